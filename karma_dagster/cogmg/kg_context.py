"""KG context for any LLM: what an answering model needs from one namespace's KG, ranked and cut to a token budget.

Modelled on GraphRAG's local search (Edge et al. 2024, arXiv 2404.16130): the question's entities are linked to
KG nodes, their neighbourhood is gathered, and its relationships are ranked and packed into a context window of a
fixed size, in-network (between two linked entities) first. Here the pieces are this project's: entities are
linked as `karma ask` links them (cogmg/decompose_local.py: dictionary NER, then the namespace's entity index
within rho), the question's relation words and answer kinds come from the same cue lexicon (cogmg/cues.py), and
each triple carries its papers' evidence sentences. Reads only; deterministic for a given KG, question and budget.

Ranking (each part stated in `Triple.why`): relevance to the linked entities (1 - link distance for an edge at the
entity, 0.35 of that one hop further, +1 when both ends are linked), +1 when the relation is one the question's
words name, +0.5 when the far end is of a kind the question asks for, +0.5 x confidence, papers
(0.3 x log2(1 + distinct documents), at most 0.6), recency (0.1 for evidence dated at the reference date, falling
to 0 over ten years). Ties break on relation and ids.

Budget: tokens are estimated as ceil(characters / 3) per item (`estimate_tokens`; no tokenizer download; measured
against SmolLM2's tokenizer in bench/kg_context.py, where / 4 undercounted biomedical names and ids 1.5x).
The header, then the linked entities, then the triples (each with up to two evidence sentences) are taken in
rank order while they fit; the first that does not fit ends the context (taken without its evidence when that
fits): items are whole, never cut, and a smaller budget gives a prefix of a larger one's ranking.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from karma_dagster.cogmg.cues import answer_kinds, relation_cues
from karma_dagster.cogmg.decompose_local import link_mentions
from karma_dagster.cogmg.questions import QUESTION_MAX_CHARS, QuestionRejected, check_question
from karma_dagster.kg import reinforcement
from karma_dagster.kg.backends import kg_exists, kg_store
from karma_dagster.kg_tools.bounds import CONTEXT_BUDGET_DEFAULT, CONTEXT_BUDGET_MAX, CONTEXT_BUDGET_MIN
from karma_dagster.kg_tools.results import Refused, ToolResult
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths

BUDGET_MIN, BUDGET_MAX, BUDGET_DEFAULT = CONTEXT_BUDGET_MIN, CONTEXT_BUDGET_MAX, CONTEXT_BUDGET_DEFAULT  # tokens
LINKED_MAX = 5  # linked entities whose neighbourhood is read (longest mention first)
HOP2_FROM = 5  # best-ranked 1-hop neighbours whose own edges are read (the 2-hop fan-out)
HOP2_PER_NODE = 10  # 2-hop edges kept per expanded neighbour (best ranked)
CANDIDATES_MAX = 400  # triples ranked at most: the rest of a hub's edges never make a budget anyway
EVIDENCE_PER_TRIPLE = 2  # evidence sentences shown per triple (best score, then newest)
SENTENCE_SHOWN_CHARS = 300  # an evidence sentence is shown up to this many characters (then '...')
CHARS_PER_TOKEN = 3  # the estimator (bench/kg_context.py checks it against SmolLM2's tokenizer: 4 undercounted it 1.5x)
TOKEN_ESTIMATOR = f"ceil(characters / {CHARS_PER_TOKEN}) per item"

W_LINK, W_HOP2, W_BOTH_LINKED, W_RELATION, W_KIND, W_CONFIDENCE = 1.0, 0.35, 1.0, 1.0, 0.5, 0.5
W_PAPERS, PAPERS_CAP, W_RECENCY, RECENCY_YEARS = 0.3, 0.6, 0.1, 10


class KGContextError(ValueError):
    """A question or budget that cannot be served, named with the problem."""


class ContextEntity(BaseModel):
    ref: str  # E1, E2, ... as the text names them
    id: str
    name: str
    kind: str
    mention: str  # the question's words it was linked from
    distance: float  # entity-index cosine distance of the link


class ContextEvidence(BaseModel):
    triple: int  # the ref of the triple it supports
    doc_key: str
    date: str
    sentence: str
    score: float
    backbone: str


class ContextTriple(BaseModel):
    ref: int  # [n] in the text
    head_id: str
    head_name: str
    head_kind: str
    relation: str
    tail_id: str
    tail_name: str
    tail_kind: str
    confidence: float
    n_docs: int  # distinct papers stating it in this namespace (a review decision counts as its paper)
    in_seed: bool
    first_seen: str | None
    last_seen: str | None
    hop: int  # 1: at a linked entity; 2: one edge further
    score: float
    why: dict[str, float]  # the ranking's parts
    answer: str | None  # the end that is not a linked entity (None when both are)
    evidence: list[ContextEvidence] = []
    evidence_total: int = 0  # live evidence rows of the triple (shown: `evidence`)


class KGContext(BaseModel):
    question: str
    namespace: str
    as_of: str | None
    budget: int
    tokens_used: int
    token_estimator: str = TOKEN_ESTIMATOR
    relations_asked: list[str]  # schema relations the question's words name
    answer_kinds: list[str]  # node kinds the question asks for
    entities: list[ContextEntity]
    triples: list[ContextTriple]
    candidates: int  # triples ranked
    dropped: dict[str, int]  # entities / triples / evidence left out by the budget
    notes: list[str] = []
    text: str = Field(description="the ready-to-paste prompt block; [n] marks triple n")

    def answers(self, k: int = 3) -> list[str]:
        """The far ends of the best 1-hop triples, distinct, in rank order: what the KG alone answers (no LLM)."""
        out: list[str] = []
        for t in self.triples:
            if t.hop == 1 and t.answer and t.answer.lower() not in {a.lower() for a in out}:
                out.append(t.answer)
        return out[:k]


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def check_budget(budget: object) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise KGContextError(f"budget must be a whole number of tokens from {BUDGET_MIN} to {BUDGET_MAX}, "
                             f"got {budget!r}")
    if not BUDGET_MIN <= budget <= BUDGET_MAX:
        raise KGContextError(f"budget={budget} is out of bounds: give {BUDGET_MIN} to {BUDGET_MAX} tokens")
    return budget


def _check_question(question: object) -> str:
    if not isinstance(question, str) or not question.strip():
        raise KGContextError("question is empty: ask a question that names a biomedical entity")
    try:
        return check_question(question)
    except QuestionRejected as exc:
        raise KGContextError(str(exc)) from exc


# One row per live support of every edge at the given nodes (kg_edges_all's semantics, as kg/keyed.py: seed row +
# evidence dated <= as_of, support dated on or before the edge's latest supersession left out), with the sentence.
_SUPPORT_SQL = """
WITH ids(id) AS (VALUES {values}),
c AS (
    SELECT s.head_id, s.relation, s.tail_id, s.confidence AS s, CAST(NULL AS DATE) AS date,
        CAST(NULL AS VARCHAR) AS doc_key, CAST(NULL AS VARCHAR) AS sentence, CAST(NULL AS VARCHAR) AS backbone,
        CAST(NULL AS VARCHAR) AS paper_key
    FROM seed_edges s WHERE s.head_id IN (SELECT id FROM ids) OR s.tail_id IN (SELECT id FROM ids)
    UNION ALL
    SELECT e.head_id, e.relation, e.tail_id, e.score, e.date, e.doc_key, e.evidence, e.backbone, e.paper_key
    FROM evidence e
    WHERE e.namespace = ? AND (CAST(? AS DATE) IS NULL OR e.date <= CAST(? AS DATE))
        AND (e.head_id IN (SELECT id FROM ids) OR e.tail_id IN (SELECT id FROM ids))),
