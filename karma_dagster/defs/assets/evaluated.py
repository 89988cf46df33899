"""EA: confidence, clarity and relevance per triple; accepted for the KG when their mean >= Theta."""


import dagster as dg

from karma_dagster.agents.evaluator import evaluate_triples
from karma_dagster.defs.assets.batching import per_document
from karma_dagster.defs.assets.common import StageTimer, agent_errors, finish_stage, stage_asset_kwargs
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.frames import frame_to_records
from karma_dagster.schemas.records import EvaluatedRow, ResolvedRow


def build(ns: str, code_version: str, pool: str | None) -> dg.AssetsDefinition:
    @dg.asset(**stage_asset_kwargs(ns, "evaluated", code_version, "resolved", pool, kinds={"python"}))
    @per_document
    def evaluated(
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
        resolved = frame_to_records(store.read(ns, "resolved", key), ResolvedRow)
        segments = store.read(ns, "segments", key)
        relevance = dict(zip(segments["segment_id"], segments["relevance"].astype(float)))
        entities = store.read(ns, "entities", key)
        linked = set(entities.loc[entities["status"] == "linked", "entity_id"])
        with agent_errors(context, store, "evaluated", backbone):
            rows = evaluate_triples(resolved, relevance, backbone, karma_params.params(), is_linked=linked)  # type: ignore[arg-type]
        accepted = sum(r.accepted for r in rows)
        return finish_stage(
            context, store, ns, "evaluated", rows, EvaluatedRow, backbone, timer,
            ["head_name", "kg_relation", "tail_name", "confidence", "clarity", "relevance", "score", "accepted"],
            extra={"accepted": accepted, "rejected": len(rows) - accepted, "theta": karma_params.integrate_threshold},
        )

    return evaluated
