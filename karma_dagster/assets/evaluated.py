"""EA: confidence, clarity and relevance per triple; accepted for the KG when their mean >= Theta."""

from karma_dagster.agents.evaluator import evaluate_triples
from karma_dagster.assets.stage_factory import StageCall, StageSpec, stage_asset
from karma_dagster.schemas.records import EvaluatedRow, ResolvedRow

SPEC = StageSpec(
    "evaluated", upstream="resolved", model=EvaluatedRow,
    preview=("head_name", "kg_relation", "tail_name", "confidence", "clarity", "relevance", "score", "accepted"),
)


def compute(call: StageCall) -> tuple[list, dict]:
    segments, entities = call.table("segments"), call.table("entities")
    relevance = dict(zip(segments["segment_id"], segments["relevance"].astype(float)))
    linked = set(entities.loc[entities["status"] == "linked", "entity_id"])
    rows = evaluate_triples(call.records("resolved", ResolvedRow), relevance, call.backbone, call.params, is_linked=linked)
    accepted = sum(r.accepted for r in rows)
    return rows, {"accepted": accepted, "rejected": len(rows) - accepted, "theta": call.params.integrate_threshold}


def build(ns: str, code_version: str, pool: str | None):
    return stage_asset(ns, code_version, pool, SPEC, compute)
