"""RA: sections -> segments with relevance R(s); references and acknowledgements dropped; kept when R >= delta."""


import json

import dagster as dg

from karma_dagster.agents.reader import read_document
from karma_dagster.defs.assets.batching import per_document
from karma_dagster.defs.assets.common import StageTimer, agent_errors, finish_stage, stage_asset_kwargs
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.records import RawSection, SegmentRow


def build(ns: str, code_version: str, pool: str | None) -> dg.AssetsDefinition:
    @dg.asset(**stage_asset_kwargs(ns, "segments", code_version, "documents", pool, kinds={"python", "spacy"}))
    @per_document
    def segments(
        context: dg.AssetExecutionContext,
        storage: KarmaStorageResource,
        backbones: BackbonesResource,
        karma_params: KarmaParamsResource,
    ) -> dg.MaterializeResult:
        timer = StageTimer()
        store = storage.stage_store()
        backbone = backbones.get(ns, storage)
        backbone.reset_usage()
        doc = store.read(ns, "documents", context.partition_key).iloc[0]
        sections = [RawSection.model_validate(s) for s in json.loads(doc["sections_json"])]
        from karma_dagster import runtime

        kg_context = runtime.kg_context(storage.cache_path(), storage.kg_path(), doc["text"])
        with agent_errors(context, store, "segments", backbone):
            rows = read_document(context.partition_key, sections, backbone, karma_params.params(), kg_context)
        kept = sum(r.kept for r in rows)
        return finish_stage(
            context, store, ns, "segments", rows, SegmentRow, backbone, timer,
            ["segment_id", "section", "relevance", "kept", "drop_reason", "text"],
            extra={"kg_context": ", ".join(kg_context[:15]), "kept": kept, "dropped": len(rows) - kept, "delta": karma_params.delta},
        )

    return segments
