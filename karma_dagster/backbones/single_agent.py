"""The KARMA paper's single-agent baseline as a backbone mode (`mode: single_agent` in backbones.yaml).

One generation extracts every triple of a text; there is no reader filter (every content segment is kept),
no summarizer (the segment is its own summary), no debate (a clash with the KG is never argued away) and no
evaluator model. The chain's agents still run around it, so it writes the same stage tables as the multi-agent
chain and every metric compares: the relation labels map onto the schema by the schema's table, and C, Cl, R
are the rule signals of the local judge (no model judges its own output).

- over an LLM backbone: prompts/single_agent/single_agent.vN.jinja, one call per text, memoized for the
  entity and the relation question of the same text;
- over the local backbone: the dictionary NER and the relation classifier in one pass over the whole text.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.backbones.base import (
    AlignmentAnswer,
    Backbone,
    DebateAnswer,
    EvaluationSignals,
    TripleQuery,
    Usage,
)
from karma_dagster.backbones.local.judge import LocalJudge
from karma_dagster.config import BACKBONE_MODES
from karma_dagster.dictionary.lexicon import CORPUS_TYPE
from karma_dagster.schemas.records import MentionSpan, ParsedDocument, RawSection

SINGLE_AGENT_VERSION = "single-agent-v1"


class SingleAgentTriple(BaseModel):
    model_config = ConfigDict(extra="ignore")
    head: str = Field(min_length=1)
    head_type: str
    relation: str
    tail: str = Field(min_length=1)
    tail_type: str
    confidence: float = Field(0.9, ge=0.0, le=1.0)


class SingleAgentOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    triples: list[SingleAgentTriple]


class SingleAgentBackbone(Backbone):
    """Wraps a built backbone (local or LLM) and answers the chain's questions the single-agent way."""

    def __init__(self, name: str, base: Backbone, judge: LocalJudge | None = None) -> None:
        self.name = name
        self.base = base
        self.rules = judge or LocalJudge()
        self._memo: dict[str, list[SingleAgentTriple]] = {}
        self._lock = threading.Lock()
        self._invalid = 0
        self.is_llm = hasattr(base, "prompts") and hasattr(base, "client")

    # ------------------------------------------------------------------ bookkeeping
    def prompt_id(self, agent: str) -> str:
        if agent in ("entity_extraction", "relation_extraction"):
            if self.is_llm:
                return self.base.prompts.prompt_id("single_agent")  # type: ignore[attr-defined]
            return f"{SINGLE_AGENT_VERSION}+{self.base.prompt_id(agent)}"
        return f"{SINGLE_AGENT_VERSION}:none({agent})"

    def usage(self) -> Usage:
        u = self.base.usage()
        with self._lock:
            return u.add(Usage(invalid_items=self._invalid))

    def reset_usage(self) -> None:
        self.base.reset_usage()
        with self._lock:
            self._invalid = 0

    def map(self, fn, items):  # noqa: ANN001, ANN201 - the base's concurrency (LLM calls overlap)
        return self.base.map(fn, items)

    # ------------------------------------------------------------------ no IA / RA / SA agents
    def clean_document(self, doc: ParsedDocument) -> ParsedDocument:
        return doc

    def score_relevance(self, sections: list[RawSection], kg_context: Sequence[str]) -> list[float]:
        return [1.0] * len(sections)

    def summarize(self, section: RawSection, max_sentences: int) -> str:
        return section.text

    # ------------------------------------------------------------------ the one extraction
    def _triples(self, text: str) -> list[SingleAgentTriple]:
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with self._lock:
            if key in self._memo:
                return self._memo[key]
        llm = self.base
        out: SingleAgentOutput = llm._ask(  # type: ignore[attr-defined]
            "single_agent", SingleAgentOutput, entity_types=llm.entity_types,  # type: ignore[attr-defined]
            relation_types=llm.relation_types, text=text,  # type: ignore[attr-defined]
        )
        with self._lock:
            self._memo[key] = out.triples
        return out.triples

    def recognize(self, text: str) -> list[MentionSpan]:
        if not self.is_llm:
            return self.base.recognize(text)
        if not text.strip():
            return []
        from karma_dagster.backbones.llm.backbone import locate_mentions

        allowed = {t["name"].lower(): t["name"] for t in self.base.entity_types}  # type: ignore[attr-defined]
        items, invalid = [], 0
        for t in self._triples(text):
            for surface, etype in ((t.head, t.head_type), (t.tail, t.tail_type)):
                name = allowed.get(etype.strip().lower())
                if name is None:
                    invalid += 1
                elif (surface, name) not in items:
                    items.append((surface, name))
        spans, unfound = locate_mentions(text, items)
        with self._lock:
            self._invalid += invalid + unfound
        # the chain's own NER types (Chemical, Gene, ...): the entity index and the lexicon speak these
        return [s.model_copy(update={"type": CORPUS_TYPE.get(s.type, s.type)}) for s in spans]

    def relation_probabilities(
        self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]]
    ) -> list[dict[str, float]]:
        if not self.is_llm:
            return self.base.relation_probabilities(text, pairs)
        if not pairs:
            return []
        names = [t["name"] for t in self.base.relation_types]  # type: ignore[attr-defined]
        canonical = {n.lower(): n for n in names}
        stated: dict[frozenset[str], dict[str, float]] = {}
        invalid = 0
        for t in self._triples(text):
            label = canonical.get(t.relation.strip().lower())
            if label is None:
                invalid += 1
                continue
            key = frozenset((t.head.strip().lower(), t.tail.strip().lower()))
            slot = stated.setdefault(key, {})
            slot[label] = max(slot.get(label, 0.0), t.confidence)
        with self._lock:
            self._invalid += invalid
        out = []
        for h, t in pairs:
            probs = dict.fromkeys(names, 0.0)
            probs.update(stated.get(frozenset((h.text.lower(), t.text.lower())), {}))
            out.append(probs)
        return out

    # ------------------------------------------------------------------ no SAA / CRA / EA models
    def align(self, triple: TripleQuery, candidates: list[str]) -> AlignmentAnswer:
        return self.rules.align(triple, candidates)

    def debate(self, triple: TripleQuery, existing_relation: str) -> DebateAnswer:
        return DebateAnswer(
            argument_for="single-agent baseline: the extracted triple is kept as generated",
            argument_against="single-agent baseline: no conflict-resolution agent argues against it",
            verdict="agree", confidence=0.0,
        )

    def evaluation_signals(self, triple: TripleQuery, probability: float, segment_relevance: float,
                           linked_entities: int) -> EvaluationSignals:
        return self.rules.evaluation_signals(triple, probability, segment_relevance, linked_entities)


def wrap_mode(name: str, mode: str, base: Backbone) -> Backbone:
    """The backbone a config's `mode` asks for; a clear error for an unknown mode."""
    if mode == "multi_agent":
        return base
    if mode == "single_agent":
        return SingleAgentBackbone(name, base)
    raise ValueError(f"backbone {name!r}: unknown mode {mode!r} (use one of {list(BACKBONE_MODES)})")
