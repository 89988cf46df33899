"""CRA: a new triple whose relation cannot hold together with another on the same pair of entities is debated, then
adjudicated with both sides' support and dates (kg/adjudication.py): keep, discard, replace the older edge, or review.

Checked in time: a document dated D meets (1) the KG of its namespace as of D-1 (`existing_edges`, seed + evidence
dated before D, minus edges superseded by then) and (2) its own other triples (one paper saying both). Documents of
the same day D meet each other at D's merge (kg/merge.py), which sees them all.

The debate decides whether a clash is a real contradiction (verdict, confidence, both arguments are stored on the
row); the numbers decide which side stands only when it is.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from karma_dagster.backbones.base import Backbone, DebateAnswer, DebateSide, TripleQuery, backbone_map
from karma_dagster.kg import adjudication as adj
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.edges import EdgeFacts, edge_text
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import AlignedRow, ResolvedRow

Pair = tuple[str, str]
# (head, tail) pairs -> the KG edges stored head -> tail, with their support as of the day before the document
ExistingEdges = Callable[[Sequence[Pair]], Mapping[Pair, Sequence[EdgeFacts]]]
Edge = tuple[str, str, str]
# KG edges -> their evidence sentences as of the day before the document, newest first (the debate's KG side)
EdgeSentences = Callable[[Sequence[Edge]], Mapping[Edge, Sequence[str]]]

# when several clashes disagree, the row takes the gravest outcome
_SEVERITY = {"discard": 3, "review": 2, "replace": 1, "keep": 0}


def new_support(t: AlignedRow) -> float:
    """The new triple's own support: MedKGent sampling confidence when sampled, else the extractor's probability."""
    return float(t.sample_confidence) if t.sample_confidence is not None else float(t.probability)


@dataclass(frozen=True)
class _Clash:
    against: str  # "kg" | "same_document"
    edge: Edge  # the other side's edge (head, relation, tail)
    support: float  # the other side's support (KG: undiscounted confidence; same document: its best occurrence)
    date: dt.date | None  # KG: its last evidence (None: seed only); same document: the document's date
    facts: EdgeFacts | None = None  # KG only
    evidence: str = ""  # same document: the other triple's sentence


def _eligible(t: AlignedRow) -> bool:
    return t.schema_status == "aligned" and t.kg_relation is not None


def _edge_of(t: AlignedRow) -> Edge:
    return (t.head_id, t.kg_relation or "", t.tail_id)


def _kg_clashes(t: AlignedRow, edges: Mapping[Pair, Sequence[EdgeFacts]], schema: KGSchema) -> list[_Clash]:
    found = list(edges.get((t.head_id, t.tail_id), ()))
    if t.tail_id != t.head_id:
        found += list(edges.get((t.tail_id, t.head_id), ()))
    kinds = (t.head_kg_type, t.tail_kg_type)
    return [_Clash("kg", (e.head_id, e.relation, e.tail_id), e.confidence, e.last_seen, e)
            for e in found if schema.incompatible(t.kg_relation or "", e.relation, *kinds)]  # type: ignore[arg-type]


def _document_clashes(
    i: int, aligned: Sequence[AlignedRow], support_of: Mapping[tuple[str, Edge], float], schema: KGSchema,
    on: dt.date | None,
) -> list[_Clash]:
    """The document's other triples on the same pair whose relation contradicts this one's (one clash per edge)."""
    t = aligned[i]
    out: dict[Edge, _Clash] = {}
    for j, u in enumerate(aligned):
        if j == i or not _eligible(u) or u.doc_key != t.doc_key:
            continue
        if {u.head_id, u.tail_id} != {t.head_id, t.tail_id}:
            continue
        if schema.incompatible(t.kg_relation or "", u.kg_relation or "", t.head_kg_type or "", t.tail_kg_type or ""):
            edge = _edge_of(u)
            out.setdefault(edge, _Clash("same_document", edge, support_of[(u.doc_key, edge)], on, evidence=u.evidence))
    return list(out.values())


def resolve_conflicts(
    aligned: list[AlignedRow],
    existing_edges: ExistingEdges,
    backbone: Backbone,
    schema: KGSchema,
    params: KarmaParams,
    *,
    on: dt.date | None = None,
    sentences: EdgeSentences | None = None,
) -> list[ResolvedRow]:
    """Resolve one document's aligned triples. `on` is the document's date D (time discount of KG edges, the date of
    a same-document clash, the supersession date of a replace); `existing_edges` and `sentences` (what the KG's side
    of a debate is shown) must answer as of D-1."""
    eligible = [i for i, t in enumerate(aligned) if _eligible(t)]
    pairs = list(dict.fromkeys(p for i in eligible for p in ((aligned[i].head_id, aligned[i].tail_id),
                                                             (aligned[i].tail_id, aligned[i].head_id))))
    edges = existing_edges(pairs) if pairs else {}
    # occurrences of one edge in one document count once, at their best (one paper is one observation:
    # kg/reinforcement.py), on both sides of a same-paper clash
    scores: dict[tuple[str, Edge], list[float]] = defaultdict(list)
    for i in eligible:
        scores[(aligned[i].doc_key, _edge_of(aligned[i]))].append(new_support(aligned[i]))
    support_of = {k: max(v) for k, v in scores.items()}
    clashes = {i: _kg_clashes(aligned[i], edges, schema) + _document_clashes(i, aligned, support_of, schema, on)
               for i in eligible}

    # detection first (above); then every (triple, other relation) debate of the document overlaps on the backbone
    questions = list(dict.fromkeys((i, c.edge[1]) for i in eligible for c in clashes[i]))
    against = {q: next(c for c in clashes[q[0]] if c.edge[1] == q[1]) for q in questions}
    kg_edges = sorted({c.edge for c in against.values() if c.facts is not None})
    said = dict(sentences(kg_edges)) if sentences is not None and kg_edges else {}

    def debate(question: tuple[int, str]) -> DebateAnswer:
        i, relation = question
        t = aligned[i]
        query = TripleQuery(head_name=t.head_name, head_type=t.head_kg_type or t.head_type, relation=t.kg_relation,
                            tail_name=t.tail_name, tail_type=t.tail_kg_type or t.tail_type, evidence=t.evidence)
        clash = against[question]
        return backbone.debate(query, relation, _side(t, clash, said.get(clash.edge, ())))

    answers = dict(zip(questions, backbone_map(backbone, debate, questions), strict=True))
    out: list[ResolvedRow] = []
    for i, t in enumerate(aligned):
        base = t.model_dump()
        if not _eligible(t):  # nothing to check against: the schema has no place for it yet
            out.append(ResolvedRow(**base, conflict=False, contradicts=None, verdict="none", action="review",
                                   adjudication="schema review: no KG relation to check"))
        elif not clashes[i]:
            out.append(ResolvedRow(**base, conflict=False, contradicts=None, verdict="none", action="keep"))
        else:
            s = support_of[(t.doc_key, _edge_of(t))]
            out.append(_adjudicated(base, s, clashes[i], answers, i, on, params))
    return out


def _side(t: AlignedRow, clash: _Clash, sentences: Sequence[str] = ()) -> DebateSide:
    """What the other side of a clash stands on, for the debate: the KG edge's sentences, support, papers and dates,
    or the same paper's other sentence."""
    head, tail = (t.head_name, t.tail_name) if clash.edge[0] == t.head_id else (t.tail_name, t.head_name)
    claim = f"{head} {clash.edge[1]} {tail}"
    if clash.facts is None:
        return DebateSide(claim=claim, source="same paper", evidence=[clash.evidence] if clash.evidence else [],
                          confidence=round(clash.support, 4), last_seen=clash.date)
    f = clash.facts
    return DebateSide(claim=claim, source="knowledge graph", evidence=list(sentences),
                      confidence=round(f.confidence, 4), papers=f.n_docs, in_seed=f.in_seed,
                      first_seen=f.first_seen, last_seen=f.last_seen)


