"""Judge every accepted triple against PubTator gold, including ends that have no vocabulary id.

`score_gold` compares id pairs, so a triple with a new entity (no vocabulary id) at one end is invisible to it:
36 % of the accepted BioRED triples once were, and nobody knew how right they were. Here each end is resolved to
gold ids in order: its own comparable id; another mention of the same entity's id; the ids of the gold mentions
its mentions overlap on the gold text. An end the corpus would have annotated (its type is one the corpus marks)
that overlaps no gold mention is not a gold entity, so the pair is wrong. What no gold can judge is counted with
the reason, never dropped: a type the corpus does not annotate (a gene in BC5CDR), a mention that could not be
placed on the gold text, and on a CID-only corpus (BC5CDR) a non-causal chemical-disease relation on a pair the
gold does not call CID (CID gold says nothing of "treats").

The unit is one (document, pair): a triple counts once per document (its best-supported reading), as the KG's
reinforcement counts papers. A unit's confidence is the highest stored evidence score of its rows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd
from pydantic import BaseModel, ConfigDict

from karma_dagster.dictionary.lexicon import CORPUS_TYPE
from karma_dagster.ingest.pubtator import PubTatorDoc
from karma_dagster.metrics.calibration import expected_calibration_error
from karma_dagster.metrics.gold import CDR_LABEL, comparable_id, ner_type, raw_id
from karma_dagster.metrics.gold_mentions import PRF
from karma_dagster.metrics.gold_relations import _ids, gold_pairs

POSITIVE_LABELS = frozenset({"Positive_Correlation", "causes", "upregulates"})

# Why a unit is unjudged because the corpus never annotates what it states (outside the gold's scope), as opposed
# to a unit the gold covers that could not be judged (a mention not placed on the gold text): both stay "unjudged"
# (no gold says whether they are right), and the split says how much of it a better alignment could still judge.
NOT_ANNOTATED = "the corpus does not annotate "  # + the end's type (a gene in BC5CDR)
CID_KINDS = "CID gold annotates chemical-disease pairs only"
CID_NON_CAUSAL = "CID gold cannot judge a non-causal relation off a CID pair"


def outside_scope(why: str) -> bool:
    """Whether an unjudged unit's reason is a kind, type or relation the corpus does not annotate."""
    return why.startswith(NOT_ANNOTATED) or why in (CID_KINDS, CID_NON_CAUSAL)


class JudgedUnit(BaseModel):
    """One accepted (document, pair) and its verdict: right True/False, or None with the reason it is unjudged."""

    model_config = ConfigDict(extra="forbid")
    doc_key: str
    pair: tuple[str, str]  # the gold ids it resolved to (or entity ids when unjudged / not gold entities)
    relation: str
    confidence: float
    right: bool | None
    typed_right: bool | None
    why: str


class Judgement(BaseModel):
    """Accepted pairs and pair + type P/R/F1 over judged units, their ECE, and how many units no gold could judge."""

    model_config = ConfigDict(extra="forbid")
    units: list[JudgedUnit]
    pair: PRF
    pair_type: PRF
    n_gold_pairs: int

    @property
    def judged(self) -> list[JudgedUnit]:
        return [u for u in self.units if u.right is not None]

    @property
    def unjudged(self) -> int:
        return sum(u.right is None for u in self.units)

    def ece(self) -> float | None:
        j = self.judged
        return expected_calibration_error([u.confidence for u in j], [bool(u.right) for u in j]) if j else None

    def unjudged_reasons(self) -> dict[str, int]:
        return dict(Counter(u.why for u in self.units if u.right is None))

    @property
    def outside_scope(self) -> int:
        """Unjudged units the corpus does not annotate at all (counted among the unjudged, shown apart)."""
        return sum(u.right is None and outside_scope(u.why) for u in self.units)

    def scope_line(self) -> str:
        """What the unjudged are: outside the gold's scope, or in it but not judged (printed beside one_line)."""
        n, s = self.unjudged, self.outside_scope
        return (f"unjudged {n} of {len(self.units)}: outside the gold's scope {s} (a kind pair, type or relation the "
                f"corpus does not annotate), in its scope but not judged {n - s}")

    def one_line(self) -> str:
        """The line `karma gold-eval` prints for the accepted triples."""
        p, t, ece = self.pair, self.pair_type, self.ece()
        return (f"accepted pairs P/R/F1 {p.precision:.3f}/{p.recall:.3f}/{p.f1:.3f} | pair+type P/R/F1 "
                f"{t.precision:.3f}/{t.recall:.3f}/{t.f1:.3f} | ECE {'n/a' if ece is None else f'{ece:.3f}'} | "
                f"unjudged {self.unjudged} of {len(self.units)}")


