"""What a person reviews and what they decide: one item model for every source, one decision model.

One item per fact. A fact is (head id, relation, tail id) as the item states it: the schema relation it would
enter the KG as, or, when no schema relation fits, the label the item proposes (for a new relation type, the
extracted label). Several backbones or documents proposing one fact make one item that lists every proposal
(`proposals`: source, backbone, document, agent, score). A proposal's id is a hash of what made it (source,
backbone, triple, origin), so collecting the same stage tables again finds the same proposal, its item and the
item's decision; the item keeps the id of its first proposal.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from karma_dagster.kg import names as kg_names

DEFAULT_DAGSTER_URL = "http://127.0.0.1:3000"  # where the page's links to asset partitions point by default

Source = Literal["cogmg", "schema_review", "unresolved_conflict", "new_relation_type", "held_back"]
# held_back: an integrable triple the evaluator did not admit (below the operating point, or a precision rule)
SOURCES: tuple[str, ...] = ("cogmg", "schema_review", "unresolved_conflict", "new_relation_type", "held_back")
Action = Literal["accept", "edit", "reject"]  # edit = edit then accept
EXTENSION = "extension"  # DecisionIn.choice: add the item's relation to the KG's schema extensions
EDITABLE = ("head_id", "head_name", "relation", "tail_id", "tail_name")
REVIEWER_MIN_CHARS, REVIEWER_MAX_CHARS = 2, 80  # one letter is a stray shortcut key, not a name ("reject by a")
STATUSES = ("pending", "decided", "all")  # the list's status filter
STATES = ("pending", "accept", "edit", "reject")  # what the counts tell apart: undecided, or the decision's action


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


class Proposal(BaseModel):
    """One backbone's (or one run's) proposal of a fact: where it came from. An item lists all of its fact's."""

    proposal_id: str
    source: Source
    backbone: str
    origin: str
    agent: str
    stage: str
    paper: str = ""  # the paper it was read from (ReviewItem.source_paper), "" when none
    score: float = Field(ge=0.0, le=1.0)
    evidence: str = ""  # its best sentence: what its paper's KG row states when the fact is accepted


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
    # the paper the triple was read from, when `origin` is not one (a CogMG item: its supporting passage's
    # document): an accepted item's KG row stands for that paper rather than counting as a paper of its own
    paper: str = ""
    # every proposal of this fact (its first is the item's own source/backbone/origin); [] before folding: the
    # item is its own one proposal
    proposals: list[Proposal] = []

    @property
    def fact(self) -> str:
        return fact_key(self.head_id, self.relation, self.tail_id)

    def own_proposal(self) -> Proposal:
        return Proposal(proposal_id=self.item_id, source=self.source, backbone=self.backbone, origin=self.origin,
                        agent=self.agent, stage=self.stage, paper=self.source_paper or "", score=self.score,
                        evidence=next((e.text for e in self.evidence if e.text.strip()), ""))

    def all_proposals(self) -> list[Proposal]:
        return self.proposals or [self.own_proposal()]

    @property
    def backbones(self) -> list[str]:
        """The backbones that proposed the fact, first proposer first: the KGs an accepted item enters."""
        return list(dict.fromkeys(p.backbone for p in self.all_proposals()))

    def for_backbone(self, backbone: str) -> "ReviewItem":
        """The item as its backbone's KG takes it: that backbone's first proposal's document and paper."""
        mine = next((p for p in self.all_proposals() if p.backbone == backbone), None)
        if mine is None:
            raise ValueError(f"item {self.item_id}: backbone {backbone!r} did not propose it ({self.backbones})")
        if mine.proposal_id == self.item_id:
            return self.model_copy(update={"backbone": backbone})
        return self.model_copy(update={"backbone": backbone, "source": mine.source, "origin": mine.origin,
                                       "paper": mine.paper if mine.paper or mine.source != "cogmg" else "",
                                       "agent": mine.agent, "stage": mine.stage})

    @property
    def triple_text(self) -> str:
        return f"{self.head_name} -{self.relation}-> {self.tail_name}"

    @property
    def source_paper(self) -> str | None:
        """The paper the triple was read from: `paper`, else a KARMA item's origin (a document key); None for a
        CogMG fill no passage supported. An accepted item's KG row stands for it (evidence.paper_key)."""
        if self.paper:
            return self.paper
        return self.origin if self.source != "cogmg" and self.origin else None


