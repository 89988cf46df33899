"""A plan may only start from what the question names: every step's entity links to a span of the question.

A decomposer (the lexicon's NER, or a model) proposes entities; a model can propose one the question never
mentions ("PWRN" for a question about arrhythmia), and a plan over it answers a question nobody asked. So each
step's entity must be found in the question as whole words — its mention as the decomposer wrote it, or the KG
node's name — at the span the decomposer gave (the lexicon's NER) or anywhere (a model's name). A plan with an
entity found nowhere is refused (cogmg/answer.py asks a model once more, then answers "not understood").
"""

from __future__ import annotations

import re
import unicodedata

from karma_dagster.cogmg.models import LinkedEntity, QueryPlan


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("\u2019", "'")


def _pattern(name: str) -> re.Pattern[str] | None:
    words = re.findall(r"[^\W_]+", _fold(name))
    if not words or len("".join(words)) < 2:
        return None
    return re.compile(r"(?<![^\W_])" + r"[\W_]*".join(map(re.escape, words)) + r"(?![^\W_])", re.IGNORECASE)


def find_span(text: str, names: list[str]) -> tuple[int, int] | None:
    """Where the text (a question, a sentence) names one of `names` as whole words (case, punctuation and spacing
    aside), else None."""
    for name in names:
        pat = _pattern(name)
        m = pat.search(text) if pat is not None else None
        if m:
            return m.span()
    return None


def entity_span(question: str, entity: LinkedEntity) -> tuple[int, int] | None:
    """The entity's span in the question: the span it carries when the text there is its mention, else the first
    place the question names its mention or its KG name."""
    if entity.span is not None:
        s, e = entity.span
        if 0 <= s < e <= len(question) and find_span(question[s:e], [entity.mention]) is not None:
            return entity.span
    return find_span(question, [n for n in (entity.mention, entity.name) if n and n != "?"])


def ground_plan(plan: QueryPlan) -> tuple[QueryPlan, list[str]]:
    """The plan with each step's entity carrying its span, and the entities (as the decomposer named them) that
    no span of the question names: a plan with any of these must not run."""
    steps, missing = [], []
    for step in plan.steps:
        span = entity_span(plan.question, step.entity)
        if span is None:
            if step.entity.mention not in missing:
                missing.append(step.entity.mention)
            continue
        steps.append(step.model_copy(update={"entity": step.entity.model_copy(update={"span": span})}))
    return plan.model_copy(update={"steps": steps}), missing
