"""CRA: a new triple whose relation the schema says cannot coexist with an existing KG edge on the same pair
is debated; a real contradiction is queued for review when the extractor was confident, else discarded.
"""

from __future__ import annotations

from collections.abc import Callable

from karma_dagster.backbones.base import Backbone, TripleQuery
from karma_dagster.kg.schema import KGSchema
from karma_dagster.params import KarmaParams
from karma_dagster.schemas.records import AlignedRow, ResolvedRow


def _edge(head: str, relation: str, tail: str) -> str:
    return f"{head} -{relation}-> {tail}"


def resolve_conflicts(
    aligned: list[AlignedRow],
    existing_relations: Callable[[str, str], list[str]],
    backbone: Backbone,
    schema: KGSchema,
    params: KarmaParams,
) -> list[ResolvedRow]:
    """`existing_relations(a, b)` lists the KG relations stored as a -> b; both orientations are asked."""
    out: list[ResolvedRow] = []
    for t in aligned:
        base = t.model_dump()
        if t.schema_status != "aligned" or t.kg_relation is None:
            out.append(ResolvedRow(**base, conflict=False, contradicts=None, verdict="none", action="review"))
            continue
        existing = [(t.head_id, r, t.tail_id) for r in existing_relations(t.head_id, t.tail_id)]
        if t.tail_id != t.head_id:
            existing += [(t.tail_id, r, t.head_id) for r in existing_relations(t.tail_id, t.head_id)]
        clashes = [e for e in existing if schema.incompatible(t.kg_relation, e[1])]
        if not clashes:
            out.append(ResolvedRow(**base, conflict=False, contradicts=None, verdict="none", action="keep"))
            continue
        query = TripleQuery(head_name=t.head_name, head_type=t.head_kg_type or t.head_type, relation=t.kg_relation,
                            tail_name=t.tail_name, tail_type=t.tail_kg_type or t.tail_type, evidence=t.evidence)
        contradicted = None
        for edge in clashes:  # every clashing edge is debated; one real contradiction is enough
            if backbone.debate(query, edge[1]).verdict == "contradict":
                contradicted = edge
                break
        if contradicted is None:
            out.append(ResolvedRow(**base, conflict=True, contradicts=_edge(*clashes[0]), verdict="agree",
                                   action="keep"))
        else:
            action = "review" if t.probability >= params.conflict_review_confidence else "discard"
            out.append(ResolvedRow(**base, conflict=True, contradicts=_edge(*contradicted), verdict="contradict",
                                   action=action))
    return out
