"""SAA: triples -> KG schema kinds and relations; what does not fit is flagged for review, not forced."""

from karma_dagster import runtime
from karma_dagster.agents.schema_alignment import align_triples
from karma_dagster.assets.stage_factory import StageCall, StageSpec, stage_asset
from karma_dagster.schemas.records import AlignedRow, MentionRow, TripleRow

SPEC = StageSpec(
    "aligned", upstream="relations", model=AlignedRow, kinds=frozenset({"python", "duckdb"}),
    preview=("head_name", "head_kg_type", "kg_relation", "metaedge", "tail_name", "tail_kg_type", "alignment_prob",
             "schema_status"),
)


def compute(call: StageCall) -> tuple[list, dict]:
    rows = align_triples(
        call.records("relations", TripleRow),
        call.records("entities", MentionRow),
        call.backbone,
        runtime.kg_schema(),
        call.params,
        runtime.kg_kind_lookup(call.storage.kg_path()),
    )
    review = sum(r.schema_status == "review" for r in rows)
    return rows, {"aligned": len(rows) - review, "schema_review": review}


def build(ns: str, code_version: str, pool: str | None):
    return stage_asset(ns, code_version, pool, SPEC, compute)
