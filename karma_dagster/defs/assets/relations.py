"""REA: entity pairs of a sentence -> triples, every relation type with p >= theta_r, with evidence."""


import dagster as dg

from karma_dagster.agents.relation_extraction import extract_relations
from karma_dagster.defs.assets.batching import per_document
from karma_dagster.defs.assets.common import StageTimer, agent_errors, finish_stage, stage_asset_kwargs
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.frames import frame_to_records
from karma_dagster.schemas.records import MentionRow, SummaryRow, TripleRow


def build(ns: str, code_version: str, pool: str | None) -> dg.AssetsDefinition:
    @dg.asset(**stage_asset_kwargs(ns, "relations", code_version, "entities", pool, kinds={"python", "scikitlearn"}))
    @per_document
    def relations(
        context: dg.AssetExecutionContext,
        storage: KarmaStorageResource,
        backbones: BackbonesResource,
        karma_params: KarmaParamsResource,
    ) -> dg.MaterializeResult:
        timer = StageTimer()
        store = storage.stage_store()
        backbone = backbones.get(ns, storage)
        backbone.reset_usage()
        key = context.partition_key
        summaries = frame_to_records(store.read(ns, "summaries", key), SummaryRow)
        mentions = frame_to_records(store.read(ns, "entities", key), MentionRow)
        with agent_errors(context, store, "relations", backbone):
            rows = extract_relations(summaries, mentions, backbone, karma_params.params())  # type: ignore[arg-type]
        by_type: dict[str, int] = {}
        for r in rows:
            by_type[r.relation] = by_type.get(r.relation, 0) + 1
        return finish_stage(
            context, store, ns, "relations", rows, TripleRow, backbone, timer,
            ["head_name", "relation", "tail_name", "probability", "evidence"],
            extra={"triples": len(rows), "by_relation": dg.MetadataValue.json(by_type)},
        )

    return relations
