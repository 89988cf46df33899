"""Mention scoring against PubTator gold: exact span + type (micro and per type), and document-level id sets.

Only the types the gold corpus annotates are scored (a BC5CDR abstract's genes are not false positives);
our NER types map onto the corpus types through `CORPUS_TYPE`. Identifiers compare after namespacing
(`MESH:D003924`, `NCBIGene:3630`, `NCBITaxon:9606`), which is how the lexicon stores them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel

from karma_dagster.dictionary.lexicon import CORPUS_TYPE, corpus_vocab_id
from karma_dagster.dictionary.variants import split_identifier
from karma_dagster.ingest.pubtator import PubTatorDoc
from karma_dagster.schemas.records import MentionSpan


class PRF(BaseModel):
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


class MentionScores(BaseModel):
    mentions: dict[str, PRF]  # "micro" and one row per type
    ids: dict[str, PRF]  # document-level identifier sets


def _score(gold: set[tuple], pred: set[tuple], table: dict[str, PRF], type_of: Callable[[tuple], str]) -> None:
    for key in gold | pred:
        for name in ("micro", type_of(key)):
            prf = table.setdefault(name, PRF())
            if key in gold and key in pred:
                prf.tp += 1
            elif key in pred:
                prf.fp += 1
            else:
                prf.fn += 1


def score_mentions(docs: Sequence[PubTatorDoc], predictions: Sequence[Iterable[MentionSpan]],
                   types: Iterable[str] | None = None) -> MentionScores:
    """P/R/F1 of predicted spans against each document's gold mentions (`types` = NER types scored)."""
    if len(docs) != len(predictions):
        raise ValueError(f"score_mentions: {len(docs)} documents but {len(predictions)} prediction lists")
    gold_types = {CORPUS_TYPE[m.type] for d in docs for m in d.mentions if m.type in CORPUS_TYPE}
    scored = set(types) & gold_types if types is not None else gold_types
    mentions: dict[str, PRF] = {"micro": PRF()}
    ids: dict[str, PRF] = {"micro": PRF()}
    for doc, preds in zip(docs, predictions):
        gold_m, pred_m = set(), set()
        gold_i, pred_i = set(), set()
        for m in doc.mentions:
            t = CORPUS_TYPE.get(m.type)
            if t not in scored:
                continue
            gold_m.add((m.start, m.end, t))
            for part in split_identifier(t, m.identifier):
                vid = corpus_vocab_id(t, part)
                if vid:
                    gold_i.add((vid, t))
        for p in preds:
            if p.type not in scored:
                continue
            pred_m.add((p.start, p.end, p.type))
            if p.vocab_id:
                pred_i.add((p.vocab_id, p.type))
        _score(gold_m, pred_m, mentions, lambda k: k[2])
        _score(gold_i, pred_i, ids, lambda k: k[1])
    return MentionScores(mentions=mentions, ids=ids)


def format_table(title: str, scores: MentionScores) -> str:
    lines = [f"## {title}", "", "| level | type | P | R | F1 | tp | fp | fn |", "|---|---|---|---|---|---|---|---|"]
    for level, table in (("mention", scores.mentions), ("doc-id", scores.ids)):
        order = ["micro"] + sorted(k for k in table if k != "micro")
        for name in order:
            s = table[name]
            lines.append(f"| {level} | {name} | {s.precision:.3f} | {s.recall:.3f} | {s.f1:.3f} | {s.tp} | {s.fp} | {s.fn} |")
    return "\n".join(lines)
