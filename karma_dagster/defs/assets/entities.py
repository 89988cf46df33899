"""EEA: summaries -> typed mentions, dictionary-filtered, normalized against the KG's entity index."""


import dagster as dg

from karma_dagster.agents.entity_extraction import extract_entities
from karma_dagster.defs.assets.batching import per_document
from karma_dagster.defs.assets.common import StageTimer, agent_errors, finish_stage, stage_asset_kwargs
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.frames import frame_to_records
from karma_dagster.schemas.records import MentionRow, SummaryRow


def build(ns: str, code_version: str, pool: str | None) -> dg.AssetsDefinition:
    @dg.asset(
        **stage_asset_kwargs(
            ns, "entities", code_version, "summaries", pool, kinds={"python", "spacy", "lancedb"},
            extra_deps=[dg.AssetKey("seed_kg")],
        )
    )
    @per_document
    def entities(
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
        summaries = frame_to_records(store.read(ns, "summaries", context.partition_key), SummaryRow)
        with agent_errors(context, store, "entities", backbone):
            rows = extract_entities(
                summaries,  # type: ignore[arg-type]
                backbone,
                runtime.dictionary(storage.cache_path(), storage.kg_path()),
                runtime.entity_index(storage.index_uri()),
                karma_params.params(),
            )
        linked = sum(r.status == "linked" for r in rows)
        return finish_stage(
            context, store, ns, "entities", rows, MentionRow, backbone, timer,
            ["text", "type", "long_form", "status", "kg_name", "entity_id", "distance"],
            extra={"mentions": len(rows), "linked": linked, "new": len(rows) - linked, "rho": karma_params.rho},
        )

    return entities
