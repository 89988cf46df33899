"""The KARMA formulas' parameters, in one validated place.

Assets get them through the `KarmaParamsResource`; agents take a `KarmaParams` so they stay Dagster-free.
Defaults were chosen on the shipped *training* corpora and the sample papers, never on dev splits.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvaluatorWeights(BaseModel):
    """Weights of the evaluator's logistic scores C, Cl, R = sigma(bias + sum w_i * signal_i)."""

    model_config = ConfigDict(extra="forbid")
    # Hand-set on the sample papers (no gold for C, Cl, R): confidence follows the relation probability
    # (p 0.5 -> 0.5 with one linked entity), relevance needs entities the KG knows, not only a relevant segment.
    confidence: dict[str, float] = {"bias": -4.0, "probability": 6.0, "linked_entities": 0.75, "hedged": -1.5}
    clarity: dict[str, float] = {"bias": 2.0, "evidence_tokens_over_40": -1.5, "hedged": -1.0, "negated": -2.0}
    relevance: dict[str, float] = {"bias": -3.0, "segment_relevance": 3.0, "linked_entities": 1.0}


def _llm_weights() -> EvaluatorWeights:
    """For backbones that judge each triple themselves (the evaluator prompt's C, Cl, R as llm_* signals)."""
    return EvaluatorWeights(
        confidence={"bias": -3.0, "llm_confidence": 4.0, "probability": 2.0},
        clarity={"bias": -2.0, "llm_clarity": 4.0},
        relevance={"bias": -2.5, "llm_relevance": 3.0, "segment_relevance": 2.0},
    )


class KarmaParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    delta: float = Field(0.35, ge=0, le=1, description="reader: keep a segment when R(s) >= delta")
    summary_max_sentences: int = Field(6, ge=1, description="summarizer: sentences kept per segment")
    rho: float = Field(0.30, ge=0, le=2, description="normalization: new entity when cosine distance > rho")
    theta: dict[str, float] = Field(
        default_factory=lambda: {"default": 0.4},
        description="relation extraction: per-type thresholds theta_r; 'default' for unlisted types",
    )
    relation_samples: int = Field(
        1, ge=1, le=50, description="relation extraction: MedKGent sampling, N samples per question (1 = off)"
    )
    sampling_temperature: float = Field(
        0.7, gt=0, le=2, description="relation extraction: temperature of the N samples (must be > 0)"
    )
    min_sample_confidence: float = Field(
        0.6, ge=0, le=1, description="relation extraction: drop a triple found in fewer than this fraction of samples"
    )
    alignment_floor: float = Field(0.5, ge=0, le=1, description="schema alignment: below this -> review")
    conflict_review_confidence: float = Field(
        0.8, ge=0, le=1, description="contradicting triples at or above this confidence go to review, below are discarded"
    )
    integrate_threshold: float = Field(0.65, ge=0, le=1, description="evaluator: integrate when mean(C, Cl, R) >= Theta")
    seed_edge_confidence: float = Field(0.9, ge=0, le=1, description="confidence given to imported KG edges")
    weights: EvaluatorWeights = Field(default_factory=EvaluatorWeights, description="evaluator weights, rule signals")
    llm_weights: EvaluatorWeights = Field(
        default_factory=_llm_weights, description="evaluator weights when the backbone reports llm_* signals"
    )

    def theta_for(self, relation: str) -> float:
        return self.theta.get(relation, self.theta.get("default", 0.5))
