"""SAA: triples -> KG schema kinds and relations; what does not fit is flagged for review, not forced."""


import dagster as dg

from karma_dagster.agents.schema_alignment import align_triples
from karma_dagster.defs.assets.batching import per_document
from karma_dagster.defs.assets.common import StageTimer, agent_errors, finish_stage, stage_asset_kwargs
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.frames import frame_to_records
from karma_dagster.schemas.records import AlignedRow, MentionRow, TripleRow


def build(ns: str, code_version: str, pool: str | None) -> dg.AssetsDefinition:
    @dg.asset(**stage_asset_kwargs(ns, "aligned", code_version, "relations", pool, kinds={"python", "duckdb"}))
    @per_document
    def aligned(
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
        key = context.partition_key
        triples = frame_to_records(store.read(ns, "relations", key), TripleRow)
        mentions = frame_to_records(store.read(ns, "entities", key), MentionRow)
        kind_of = runtime.kg_kind_lookup(storage.kg_path())
        with agent_errors(context, store, "aligned", backbone):
            rows = align_triples(
                triples, mentions, backbone, runtime.kg_schema(), karma_params.params(), kind_of  # type: ignore[arg-type]
            )
        review = sum(r.schema_status == "review" for r in rows)
        return finish_stage(
            context, store, ns, "aligned", rows, AlignedRow, backbone, timer,
            ["head_name", "head_kg_type", "kg_relation", "metaedge", "tail_name", "tail_kg_type", "alignment_prob", "schema_status"],
            extra={"aligned": len(rows) - review, "schema_review": review},
        )

    return aligned
