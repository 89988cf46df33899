"""SA: kept segments -> condensed summaries that keep entities, numbers and relation words."""

from karma_dagster.agents.summarizer import summarize_segments
from karma_dagster.assets.stage_factory import StageCall, StageSpec, stage_asset
from karma_dagster.schemas.records import SegmentRow, SummaryRow

SPEC = StageSpec(
    "summaries", upstream="segments", model=SummaryRow,
    preview=("summary_id", "section", "n_sentences_in", "n_sentences_out", "text"),
)


def compute(call: StageCall) -> tuple[list, dict]:
    rows = summarize_segments(call.records("segments", SegmentRow), call.backbone, call.params)
    return rows, {
        "sentences_in": sum(r.n_sentences_in for r in rows), "sentences_out": sum(r.n_sentences_out for r in rows),
    }


def build(ns: str, code_version: str, pool: str | None):
    return stage_asset(ns, code_version, pool, SPEC, compute)
