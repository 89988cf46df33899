"""Who labels each new triple likely_correct / uncertain / likely_incorrect (KARMA's LLM-based correctness).

- an LLM judge: the `judge` prompt (prompts/judge) of the backbone named `judge:` in backbones.yaml;
- the local default: a rule-based judge, labelled as such everywhere it is reported (it reads the evidence
  sentence for a plain statement of the relation; it knows no biology, so it is no LLM verdict);
- a judge that cannot run (its key is missing): every triple 'not_judged', with the reason.
"""

from __future__ import annotations

from typing import Literal, Protocol

from karma_dagster.backbones.base import TripleQuery
from karma_dagster.dictionary.cues import hedge_cue, negation_cue, relation_cue

Verdict = Literal["likely_correct", "uncertain", "likely_incorrect", "not_judged"]
VERDICTS: tuple[str, ...] = ("likely_correct", "uncertain", "likely_incorrect", "not_judged")


class TripleJudge(Protocol):
    label: str
    is_llm: bool

    def judge(self, triple: TripleQuery) -> tuple[Verdict, str]: ...


class RuleJudge:
    """Negated evidence -> likely_incorrect; hedged or no word stating the relation -> uncertain; else likely_correct."""

    label = "local rule-based judge (not an LLM): plain statement of the relation in the evidence"
    is_llm = False

    def judge(self, triple: TripleQuery) -> tuple[Verdict, str]:
        ev = triple.evidence
        neg, hedge, cue = negation_cue(ev), hedge_cue(ev), relation_cue(triple.relation, ev)
        if neg:
            return "likely_incorrect", f"evidence is negated ({neg!r})"
        if hedge:
            return "uncertain", f"evidence is hedged ({hedge!r})"
        if not cue:
            return "uncertain", f"no word in the evidence states {triple.relation!r}"
        return "likely_correct", f"evidence states it ({cue!r})"


class LLMJudge:
    is_llm = True

    def __init__(self, name: str, backbone) -> None:  # an LLMBackbone (has .judge)
        self.backbone = backbone
        self.label = f"LLM judge {name} ({backbone.prompt_id('judge') if hasattr(backbone, 'prompts') else 'judge'})"

    def judge(self, triple: TripleQuery) -> tuple[Verdict, str]:
        out = self.backbone.judge(triple)
        return out.verdict, out.rationale


class NoJudge:
    is_llm = False

    def __init__(self, reason: str) -> None:
        self.label = f"not judged: {reason}"
        self.reason = reason

    def judge(self, triple: TripleQuery) -> tuple[Verdict, str]:
        return "not_judged", self.reason
