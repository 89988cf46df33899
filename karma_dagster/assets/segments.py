"""RA: sections -> segments with relevance R(s); references and acknowledgements dropped; kept when R >= delta."""

import json

from karma_dagster import runtime
from karma_dagster.agents.reader import read_document
from karma_dagster.assets.stage_factory import StageCall, StageSpec, stage_asset
from karma_dagster.schemas.records import RawSection, SegmentRow

SPEC = StageSpec(
    "segments", upstream="documents", model=SegmentRow, kinds=frozenset({"python", "spacy"}),
    preview=("segment_id", "section", "relevance", "kept", "drop_reason", "text"),
)


def compute(call: StageCall) -> tuple[list, dict]:
    doc = call.table("documents").iloc[0]
    sections = [RawSection.model_validate(s) for s in json.loads(doc["sections_json"])]
    kg_context = runtime.kg_context(call.storage.cache_path(), call.storage.kg_path(), doc["text"])
    rows = read_document(call.document, sections, call.backbone, call.params, kg_context)
    kept = sum(r.kept for r in rows)
    return rows, {
        "kg_context": ", ".join(kg_context[:15]), "kept": kept, "dropped": len(rows) - kept, "delta": call.params.delta,
    }


def build(ns: str, code_version: str, pool: str | None):
    return stage_asset(ns, code_version, pool, SPEC, compute)
