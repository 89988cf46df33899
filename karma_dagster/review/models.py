"""What a person reviews and what they decide: one item model for every source, one decision model.

An item's id is a hash of what makes it the same question to a person (source, backbone, triple, origin), so
collecting the same stage tables again finds the same items and their decisions.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_DAGSTER_URL = "http://127.0.0.1:3000"  # where the page's links to asset partitions point by default

Source = Literal["cogmg", "schema_review", "unresolved_conflict", "new_relation_type"]
SOURCES: tuple[str, ...] = ("cogmg", "schema_review", "unresolved_conflict", "new_relation_type")
Action = Literal["accept", "edit", "reject"]  # edit = edit then accept
EDITABLE = ("head_id", "head_name", "relation", "tail_id", "tail_name")


class Span(BaseModel):
    """An entity marked in an evidence text: [start, end) character offsets."""

    model_config = ConfigDict(frozen=True)
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    label: str  # "head", "tail" or "entity"


class Evidence(BaseModel):
    """A sentence or passage a person reads to judge the triple."""

    text: str
    where: str = ""  # document key (and segment / passage id)
    score: float | None = None  # the passage's retrieval score, when it was retrieved
    spans: list[Span] = []


class ReviewItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item_id: str
    source: Source
    backbone: str
    head_id: str
    head_name: str
    head_kind: str | None = None
    relation: str
    tail_id: str
    tail_name: str
    tail_kind: str | None = None
    origin: str  # the question id (cogmg) or the document key (KARMA's stage tables)
    agent: str  # what proposed it, e.g. "cogmg:passage_re", "schema alignment (SAA)"
    stage: str  # the Dagster asset (under the backbone's prefix) whose partition `origin` is: "completions", ...
    evidence: list[Evidence] = []
    scores: dict[str, float] = {}
    score: float = Field(ge=0.0, le=1.0)  # what the merge would add to the edge (its evidence score)
    change: str  # what accepting would change, in a curator's words
    note: str = ""  # why it needs a person (the adjudication, the missing schema place)
    extracted_relation: str = ""  # the label the extractor gave, when it differs from `relation`
    contradicts: str | None = None  # "head -rel-> tail" a KG edge accepting would supersede

    @property
    def triple_text(self) -> str:
        return f"{self.head_name} -{self.relation}-> {self.tail_name}"


def item_id(source: str, backbone: str, head_id: str, relation: str, tail_id: str, origin: str) -> str:
    key = "\x1f".join((source, backbone, head_id, relation, tail_id, origin))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]


class DecisionIn(BaseModel):
    """A reviewer's decision as submitted (web form, JSON or code)."""

    model_config = ConfigDict(extra="forbid")
    action: Action
    reviewer: str
    edits: dict[str, str] = {}  # only for action "edit": field -> new value (fields of EDITABLE)

    @field_validator("reviewer")
    @classmethod
    def _reviewer(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("reviewer name is empty: say who decides")
        if len(value) > 80:
            raise ValueError(f"reviewer name is too long ({len(value)} > 80 chars)")
        return value

    @field_validator("edits")
    @classmethod
    def _edits(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(EDITABLE))
        if unknown:
            raise ValueError(f"cannot edit {unknown}: editable fields are {list(EDITABLE)}")
        return {k: " ".join(str(v).split()) for k, v in value.items()}


class Decision(BaseModel):
    """A stored decision: who, when, what changed, and whether the KG has taken it in."""

    item_id: str
    action: Action
    reviewer: str
    decided_at: dt.datetime  # UTC
    edits: dict[str, list[str]] = {}  # field -> [old, new]
    merged_at: dt.datetime | None = None
    merge_date: dt.date | None = None  # the KG date partition it entered under
    merge_note: str = ""  # why an accepted item is not merged (e.g. needs a schema change)

    @property
    def accepted(self) -> bool:
        return self.action in ("accept", "edit")
