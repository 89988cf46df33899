"""CRA: aligned triples checked against the KG's existing edges; contradictions debated, then kept,
discarded or queued for review."""

from karma_dagster import runtime
from karma_dagster.agents.conflict_resolution import resolve_conflicts
from karma_dagster.assets.stage_factory import StageCall, StageSpec, stage_asset
from karma_dagster.schemas.records import AlignedRow, ResolvedRow

SPEC = StageSpec(
    "resolved", upstream="aligned", model=ResolvedRow, kinds=frozenset({"python", "duckdb"}),
    preview=("head_name", "kg_relation", "tail_name", "conflict", "contradicts", "verdict", "action"),
)


def compute(call: StageCall) -> tuple[list, dict]:
    existing = runtime.existing_relations_lookup(call.storage.kg_path(), call.namespace)
    rows = resolve_conflicts(call.records("aligned", AlignedRow), existing, call.backbone, runtime.kg_schema(), call.params)
    actions = {f"action_{a}": sum(r.action == a for r in rows) for a in ("keep", "discard", "review")}
    return rows, {"conflicts": sum(r.conflict for r in rows), **actions}


def build(ns: str, code_version: str, pool: str | None):
    return stage_asset(ns, code_version, pool, SPEC, compute)
