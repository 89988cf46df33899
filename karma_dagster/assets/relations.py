"""REA: entity pairs of a sentence -> triples, every relation type with p >= theta_r, with evidence."""

from collections import Counter

import dagster as dg

from karma_dagster.agents.relation_extraction import extract_relations
from karma_dagster.assets.stage_factory import StageCall, StageSpec, stage_asset
from karma_dagster.schemas.records import MentionRow, SummaryRow, TripleRow

SPEC = StageSpec(
    "relations", upstream="entities", model=TripleRow, kinds=frozenset({"python", "scikitlearn"}),
    preview=("head_name", "relation", "tail_name", "probability", "evidence"),
)


def compute(call: StageCall) -> tuple[list, dict]:
    rows = extract_relations(
        call.records("summaries", SummaryRow), call.records("entities", MentionRow), call.backbone, call.params
    )
    return rows, {"triples": len(rows), "by_relation": dg.MetadataValue.json(dict(Counter(r.relation for r in rows)))}


def build(ns: str, code_version: str, pool: str | None):
    return stage_asset(ns, code_version, pool, SPEC, compute)
