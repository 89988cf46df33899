"""The KARMA formulas' parameters as a Dagster resource (editable in the launchpad, validated by pydantic)."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from karma_dagster.params import EvaluatorWeights, KarmaParams

_DEFAULTS = KarmaParams()
_W = _DEFAULTS.weights
_LW = _DEFAULTS.llm_weights


class KarmaParamsResource(dg.ConfigurableResource):
    delta: float = Field(_DEFAULTS.delta, description="reader: keep a segment when R(s) >= delta")
    summary_max_sentences: int = Field(_DEFAULTS.summary_max_sentences, description="summarizer: sentences kept")
    rho: float = Field(_DEFAULTS.rho, description="normalization: a new entity when the index distance > rho")
    theta: dict[str, float] = Field(dict(_DEFAULTS.theta), description="relation thresholds theta_r; key 'default'")
    relation_samples: int = Field(_DEFAULTS.relation_samples, description="relation extraction: MedKGent samples N (1 = off)")
    sampling_temperature: float = Field(_DEFAULTS.sampling_temperature, description="temperature of the N samples (> 0)")
    min_sample_confidence: float = Field(
        _DEFAULTS.min_sample_confidence, description="drop triples found in fewer than this fraction of the samples"
    )
    alignment_floor: float = Field(_DEFAULTS.alignment_floor, description="schema alignment: below -> review")
    conflict_review_confidence: float = Field(
        _DEFAULTS.conflict_review_confidence, description="contradicting triples at/above go to review, else discarded"
    )
    integrate_threshold: float = Field(_DEFAULTS.integrate_threshold, description="evaluator: integrate when mean >= Theta")
    seed_edge_confidence: float = Field(_DEFAULTS.seed_edge_confidence, description="confidence of imported edges")
    weights_confidence: dict[str, float] = Field(dict(_W.confidence), description="evaluator weights for C")
    weights_clarity: dict[str, float] = Field(dict(_W.clarity), description="evaluator weights for Cl")
    weights_relevance: dict[str, float] = Field(dict(_W.relevance), description="evaluator weights for R")
    llm_weights_confidence: dict[str, float] = Field(dict(_LW.confidence), description="C weights, LLM backbones")
    llm_weights_clarity: dict[str, float] = Field(dict(_LW.clarity), description="Cl weights, LLM backbones")
    llm_weights_relevance: dict[str, float] = Field(dict(_LW.relevance), description="R weights, LLM backbones")

    def params(self) -> KarmaParams:
        return KarmaParams(
            delta=self.delta,
            summary_max_sentences=self.summary_max_sentences,
            rho=self.rho,
            theta=dict(self.theta),
            relation_samples=self.relation_samples,
            sampling_temperature=self.sampling_temperature,
            min_sample_confidence=self.min_sample_confidence,
            alignment_floor=self.alignment_floor,
            conflict_review_confidence=self.conflict_review_confidence,
            integrate_threshold=self.integrate_threshold,
            seed_edge_confidence=self.seed_edge_confidence,
            weights=EvaluatorWeights(
                confidence=dict(self.weights_confidence),
                clarity=dict(self.weights_clarity),
                relevance=dict(self.weights_relevance),
            ),
            llm_weights=EvaluatorWeights(
                confidence=dict(self.llm_weights_confidence),
                clarity=dict(self.llm_weights_clarity),
                relevance=dict(self.llm_weights_relevance),
            ),
        )