def fact_key(head_id: str, relation: str, tail_id: str) -> str:
    """What makes two proposals one review item: the same head id, relation and tail id."""
    return hashlib.sha256("\x1f".join((head_id, relation, tail_id)).encode("utf-8")).hexdigest()[:20]


def item_id(source: str, backbone: str, head_id: str, relation: str, tail_id: str, origin: str) -> str:
    key = "\x1f".join((source, backbone, head_id, relation, tail_id, origin))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]


class DecisionIn(BaseModel):
    """A reviewer's decision as submitted (web form, JSON or code)."""

    model_config = ConfigDict(extra="forbid")
    action: Action
    reviewer: str
    edits: dict[str, str] = {}  # only for action "edit": field -> new value (fields of EDITABLE)
    # only for action "accept" of a schema-review or new-relation-type item: a metaedge abbreviation among
    # review.accepting.choices(item) (the triple enters as that relation), or EXTENSION (its relation is added
    # to the KG's schema extensions)
    choice: str = ""

    @field_validator("reviewer")
    @classmethod
    def _reviewer(cls, value: str) -> str:
        """Like a KG name (it enters the KG's provenance): NFC, one line, no control, format or bidi character."""
        clean = kg_names.clean_name(value, REVIEWER_MAX_CHARS)
        if isinstance(clean, kg_names.Rejection):
            if clean.code == "empty":
                raise ValueError("reviewer name is empty: say who decides")
            raise ValueError(f"reviewer name: {clean.reason} in {kg_names.preview(value)}")
        if len(clean) < REVIEWER_MIN_CHARS:
            raise ValueError(f"reviewer name {clean!r} is too short (at least {REVIEWER_MIN_CHARS} characters): "
                             "say who decides")
        return clean

    @field_validator("edits")
    @classmethod
    def _edits(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(EDITABLE))
        if unknown:
            raise ValueError(f"cannot edit {unknown}: editable fields are {list(EDITABLE)}")
        out = {}
        for field, raw in value.items():  # the chain's rules: ids exact, names and relation labels clean and bounded
            try:
                if field.endswith("_id"):
                    out[field] = kg_names.exact(" ".join(str(raw).split()), f"edited {field}")
                else:
                    out[field] = kg_names.checked(str(raw), f"edited {field}", kg_names.LABEL_MAX_CHARS
                                                  if field == "relation" else kg_names.NAME_MAX_CHARS)
            except kg_names.NameRejected as exc:
                raise ValueError(str(exc)) from None
        return out


class QueueCounts(BaseModel):
    """Items per source and state (STATES) under the page's filters: the figures above the list."""

    by_source: dict[str, dict[str, int]] = {}

    def n(self, source: str | None = None, state: str | None = None) -> int:
        """One source's (or every source's) count in one state, "decided" (any action), or all states."""
        rows = [self.by_source.get(source, {})] if source else list(self.by_source.values())
        states = (STATES[1:] if state == "decided" else (state,)) if state and state != "all" else STATES
        return sum(row.get(s, 0) for row in rows for s in states)

    def flat(self, scope: str, sources: tuple[str, ...]) -> dict[str, int]:
        """`scope:source:state` -> count for every source (and `all`) and state: what the page's counters are
        keyed by, so a decision's response can refresh them in place."""
        return {f"{scope}:{src or 'all'}:{state}": self.n(src, state)
                for src in (*sources, None) for state in (*STATES, "decided", "all")}


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
    choice: str = ""  # what Accept was told to do (DecisionIn.choice)
    merged_backbones: list[str] = []  # the backbones' KGs that took it ([] with merged_at: every one, stored before)

    def merged_in(self, backbone: str) -> bool:
        return backbone in self.merged_backbones or (self.merged_at is not None and not self.merged_backbones)

    @property
    def accepted(self) -> bool:
        return self.action in ("accept", "edit")