def _adjudicated(
    base: dict, support: float, clashes: list[_Clash], answers: Mapping[tuple[int, str], DebateAnswer], i: int,
    on: dt.date | None, params: KarmaParams,
) -> ResolvedRow:
    """Each clash adjudicated with its own debate; the gravest outcome is the row's (its clash is the one shown)."""
    decided: list[tuple[adj.Decision, _Clash, DebateAnswer]] = []
    for c in clashes:
        answer = answers[(i, c.edge[1])]
        if c.facts is not None:
            d = adj.against_edge(support, c.facts, on, answer.verdict, answer.confidence, params)
        else:
            d = adj.against_claim(support, c.support, edge_text(*c.edge), answer.verdict, answer.confidence, params)
        decided.append((d, c, answer))
    gravest = max(_SEVERITY[d.action] for d, _, _ in decided)
    deciding = [x for x in decided if _SEVERITY[x[0].action] == gravest]
    decision, clash, answer = deciding[0]
    if decision.action == "replace":  # every KG edge it beats is superseded; the reason names them all
        contradicts = adj.join_edges(c.edge for _, c, _ in deciding)
        reason = " | ".join(d.reason for d, _, _ in deciding)
    else:
        contradicts, reason = edge_text(*clash.edge), decision.reason
    if len(decided) > len(deciding):
        reason += f" ({len(decided)} clashes; the gravest outcome decides)"
    return ResolvedRow(
        **base, conflict=True, contradicts=contradicts,
        verdict=answer.verdict, action=decision.action, against=clash.against, against_date=clash.date,
        against_confidence=round(min(1.0, max(0.0, clash.support)), 6),
        debate_confidence=min(1.0, max(0.0, float(answer.confidence))),
        argument_for=answer.argument_for, argument_against=answer.argument_against, adjudication=reason,
        debate_transcript=json.dumps([t.model_dump() for t in answer.transcript]) if answer.transcript else None,
    )
