"""The KARMA formulas' parameters, in one validated place.

Assets get them through the `KarmaParamsResource`; agents take a `KarmaParams` so they stay Dagster-free.
Defaults were chosen on the shipped *training* corpora and the sample papers, never on dev splits.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from karma_dagster.runtime.strict_keys import StrictModel


class EvaluatorWeights(StrictModel):
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


class ControllerParams(StrictModel):
    """The Central Controller's weights (KARMA Eq. 4 and its UCB exploration term), see scheduling/controller.py.

    priority = w_utility * U + w_urgency * urgency - w_cost * cost, score = priority + alpha * sqrt(ln t / (1 + n_tau)).
    U: the LLM's estimate when a `controller:` backbone is configured, else w_novelty * novelty + w_recency * recency.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha: float = Field(0.5, ge=0.0, description="controller: UCB exploration weight alpha")
    w_utility: float = Field(1.0, ge=0.0, description="controller Eq. 4: omega_1, weight of the utility U")
    w_urgency: float = Field(0.3, ge=0.0, description="controller Eq. 4: omega_2, weight of the waiting time")
    w_cost: float = Field(0.3, ge=0.0, description="controller Eq. 4: omega_3, weight of the estimated token cost "
                          "(subtracted: cheaper documents first)")
    w_novelty: float = Field(0.7, ge=0.0, description="rule utility: weight of the title's entities the KG lacks")
    w_recency: float = Field(0.3, ge=0.0, description="rule utility: weight of the publication date's recency")
    recency_half_life_days: float = Field(365.0, gt=0.0, description="rule utility: recency halves every ... days")
    urgency_half_life_hours: float = Field(
        24.0, gt=0.0, description="urgency = 1 - 2^(-waiting hours / this): half-urgent after this long in the inbox")
    cost_reference_tokens: float = Field(
        20_000.0, gt=0.0, description="cost = tokens / (tokens + this): a document estimated at this many tokens "
        "(all backbones' calls) costs 0.5")


class KarmaParams(StrictModel):
    model_config = ConfigDict(extra="forbid")

    delta: float = Field(0.35, ge=0, le=1, description="reader: keep a segment when R(s) >= delta")
    summary_max_sentences: int = Field(6, ge=1, description="summarizer: sentences kept per segment")
    rho: float = Field(0.30, ge=0, le=2, description="normalization: new entity when cosine distance > rho")
    theta: dict[str, float] = Field(
        default_factory=lambda: {"default": 0.4},
        description="relation extraction: per-type thresholds theta_r; 'default' for unlisted types",
    )
    # MedKGent sampling confidence, on by default. N = 5 keeps a local run cheap (the local backbone classifies a
    # summary once and perturbs its logits per sample: the relations stage took 1.3-1.5 s for the 12 sample papers
    # with N = 5 as with N = 1) and gives fractions 0.2 apart, so the 0.6 rule means "3 of 5". On an LLM backbone
    # each sample is one more REA call (cached per sample index): set 1 to turn sampling off.
    relation_samples: int = Field(
        5, ge=1, le=50, description="relation extraction: MedKGent sampling, N samples per question (1 = off)"
    )
    sampling_temperature: float = Field(
        0.7, gt=0, le=2, description="relation extraction: temperature of the N samples (must be > 0; local "
        "backbone: the scale of the logistic noise added to each relation's logit)"
    )
    min_sample_confidence: float = Field(
        0.6, ge=0, le=1, description="relation extraction: drop a triple found in fewer than this fraction of samples"
    )
    alignment_floor: float = Field(0.5, ge=0, le=1, description="schema alignment: below this -> review")
    conflict_review_confidence: float = Field(
        0.8, ge=0, le=1,
        description="adjudication: a contradicting triple that loses to the other side goes to review when its own "
                    "support is at or above this, else it is discarded",
    )
    conflict_debate_min_confidence: float = Field(
        0.6, ge=0, le=1,
        description="adjudication: a debate verdict 'contradict' below this confidence sends the triple to review "
                    "(the debate did not settle it); at or above, both sides' support decides",
    )
    conflict_replace_margin: float = Field(
        0.15, ge=0, le=1,
        description="adjudication: the side whose support exceeds the other's by at least this wins (a new triple "
                    "then replaces the older KG edge, which is kept in history); closer calls go to review",
    )
    conflict_half_life_years: float = Field(
        10.0, ge=0,
        description="adjudication: a KG edge's confidence counts half for every this many years since its last "
                    "evidence (newer findings weigh more; seed-only edges are undated and not discounted; 0 = off)",
    )
    integrate_threshold: float = Field(
        0.65, ge=0, le=1, description="evaluator: integrate when mean(C, Cl, R) >= Theta (an LLM's judged signals)")
    rule_integrate_threshold: float = Field(
        0.3, ge=0, le=1,
        description="evaluator: Theta for the rule-based judge's signals (the local backbones, scored with `weights`), "
                    "chosen on the training splits (`python bench/chain_gold.py <train files> --backbone local --theta "
                    "...`): the largest Theta at the best mean accepted pair F1 of BioRED and BC5CDR train (0.648 at "
                    "0, 0.2 and 0.3; 0.647 at 0.4 and 0.5; 0.632 at the LLM's 0.65; re-swept 2026-12-03 with the "
                    "learned NER, the segment view and the Compound-Symptom metaedges: 0.5 before)",
    )
    admission_precision: float = Field(
        0.75, gt=0, lt=1,
        description="evaluator: the precision the KG must hold. A backbone with a calibrated correctness model "
                    "(local) admits a triple when its P(right) reaches the threshold at which the admitted triples "
                    "reached this precision out of fold on the training splits (95 % lower bound); the rest goes to "
                    "review, ranked by P(right). Higher: a smaller KG a curator can trust more")
    seed_edge_confidence: float = Field(0.9, ge=0, le=1, description="confidence given to imported KG edges")
    weights: EvaluatorWeights = Field(default_factory=EvaluatorWeights, description="evaluator weights, rule signals")
    llm_weights: EvaluatorWeights = Field(
        default_factory=_llm_weights, description="evaluator weights when the backbone reports llm_* signals"
    )
    controller: ControllerParams = Field(
        default_factory=ControllerParams, description="Central Controller: Eq. 4 weights and the UCB alpha"
    )

    def integrate_threshold_for(self, llm_signals: bool) -> float:
        """Theta for a score from an LLM's judged signals (`llm_weights`) or from the rule-based judge's."""
        return self.integrate_threshold if llm_signals else self.rule_integrate_threshold

    def theta_for(self, relation: str) -> float:
        return self.theta.get(relation, self.theta.get("default", 0.5))
