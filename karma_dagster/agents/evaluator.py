"""EA: confidence C, clarity Cl and relevance R per triple, each sigma(bias + sum_i w_i * signal_i) over the
backbone's signals with the configured weights; a triple is integrated when mean(C, Cl, R) >= Theta (an LLM's
judged signals and the rule-based judge's have their own weights and Theta: params.py) and the earlier agents let it
through (aligned to the schema, kept or replacing by conflict resolution). Each row also
carries its `evidence_score` (records.evidence_score): what the KG's reinforcement aggregates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection

from karma_dagster.backbones.base import Backbone, TripleQuery, backbone_map
from karma_dagster.params import KarmaParams
from karma_dagster.schemas.records import EvaluatedRow, ResolvedRow, evidence_score


class EvaluatorError(ValueError):
    """A triple whose segment has no relevance, or weights naming a signal the backbone did not give."""


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def logistic_score(weights: dict[str, float], signals: dict[str, float], what: str = "score") -> float:
    """sigma(bias + sum w_i * s_i); a weight naming a signal that is absent is an error, not a silent zero."""
    z = weights.get("bias", 0.0)
    for name, w in weights.items():
        if name == "bias":
            continue
        if name not in signals:
            raise EvaluatorError(f"{what} weight {name!r} has no signal; signals given: {sorted(signals)}")
        z += w * signals[name]
    return sigmoid(z)


def evaluate_triples(
    resolved: list[ResolvedRow],
    segment_relevance: dict[str, float],
    backbone: Backbone,
    params: KarmaParams,
    *,
    is_linked: Callable[[str], bool] | Collection[str] | None = None,
) -> list[EvaluatedRow]:
    """`is_linked` tells which entity ids are KG nodes (the linked_entities signal); None counts none linked."""
    if is_linked is None:
        linked: Callable[[str], bool] = lambda _id: False  # noqa: E731
    elif callable(is_linked):
        linked = is_linked
    else:
        ids = frozenset(is_linked)
        linked = ids.__contains__
    for t in resolved:
        if t.segment_id not in segment_relevance:
            raise EvaluatorError(f"triple {t.triple_id}: no relevance for segment {t.segment_id!r}")

    def signals_of(t: ResolvedRow) -> dict[str, float]:
        query = TripleQuery(head_name=t.head_name, head_type=t.head_kg_type or t.head_type,
                            relation=t.kg_relation or t.relation, tail_name=t.tail_name,
                            tail_type=t.tail_kg_type or t.tail_type, evidence=t.evidence)
        n_linked = int(bool(linked(t.head_id))) + int(bool(linked(t.tail_id)))
        return backbone.evaluation_signals(query, t.probability, segment_relevance[t.segment_id], n_linked).signals

    # the per-triple questions overlap up to the backbone's concurrency limit; scoring stays in input order
    all_signals = backbone_map(backbone, signals_of, resolved)
    out: list[EvaluatedRow] = []
    for t, signals in zip(resolved, all_signals, strict=True):
        llm = "llm_confidence" in signals
        w = params.llm_weights if llm else params.weights
        c = logistic_score(w.confidence, signals, "confidence")
        cl = logistic_score(w.clarity, signals, "clarity")
        r = logistic_score(w.relevance, signals, "relevance")
        score = (c + cl + r) / 3.0
        accepted = score >= params.integrate_threshold_for(llm) and kept_and_aligned(t)
        row = t.model_dump()
        out.append(EvaluatedRow(**row, confidence=c, clarity=cl, relevance=r, score=score, accepted=accepted,
                                evidence_score=evidence_score(row.get("sample_confidence"), score, t.probability)))
    return out


def kept_and_aligned(t: ResolvedRow) -> bool:
    """What the earlier agents must have said for a triple to be integrable: aligned to the schema, and kept by
    conflict resolution ("replace": kept, and the older KG edge it contradicts is superseded at merge)."""
    return t.action in ("keep", "replace") and t.schema_status == "aligned"
