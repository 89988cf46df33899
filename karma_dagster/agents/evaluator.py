"""EA: confidence C, clarity Cl and relevance R per triple, each sigma(bias + sum_i w_i * signal_i) over the
backbone's signals with the configured weights, and the admission decision.

A backbone with a calibrated correctness model (the local one: backbones/local/correctness.py) answers
P(this triple is right) from everything the chain knows (`TripleContext`); that probability is the row's
`correctness` and its `evidence_score` (what the KG's reinforcement aggregates), and a triple is admitted when the
earlier agents let it through (aligned to the schema, kept or replacing by conflict resolution), no precision rule
blocks it (a negated or contrasted co-mention, a chemical named as the disease's cause read as its treatment) and
its probability reaches the operating point of `params.admission_precision`. What is not admitted carries the
reason in `admission` and goes to the review queue, ranked by its probability.

An LLM backbone calibrated with `karma calibrate` (backbones/llm/calibration.py) is decided the same way, its
mean(C, Cl, R) mapped to P(right). One never calibrated holds its integrable triples for review (its scores are
no probabilities) unless its `uncalibrated_admission` setting is `theta`: KARMA's rule, mean(C, Cl, R) >= Theta
(params.py), which the rule-scored pass-throughs and test doubles also keep.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection

from collections import Counter
from collections.abc import Sequence

from karma_dagster.backbones.base import Backbone, TripleQuery, backbone_map
from karma_dagster.backbones.local.triple_features import blocked
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import EvaluatedRow, MentionRow, ResolvedRow, SegmentRow, evidence_score
from karma_dagster.schemas.triple_context import EndFacts, TripleContext


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
    contexts: Sequence[TripleContext] | None = None,
) -> list[EvaluatedRow]:
    """`is_linked` tells which entity ids are KG nodes (the linked_entities signal); None counts none linked.
    `contexts` (one per resolved row, `triple_contexts`): what a correctness model reads; None = no model asked."""
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
    if contexts is not None and len(contexts) != len(resolved):
        raise EvaluatorError(f"{len(contexts)} triple contexts for {len(resolved)} triples")
    probs = backbone.correctness(list(contexts)) if contexts is not None and resolved else None
    threshold = backbone.admission_threshold(params.admission_precision) if probs is not None else None
    out: list[EvaluatedRow] = []
    for i, (t, signals) in enumerate(zip(resolved, all_signals, strict=True)):
        llm = "llm_confidence" in signals
        w = params.llm_weights if llm else params.weights
        c = logistic_score(w.confidence, signals, "confidence")
        cl = logistic_score(w.clarity, signals, "clarity")
        r = logistic_score(w.relevance, signals, "relevance")
        score = (c + cl + r) / 3.0
        row = t.model_dump()
        calibrated = _score_probability(backbone, score) if llm and probs is None else None
        if calibrated is not None:  # an LLM backbone calibrated by `karma calibrate`: its mean score made P(right)
            out.append(_admitted(t, row, c, cl, r, score, calibrated,
                                 backbone.admission_threshold(params.admission_precision),
                                 contexts[i] if contexts is not None else None, params))
            continue
        if llm and probs is None and _holds_uncalibrated(backbone):
            reason = (f"held for review: backbone {getattr(backbone, 'name', '?')!r} is uncalibrated (its score "
                      f"{score:.2f} is no probability; karma calibrate fits it on a gold file)")
            out.append(EvaluatedRow(**row, confidence=c, clarity=cl, relevance=r, score=score, accepted=False,
                                    evidence_score=evidence_score(row.get("sample_confidence"), score, t.probability),
                                    admission=reason if kept_and_aligned(t) else
                                    f"not integrable ({t.schema_status}, {t.action})"))
            continue
        if probs is None or threshold is None or contexts is None:
            accepted = score >= params.integrate_threshold_for(llm) and kept_and_aligned(t)
            out.append(EvaluatedRow(**row, confidence=c, clarity=cl, relevance=r, score=score, accepted=accepted,
                                    evidence_score=evidence_score(row.get("sample_confidence"), score,
                                                                  t.probability)))
            continue
        out.append(_admitted(t, row, c, cl, r, score, probs[i], threshold, contexts[i], params))
    return out


def _admitted(t: ResolvedRow, row: dict, c: float, cl: float, r: float, score: float, p: float,
              threshold: float | None, context: TripleContext | None, params: KarmaParams) -> EvaluatedRow:
    """A triple decided by a calibrated P(right): integrable, no precision rule blocking it, at the operating point."""
    reason = None if kept_and_aligned(t) else f"not integrable ({t.schema_status}, {t.action})"
    reason = reason or (blocked(context) if context is not None else None)
    if threshold is None:
        raise EvaluatorError(f"triple {t.triple_id}: a calibrated probability without an operating point")
    if reason is None and p < threshold:
        reason = (f"below the operating point: P(right) {p:.2f} < {threshold:.2f} "
                  f"(admission precision {params.admission_precision:.2f})")
    return EvaluatedRow(**row, confidence=c, clarity=cl, relevance=r, score=score, accepted=reason is None,
                        evidence_score=p, correctness=p,
                        admission=reason or f"admitted: P(right) {p:.2f} >= {threshold:.2f}")


def _score_probability(backbone: Backbone, score: float) -> float | None:
    ask = getattr(backbone, "score_probability", None)  # duck-typed stand-ins (test doubles, plug-ins) have none
    return ask(score) if callable(ask) else None


def _holds_uncalibrated(backbone: Backbone) -> bool:
    ask = getattr(backbone, "holds_uncalibrated", None)
    return bool(ask()) if callable(ask) else False


def triple_contexts(resolved: Sequence[ResolvedRow], mentions: Sequence[MentionRow],
                    segments: Sequence[SegmentRow]) -> list[TripleContext]:
    """What the correctness model reads of each triple, from the stage tables the evaluator stage has."""
    by_id = {m.mention_id: m for m in mentions}
    n_mentions = Counter(m.entity_id for m in mentions)
    seg = {s.segment_id: s for s in segments}
    n_entities = len(n_mentions)

    def end(mention_id: str, name: str, typ: str) -> EndFacts:
        m = by_id.get(mention_id)
        if m is None:  # a tool statement or a table from another chain: what the row itself says
            return EndFacts(text=name, type=typ, has_vocab_id=False, status="new")
        return EndFacts(text=m.text, type=m.type, has_vocab_id=bool(m.vocab_id), status=m.status,
                        linked_to=m.linked_to, in_dictionary=m.in_dictionary, distance=max(0.0, float(m.distance)),
                        n_mentions=max(1, n_mentions[m.entity_id]))

    out = []
    for t in resolved:
        s = seg.get(t.segment_id)
        out.append(TripleContext(
            relation=t.relation, kg_relation=t.kg_relation, probability=t.probability,
            sample_confidence=t.sample_confidence, alignment_prob=t.alignment_prob, evidence=t.evidence,
            head=end(t.head_mention_id, t.head_name, t.head_type), tail=end(t.tail_mention_id, t.tail_name, t.tail_type),
            section=s.section if s else "other", segment_relevance=s.relevance if s else 1.0,
            segment_order=s.order if s else 0, conflict=t.conflict, n_doc_entities=n_entities))
    return out


def kept_and_aligned(t: ResolvedRow) -> bool:
    """What the earlier agents must have said for a triple to be integrable: aligned to the schema, and kept by
    conflict resolution ("replace": kept, and the older KG edge it contradicts is superseded at merge)."""
    return t.action in ("keep", "replace") and t.schema_status == "aligned"
