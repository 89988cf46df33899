"""The local backbone's answers to the schema-alignment, debate and evaluator questions: rules, no model.

Alignment reads the schema's relation_map table. The debate is the rule a careful curator would apply first: a
new triple only overturns a KG edge when its evidence states the new relation plainly (a relation cue, no
hedge, no negation); hedged, negated or cue-less evidence is "not a real contradiction". The evaluator signals
are the lexical facts the configured weights turn into confidence, clarity and relevance.
"""

from __future__ import annotations

from karma_dagster.backbones.base import AlignmentAnswer, DebateAnswer, DebateSide, EvaluationSignals, TripleQuery
from karma_dagster.dictionary.cues import hedge_cue, negation_cue, relation_cue
from karma_dagster.dictionary.sentence_memo import count_tokens
from karma_dagster.kg.schema import KGSchema

JUDGE_VERSION = "local-judge-v1"


def _snippet(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class LocalJudge:
    """Rule-based SAA / CRA / EA answers over one KG schema."""

    def __init__(self, schema: KGSchema | None = None) -> None:
        self.schema = schema or KGSchema.load()

    def align(self, triple: TripleQuery, candidates: list[str]) -> AlignmentAnswer:
        """Table lookup; p = 1 for a one-to-one mapping, lower when several labels collapse onto the relation.

        `triple.head_type`/`tail_type` are KG node kinds here (the alignment agent resolves them first).
        """
        hit = self.schema.map_label(triple.relation, triple.head_type, triple.tail_type)
        if hit is None or hit[0].relation not in candidates:
            return AlignmentAnswer(kg_relation=None, probability=0.0)
        relation = hit[0].relation
        return AlignmentAnswer(kg_relation=relation, probability=self.schema.label_confidence(
            triple.relation, relation, triple.head_type, triple.tail_type))

    def debate(self, triple: TripleQuery, existing_relation: str, existing: DebateSide | None = None) -> DebateAnswer:
        """Contradict only on a plain statement of the new relation; hedged/negated/cue-less evidence agrees (the
        rule reads the new sentence; `existing`'s support is weighed by the adjudication, not here)."""
        ev = triple.evidence
        new = f"{triple.head_name} -{triple.relation}-> {triple.tail_name}"
        hedge, neg, cue = hedge_cue(ev), negation_cue(ev), relation_cue(triple.relation, ev)
        quote = f'"{_snippet(ev)}"'
        argument_for = (f"The evidence {quote} states it with {cue!r}, so {new} holds, which the KG's "
                        f"'{existing_relation}' edge on this pair cannot also satisfy." if cue else
                        f"The extractor read {new} from {quote}, against the KG's '{existing_relation}' edge.")
        if cue and not hedge and not neg:
            between = self._cue_between(triple, ev, cue)
            return DebateAnswer(
                argument_for=argument_for,
                argument_against=(f"The KG's '{existing_relation}' edge comes from curated sources; one abstract "
                                  f"sentence may describe a special population or dose."),
                verdict="contradict",
                confidence=0.8 if between else 0.65,
            )
        reasons = []
        if hedge:
            reasons.append(f"it is hedged ({hedge!r})")
        if neg:
            reasons.append(f"it is negated ({neg!r})")
        if not cue:
            reasons.append(f"it has no word stating '{triple.relation}'")
        return DebateAnswer(
            argument_for=argument_for,
            argument_against=(f"The evidence {quote} does not plainly assert {new}: " + " and ".join(reasons)
                              + f"; the KG's '{existing_relation}' edge stands."),
            verdict="agree",
            confidence=0.7 if (hedge or neg) else 0.55,
        )

    @staticmethod
    def _cue_between(triple: TripleQuery, ev: str, cue: str) -> bool:
        low = ev.lower()
        h, t, c = low.find(triple.head_name.lower()), low.find(triple.tail_name.lower()), low.find(cue)
        return min(h, t) >= 0 and c >= 0 and min(h, t) < c < max(h, t)

    def evaluation_signals(self, triple: TripleQuery, probability: float, segment_relevance: float,
                           linked_entities: int) -> EvaluationSignals:
        """evidence_tokens_over_40 = max(0, tokens - 40) / 40: 0 for a normal sentence, 1 at 80 tokens."""
        if not 0 <= linked_entities <= 2:
            raise ValueError(f"linked_entities must be 0, 1 or 2, got {linked_entities}")
        n_tokens = count_tokens(triple.evidence)
        return EvaluationSignals(signals={
            "probability": float(probability),
            "linked_entities": float(linked_entities),
            "hedged": 1.0 if hedge_cue(triple.evidence) else 0.0,
            "negated": 1.0 if negation_cue(triple.evidence) else 0.0,
            "evidence_tokens_over_40": max(0, n_tokens - 40) / 40.0,
            "segment_relevance": float(segment_relevance),
        })
