"""QA coherence: curated domain questions answered by traversing one namespace's KG, answers judged plausible.

KARMA (Lu & Wang, arXiv 2502.06472, section 4) reports QA coherence as the share of domain questions whose
answer, read off the enriched KG, is plausible:  QA = |{q : answer_G(q) plausible}| / |Q|.

A question names an entity (a KG node name, case-insensitive, or a node id; `aliases` are other names of the
same thing) and the KG relations to follow (either direction); the answer is the set of neighbours reached. It
is plausible when one of them is among the question's curated plausible answers (a versioned file written from
the sample papers before any run: the key is fixed, not fitted to a backbone); with an LLM judge the judge may
also accept an answer outside the key (labelled in `how`).

Why two scores: the seed KG alone already answers some questions, and that is no credit to a chain. Each
namespace is scored with its increments and over the seed alone (`SEED_ONLY_NAMESPACE`), so the gain the
increments bring is visible; the shipped set (v2) is written so the seed alone answers none.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.backbones.base import TripleQuery
from karma_dagster.kg.store import SEED_ONLY_NAMESPACE, KGStore
from karma_dagster.metrics.judge import TripleJudge
from karma_dagster.runtime.paths import data_file

QUESTIONS_FILE = "sample_questions.v2.yaml"


def default_questions() -> Path:
    """The versioned curated question set shipped with the project."""
    return data_file("qa", QUESTIONS_FILE)


def questions_label(setting: str = "") -> str:
    """How charts and tables name the QA question set in use: the judge's `qa_questions` file by its name, else
    the package's shipped sample set (a project's comparison is then not measured on its own questions)."""
    if setting.strip():
        return f"the question set {Path(setting).name}"
    return f"the package's sample questions ({QUESTIONS_FILE}), not the project's"


def normalize(name: str) -> str:
    """How names are compared: NFKC (a PDF's mathematical 𝛽 is β), typographic apostrophes as plain ones,
    case-insensitive, whitespace collapsed (PDF text says "Graves’ disease", the KG "Graves' disease")."""
    return " ".join(unicodedata.normalize("NFKC", name).replace("\u2019", "'").lower().split())


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    question: str
    entity: str
    aliases: list[str] = []  # other names of the entity (the papers' or the KG's)
    relations: list[str] = Field(min_length=1)
    plausible: list[str] = Field(min_length=1)
    source: str = ""  # where the papers state the answer: an inbox file, '#PMID' for one document of a file

    def names(self) -> list[str]:
        return [self.entity, *self.aliases]


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


class QAScore(BaseModel):
    """QA coherence of one set of answers: plausible / questions (None when there is no question)."""

    questions: int
    answered: int
    plausible: int
    coherence: float | None


def load_questions(path: Path | None = None) -> QuestionSet:
    path = Path(path or default_questions())
    if not path.is_file():
        raise FileNotFoundError(f"QA question set {path} not found")
    try:
        questions = QuestionSet.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except Exception as exc:  # yaml or pydantic: name the file
        raise ValueError(f"QA question set {path.name} is malformed: {exc}") from exc
    ids = [q.id for q in questions.questions]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"QA question set {path.name} repeats question ids {duplicated}")
    return questions


def name_index(kg: KGStore, ns: str) -> dict[str, set[str]]:
    """normalized node name -> ids of the nodes so named, in namespace `ns` (ids map to themselves)."""
    index: dict[str, set[str]] = {}
    with kg.connect(read_only=True) as con:
        for node_id, name in con.execute("SELECT id, name FROM kg_nodes(?)", [ns]).fetchall():
            index.setdefault(normalize(name), set()).add(node_id)
            index.setdefault(node_id, set()).add(node_id)
    return index


def traverse(kg: KGStore, ns: str, q: Question, index: dict[str, set[str]] | None = None) -> list[str]:
    """Names of the nodes one edge of `q.relations` away from the question's entity, in namespace `ns`.

    `index` is `name_index(kg, ns)`, passed in when many questions are answered against one snapshot."""
    index = index if index is not None else name_index(kg, ns)
    start = sorted({i for n in q.names() for i in index.get(normalize(n), set()) | index.get(n, set())})
    if not start:
        return []
    with kg.connect(read_only=True) as con:
        rows = con.execute(
            """
            WITH n AS (SELECT id, name FROM kg_nodes(?)),
                 e AS (SELECT head_id, tail_id FROM kg_edges(?) WHERE list_contains(?, relation))
            SELECT DISTINCT n.name FROM e JOIN n ON n.id = e.tail_id WHERE list_contains(?, e.head_id)
            UNION
            SELECT DISTINCT n.name FROM e JOIN n ON n.id = e.head_id WHERE list_contains(?, e.tail_id)
            ORDER BY 1
            """,
            [ns, ns, q.relations, start, start],
        ).fetchall()
    return [r[0] for r in rows]


def key_hits(q: Question, answers: list[str]) -> list[str]:
    """The reached names that the curated key lists as plausible."""
    key = {normalize(p) for p in q.plausible}
    return [a for a in answers if normalize(a) in key]


def answer_questions(kg: KGStore, ns: str, questions: QuestionSet, judge: TripleJudge) -> list[QAAnswer]:
    out = []
    with kg.connect(read_only=True):  # one lock and one snapshot for every question
        index = name_index(kg, ns)
        answers_of = {q.id: traverse(kg, ns, q, index) for q in questions.questions}
    for q in questions.questions:
        answers = answers_of[q.id]
        hits = key_hits(q, answers)
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


def score(answers: list[QAAnswer]) -> QAScore:
    """QA = plausible answers / questions (Table 1's QA coherence)."""
    plausible = sum(a.plausible for a in answers)
    return QAScore(questions=len(answers), answered=sum(bool(a.answers) for a in answers), plausible=plausible,
                   coherence=plausible / len(answers) if answers else None)


def answer_with_and_without_increments(kg: KGStore, ns: str, questions: QuestionSet,
                                       judge: TripleJudge) -> tuple[list[QAAnswer], list[QAAnswer]]:
    """(answers over the namespace's KG = seed + its increments, answers over the seed alone)."""
    return (answer_questions(kg, ns, questions, judge),
            answer_questions(kg, SEED_ONLY_NAMESPACE, questions, judge))
