"""SAA: map each triple's entity kinds and relation onto the KG schema, oriented as the metaedge runs.

An entity linked to the KG keeps its node's kind; a new one gets the kind its NER type maps to. Whatever the
schema cannot place (an unknown kind, no metaedge between the kinds, a mapping below the floor) is flagged for
schema review with the KG fields left empty, never forced onto the nearest edge.

The schema binds the alignment, whatever the backbone: an extracted label is first mapped through the schema's
label table (relation_map), the same for every backbone; only where the table has no row for the kind pair is the
backbone asked, and then only among the metaedges of the label's polarity (kg/schema.py `aligned_candidates`: a
positive correlation is never offered `downregulates` or `treats`). Its answer is checked against that list: a
contrary relation goes to schema review, a relation outside every candidate is an AlignmentError.
"""

from __future__ import annotations

from collections.abc import Callable

from karma_dagster.backbones.base import Backbone, TripleQuery, backbone_map
from karma_dagster.kg.schema import KGSchema, Metaedge
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import AlignedRow, MentionRow, TripleRow


class AlignmentError(ValueError):
    """The backbone named a relation outside the candidates it was offered."""


def entity_kind(entity_id: str, ner_type: str, schema: KGSchema,
                kg_kind_of: Callable[[str], str | None]) -> str | None:
    kind = kg_kind_of(entity_id)
    if kind is None:
        kind = schema.kind_for_ner_type(ner_type)
    return kind if kind in schema.node_kinds else None


def _review(t: TripleRow, head_kind: str | None, tail_kind: str | None, prob: float = 0.0) -> AlignedRow:
    return AlignedRow(**t.model_dump(), head_kg_type=head_kind, tail_kg_type=tail_kind, kg_relation=None,
                      metaedge=None, alignment_prob=prob, schema_status="review")


def align_triples(
    triples: list[TripleRow],
    mentions: list[MentionRow],
    backbone: Backbone,
    schema: KGSchema,
    params: KarmaParams,
    kg_kind_of: Callable[[str], str | None],
) -> list[AlignedRow]:
    """One AlignedRow per triple; head/tail swapped (with their fields) when the metaedge runs the other way."""
    mention_type = {m.mention_id: m.type for m in mentions}
    kinds: list[tuple[str | None, str | None, list[str]]] = []
    tabled: dict[int, tuple[Metaedge, bool, float]] = {}  # the label table's answer, for every backbone alike
    for i, t in enumerate(triples):
        head_type = mention_type.get(t.head_mention_id, t.head_type)
        tail_type = mention_type.get(t.tail_mention_id, t.tail_type)
        hk = entity_kind(t.head_id, head_type, schema, kg_kind_of)
        tk = entity_kind(t.tail_id, tail_type, schema, kg_kind_of)
        hit = schema.map_label(t.relation, hk, tk) if hk and tk else None
        if hit is not None:
            tabled[i] = (*hit, schema.label_confidence(t.relation, hit[0].relation, hk, tk))
        candidates = sorted({me.relation for me in schema.aligned_candidates(t.relation, hk, tk)}) if hk and tk else []
        kinds.append((hk, tk, candidates))
    # one question per triple the table cannot place and that has candidates; the calls overlap up to the
    # backbone's concurrency limit
    asked = [i for i, (_, _, candidates) in enumerate(kinds) if candidates and i not in tabled]
    answers = dict(zip(asked, backbone_map(backbone, 
        lambda i: backbone.align(
            TripleQuery(head_name=triples[i].head_name, head_type=kinds[i][0], relation=triples[i].relation,
                        tail_name=triples[i].tail_name, tail_type=kinds[i][1], evidence=triples[i].evidence),
            kinds[i][2],
        ),
        asked,
    ), strict=True))
    out: list[AlignedRow] = []
    for i, t in enumerate(triples):
        hk, tk, candidates = kinds[i]
        if i in tabled:
            me, swapped, probability = tabled[i]
            if probability < params.alignment_floor:
                out.append(_review(t, hk, tk, probability))
                continue
        elif i not in answers:
            out.append(_review(t, hk, tk))
            continue
        else:
            answer = answers[i]
            if answer.kg_relation is None or answer.probability < params.alignment_floor:
                out.append(_review(t, hk, tk, min(1.0, max(0.0, answer.probability))))
                continue
            if answer.kg_relation not in candidates:
                if answer.kg_relation in {m.relation for m in schema.candidates(hk, tk)}:  # contrary to the label
                    out.append(_review(t, hk, tk, min(1.0, max(0.0, answer.probability))))
                    continue
                raise AlignmentError(f"triple {t.triple_id}: backbone {backbone.name} answered "
                                     f"{answer.kg_relation!r}, not one of the candidates {candidates} for {hk}-{tk}")
            found = schema.metaedge(answer.kg_relation, hk, tk)
            assert found is not None  # candidates come from the same schema
            me, swapped = found
            probability = answer.probability
        row = t.model_dump()
        if swapped:
            for a, b in (("head_mention_id", "tail_mention_id"), ("head_id", "tail_id"),
                         ("head_name", "tail_name"), ("head_type", "tail_type")):
                row[a], row[b] = row[b], row[a]
            hk, tk = tk, hk
        out.append(AlignedRow(**row, head_kg_type=hk, tail_kg_type=tk, kg_relation=me.relation,
                              metaedge=me.abbrev, alignment_prob=min(1.0, max(0.0, probability)),
                              schema_status="aligned"))
    return out
