"""Question sets: versioned YAML files under data/questions/ (`<set>.v<N>.yaml`; a changed set is a new file).

Each question is answered from its text alone. `answers` is the key the benchmark scores a KG answer against
(written from the papers, never from a backbone's output); `source` names the paper that states it (an inbox
file, `file#PMID` for one abstract of a PubTator file); `entity` / `relations` are the writer's annotation of
what the question asks about, kept for reading and never shown to the answerer.
A question's partition key is `<set>.v<N>__<id>`: ids and set names never hold a double underscore.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from karma_dagster.kg import names as kg_names
from karma_dagster.kg_tools.bounds import QUESTION_MAX_CHARS  # the tools' schema bounds it too
from karma_dagster.runtime.paths import data_file

_NAME = r"[a-z0-9]+(?:[-_][a-z0-9]+)*"
FILE_RE = re.compile(rf"^(?P<set>{_NAME})\.v(?P<version>[1-9]\d*)\.yaml$")
ID_RE = re.compile(rf"^{_NAME}$")
KEY_SEP = "__"


QUESTION_MAX_ENV = "KARMA_QUESTION_MAX_CHARS"


class QuestionFileError(ValueError):
    """A question file that cannot be used, named with the problem."""


class QuestionRejected(ValueError):
    """A question that cannot be asked: too long, or holding control or format characters."""


def question_max_chars() -> int:
    """The longest question asked or loaded: $KARMA_QUESTION_MAX_CHARS, else 2,000 characters."""
    raw = os.environ.get(QUESTION_MAX_ENV, "").strip()
    if not raw:
        return QUESTION_MAX_CHARS
    if not raw.isdigit() or int(raw) < 8:
        raise QuestionRejected(f"{QUESTION_MAX_ENV}={raw!r}: expected a whole number of characters, at least 8")
    return int(raw)


def check_question(text: str, where: str = "the question") -> str:
    """The question cleaned (one line, NFC), or QuestionRejected naming `where`, its length and the limit. Checked
    before anything is planned: 30,000 characters took the planner minutes."""
    limit = question_max_chars()
    out = kg_names.clean_name(text, limit)
    if isinstance(out, kg_names.Rejection):
        if out.code == "too_long":
            raise QuestionRejected(f"{where} is {len(text):,} characters long, over the limit of {limit:,} "
                                   f"({QUESTION_MAX_ENV}): ask it shorter")
        raise QuestionRejected(f"{where}: {out.reason}")
    return out


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    question: str = Field(min_length=8)
    answers: list[str] = Field(min_length=1)
    source: str = Field(min_length=1)
    entity: str = ""
    aliases: list[str] = []
    relations: list[str] = []

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not ID_RE.match(value):
            raise ValueError(f"question id {value!r}: lowercase letters, digits, single '-' or '_' between them")
        return value


class QuestionSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str  # from the file name
    version: int
    sha256: str  # of the file: a registered set whose file changes is refused (a changed set is a new file)
    description: str = ""
    questions: list[Question]

    @property
    def key(self) -> str:
        return f"{self.name}.v{self.version}"

    def partition_keys(self) -> list[str]:
        return [question_key(self.key, q.id) for q in self.questions]


def question_key(set_key: str, question_id: str) -> str:
    return f"{set_key}{KEY_SEP}{question_id}"


def split_key(key: str) -> tuple[str, str]:
    set_key, sep, qid = key.partition(KEY_SEP)
    if not sep or not qid:
        raise ValueError(f"question key {key!r}: expected '<set>.v<N>{KEY_SEP}<question id>'")
    return set_key, qid


def default_dir() -> Path:
    return data_file("questions")


def load_set(path: Path | str) -> QuestionSet:
    """One question file, validated; any problem raises QuestionFileError naming the file and the problem."""
    path = Path(path)
    m = FILE_RE.match(path.name)
    if not m:
        raise QuestionFileError(f"question file {path.name}: name must be <set>.v<N>.yaml (lowercase set name)")
    try:
        raw = path.read_bytes()
        data = yaml.safe_load(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise QuestionFileError(f"question file {path.name}: cannot be read as YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise QuestionFileError(f"question file {path.name}: expected a mapping with version and questions")
    if data.get("version") != int(m["version"]):
        raise QuestionFileError(f"question file {path.name}: says version {data.get('version')!r}, its name "
                                f"v{m['version']}")
    try:
        qs = QuestionSet.model_validate({**data, "name": m["set"], "sha256": hashlib.sha256(raw).hexdigest()[:16]})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise QuestionFileError(f"question file {path.name}: {problems}") from exc
    if not qs.questions:
        raise QuestionFileError(f"question file {path.name}: has no questions")
    ids = [q.id for q in qs.questions]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise QuestionFileError(f"question file {path.name}: repeats question ids {repeated}")
    for q in qs.questions:
        try:
            check_question(q.question, f"question {q.id!r}")
        except QuestionRejected as exc:
            raise QuestionFileError(f"question file {path.name}: {exc}") from exc
    return qs


def question_files(folder: Path | str | None = None) -> list[Path]:
    folder = Path(folder) if folder is not None else default_dir()
    return sorted(p for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_all(folder: Path | str | None = None) -> list[QuestionSet]:
    """Every set of the folder (errors name the file); two files of one set are two versions, both kept."""
    return [load_set(p) for p in question_files(folder)]


def find_question(key: str, folder: Path | str | None = None) -> tuple[QuestionSet, Question]:
    set_key, qid = split_key(key)
    for qs in load_all(folder):
        if qs.key == set_key:
            for q in qs.questions:
                if q.id == qid:
                    return qs, q
            raise KeyError(f"question set {set_key} has no question {qid!r}")
    raise KeyError(f"no question set {set_key} under data/questions/")
