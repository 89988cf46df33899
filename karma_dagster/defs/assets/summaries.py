"""SA: kept segments -> condensed summaries that keep entities, numbers and relation words."""


import dagster as dg

from karma_dagster.agents.summarizer import summarize_segments
from karma_dagster.defs.assets.batching import per_document
from karma_dagster.defs.assets.common import StageTimer, agent_errors, finish_stage, stage_asset_kwargs
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.frames import frame_to_records
from karma_dagster.schemas.records import SegmentRow, SummaryRow


def build(ns: str, code_version: str, pool: str | None) -> dg.AssetsDefinition:
    @dg.asset(**stage_asset_kwargs(ns, "summaries", code_version, "segments", pool, kinds={"python"}))
    @per_document
    def summaries(
        context: dg.AssetExecutionContext,
        storage: KarmaStorageResource,
        backbones: BackbonesResource,
        karma_params: KarmaParamsResource,
    ) -> dg.MaterializeResult:
        timer = StageTimer()
        store = storage.stage_store()
        backbone = backbones.get(ns, storage)
        backbone.reset_usage()
        segments = frame_to_records(store.read(ns, "segments", context.partition_key), SegmentRow)
        with agent_errors(context, store, "summaries", backbone):
            rows = summarize_segments(segments, backbone, karma_params.params())  # type: ignore[arg-type]
        n_in = sum(r.n_sentences_in for r in rows)
        n_out = sum(r.n_sentences_out for r in rows)
        return finish_stage(
            context, store, ns, "summaries", rows, SummaryRow, backbone, timer,
            ["summary_id", "section", "n_sentences_in", "n_sentences_out", "text"],
            extra={"sentences_in": n_in, "sentences_out": n_out},
        )

    return summaries