class DocumentTriples(BaseModel):
    """One document's gold, its mentions placed on the gold text, and its accepted triples."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    doc_key: str
    gold: PubTatorDoc
    mentions: pd.DataFrame  # entities table rows + `gold_start`/`gold_end` (-1: not placed on the gold text)
    triples: pd.DataFrame  # evaluated (or relations) rows to judge


def annotated_types(docs: Iterable[PubTatorDoc]) -> frozenset[str]:
    return frozenset(CORPUS_TYPE.get(m.type, m.type) for d in docs for m in d.mentions)


def _overlapping_gold_ids(gold: PubTatorDoc, start: int, end: int) -> set[str]:
    out: set[str] = set()
    for g in gold.mentions:
        if start < g.end and g.start < end:
            out.update(_ids(g.identifier, g.type))
    return out


def end_ids(mention_id: str, mentions: pd.DataFrame, gold: PubTatorDoc,
            types: frozenset[str]) -> tuple[set[str] | None, str]:
    """Gold ids an end resolves to, or (None, why unjudged). An empty set: not a gold entity (judged wrong)."""
    rows = mentions[mentions["mention_id"] == mention_id]
    if rows.empty:
        return None, "mention not in the entities table"
    first = rows.iloc[0]
    same = mentions[mentions["entity_id"] == first["entity_id"]]
    for _, m in pd.concat([rows, same]).iterrows():
        vid, _how = comparable_id(m["vocab_id"] if isinstance(m["vocab_id"], str) else None,
                                  m["kg_id"] if isinstance(m["kg_id"], str) else None)
        if vid:
            return {raw_id(vid) or vid}, "id"
    placed = same[same["gold_start"] >= 0]
    ids: set[str] = set()
    for _, m in placed.iterrows():
        ids |= _overlapping_gold_ids(gold, int(m["gold_start"]), int(m["gold_end"]))
    if ids:
        return ids, "span"
    if ner_type(str(first["type"])) not in types:
        return None, f"{NOT_ANNOTATED}{ner_type(str(first['type']))}"
    if placed.empty:
        return None, "mention not placed on the gold text"
    return set(), "not a gold entity"


def judge_documents(docs: Sequence[DocumentTriples], score_column: str = "evidence_score") -> Judgement:
    types = annotated_types(d.gold for d in docs)
    rel_types = {r.relation for d in docs for r in d.gold.relations}
    cdr_only = bool(rel_types) and rel_types == {CDR_LABEL}
    units: dict[tuple[str, frozenset[str]], JudgedUnit] = {}
    rows: dict[tuple[str, frozenset[str]], list[tuple[float, str, bool | None, bool | None, str]]] = {}
    found_pairs: set[tuple[str, frozenset[str]]] = set()
    found_typed: set[tuple[str, frozenset[str], str]] = set()
    n_gold = n_gold_typed = 0
    for d in docs:
        gold = gold_pairs(d.gold)
        n_gold += len(gold)
        n_gold_typed += sum(len(v) for v in gold.values())
        for t in d.triples.itertuples():
            conf = float(getattr(t, score_column) if pd.notna(getattr(t, score_column, None)) else t.probability)
            key, right, typed, why = judge_row(t, d, types, cdr_only, gold)
            label = str(t.relation)
            if right:
                found_pairs.add((d.doc_key, key))
                if typed:
                    found_typed.add((d.doc_key, key, CDR_LABEL if cdr_only else label))
            rows.setdefault((d.doc_key, key), []).append((conf, label, right, typed, why))
    for (doc_key, key), seen in rows.items():
        judged_rows = [r for r in seen if r[2] is not None]
        best = max(judged_rows or seen, key=lambda r: r[0])
        units[(doc_key, key)] = JudgedUnit(
            doc_key=doc_key, pair=tuple(sorted(key)) if len(key) == 2 else (min(key), min(key)), relation=best[1],
            confidence=max(r[0] for r in seen),
            right=any(r[2] for r in judged_rows) if judged_rows else None,
            typed_right=any(bool(r[3]) for r in judged_rows) if judged_rows else None, why=best[4])
    judged = [u for u in units.values() if u.right is not None]
    tp = sum(bool(u.right) for u in judged)
    pair = PRF(tp=tp, fp=len(judged) - tp, fn=max(0, n_gold - len(found_pairs)))
    ttp = sum(bool(u.typed_right) for u in judged)
    pair_type = PRF(tp=ttp, fp=len(judged) - ttp, fn=max(0, n_gold_typed - len(found_typed)))
    return Judgement(units=list(units.values()), pair=pair, pair_type=pair_type, n_gold_pairs=n_gold)


Verdict = tuple[frozenset[str], bool | None, bool | None, str]


def judge_row(t: object, d: DocumentTriples, types: frozenset[str], cdr_only: bool,
              gold: Mapping[frozenset[str], set[str]]) -> Verdict:
    """(the pair's key, right at pair level, right with its type, why) for one triple row; None: unjudged."""
    label = str(t.relation)  # type: ignore[attr-defined]
    kg_rel = getattr(t, "kg_relation", None)
    head, tail = str(t.head_id), str(t.tail_id)  # type: ignore[attr-defined]
    hi, hwhy = end_ids(t.head_mention_id, d.mentions, d.gold, types)  # type: ignore[attr-defined]
    ti, twhy = end_ids(t.tail_mention_id, d.mentions, d.gold, types)  # type: ignore[attr-defined]
    kinds = {ner_type(str(t.head_type)), ner_type(str(t.tail_type))}  # type: ignore[attr-defined]
    if hi is None or ti is None:
        return frozenset((head, tail)), None, None, hwhy if hi is None else twhy
    if cdr_only and kinds != {"Chemical", "Disease"}:
        return frozenset((head, tail)), None, None, CID_KINDS
    hits = [frozenset((a, b)) for a in sorted(hi) for b in sorted(ti) if a != b and frozenset((a, b)) in gold]
    positive = label in POSITIVE_LABELS or kg_rel in POSITIVE_LABELS
    if hits:
        if cdr_only:
            return hits[0], positive, positive, "CID pair" + ("" if positive else ", read as a non-causal relation")
        return hits[0], True, label in gold[hits[0]], "gold pair"
    key = frozenset((sorted(hi)[0] if hi else f"~{head}", sorted(ti)[0] if ti else f"~{tail}"))
    if cdr_only and not positive:
        return key, None, None, CID_NON_CAUSAL
    return key, False, False, "not a gold entity" if not (hi and ti) else "not a gold pair"


def placed_mentions(entities: pd.DataFrame, aligned: Sequence[object]) -> pd.DataFrame:
    """The entities table with each mention's place on the gold text (`aligned_mentions`' output, same order)."""
    out = entities.copy()
    out["gold_start"] = [int(m.start) for m in aligned]  # type: ignore[attr-defined]
    out["gold_end"] = [int(m.end) for m in aligned]  # type: ignore[attr-defined]
    return out


def by_document(units: Iterable[JudgedUnit]) -> Mapping[str, list[JudgedUnit]]:
    out: dict[str, list[JudgedUnit]] = defaultdict(list)
    for u in units:
        out[u.doc_key].append(u)
    return out
