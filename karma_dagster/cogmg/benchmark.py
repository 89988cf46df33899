"""The QA benchmark, measured like CogMG: hit rate before completion, after completion (unreviewed completions
counted as if in the KG) and after review (only the accepted completions), per backbone.

A question is a hit when the KG answer (its plan executed over the namespace's KG, + the overlay) names one of
the question's key answers (`answers` in the question file, compared like metrics/qa.py: NFKC, case, spacing).
The plan is made once per question; only the overlay changes between the three readings. A question without a
plan (no linkable entity) counts as a miss in all three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pydantic import BaseModel

from karma_dagster.cogmg.answer import run_plan
from karma_dagster.cogmg.models import Answer, Completion
from karma_dagster.cogmg.questions import Question
from karma_dagster.metrics.qa import normalize
from karma_dagster.runtime.paths import DataPaths

TripleKey = tuple[str, str, str]


class QuestionScore(BaseModel):
    question_id: str
    planned: bool
    hit_before: bool
    hit_after_completion: bool
    hit_after_review: bool
    completions: int
    supported: int
    accepted: int


class BenchmarkRow(BaseModel):
    backbone: str
    question_set: str
    questions: int
    planned: int  # questions with a query plan (an entity linked or named, a relation the schema allows)
    answered_before: int  # the KG returned some answer (right or wrong)
    hit_before: float
    hit_after_completion: float
    hit_after_review: float
    completions: int
    supported: int
    accepted: int
    per_question: list[QuestionScore] = []


def is_hit(question: Question, answer: Answer) -> bool:
    key = {normalize(a) for a in question.answers}
    return any(normalize(n) in key for n in answer.answers)


def triple_key(c: Completion) -> TripleKey:
    return (c.head_id, c.relation, c.tail_id)


def benchmark(backbone: str, question_set: str, questions: Iterable[Question], data: DataPaths,
              answers: dict[str, Answer | None], completions: dict[str, list[Completion]],
              accepted: Callable[[Completion], bool]) -> BenchmarkRow:
    """`answers` / `completions` by question id (None: no plan); `accepted` says which completions review accepted."""
    scores: list[QuestionScore] = []
    answered = 0
    for q in questions:
        answer = answers.get(q.id)
        done = completions.get(q.id, [])
        ok = [c for c in done if accepted(c)]
        if answer is None or not answer.plan.steps:
            scores.append(QuestionScore(question_id=q.id, planned=False, hit_before=False, hit_after_completion=False,
                                        hit_after_review=False, completions=len(done),
                                        supported=sum(c.supported for c in done), accepted=len(ok)))
            continue
        before = run_plan(answer.plan, question_id=q.id, backbone=backbone, data=data)
        answered += before.hit
        after = run_plan(answer.plan, question_id=q.id, backbone=backbone, data=data, overlay=done) if done else before
        reviewed = run_plan(answer.plan, question_id=q.id, backbone=backbone, data=data, overlay=ok) if ok else before
        scores.append(QuestionScore(question_id=q.id, planned=True, hit_before=is_hit(q, before),
                                    hit_after_completion=is_hit(q, after), hit_after_review=is_hit(q, reviewed),
                                    completions=len(done), supported=sum(c.supported for c in done),
                                    accepted=len(ok)))
    n = len(scores)

    def rate(attr: str) -> float:
        return round(sum(getattr(s, attr) for s in scores) / n, 4) if n else 0.0

    return BenchmarkRow(backbone=backbone, question_set=question_set, questions=n,
                        planned=sum(s.planned for s in scores), answered_before=answered,
                        hit_before=rate("hit_before"), hit_after_completion=rate("hit_after_completion"),
                        hit_after_review=rate("hit_after_review"), completions=sum(s.completions for s in scores),
                        supported=sum(s.supported for s in scores), accepted=sum(s.accepted for s in scores),
                        per_question=scores)


def markdown(rows: list[BenchmarkRow]) -> str:
    lines = ["| backbone | set | questions | planned | hit before | after completion | after review | completions "
             "(supported / accepted) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.backbone} | {r.question_set} | {r.questions} | {r.planned} | {r.hit_before:.1%} | "
                     f"{r.hit_after_completion:.1%} | {r.hit_after_review:.1%} | {r.completions} "
                     f"({r.supported} / {r.accepted}) |")
    return "\n".join(lines)


def evaluate_set(questions: Iterable[Question], question_set: str, *, backbone: str, settings, data: DataPaths,  # noqa: ANN001
                 llm_backbone=None, accepted: Callable[[Completion], bool] = lambda c: c.supported  # noqa: ANN001
                 ) -> tuple[BenchmarkRow, dict[str, Answer | None], dict[str, list[Completion]]]:
    """Answer and complete every question here, then score (what the assets do per partition, in one call).
    `accepted` defaults to: review accepts every supported completion."""
    from karma_dagster.cogmg.answer import answer_question
    from karma_dagster.cogmg.pipeline import complete_answer

    questions = list(questions)
    answers: dict[str, Answer | None] = {}
    completions: dict[str, list[Completion]] = {}
    for q in questions:
        answer = answer_question(q.question, backbone=backbone, settings=settings, data=data, question_id=q.id,
                                 llm_backbone=llm_backbone)
        answers[q.id] = answer if answer.understood else None  # "not understood": no plan, as before
        if answer.understood:
            completions[q.id] = complete_answer(answer, settings=settings, data=data, llm_backbone=llm_backbone)
    row = benchmark(backbone, question_set, questions, data, answers, completions, accepted)
    return row, answers, completions
