"""CRA: aligned triples checked against the KG's existing edges; contradictions debated, then kept,
discarded or queued for review."""


import dagster as dg

from karma_dagster.agents.conflict_resolution import resolve_conflicts
from karma_dagster.defs.assets.batching import per_document
from karma_dagster.defs.assets.common import StageTimer, agent_errors, finish_stage, stage_asset_kwargs
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.frames import frame_to_records
from karma_dagster.schemas.records import AlignedRow, ResolvedRow


def build(ns: str, code_version: str, pool: str | None) -> dg.AssetsDefinition:
    @dg.asset(**stage_asset_kwargs(ns, "resolved", code_version, "aligned", pool, kinds={"python", "duckdb"}))
    @per_document
    def resolved(
        context: dg.AssetExecutionContext,
        storage: KarmaStorageResource,
        backbones: BackbonesResource,
        karma_params: KarmaParamsResource,
    ) -> dg.MaterializeResult:
        from karma_dagster import runtime

        timer = StageTimer()
        store = storage.stage_store()
        backbone = backbones.get(ns, storage)
        backbone.reset_usage()
        aligned = frame_to_records(store.read(ns, "aligned", context.partition_key), AlignedRow)
        existing = runtime.existing_relations_lookup(storage.kg_path(), ns)
        with agent_errors(context, store, "resolved", backbone):
            rows = resolve_conflicts(aligned, existing, backbone, runtime.kg_schema(), karma_params.params())  # type: ignore[arg-type]
        actions = {a: sum(r.action == a for r in rows) for a in ("keep", "discard", "review")}
        return finish_stage(
            context, store, ns, "resolved", rows, ResolvedRow, backbone, timer,
            ["head_name", "kg_relation", "tail_name", "conflict", "contradicts", "verdict", "action"],
            extra={"conflicts": sum(r.conflict for r in rows), **{f"action_{k}": v for k, v in actions.items()}},
        )

    return resolved
