"""The KARMA paper's single-agent baseline as a backbone mode (`mode: single_agent` in backbones.yaml).

One generation extracts every triple of a paper (or of a paper-sized chunk when the paper exceeds the model's
context: `single_agent_chunk_chars`). The chain's stage registry gives this mode its own stage variants
(stages.chain_for): the paper's content cut into chunks instead of the reader's R(s) filter, no summarizer, the
backbone's own relation answer instead of theta_r, no conflict resolution (verdict "skipped") and no evaluator
(C, Cl, R n/a, no Theta). This class answers the two model questions that remain, from that one generation:

- over an LLM backbone: prompts/single_agent/single_agent.vN.jinja, one call per chunk, shared by the entity and
  the relation question of the same chunk (memoized per text, sample index and temperature: MedKGent's N
  samples are N different calls at the sampling temperature, never one memoized answer);
- over the local backbone: the dictionary NER and the relation classifier in one pass over the whole chunk; the
  classifier is the local chain's own document-level entity-pair model (every pair of entities of the chunk, all
  their mentions), offered through the same `document_relation_probabilities` the REA asks for.

`own_threshold` is the relation answer the underlying model gives by itself: the local document-level model's
cross-validated decision (its probabilities are shifted so that it falls on KarmaParams' default theta_r:
doc_relations.py), the mention-pair classifier's boundary p >= 0.5 for a local base without it, or "stated"
for an LLM (any triple it lists).
Schema alignment still maps the labels onto the KG schema by the schema's table (rules, not a model).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.backbones.base import (
    AlignmentAnswer,
    Backbone,
    DebateAnswer,
    DebateSide,
    EvaluationSignals,
    TripleQuery,
    Usage,
)
from karma_dagster.backbones.local.judge import LocalJudge
from karma_dagster.runtime.config import BACKBONE_MODES
from karma_dagster.dictionary.lexicon import CORPUS_TYPE
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import MentionSpan, ParsedDocument, RawSection

SINGLE_AGENT_VERSION = "single-agent-v2"
LOCAL_DECISION = 0.5  # a one-vs-rest logistic regression says "yes" at p >= 0.5
# the document-level model's cross-validated operating point, shifted onto the default theta_r (doc_relations.py)
DOC_DECISION = KarmaParams().theta_for("default")
MEMO_SIZE = 256  # generations kept in memory; older ones come back from the LLM response cache
STATED = 1e-6  # an LLM's generation: a triple it lists at all (its confidence is kept as the probability)


class NoSuchAgent(RuntimeError):
    """The single-agent baseline was asked what only an agent of the KARMA chain answers."""


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
        # the recent generations (a stage asks about one paper's chunks, then the next paper's): bounded
        self._memo: OrderedDict[tuple[str, int | None, float | None], list[SingleAgentTriple]] = OrderedDict()
        self._lock = threading.Lock()
        self._invalid = 0
        self.is_llm = hasattr(base, "prompts") and hasattr(base, "client")
        self.judge_signals = "llm" if self.is_llm else "rules"
        self.own_threshold = STATED if self.is_llm else LOCAL_DECISION
        if not self.is_llm and callable(getattr(base, "document_relation_probabilities", None)):
            # the local base's entity-pair model: the REA asks these when the backbone has them (an LLM's
            # single generation has no entity-pair answer, so it never gets them)
            self.document_relation_probabilities = base.document_relation_probabilities  # type: ignore[attr-defined]
            self.sample_document_relation_probabilities = base.sample_document_relation_probabilities  # type: ignore[attr-defined]
            self.own_threshold = DOC_DECISION

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
        return doc  # the parser's text as it is: no ingestion agent

    def score_relevance(self, sections: list[RawSection], kg_context: Sequence[str]) -> list[float]:
        return [1.0] * len(sections)  # no reader filter: the single-agent chain never asks; any caller keeps all

    def summarize(self, section: RawSection, max_sentences: int) -> str:
        return section.text  # no summarizer

    # ------------------------------------------------------------------ the one extraction
    def _triples(self, text: str, sample: int | None = None, temperature: float | None = None
                 ) -> list[SingleAgentTriple]:
        """The generation for `text` (sample `sample` at `temperature` when MedKGent sampling asks), memoized so
        the entity and the relation question of one chunk share one call; the LLM cache keys samples apart."""
        key = (hashlib.sha256(text.encode("utf-8")).hexdigest(), sample, temperature)
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return self._memo[key]
        llm = self.base
        rendered = llm._render(  # type: ignore[attr-defined]
            "single_agent", entity_types=llm.entity_types, relation_types=llm.relation_types,  # type: ignore[attr-defined]
            text=text)
        out, _booked = llm.client.complete_json(  # type: ignore[attr-defined]  # booked by the client's sink
            rendered, SingleAgentOutput, temperature=temperature, sample=sample)
        with self._lock:
            self._memo[key] = out.triples
            while len(self._memo) > MEMO_SIZE:
                self._memo.popitem(last=False)
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
        return self._stated(self._triples(text), pairs)

    def sample_relation_probabilities(
        self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]], sample: int, temperature: float
    ) -> list[dict[str, float]]:
        """MedKGent sample `sample`: a generation of its own at `temperature` (an LLM), or whatever sampling the
        local classifier offers."""
        if not self.is_llm:
            return self.base.sample_relation_probabilities(text, pairs, sample, temperature)
        if sample < 0 or not temperature > 0:
            raise ValueError(f"sample must be >= 0 and temperature > 0 (got {sample}, {temperature})")
        return self._stated(self._triples(text, sample, temperature), pairs) if pairs else []

    def _stated(self, triples: list[SingleAgentTriple], pairs: list[tuple[MentionSpan, MentionSpan]]
                ) -> list[dict[str, float]]:
        """Per pair, the confidence of each relation the generation states between the two surfaces (0 if none)."""
        if not pairs:
            return []
        names = [t["name"] for t in self.base.relation_types]  # type: ignore[attr-defined]
        canonical = {n.lower(): n for n in names}
        stated: dict[frozenset[str], dict[str, float]] = {}
        invalid = 0
        for t in triples:
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
        return self.rules.align(triple, candidates)  # the schema's label table, no model

    def debate(self, triple: TripleQuery, existing_relation: str, existing: DebateSide | None = None) -> DebateAnswer:
        raise NoSuchAgent(f"backbone {self.name!r} is the single-agent baseline: it has no conflict-resolution "
                          "agent (its resolved stage is a pass-through, verdict 'skipped')")

    def evaluation_signals(self, triple: TripleQuery, probability: float, segment_relevance: float,
                           linked_entities: int) -> EvaluationSignals:
        raise NoSuchAgent(f"backbone {self.name!r} is the single-agent baseline: it has no evaluator agent (its "
                          "evaluated stage is a pass-through, C/Cl/R n/a)")


class ToolsModeBackbone(SingleAgentBackbone):
    """An LLM backbone in the `tools` mode: its chain calls the KG tools by function calling (kg_tools/chain.py,
    through `base`), never the agents; like the baseline it has no ingestion, reader or summarizer agent. Its
    extraction is answered by the tools prompt, which is what the KG's provenance names."""

    TOOLS_PROMPT = "tools_agent"

    def prompt_id(self, agent: str) -> str:
        if agent in ("entity_extraction", "relation_extraction") and self.is_llm:
            return self.base.prompts.prompt_id(  # type: ignore[attr-defined]
                self.TOOLS_PROMPT, self.base.prompt_versions.get(self.TOOLS_PROMPT))  # type: ignore[attr-defined]
        return f"tools:none({agent})"


def wrap_mode(name: str, mode: str, base: Backbone) -> Backbone:
    """The backbone a config's `mode` asks for; a clear error for an unknown mode."""
    if mode == "multi_agent":
        return base
    if mode == "single_agent":
        return SingleAgentBackbone(name, base)
    if mode == "tools":
        return ToolsModeBackbone(name, base)
    raise ValueError(f"backbone {name!r}: unknown mode {mode!r} (use one of {list(BACKBONE_MODES)})")
