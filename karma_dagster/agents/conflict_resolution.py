"""CRA: a new triple whose relation the schema says cannot coexist with an existing KG edge on the same pair
is debated; a real contradiction is queued for review when the extractor was confident, else discarded.
"""

from __future__ import annotations

from collections.abc import Callable

from karma_dagster.backbones.base import Backbone, TripleQuery, backbone_map
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
    # detection first (KG lookups, in this thread), then the debates of all conflicting triples overlap
    clashes_of: list[list[tuple[str, str, str]]] = []
    for t in aligned:
        if t.schema_status != "aligned" or t.kg_relation is None:
            clashes_of.append([])
            continue
        existing = [(t.head_id, r, t.tail_id) for r in existing_relations(t.head_id, t.tail_id)]
        if t.tail_id != t.head_id:
            existing += [(t.tail_id, r, t.head_id) for r in existing_relations(t.tail_id, t.head_id)]
        clashes_of.append([e for e in existing if schema.incompatible(t.kg_relation, e[1])])

    def debate(i: int) -> tuple[str, str, str] | None:
        t = aligned[i]
        query = TripleQuery(head_name=t.head_name, head_type=t.head_kg_type or t.head_type, relation=t.kg_relation,
                            tail_name=t.tail_name, tail_type=t.tail_kg_type or t.tail_type, evidence=t.evidence)
        for edge in clashes_of[i]:  # every clashing edge is debated; one real contradiction is enough
            if backbone.debate(query, edge[1]).verdict == "contradict":
                return edge
        return None

    debated = [i for i, clashes in enumerate(clashes_of) if clashes]
    verdicts = dict(zip(debated, backbone_map(backbone, debate, debated), strict=True))
    out: list[ResolvedRow] = []
    for i, t in enumerate(aligned):
        base = t.model_dump()
        clashes = clashes_of[i]
        if t.schema_status != "aligned" or t.kg_relation is None:
            out.append(ResolvedRow(**base, conflict=False, contradicts=None, verdict="none", action="review"))
            continue
        if not clashes:
            out.append(ResolvedRow(**base, conflict=False, contradicts=None, verdict="none", action="keep"))
            continue
        contradicted = verdicts[i]
        if contradicted is None:
            out.append(ResolvedRow(**base, conflict=True, contradicts=_edge(*clashes[0]), verdict="agree",
                                   action="keep"))
        else:
            action = "review" if t.probability >= params.conflict_review_confidence else "discard"
            out.append(ResolvedRow(**base, conflict=True, contradicts=_edge(*contradicted), verdict="contradict",
                                   action=action))
    return out
