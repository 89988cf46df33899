"""The local backbone's learned evaluator: calibrated P(right), precision rules, the operating point, the shipped
model's provenance, and what is not admitted going to review ranked by its probability."""

from __future__ import annotations

import hashlib
import json

import pytest

from karma_dagster.agents.evaluator import evaluate_triples
from stub_backbones import PartialBackbone
from karma_dagster.backbones.base import EvaluationSignals
from karma_dagster.backbones.local import correctness
from karma_dagster.backbones.local.triple_features import blocked, features
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import data_file
from karma_dagster.schemas.records import ResolvedRow
from karma_dagster.schemas.triple_context import EndFacts, TripleContext

MODEL = correctness.load()


def _ctx(evidence: str, head: str, tail: str, relation: str = "Negative_Correlation", kg_relation: str = "treats",
         htype: str = "Chemical", ttype: str = "Disease", p: float = 0.8) -> TripleContext:
    end = {"has_vocab_id": True, "status": "linked", "linked_to": "seed"}
    return TripleContext(relation=relation, kg_relation=kg_relation, probability=p, sample_confidence=1.0,
                         evidence=evidence, head=EndFacts(text=head, type=htype, **end),
                         tail=EndFacts(text=tail, type=ttype, **end))


# sentences the KG once admitted with confidence 1.00 (read in a real browser), and the plain statements beside them
NEGATED = [
    _ctx("Celecoxib did not affect COX-2 expression in these cells.", "Celecoxib", "COX-2", "Negative_Correlation",
         "downregulates", ttype="Gene"),
    _ctx("Aspirin reduced the risk of colorectal cancer but not gastric cancer.", "Aspirin", "gastric cancer"),
    _ctx("There was no association between valproate and hepatotoxicity in this cohort.", "valproate",
         "hepatotoxicity", "Positive_Correlation", "causes"),
]
CAUSED = _ctx("Cisplatin-induced nephrotoxicity was severe in two patients.", "Cisplatin", "nephrotoxicity")
PLAIN = _ctx("Levothyroxine is effective in the treatment of hypothyroidism.", "Levothyroxine", "hypothyroidism")


@pytest.mark.parametrize("ctx", NEGATED, ids=["did-not", "but-not", "no-association"])
def test_negated_or_contrasted_co_mentions_are_blocked(ctx):
    assert blocked(ctx) is not None
    assert features(ctx)["negation_pair"] + features(ctx)["contrast_pair"] >= 1


def test_a_chemical_named_as_the_cause_never_treats():
    assert "cause" in (blocked(CAUSED) or "")
    as_cause = CAUSED.model_copy(update={"relation": "Positive_Correlation", "kg_relation": "causes"})
    assert blocked(as_cause) is None
    assert blocked(PLAIN) is None


def test_probabilities_are_capped_below_certainty_and_ordered_by_the_evidence():
    strong = PLAIN.model_copy(update={"probability": 0.99})
    weak = PLAIN.model_copy(update={"probability": 0.05, "sample_confidence": 0.6})
    p_strong, p_weak = MODEL.probabilities([strong, weak])
    assert 0.0 < p_weak < p_strong <= MODEL.cap < 0.99


def test_operating_point_rises_with_the_precision_asked():
    thresholds = [MODEL.threshold_for(p) for p in (0.5, 0.6, 0.7, 0.75, 0.8, 0.9)]
    assert thresholds == sorted(thresholds)
    t = MODEL.threshold_for(0.75)
    point = MODEL.point_at(t)
    assert point is not None and point.precision_low >= 0.75 and point.admitted >= 20


def test_shipped_model_matches_the_training_corpora():
    """Retrain (python scripts/train_evaluator.py) when a training corpus changes: this fails until then."""
    for name, digest in MODEL.provenance["corpora"].items():  # type: ignore[union-attr]
        assert hashlib.sha256(data_file("corpora", name).read_bytes()).hexdigest() == digest, name
    assert MODEL.provenance["examples"] >= 500


def test_a_model_from_other_features_is_refused(tmp_path):
    raw = json.loads(correctness.default_path().read_text())
    raw["features_version"] = "triple-features-v0"
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(correctness.CorrectnessModelError, match="retrain"):
        correctness.load(str(bad))


class _Calibrated(PartialBackbone):
    """Only the evaluator's questions: the rule signals in the local judge's shape, the shipped model's P(right)."""

    name = "calibrated"

    def prompt_id(self, agent):
        return "calibrated-test"

    def evaluation_signals(self, triple, probability, segment_relevance, linked_entities):
        return EvaluationSignals(signals={"probability": probability, "linked_entities": float(linked_entities),
                                          "hedged": 0.0, "negated": 0.0, "evidence_tokens_over_40": 0.0,
                                          "segment_relevance": segment_relevance})

    def correctness(self, contexts):
        return MODEL.probabilities(contexts)

    def admission_threshold(self, precision):
        return MODEL.threshold_for(precision)


def _row(ctx: TripleContext, i: int) -> ResolvedRow:
    return ResolvedRow(
        doc_key="d", triple_id=f"t{i}", summary_id="s", segment_id="g", head_mention_id=f"h{i}", head_id=f"H{i}",
        head_name=ctx.head.text, head_type=ctx.head.type, relation=ctx.relation, tail_mention_id=f"x{i}",
        tail_id=f"T{i}", tail_name=ctx.tail.text, tail_type=ctx.tail.type, probability=ctx.probability,
        evidence=ctx.evidence, sample_confidence=ctx.sample_confidence, head_kg_type="Compound",
        tail_kg_type="Disease", kg_relation=ctx.kg_relation, metaedge="CtD", alignment_prob=1.0,
        schema_status="aligned", conflict=False, contradicts=None, verdict="none", action="keep")


def test_the_evaluator_admits_at_the_operating_point_and_says_why_the_rest_is_held_back():
    contexts = [PLAIN.model_copy(update={"probability": 0.99}), NEGATED[0], CAUSED]
    rows = [_row(c, i) for i, c in enumerate(contexts)]
    out = evaluate_triples(rows, {"g": 1.0}, _Calibrated(), KarmaParams(), contexts=contexts)
    assert [r.evidence_score for r in out] == [r.correctness for r in out]
    assert not out[1].accepted and "negated" in out[1].admission
    assert not out[2].accepted and "cause" in out[2].admission
    strict = evaluate_triples(rows[:1], {"g": 1.0}, _Calibrated(), KarmaParams(admission_precision=0.98),
                              contexts=contexts[:1])
    assert not strict[0].accepted and strict[0].admission.startswith("below the operating point")


def test_a_handful_of_top_triples_does_not_veto_every_threshold_below():
    """A point of 8 triples above 0.94 with a wide interval must not push the operating point to the cap."""
    curve = [correctness.OperatingPoint(threshold=t, admitted=n, precision=r / n,
                                        precision_low=correctness.wilson_low(r, n), recall=r / 1000)
             for t, n, r in ((0.6, 1200, 960), (0.8, 400, 340), (0.94, 8, 6))]
    model = MODEL.model_copy(update={"curve": curve})
    assert model.threshold_for(0.75) == 0.6
    assert model.threshold_for(0.9) == model.cap  # nothing reaches 0.90 with confidence