sup AS (
    SELECT against_head_id AS head_id, against_relation AS relation, against_tail_id AS tail_id,
        max(date) AS superseded_on
    FROM adjudications
    WHERE action = 'replace' AND namespace = ? AND (CAST(? AS DATE) IS NULL OR date <= CAST(? AS DATE))
    GROUP BY against_head_id, against_relation, against_tail_id)
SELECT c.head_id, c.relation, c.tail_id, c.s, c.date, c.doc_key, c.sentence, c.backbone, c.paper_key
FROM c LEFT JOIN sup x ON x.head_id = c.head_id AND x.relation = c.relation AND x.tail_id = c.tail_id
WHERE x.superseded_on IS NULL OR c.date > x.superseded_on
"""

Edge = tuple[str, str, str]
_Ranked = tuple[float, Edge, int, dict[str, float], str]  # score, edge, hop, why, the neighbour a 2-hop edge is at


def _order(r: _Ranked) -> tuple:
    return (-r[0], r[1][1], r[1][0], r[1][2])


class _Edge:
    """One edge's live support aggregated as kg_edges does (1 - prod(1 - s) over the seed and one factor per
    paper: kg/reinforcement.py). A row: (score, date, doc_key, sentence, backbone, paper_key); doc_key None = seed."""

    def __init__(self, key: Edge) -> None:
        self.key = key
        self.rows: list[tuple[float, dt.date | None, str | None, str | None, str | None, str | None]] = []

    def _readings(self) -> list[reinforcement.Reading]:
        return [reinforcement.reading(r[2], r[5], r[0]) for r in self.rows if r[2] is not None]

    @property
    def confidence(self) -> float:
        seed = next((r[0] for r in self.rows if r[2] is None), None)
        return reinforcement.confidence(seed, self._readings())

    @property
    def docs(self) -> set[str]:
        """The papers stating it (a review decision counts as the paper it came from)."""
        return {r.paper for r in self._readings()}

    @property
    def dates(self) -> list[dt.date]:
        return [r[1] for r in self.rows if r[1] is not None]

    @property
    def in_seed(self) -> bool:
        return any(r[2] is None for r in self.rows)


def _support(store: Any, ids: Iterable[str], namespace: str, as_of: dt.date | None) -> dict[Edge, _Edge]:
    wanted = sorted(set(ids))
    out: dict[Edge, _Edge] = {}
    if not wanted:
        return out
    sql = _SUPPORT_SQL.format(values=", ".join(["(CAST(? AS VARCHAR))"] * len(wanted)))
    with store.connect(read_only=True) as con:
        rows = con.execute(sql, [*wanted, namespace, as_of, as_of, namespace, as_of, as_of]).fetchall()
    for h, r, t, s, date, doc, sentence, backbone, paper in rows:
        out.setdefault((h, r, t), _Edge((h, r, t))).rows.append((float(s), date, doc, sentence, backbone, paper))
    return out


class _Ranker:
    def __init__(self, question: str, linked: dict[str, float], relations: list[str], kinds: list[str],
                 reference: dt.date | None) -> None:
        self.linked, self.relations, self.kinds, self.reference = linked, set(relations), set(kinds), reference
        self.question_words = {w.lower() for w in question.replace("?", " ").split()}

    def score(self, e: _Edge, kinds: dict[str, str], hop: int, root: str) -> tuple[float, dict[str, float]]:
        h, rel, t = e.key
        why: dict[str, float] = {}
        if hop == 1:
            why["link"] = W_LINK * max(1.0 - self.linked[x] for x in (h, t) if x in self.linked)
            if h in self.linked and t in self.linked and h != t:
                why["both_linked"] = W_BOTH_LINKED
        else:
            why["link"] = W_HOP2 * (1.0 - self.linked[root])
        if rel in self.relations or rel in self.question_words:
            why["relation"] = W_RELATION
        far = [x for x in (h, t) if x not in self.linked] or [t]
        if self.kinds and any(kinds.get(x) in self.kinds for x in far):
            why["kind"] = W_KIND
        why["confidence"] = W_CONFIDENCE * e.confidence
        if e.docs:
            why["papers"] = min(PAPERS_CAP, W_PAPERS * math.log2(1 + len(e.docs)))
        if e.dates and self.reference:
            age = max(0, (self.reference - max(e.dates)).days)
            why["recency"] = W_RECENCY * max(0.0, 1.0 - age / (365.25 * RECENCY_YEARS))
        why = {k: round(v, 4) for k, v in why.items()}
        return round(sum(why.values()), 4), why


def _clip(sentence: str) -> str:
    s = " ".join(sentence.split())
    return s if len(s) <= SENTENCE_SHOWN_CHARS else s[: SENTENCE_SHOWN_CHARS - 3].rstrip() + "..."


def _triple_text(t: ContextTriple) -> str:
    papers = f"; {t.n_docs} paper{'s' if t.n_docs != 1 else ''}" if t.n_docs else ""
    seed = "; in the seed KG" if t.in_seed else ""
    last = f"; last {t.last_seen}" if t.last_seen else ""
    lines = [f"[{t.ref}] {t.head_name} {t.relation} {t.tail_name}. ({t.head_kind} -> {t.tail_kind}; "
             f"confidence {t.confidence:.2f}{papers}{seed}{last})"]
    lines += [f'    evidence, {ev.doc_key} ({ev.date}): "{ev.sentence}"' for ev in t.evidence]
    return "\n".join(lines) + "\n"


def kg_context(question: str, budget: int = BUDGET_DEFAULT, *, data: DataPaths, namespace: str,
               as_of: dt.date | None = None, params: KarmaParams | None = None) -> KGContext:
    """The context for `question` from `namespace`'s KG (seed + its merges dated <= as_of), within `budget` tokens.

    Raises KGContextError for an empty or too long question, a budget out of bounds, or a data folder with no KG.
    A question naming nothing the KG knows is no error: the context is empty and says so (a note, and the text)."""
    question = _check_question(question)
    budget = check_budget(budget)
    if not kg_exists(data):
        raise KGContextError("the KG has no seed yet: run `karma import-kg` (or `karma run`) first")
    params = params or KarmaParams()
    store = kg_store(data)
    linked, unlinked, notes, spans = link_mentions(question, data, namespace, params.rho)
    linked = linked[:LINKED_MAX]
    notes = list(notes) + [f"{e.mention!r} names no KG entity (the KG cannot say anything about it)"
                           for e in unlinked]
    relations = list(dict.fromkeys(r for _cue, r in relation_cues(question, exclude=spans)))
    kinds = answer_kinds(question)
    distance = {e.entity_id: e.distance for e in linked}

    # ---- gather: 1 hop from the linked entities, then 1 more from the best 1-hop neighbours (bounded fan-out)
    hop1 = _support(store, distance, namespace, as_of)
    ends = {x for k in hop1 for x in (k[0], k[2])} | set(distance)
    nodes = store.nodes_by_id(ends, namespace)
    node_kind = {i: n["kind"] for i, n in nodes.items()}
    dates = [d for e in hop1.values() for d in e.dates]
    ranker = _Ranker(question, distance, relations, kinds, as_of or (max(dates) if dates else None))
    ranked: list[_Ranked] = []
    for key, e in hop1.items():
        s, why = ranker.score(e, node_kind, 1, "")
        ranked.append((s, key, 1, why, ""))
    ranked.sort(key=_order)
    root_of: dict[str, str] = {}  # expanded neighbour -> the linked entity it was reached from (its best edge)
    for _s, (h, _r, t), _hop, _why, _via in ranked:
        for x in (h, t):
            if x not in distance and x not in root_of and len(root_of) < HOP2_FROM:
                root_of[x] = h if h in distance else t
    expand = list(root_of)
    hop2 = {k: e for k, e in _support(store, expand, namespace, as_of).items() if k not in hop1}
    if hop2:
        more = {x for k in hop2 for x in (k[0], k[2])} - nodes.keys()
        nodes.update(store.nodes_by_id(more, namespace))
        node_kind.update({i: n["kind"] for i, n in nodes.items()})
        per_node: dict[str, list[_Ranked]] = {}
        for key, e in hop2.items():
            via = key[0] if key[0] in root_of else key[2]
            s, why = ranker.score(e, node_kind, 2, root_of[via])
            per_node.setdefault(via, []).append((s, key, 2, why, via))
        for via in expand:
            ranked += sorted(per_node.get(via, []), key=_order)[:HOP2_PER_NODE]
        ranked.sort(key=_order)
    support = {**hop1, **hop2}
    ranked = [r for r in ranked if r[1][0] in nodes and r[1][2] in nodes][:CANDIDATES_MAX]

    # ---- pack: header, entities, triples in rank order while they fit; the first that does not ends it
    scope = f"namespace {namespace}" + (f", as of {as_of}" if as_of else "")
    header = f"Knowledge-graph context for the question ({scope}). Facts are numbered [n], most relevant first.\n"
    items_used = estimate_tokens(header)
    if items_used > budget:
        raise KGContextError(f"budget={budget} cannot hold even the context's header ({items_used} tokens)")
    lines = [header]
    entities: list[ContextEntity] = []
    dropped = {"entities": 0, "triples": 0, "evidence": 0}
    full = False
    for i, e in enumerate(linked, 1):
        ent = ContextEntity(ref=f"E{i}", id=e.entity_id, name=e.name, kind=e.kind, mention=e.mention,
                            distance=e.distance)
        line = (("Entities the question names:\n" if i == 1 else "")
                + f"E{i} {ent.name} ({ent.kind}; KG id {ent.id})\n")
        cost = estimate_tokens(line)
        if full or items_used + cost > budget:
            full = True
            dropped["entities"] += 1
            continue
        items_used += cost
        lines.append(line)
        entities.append(ent)
    if not linked:
        line = "The knowledge graph holds no entity this question names.\n"
        if items_used + estimate_tokens(line) <= budget:
            items_used += estimate_tokens(line)
            lines.append(line)
    triples: list[ContextTriple] = []
    for s, key, hop, why, via in ranked:
        if full:
            dropped["triples"] += 1
            dropped["evidence"] += sum(r[2] is not None for r in support[key].rows)
            continue
        t = _triple(len(triples) + 1, key, support[key], nodes, distance, via, s, why)
        t_text = ("Facts:\n" if not triples else "") + _triple_text(t)
        cost = estimate_tokens(t_text)
        if items_used + cost > budget:
            full = True  # the last item: this triple without its evidence when that fits (still a prefix)
            t = t.model_copy(update={"evidence": []})
            t_text = ("Facts:\n" if not triples else "") + _triple_text(t)
            cost = estimate_tokens(t_text)
            if items_used + cost > budget:
                dropped["triples"] += 1
                dropped["evidence"] += t.evidence_total
                continue
        items_used += cost
        lines.append(t_text)
        triples.append(t)
        dropped["evidence"] += t.evidence_total - len(t.evidence)
    if linked and not ranked:
        notes.append("the linked entities have no edge in this namespace's KG")
    return KGContext(question=question, namespace=namespace, as_of=str(as_of) if as_of else None, budget=budget,
                     tokens_used=items_used, relations_asked=relations, answer_kinds=kinds, entities=entities,
                     triples=triples, candidates=len(ranked), dropped=dropped, notes=notes, text="".join(lines))


def _triple(ref: int, key: Edge, e: _Edge, nodes: dict[str, dict], linked: dict[str, float], via: str,
            score: float, why: dict[str, float]) -> ContextTriple:
    h, rel, t = key
    evidence_rows = sorted((r for r in e.rows if r[2] is not None), key=lambda r: (-r[0], -(r[1].toordinal()), r[2]))
    shown = [ContextEvidence(triple=ref, doc_key=r[2], date=str(r[1]), sentence=_clip(r[3] or ""),
                             score=round(r[0], 4), backbone=r[4] or "") for r in evidence_rows[:EVIDENCE_PER_TRIPLE]]
    dates = e.dates
    known = set(linked) | {via}  # the far end of a 2-hop triple is the one past the neighbour it was reached by
    answer = t if h in known and t not in known else h if t in known and h not in known else None
    return ContextTriple(
        ref=ref, head_id=h, head_name=nodes[h]["name"], head_kind=nodes[h]["kind"], relation=rel, tail_id=t,
        tail_name=nodes[t]["name"], tail_kind=nodes[t]["kind"], confidence=round(e.confidence, 4),
        n_docs=len(e.docs), in_seed=e.in_seed, first_seen=str(min(dates)) if dates else None,
        last_seen=str(max(dates)) if dates else None, hop=2 if via else 1, score=score, why=why,
        answer=nodes[answer]["name"] if answer else None, evidence=shown, evidence_total=len(evidence_rows))


def context_tool(data: DataPaths, namespace: str, question: str, budget: int = BUDGET_DEFAULT,
                 as_of: str | None = None) -> ToolResult:
    """kg_context as a KG tool answers (`karma mcp`'s `kg_context`): the context as data, or a refusal a model
    reads (arguments already checked by kg_tools.schemas.KgContextArgs)."""
    try:
        day = None
        if as_of is not None:
            try:
                day = dt.date.fromisoformat(as_of)
            except (TypeError, ValueError):
                raise Refused(f"as_of {as_of!r} is not a date: write YYYY-MM-DD, e.g. 2016-02-12") from None
        try:
            found = kg_context(question, budget, data=data, namespace=namespace, as_of=day)
        except KGContextError as exc:
            raise Refused(str(exc)) from exc
    except Refused as exc:
        return ToolResult(ok=False, message=str(exc))
    names = ", ".join(f"{e.name} ({e.kind})" for e in found.entities) or "no KG entity"
    return ToolResult(ok=True, data=found.model_dump(mode="json"),
                      message=f"{len(found.triples)} triple(s) about {names} in {found.tokens_used} of {budget} "
                              f"tokens ({found.dropped['triples']} more ranked triple(s) did not fit); paste `text`")


__all__ = ["BUDGET_DEFAULT", "BUDGET_MAX", "BUDGET_MIN", "QUESTION_MAX_CHARS", "KGContext", "KGContextError",
           "context_tool", "estimate_tokens", "kg_context"]
