"""QA coherence: curated domain questions answered by traversing one namespace's KG, answers judged plausible.

A question names an entity (by KG name, case-insensitive, or id) and the KG relations to follow (either
direction); the answer is the set of neighbours reached. It is plausible when one of them is among the
question's curated plausible answers (a versioned file, written before any run: the key is fixed, not fitted
to a backbone); with an LLM judge the judge may also accept an answer outside the key (labelled in `how`).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.backbones.base import TripleQuery
from karma_dagster.kg.store import KGStore
from karma_dagster.metrics.judge import TripleJudge
from karma_dagster.paths import data_file


def default_questions() -> Path:
    """The versioned curated question set shipped with the project."""
    return data_file("qa", "sample_questions.v1.yaml")


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    question: str
    entity: str
    relations: list[str] = Field(min_length=1)
    plausible: list[str] = Field(min_length=1)


class QuestionSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int
    description: str = ""
    questions: list[Question]


class QAAnswer(BaseModel):
    id: str
    question: str
    answers: list[str]
    plausible: bool
    how: str


def load_questions(path: Path | None = None) -> QuestionSet:
    path = Path(path or default_questions())
    if not path.is_file():
        raise FileNotFoundError(f"QA question set {path} not found")
    try:
        return QuestionSet.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except Exception as exc:  # yaml or pydantic: name the file
        raise ValueError(f"QA question set {path.name} is malformed: {exc}") from exc


def traverse(kg: KGStore, ns: str, q: Question) -> list[str]:
    """Names of the nodes one edge of `q.relations` away from the question's entity, in namespace `ns`."""
    with kg.connect(read_only=True) as con:
        rows = con.execute(
            """
            WITH n AS (SELECT id, name FROM kg_nodes(?)),
                 start AS (SELECT id FROM n WHERE lower(name) = lower(?) OR id = ?),
                 e AS (SELECT head_id, tail_id FROM kg_edges(?) WHERE list_contains(?, relation))
            SELECT DISTINCT n.name FROM e JOIN n ON n.id = e.tail_id WHERE e.head_id IN (SELECT id FROM start)
            UNION
            SELECT DISTINCT n.name FROM e JOIN n ON n.id = e.head_id WHERE e.tail_id IN (SELECT id FROM start)
            ORDER BY 1
            """,
            [ns, q.entity, q.entity, ns, q.relations],
        ).fetchall()
    return [r[0] for r in rows]


def answer_questions(kg: KGStore, ns: str, questions: QuestionSet, judge: TripleJudge) -> list[QAAnswer]:
    out = []
    for q in questions.questions:
        answers = traverse(kg, ns, q)
        key = {p.lower() for p in q.plausible}
        hits = [a for a in answers if a.lower() in key]
        plausible, how = bool(hits), (f"curated key: {hits[0]}" if hits else "curated key: no match")
        if not plausible and answers and judge.is_llm:
            for a in answers:
                verdict, why = judge.judge(TripleQuery(
                    head_name=q.entity, head_type="", relation="/".join(q.relations), tail_name=a, tail_type="",
                    evidence=f"Question: {q.question} Answer found by KG traversal: {a}."))
                if verdict == "likely_correct":
                    plausible, how = True, f"{judge.label}: {a} ({why})"
                    break
        out.append(QAAnswer(id=q.id, question=q.question, answers=answers, plausible=plausible,
                            how=how if answers else "no answer in the KG"))
    return out
