"""Answering one question on one backbone: decompose, execute over the KG, hit or the missing triples.

A hit is a plan whose steps return answers in the namespace's KG (+ an optional overlay of completions); each
step that returns nothing names its missing triple with '?' for the unknown end (a two-hop step: the hop that
broke the chain). A plan runs only when every entity it starts from is named by the question (cogmg/grounding.py):
a model's plan that is not is refused and asked again once; a question naming no entity, or a plan still not
grounded, is answered "not understood" without querying the KG.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from karma_dagster.cogmg import decompose_local, llm
from karma_dagster.cogmg.grounding import ground_plan
from karma_dagster.cogmg.models import Answer, Completion, OpenTriple, QueryPlan, QueryStep
from karma_dagster.cogmg.plan import bridges, execute
from karma_dagster.cogmg.questions import check_question
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.kg.backends import kg_exists, kg_store
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths

NoLinkableEntity = decompose_local.NoLinkableEntity
NOT_UNDERSTOOD = "not understood"


class NotGrounded(NoLinkableEntity):
    """The plan starts from entities the question does not name, even when asked again."""


def make_plan(question: str, backbone: str, settings: BackboneSettings, data: DataPaths,
              llm_backbone: Any = None, params: KarmaParams | None = None) -> QueryPlan:
    """The decomposition, every entity grounded in a span of the question: the lexicon on a local backbone (its
    entities are the NER's spans), the model (schema-constrained, asked again once naming the entities it
    invented) on an LLM one. Raises NoLinkableEntity (no entity named) or NotGrounded."""
    params = params or KarmaParams()
    if settings.kind == "local":
        plan, ungrounded = ground_plan(decompose_local.decompose(question, data, backbone, params))
    else:
        if llm_backbone is None:
            raise ValueError(f"backbone {backbone!r} is an LLM backbone: pass its LLMBackbone to decompose with")
        plan, ungrounded = ground_plan(llm.decompose(question, llm_backbone, data, backbone, params.rho))
        if ungrounded:
            again, still = ground_plan(llm.decompose(question, llm_backbone, data, backbone, params.rho,
                                                     ungrounded=ungrounded))
            note = f"the plan started from {ungrounded}, which the question does not name: asked again once"
            plan = again.model_copy(update={"notes": [note, *again.notes]})
            ungrounded = still
    if ungrounded:
        raise NotGrounded(f"the plan starts from {ungrounded}, which the question does not name")
    return plan


def not_understood(question: str, *, backbone: str, question_id: str = "", why: str) -> Answer:
    """The answer to a question no grounded plan can start from: said so, and the KG never queried."""
    plan = QueryPlan(question=question, decomposer="none", notes=[why])
    return Answer(question_id=question_id, question=question, backbone=backbone, plan=plan, hit=False,
                  understood=False, error=f"{NOT_UNDERSTOOD}: {why}", text=f"Not understood: {why}.")


def run_plan(plan: QueryPlan, *, question_id: str, backbone: str, data: DataPaths,
             overlay: Sequence[Completion] = ()) -> Answer:
    triples = execute(kg_store(data), backbone, plan, overlay) if kg_exists(data) else []
    # the steps are alternatives (their answers are united): a question is a miss only when none answers, and then
    # each step names the triple the KG lacks
    missing = [] if triples else [m for step in plan.steps for m in _missing(step, backbone, data, overlay)]
    names = [t.answer for t in triples if t.answer]
    error = "" if plan.steps else "no query step: " + "; ".join(plan.notes)
    return Answer(question_id=question_id, question=plan.question, backbone=backbone, plan=plan, hit=bool(triples),
                  answers=list(dict.fromkeys(names)), triples=triples, missing=missing, error=error)


MISSING_BRIDGES = 3  # a two-hop miss whose first hop reached nodes names the second hop's triple from the best few


def _missing(step: QueryStep, backbone: str, data: DataPaths, overlay: Sequence[Completion]) -> list[OpenTriple]:
    """What completion would fill: the first hop's triple, or (when the first hop reached bridge nodes but none
    leads on) the second hop's triple from each of the best bridges."""
    if step.then is None or not kg_exists(data):
        return [step.open_triple()]
    found = bridges(kg_store(data), backbone, step, overlay)[:MISSING_BRIDGES]
    if not found:
        return [step.open_triple()]
    return [QueryStep(entity=b, relation=step.then.relation, direction=step.then.direction,
                      answer_kinds=step.then.answer_kinds).open_triple() for b in found]


def answer_question(question: str, *, backbone: str, settings: BackboneSettings, data: DataPaths,
                    question_id: str = "", llm_backbone: Any = None, params: KarmaParams | None = None,
                    overlay: Sequence[Completion] = ()) -> Answer:
    """The answer ("not understood", with no KG query, when the question names nothing a grounded plan can start
    from); raises QuestionRejected when it is too long (or holds control characters) to be asked."""
    check_question(question)  # before any planning: length and characters
    try:
        plan = make_plan(question, backbone, settings, data, llm_backbone, params)
    except NoLinkableEntity as exc:
        return not_understood(question, backbone=backbone, question_id=question_id, why=str(exc))
    return run_plan(plan, question_id=question_id, backbone=backbone, data=data, overlay=overlay)
