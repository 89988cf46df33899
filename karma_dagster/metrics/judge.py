"""Who labels each new triple likely_correct / uncertain / likely_incorrect (KARMA's LLM-based correctness).

- an LLM judge: the `judge` prompt (prompts/judge) of the backbone named `judge:` in backbones.yaml;
- the local default: a rule-based judge, labelled as such everywhere it is reported (it reads the evidence
  sentence for a plain statement of the relation; it knows no biology, so it is no LLM verdict);
- a judge that cannot run (its key is missing): every triple 'not_judged', with the reason.

A judge is only worth something when it is not the chain it judges: `judge_chain_overlap` says when it is
(see there for the rule), and the comparison flags that row.
"""

from __future__ import annotations

from typing import Literal, Protocol

from karma_dagster.backbones.base import TripleQuery
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.dictionary.cues import hedge_cue, negation_cue, relation_cue

Verdict = Literal["likely_correct", "uncertain", "likely_incorrect", "not_judged"]
VERDICTS: tuple[str, ...] = ("likely_correct", "uncertain", "likely_incorrect", "not_judged")


class JudgeIdentity(Protocol):
    """What a judge is, enough to tell whether it is the chain it judges (a judge, or the judge resource)."""

    @property
    def kind(self) -> str: ...  # "rules" (RuleJudge), "litellm" (LLMJudge), "none" (NoJudge)

    @property
    def model(self) -> str: ...  # the litellm model string of an LLM judge, else ""


class TripleJudge(Protocol):
    label: str
    is_llm: bool
    kind: str
    model: str

    def judge(self, triple: TripleQuery) -> tuple[Verdict, str]: ...


class RuleJudge:
    """Negated evidence -> likely_incorrect; hedged or no word stating the relation -> uncertain; else likely_correct."""

    label = "local rule-based judge (not an LLM): plain statement of the relation in the evidence"
    is_llm = False
    kind = "rules"
    model = ""

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
    kind = "litellm"

    def __init__(self, name: str, backbone, model: str = "") -> None:  # an LLMBackbone (has .judge)
        self.backbone = backbone
        self.model = model  # the litellm model string, compared with the chains it judges
        self.label = f"LLM judge {name} ({backbone.prompt_id('judge') if hasattr(backbone, 'prompts') else 'judge'})"

    def judge(self, triple: TripleQuery) -> tuple[Verdict, str]:
        out = self.backbone.judge(triple)
        return out.verdict, out.rationale


class NoJudge:
    is_llm = False
    kind = "none"
    model = ""

    def __init__(self, reason: str) -> None:
        self.label = f"not judged: {reason}"
        self.reason = reason

    def judge(self, triple: TripleQuery) -> tuple[Verdict, str]:
        return "not_judged", self.reason


def _model_key(model: str) -> str:
    return model.strip().lower()


def judge_chain_overlap(judge: JudgeIdentity, chain: BackboneSettings) -> str:
    """Why `judge` is not independent of the chain with settings `chain` ('' when it is).

    The rule, decided here once:
    - an LLM judge and an LLM chain with the same litellm model string (case-insensitive; the api_base does not
      matter: the same model behind another server is still the same model) -> the model grades its own work;
    - the rule-based judge and a `local` chain -> always: the judge's rules are dictionary/cues.py's relation,
      hedge and negation cues, which the local chain itself uses (relation cues are REA features, hedge and
      negation decide the local debate and feed the local evaluator's signals), so the judge agrees with the
      chain by construction, ablated agents or single-agent mode notwithstanding (REA still uses the cues);
    - anything else (an LLM judging `local`, rules judging an LLM chain, a judge that cannot run) -> ''.
    """
    kind, model = getattr(judge, "kind", ""), getattr(judge, "model", "")
    if kind == "litellm" and chain.kind == "litellm" and model and _model_key(model) == _model_key(chain.model):
        return f"the judge is the chain's own model {chain.model!r}"
    if kind == "rules" and chain.kind == "local":
        return ("the rule-based judge uses the relation/hedge/negation cues (dictionary/cues.py) that the local "
                "chain's relation extraction, debate and evaluator use")
    return ""
