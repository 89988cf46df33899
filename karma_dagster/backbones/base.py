"""The one agent interface that every backbone implements.

Agents (karma_dagster/agents) own the KARMA formulas (thresholds delta, rho, theta_r, Theta, the dictionary
filter, the index lookup); a backbone only answers the model-shaped question of each stage. So the `local`
backbone and an LLM backbone are interchangeable and comparable stage by stage.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.schemas.records import MentionSpan, ParsedDocument, RawSection
from karma_dagster.schemas.triple_context import TripleContext


T = TypeVar("T")
# What the REA gives a document-level backbone to read: each extractive summary's whole segment, the summary
# choosing the entities (agents/relation_extraction.py; part of the local backbone's relation prompt id)
DOCUMENT_VIEW = "segment-view-v1"
R = TypeVar("R")


class Usage(BaseModel):
    """Calls and tokens a backbone spent; the local backbone reports zeros, never invented figures."""

    model_config = ConfigDict(extra="forbid")
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    invalid_items: int = 0

    def add(self, other: "Usage") -> "Usage":
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Usage(
            calls=self.calls + other.calls,
            cache_hits=self.cache_hits + other.cache_hits,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=cost,
            invalid_items=self.invalid_items + other.invalid_items,
        )


class TripleQuery(BaseModel):
    """A candidate triple as the later agents (alignment, debate, evaluator) see it."""

    model_config = ConfigDict(extra="forbid")
    head_name: str
    head_type: str
    relation: str
    tail_name: str
    tail_type: str
    evidence: str


class AlignmentAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kg_relation: str | None  # a relation name from the KG schema, None when nothing fits
    probability: float


class DebateSide(BaseModel):
    """What one side of a clash stands on, as its advocate (and the judge) are shown it: KARMA's debate weighs the
    KG's support and dates against the new triple's sentence, not a relation name alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    claim: str  # "metformin treats type 2 diabetes"
    source: Literal["new triple", "knowledge graph", "same paper"]
    evidence: list[str] = Field(default_factory=list)  # the side's sentences
    confidence: float | None = None  # the KG edge's confidence, or the triple's own support
    papers: int | None = None  # distinct papers behind a KG edge
    in_seed: bool = False  # the imported seed KG states it
    first_seen: dt.date | None = None  # its first and latest dated evidence (None: seed only, or undated)
    last_seen: dt.date | None = None


class DebateTurn(BaseModel):
    """One argument of the debate: round 1..N, by the new triple's advocate or the existing knowledge's."""

    model_config = ConfigDict(extra="forbid")
    round: int = Field(ge=1)
    side: Literal["new", "existing"]
    argument: str


class DebateAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    argument_for: str
    argument_against: str
    verdict: Literal["agree", "contradict"]
    confidence: float
    transcript: list[DebateTurn] = Field(default_factory=list)  # the advocates' turns (empty: no multi-agent debate)


class EvaluationSignals(BaseModel):
    """Raw signals per triple; the evaluator agent turns them into C, Cl, R with the configured weights."""

    model_config = ConfigDict(extra="forbid")
    signals: dict[str, float]


class Backbone(ABC):
    """One implementation per kind of model; instances are cheap to share across the stages of a run."""

    name: str = "abstract"
    # whose signals the evaluator weighs: "rules" (the rule-based judge: `weights`, `rule_integrate_threshold`) or
    # "llm" (the model's own judgement: `llm_weights`, `integrate_threshold`); params.py
    judge_signals: str = "rules"

    @abstractmethod
    def prompt_id(self, agent: str) -> str:
        """Version of what answers `agent` (a prompt file id + hash, or the local algorithm's version)."""

    @abstractmethod
    def clean_document(self, doc: ParsedDocument) -> ParsedDocument:
        """IA: fix extraction noise (hyphenation, ligatures, OCR), fill metadata the parser missed."""

    @abstractmethod
    def score_relevance(self, sections: list[RawSection], kg_context: list[str]) -> list[float]:
        """RA: R(s) in [0, 1] for each section, judged against the KG context (names of KG entities)."""

    @abstractmethod
    def summarize(self, section: RawSection, max_sentences: int) -> str:
        """SA: a condensed text that keeps entities, numbers and relation words."""

    @abstractmethod
    def recognize(self, text: str) -> list[MentionSpan]:
        """EEA: proposed mentions with a type (spans index into `text`)."""

    @abstractmethod
    def relation_probabilities(
        self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]]
    ) -> list[dict[str, float]]:
        """REA: for each (head, tail) pair found in `text`, p(r | head, tail, text) for every relation type r."""

    @abstractmethod
    def align(self, triple: TripleQuery, candidates: list[str]) -> AlignmentAnswer:
        """SAA: the KG schema relation (among `candidates`) that the extracted relation means."""

    @abstractmethod
    def debate(self, triple: TripleQuery, existing_relation: str, existing: DebateSide | None = None) -> DebateAnswer:
        """CRA: does the new triple really contradict the KG's `existing_relation` on the same pair? `existing`:
        what that side stands on (support, papers, dates), when the caller knows it."""

    @abstractmethod
    def evaluation_signals(self, triple: TripleQuery, probability: float, segment_relevance: float,
                           linked_entities: int) -> EvaluationSignals:
        """EA: the signals that feed confidence, clarity and relevance."""

    def correctness(self, contexts: list[TripleContext]) -> list[float] | None:
        """EA: calibrated P(right) per triple, or None when this backbone has no calibrated model (its C, Cl, R
        and Theta decide, and its scores are not probabilities)."""
        return None

    def admission_threshold(self, precision: float) -> float | None:
        """EA: the probability a triple must reach for the admitted ones to hold `precision`; None: no model."""
        return None

    def score_probability(self, score: float) -> float | None:
        """EA without a correctness model: P(right) of its mean(C, Cl, R) once a calibration maps that score
        (`karma calibrate`, backbones/llm/calibration.py); None: uncalibrated, the score is no probability."""
        return None

    def holds_uncalibrated(self) -> bool:
        """EA: whether triples it scored uncalibrated wait for review instead of entering the KG by Theta."""
        return False

    def calibration_state(self) -> str:
        """What its evaluator's confidence is, as the comparison, the report and the KG browser say it:
        "calibrated ..." (a probability of being right) or "uncalibrated ..." (a score)."""
        return "uncalibrated"

    def sample_relation_probabilities(
        self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]], sample: int, temperature: float
    ) -> list[dict[str, float]]:
        """REA, MedKGent sampling: sample number `sample` of p(r | pair, text) drawn at `temperature` > 0.
        A deterministic backbone answers every sample alike (its sampling confidence is then 1 or 0)."""
        return self.relation_probabilities(text, pairs)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`fn` over `items` with up to the backbone's concurrency in flight; results in input order, the first
        error (in input order) raised. Here sequential: an in-process model is CPU-bound (the GIL would make
        threads slower); LLM backbones override it to overlap their network calls."""
        return [fn(item) for item in items]

    def usage(self) -> Usage:
        """Usage since the last `reset_usage` (assets report it per materialization)."""
        return Usage()

    def reset_usage(self) -> None:
        return None


def backbone_map(backbone: object, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`backbone.map` when it has one; duck-typed stand-ins (test doubles, plug-ins) run sequentially."""
    mapper = getattr(backbone, "map", None)
    return mapper(fn, items) if callable(mapper) else [fn(item) for item in items]
