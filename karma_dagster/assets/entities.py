"""EEA: summaries -> typed mentions, dictionary-filtered, normalized against the KG's entity index."""

import dagster as dg

from karma_dagster import runtime
from karma_dagster.agents.entity_extraction import extract_entities
from karma_dagster.assets.stage_factory import StageCall, StageSpec, stage_asset
from karma_dagster.schemas.records import MentionRow, SummaryRow

SPEC = StageSpec(
    "entities", upstream="summaries", model=MentionRow, kinds=frozenset({"python", "spacy", "lancedb"}),
    preview=("text", "type", "long_form", "status", "kg_name", "entity_id", "distance"),
    extra_deps=(dg.AssetKey("seed_kg"),),
)


def compute(call: StageCall) -> tuple[list, dict]:
    storage = call.storage
    rows = extract_entities(
        call.records("summaries", SummaryRow),
        call.backbone,
        runtime.dictionary(storage.cache_path(), storage.kg_path()),
        runtime.entity_index(storage.index_uri()),
        call.params,
    )
    linked = sum(r.status == "linked" for r in rows)
    return rows, {"mentions": len(rows), "linked": linked, "new": len(rows) - linked, "rho": call.params.rho}


def build(ns: str, code_version: str, pool: str | None):
    return stage_asset(ns, code_version, pool, SPEC, compute)
