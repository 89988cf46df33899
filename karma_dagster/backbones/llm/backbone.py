"""The LLM backbone: each agent's question asked through a versioned prompt and answered as validated JSON.

The model proposes, the code disposes: mention spans are located by this code in the text (a model's offsets are
unreliable), relation and alignment labels outside the given lists are dropped, and every dropped item is counted
in `usage().invalid_items` (never silently kept).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar, get_args

from karma_dagster.backbones.base import (
    AlignmentAnswer,
    Backbone,
    DebateAnswer,
    DebateSide,
    DebateTurn,
    EvaluationSignals,
    TripleQuery,
    Usage,
)
from karma_dagster.backbones.llm.client import LLMClient, LLMContextError
from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.backbones.llm.spans import text_spans
from karma_dagster.backbones.llm.outputs import (
    AdvocateOutput,
    AlignmentOutput,
    DebateOutput,
    EntityOutput,
    ScoreOutput,
    IngestionOutput,
    JudgeOutput,
    ReaderOutput,
    RelationOutput,
    SummaryOutput,
)
from karma_dagster.kg.entity_index import compatible_kinds
from karma_dagster.kg.schema import KGSchema
from karma_dagster.backbones.llm.calibration import UNCALIBRATED, ScoreCalibration
from karma_dagster.runtime.config import MAX_DEBATE_ROUNDS
from karma_dagster.runtime.prompts import PromptStore, RenderedPrompt
from karma_dagster.schemas.records import MentionSpan, ParsedDocument, RawSection

# KARMA's evaluator judges confidence, clarity and relevance as separate questions, one prompt each.
EVALUATOR_PROMPTS = ("evaluator_confidence", "evaluator_clarity", "evaluator_relevance")
ADVOCATE = "conflict_advocate"  # the debate's two advocates; "conflict_resolution" is its judge
T = TypeVar("T")
R = TypeVar("R")
Domain = Literal["genomics", "proteomics", "metabolomics", "general biomedicine"]

# BioRED's label sets: the relation_map of kg/schema.yaml and the shipped training corpora speak these.
DEFAULT_ENTITY_TYPES: dict[str, str] = {
    "GeneOrGeneProduct": "genes, proteins, mRNAs and other gene products (BRCA1, TNF-alpha, insulin receptor)",
    "ChemicalEntity": "drugs, chemicals, metabolites, ions and small molecules (cisplatin, glucose, 5-HT)",
    "DiseaseOrPhenotypicFeature": "diseases, disorders, symptoms, adverse effects and abnormal phenotypes",
    "SequenceVariant": "mutations and variants at DNA or protein level (V600E, rs1042522, c.35delG)",
    "OrganismTaxon": "species and organisms (human, mice, HIV-1, Escherichia coli)",
    "CellLine": "named cell lines (HeLa, MCF-7, HEK293)",
}
DEFAULT_RELATION_TYPES: dict[str, str] = {
    "Association": "the two are associated, without a stated direction of effect",
    "Positive_Correlation": "one increases, induces, causes or up-regulates the other",
    "Negative_Correlation": "one decreases, treats, inhibits, prevents or down-regulates the other",
    "Bind": "physical binding between the two (drug-protein, protein-protein)",
    "Cotreatment": "two chemicals given together in a treatment",
    "Comparison": "two chemicals compared with each other (e.g. efficacy)",
    "Drug_Interaction": "a pharmacodynamic or pharmacokinetic interaction between two drugs",
    "Conversion": "one chemical is converted into the other",
}

_NOISE_RE = re.compile(r"[\ufb00-\ufb06]|\w-\n\w|[\x00-\x08\x0b\x0c\x0e-\x1f]|\ufffd")
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")


def _noise_key(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("\u00ad", "")
    text = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]|[-\s]", "", text)
    return text.casefold()


def _is_noise_repair(wrong: str, right: str) -> bool:
    """A correction may only undo extraction noise (ligatures, line-end hyphens, spacing, control characters, a
    U+FFFD standing for one or two characters), never change words: a model told by the paper itself to rewrite
    it ("ignore previous instructions ...") must not put its words into what later becomes KG evidence."""
    k_wrong, k_right = _noise_key(wrong), _noise_key(right)
    if "\ufffd" in k_wrong:
        return re.fullmatch(".{1,2}".join(re.escape(p) for p in k_wrong.split("\ufffd")), k_right) is not None
    return k_wrong == k_right
_DOI_RE = re.compile(r"^10\.\d{4,9}/\S+$")


def _types(value: dict[str, str] | list[str] | None, default: dict[str, str]) -> list[dict[str, str]]:
    if value is None:
        value = default
    if isinstance(value, dict):
        return [{"name": k, "description": v} for k, v in value.items()]
    return [{"name": k, "description": default.get(k, k.replace("_", " "))} for k in value]


def _halving(ask: Callable[[list[T]], list[R]], batch: list[T]) -> list[R]:
    """`ask(batch)`; a batch too long for the model's context is asked again as two halves (down to one item,
    which then fails with the sizes)."""
    try:
        return ask(batch)
    except LLMContextError:
        if len(batch) < 2:
            raise
        mid = len(batch) // 2
        return _halving(ask, batch[:mid]) + _halving(ask, batch[mid:])


def _halves(text: str) -> tuple[str, str] | None:
    """`text` cut at the sentence boundary nearest its middle (text[:cut], text[cut:]); None for a single
    sentence: it cannot be split without cutting a sentence, so the caller reports the sizes instead."""
    ends = [end for _start, end, _s in split_sentences(text)][:-1]
    if not ends:
        return None
    cut = min(ends, key=lambda end: abs(end - len(text) / 2))
    return text[:cut], text[cut:]


def locate_mentions(text: str, items: list[tuple[str, str]]) -> tuple[list[MentionSpan], int]:
    """Spans of each (surface, type) in `text`: every whole-word occurrence, case-sensitive first, then
    case-insensitive; overlaps resolved longest-first. Returns the spans and how many surfaces were not found."""
    candidates: list[tuple[int, int, str]] = []
    unfound = 0
    for surface, etype in items:
        surface = surface.strip()
        if not surface:
            unfound += 1
            continue
        # whole words only (never "Na" inside "Naloxone"); a surface that starts or ends with a non-word
        # character ("-31T/C" in "IL1B-31T/C") brings its own boundary there
        pattern = (r"(?<!\w)" if re.match(r"\w", surface) else "") + re.escape(surface) + (
            r"(?!\w)" if re.search(r"\w$", surface) else "")
        hits = list(re.finditer(pattern, text)) or list(re.finditer(pattern, text, flags=re.IGNORECASE))
        if not hits:
            unfound += 1
            continue
        candidates.extend((m.start(), m.end(), etype) for m in hits)
    kept: list[tuple[int, int, str]] = []
    for start, end, etype in sorted(candidates, key=lambda c: (-(c[1] - c[0]), c[0])):
        if all(end <= s or start >= e for s, e, _ in kept):
            kept.append((start, end, etype))
    spans = [MentionSpan(start=s, end=e, text=text[s:e], type=t) for s, e, t in sorted(kept)]
    return spans, unfound


class LLMBackbone(Backbone):
    """One litellm model behind every agent; cheap to share across the stages of a run (thread-safe usage)."""

    judge_signals = "llm"

    def __init__(
        self,
        name: str,
        client: LLMClient,
        prompts: PromptStore,
        domain: Domain = "general biomedicine",
        *,
        entity_types: dict[str, str] | list[str] | None = None,
        relation_types: dict[str, str] | list[str] | None = None,
        prompt_versions: dict[str, int] | None = None,
        required_prompts: Iterable[str] = (),
        section_batch: int = 8,
        pair_batch: int = 30,
        max_section_chars: int = 4000,
        max_ingest_chars: int = 6000,
        debate_rounds: int = 2,
        calibration: ScoreCalibration | None = None,
        calibration_label: str = UNCALIBRATED,
        uncalibrated_admission: str = "review",
        calibration_fingerprint: str = "",
    ) -> None:
        if domain not in get_args(Domain):
            raise ValueError(f"domain {domain!r}: expected one of {list(get_args(Domain))}")
        if section_batch < 1 or pair_batch < 1:
            raise ValueError(f"section_batch and pair_batch must be >= 1 (got {section_batch}, {pair_batch})")
        if not 1 <= debate_rounds <= MAX_DEBATE_ROUNDS:
            raise ValueError(f"debate_rounds must be 1..{MAX_DEBATE_ROUNDS} (got {debate_rounds})")
        self.name = name
        self.client = client
        self.prompts = prompts
        self.domain = domain
        self.entity_types = _types(entity_types, DEFAULT_ENTITY_TYPES)
        self.relation_types = _types(relation_types, DEFAULT_RELATION_TYPES)
        self.prompt_versions = dict(prompt_versions or {})
        self.section_batch = section_batch
        self.pair_batch = pair_batch
        self.max_section_chars = max_section_chars
        self.max_ingest_chars = max_ingest_chars
        self.debate_rounds = debate_rounds
        if uncalibrated_admission not in ("review", "theta"):
            raise ValueError(f"uncalibrated_admission must be 'review' or 'theta' (got {uncalibrated_admission!r})")
        self.score_calibration = calibration
        self.calibration_label = calibration.label() if calibration else calibration_label
        self.uncalibrated_admission = uncalibrated_admission
        self.calibration_fingerprint = calibration_fingerprint  # what a calibration of it is bound to
        self._usage = Usage()
        self._lock = threading.Lock()
        # every answered request is booked as it arrives (not when its caller returns): a stage that fails after
        # calling the model still reports what it spent (the cost ledger's `failed` rows)
        client.on_usage = self._record
        for agent in required_prompts:  # the stage registry's prompts: fail at construction, not mid-run
            prompts.get(agent, self.prompt_versions.get(agent))

    # ------------------------------------------------------------------ bookkeeping
    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """Up to the client's concurrency limit in flight (threads + the client's semaphore); input order kept."""
        return self.client.map(fn, list(items))

    def prompt_id(self, agent: str) -> str:
        if agent == "evaluator":  # three separate prompts answer it; whether its scores were calibrated, and on what
            scores = self.score_calibration.version if self.score_calibration else UNCALIBRATED
            return "+".join(self.prompt_id(a) for a in EVALUATOR_PROMPTS) + f"@{scores}"
        if agent == "conflict_resolution":  # the judge, its advocates and the number of rounds they argue
            return (f"{self.prompts.prompt_id(agent, self.prompt_versions.get(agent))}+"
                    f"{self.prompts.prompt_id(ADVOCATE, self.prompt_versions.get(ADVOCATE))}x{self.debate_rounds}")
        return self.prompts.prompt_id(agent, self.prompt_versions.get(agent))

    def usage(self) -> Usage:
        with self._lock:
            return self._usage.model_copy()

    def reset_usage(self) -> None:
        with self._lock:
            self._usage = Usage()

    def _record(self, delta: Usage) -> None:
        with self._lock:
            self._usage = self._usage.add(delta)

    def _invalid(self, n: int) -> None:
        if n:
            self._record(Usage(invalid_items=n))

    def _render(self, agent: str, **variables: Any) -> RenderedPrompt:
        return self.prompts.render(agent, self.prompt_versions.get(agent), domain=self.domain, **variables)

    def _ask(self, agent: str, output_model: type, constrain: dict[str, Any] | None = None, **variables: Any) -> Any:
        parsed, _booked = self.client.complete_json(self._render(agent, **variables), output_model,
                                                    constrain=constrain)
        return parsed

    # ------------------------------------------------------------------ IA
    def clean_document(self, doc: ParsedDocument) -> ParsedDocument:
        """One call at most, only when metadata is missing or the text shows extraction noise; the model returns
        exact replacements (not a rewrite), and only fills fields the parser left empty."""
        full = "\n\n".join(s.text for s in doc.sections)
        excerpt = full[: self.max_ingest_chars]
        noisy = bool(_NOISE_RE.search(full))
        missing = doc.source_format in ("pdf", "text") and (
            not doc.title or not doc.authors or doc.pub_date is None or doc.doi is None)
        if not (noisy or missing) or not excerpt.strip():
            return doc
        known = {k: v for k, v in doc.model_dump(
            include={"title", "authors", "journal", "pub_date", "doi", "pmid"}, mode="json").items() if v}
        out: IngestionOutput = self._ask("ingestion", IngestionOutput, source_format=doc.source_format,
                                         known=known, text=excerpt)
        invalid = 0
        fixes: list[tuple[str, str]] = []
        for c in out.corrections:
            digits_changed = _NUMBER_RE.findall(c.wrong) != _NUMBER_RE.findall(c.right)
            if c.wrong not in excerpt or c.wrong == c.right or digits_changed or not _is_noise_repair(c.wrong, c.right):
                invalid += 1  # not in the text, a no-op, touching numbers or words: never applied
                continue
            fixes.append((c.wrong, c.right))

        def fix(text: str) -> str:
            for wrong, right in fixes:
                text = text.replace(wrong, right)
            return text

        update: dict[str, Any] = {
            "sections": [s.model_copy(update={"text": fix(s.text), "heading": fix(s.heading)}) for s in doc.sections],
        }
        if not doc.title and out.title and out.title.strip():
            update["title"] = fix(out.title.strip())
        if not doc.authors and out.authors:
            update["authors"] = [a.strip() for a in out.authors if a.strip()]
        if doc.journal is None and out.journal:
            update["journal"] = out.journal.strip()
        if doc.pub_date is None and out.pub_date:
            try:  # a full date only: a bare year would invent a precision the KG dates by
                update["pub_date"] = dt.date.fromisoformat(out.pub_date.strip())
            except ValueError:
                invalid += 0 if re.fullmatch(r"\d{4}(-\d{2})?", out.pub_date.strip()) else 1
        if doc.doi is None and out.doi:
            doi = out.doi.strip().removeprefix("https://doi.org/").removeprefix("doi:").strip()
            if _DOI_RE.match(doi) and doi.lower() in full.lower():
                update["doi"] = doi
            else:
                invalid += 1  # never keep a DOI the text does not show
        if doc.pmid is None and out.pmid:
            pmid = out.pmid.strip()
            if pmid.isdigit() and pmid in full:
                update["pmid"] = pmid
            else:
                invalid += 1
        self._invalid(invalid)
        return doc.model_copy(update=update)

    # ------------------------------------------------------------------ RA
    def score_relevance(self, sections: list[RawSection], kg_context: list[str]) -> list[float]:
        if not sections:
            return []
        items = [{"index": i, "heading": s.heading, "kind": s.kind, "text": s.text[: self.max_section_chars]}
                 for i, s in enumerate(sections)]
        batches = [items[i: i + self.section_batch] for i in range(0, len(items), self.section_batch)]

        def ask(batch: list[dict[str, Any]]) -> list[tuple[list[dict[str, Any]], ReaderOutput]]:
            return [(batch, self._ask("reader", ReaderOutput, {"index": [item["index"] for item in batch]},
                                      kg_context=list(kg_context), sections=batch))]

        answered = [pair for part in self.map(lambda b: _halving(ask, b), batches) for pair in part]
        scores: dict[int, float] = {}
        invalid = 0
        for batch, parsed in answered:
            wanted = {item["index"] for item in batch}
            for s in parsed.scores:
                if s.index in wanted and s.index not in scores:
                    scores[s.index] = s.relevance
                else:
                    invalid += 1  # an index we did not ask about, or a duplicate
        for i in range(len(sections)):
            if i not in scores:
                # asked again alone; still missing -> 0.0 (the segment is dropped), counted invalid
                retry: ReaderOutput = self._ask("reader", ReaderOutput, {"index": [i]}, kg_context=list(kg_context),
                                                sections=[items[i]])
                got = [s.relevance for s in retry.scores if s.index == i]
                if got:
                    scores[i] = got[0]
                else:
                    scores[i] = 0.0
                    invalid += 1
        self._invalid(invalid)
        return [scores[i] for i in range(len(sections))]

    # ------------------------------------------------------------------ SA
    def summarize(self, section: RawSection, max_sentences: int) -> str:
        if not section.text.strip():
            return ""
        try:
            out: SummaryOutput = self._ask("summarizer", SummaryOutput, max_sentences=max_sentences,
                                           heading=section.heading, text=section.text)
        except LLMContextError:
            halves = _halves(section.text)
            if halves is None:
                raise
            # a section longer than the context: each half summarized in its share of the sentences
            share = max(1, max_sentences // 2)
            return " ".join(p for p in (self.summarize(section.model_copy(update={"text": h}), share)
                                        for h in halves) if p)
        return out.summary.strip()

    # ------------------------------------------------------------------ EEA
    @functools.cached_property
    def _schema(self) -> KGSchema:
        return KGSchema.load()

    @functools.cached_property
    def _listed_type_of_kind(self) -> dict[str, str]:
        """KG node kind -> the listed entity type for it: the first the schema maps to that kind (kg/schema.yaml
        ner_type_to_kind), else the first whose mentions may link to that kind (a Symptom is a Disease mention)."""
        out: dict[str, str] = {}
        for t in self.entity_types:
            kind = self._schema.kind_for_ner_type(t["name"])
            if kind is not None:
                out.setdefault(kind, t["name"])
        for t in self.entity_types:
            for kind in compatible_kinds(t["name"]) or ():
                out.setdefault(kind, t["name"])
        return out

    def entity_type(self, answered: str) -> str | None:
        """The listed type the model's typed answer means (KARMA Eq. 14 is the model's typing): a listed name in
        any case, or a type outside the list that the schema maps to a node kind a listed type covers ("Drug" ->
        ChemicalEntity, "Symptom" -> DiseaseOrPhenotypicFeature); None when the schema cannot place it (the item
        is dropped, counted)."""
        allowed = {t["name"].lower(): t["name"] for t in self.entity_types}
        answered = answered.strip()
        if answered.lower() in allowed:
            return allowed[answered.lower()]
        kind = self._schema.kind_for_ner_type(answered) if answered else None
        return self._listed_type_of_kind.get(kind) if kind else None

    def recognize(self, text: str) -> list[MentionSpan]:
        if not text.strip():
            return []
        try:
            return self._recognize(text)
        except LLMContextError:
            halves = _halves(text)
            if halves is None:
                raise
            # a text longer than the context: each half read alone, its spans moved to where the half starts
            head, tail = halves
            offset = len(head)
            return self.recognize(head) + [
                m.model_copy(update={"start": m.start + offset, "end": m.end + offset}) for m in self.recognize(tail)]

    def _recognize(self, text: str) -> list[MentionSpan]:
        # a grammar-constrained server holds the answer to the prompt's rules: listed types, strings of the text
        allowed = {"type": [t["name"] for t in self.entity_types], "text": text_spans(text)}
        out: EntityOutput = self._ask("entity_extraction", EntityOutput, allowed, entity_types=self.entity_types,
                                      text=text)
        items, invalid = [], 0
        for e in out.entities:
            etype = self.entity_type(e.type)
            if etype is None:
                invalid += 1  # a type the list and the schema cannot place
                continue
            items.append((e.text, etype))
        spans, unfound = locate_mentions(text, items)
        self._invalid(invalid + unfound)
        return spans

    # ------------------------------------------------------------------ REA
    def relation_probabilities(
        self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]]
    ) -> list[dict[str, float]]:
        return self._relation_probabilities(text, pairs)

    def sample_relation_probabilities(
        self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]], sample: int, temperature: float
    ) -> list[dict[str, float]]:
        """One MedKGent sample: the same prompt at `temperature`, cached under its own sample index."""
        if sample < 0 or not temperature > 0:
            raise ValueError(f"sample must be >= 0 and temperature > 0 (got {sample}, {temperature})")
        return self._relation_probabilities(text, pairs, temperature=temperature, sample=sample)

    def _relation_probabilities(
        self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]], *, temperature: float | None = None,
        sample: int | None = None,
    ) -> list[dict[str, float]]:
        if not pairs:
            return []
        names = [t["name"] for t in self.relation_types]
        canonical = {n.lower(): n for n in names}
        described = [{"pair": i, "head": h.text, "head_type": h.type, "tail": t.text, "tail_type": t.type}
                     for i, (h, t) in enumerate(pairs)]
        batches = [described[i: i + self.pair_batch] for i in range(0, len(described), self.pair_batch)]
        labels = {"type": "object", "properties": {n: {"type": "number", "minimum": 0, "maximum": 1} for n in names},
                  "additionalProperties": False}

        def ask(batch: list[dict[str, Any]]) -> list[tuple[list[dict[str, Any]], RelationOutput]]:
            rendered = self._render("relation_extraction", relation_types=self.relation_types, text=text, pairs=batch)
            parsed, _booked = self.client.complete_json(
                rendered, RelationOutput, temperature=temperature, sample=sample,
                constrain={"pair": [p["pair"] for p in batch], "probabilities": labels})
            return [(batch, parsed)]

        result: dict[int, dict[str, float]] = {}
        invalid = 0
        answers = [pair for part in self.map(lambda b: _halving(ask, b), batches) for pair in part]
        for batch, parsed in answers:
            wanted = {p["pair"] for p in batch}
            for answer in parsed.pairs:
                if answer.pair not in wanted or answer.pair in result:
                    invalid += 1
                    continue
                probs = dict.fromkeys(names, 0.0)
                bad = False
                for label, p in answer.probabilities.items():
                    name = canonical.get(label.strip().lower())
                    if name is None or not 0.0 <= p <= 1.0:
                        bad = True  # unknown label or out-of-range value: dropped
                        continue
                    probs[name] = float(p)
                invalid += bad
                result[answer.pair] = probs
        missing = [i for i in range(len(pairs)) if i not in result]
        invalid += len(missing)
        self._invalid(invalid)
        return [result.get(i, dict.fromkeys(names, 0.0)) for i in range(len(pairs))]

    # ------------------------------------------------------------------ SAA
    def align(self, triple: TripleQuery, candidates: list[str]) -> AlignmentAnswer:
        if not candidates:
            return AlignmentAnswer(kg_relation=None, probability=0.0)
        out: AlignmentOutput = self._ask("schema_alignment", AlignmentOutput,
                                         {"kg_relation": [*candidates, None]}, triple=triple.model_dump(),
                                         candidates=list(candidates))
        if out.kg_relation is None:
            return AlignmentAnswer(kg_relation=None, probability=out.probability)
        chosen = {c.lower(): c for c in candidates}.get(out.kg_relation.strip().lower())
        if chosen is None:
            self._invalid(1)  # a relation outside the candidates is never forced into the schema
            return AlignmentAnswer(kg_relation=None, probability=0.0)
        return AlignmentAnswer(kg_relation=chosen, probability=out.probability)

    # ------------------------------------------------------------------ CRA
    def debate(self, triple: TripleQuery, existing_relation: str, existing: DebateSide | None = None) -> DebateAnswer:
        """KARMA's debate (Eq. 16) as two agents and a judge: one advocate argues for the new triple from its
        sentence, the other for the existing knowledge from its support, papers and dates; each turn answers the
        other's last argument, for `debate_rounds` rounds; then the judge reads the transcript and the two sides and
        decides agree/contradict. Calls: 2 per round + 1, in sequence (each turn reads the one before)."""
        new = DebateSide(claim=f"{triple.head_name} {triple.relation} {triple.tail_name}", source="new triple",
                         evidence=[triple.evidence] if triple.evidence.strip() else [])
        old = existing or DebateSide(claim=f"{triple.head_name} {existing_relation} {triple.tail_name}",
                                     source="knowledge graph")
        turns: list[DebateTurn] = []
        for round_ in range(1, self.debate_rounds + 1):
            for side, own, other in (("new", new, old), ("existing", old, new)):
                turns.append(DebateTurn(round=round_, side=side, argument=self.advocate(round_, own, other, turns)))
        verdict = self.decide(triple, old, turns)
        return DebateAnswer(argument_for=verdict.argument_for, argument_against=verdict.argument_against,
                            verdict=verdict.verdict, confidence=verdict.confidence, transcript=turns)

    def advocate(self, round_: int, own: DebateSide, other: DebateSide, turns: list[DebateTurn]) -> str:
        """One advocate's turn: the case for `own`, answering the debate so far (one call)."""
        out: AdvocateOutput = self._ask(ADVOCATE, AdvocateOutput, round=round_, rounds=self.debate_rounds,
                                        own=own.model_dump(mode="json"), other=other.model_dump(mode="json"),
                                        transcript=_said(turns))
        return out.argument.strip()

    def decide(self, triple: TripleQuery, existing: DebateSide, turns: list[DebateTurn]) -> DebateOutput:
        """The judge: agree/contradict from the transcript and both sides (one call)."""
        return self._ask("conflict_resolution", DebateOutput, triple=triple.model_dump(),
                         existing=existing.model_dump(mode="json"), transcript=_said(turns))

    # ------------------------------------------------------------------ EA
    def score_probability(self, score: float) -> float | None:
        """P(right) of an evaluator score (the mean of C, Cl and R) once `karma calibrate` fitted this backbone."""
        return self.score_calibration.calibrate(score) if self.score_calibration else None

    def admission_threshold(self, precision: float) -> float | None:
        """The calibration's operating point; 1.0 (above every probability) when none reaches `precision`."""
        if self.score_calibration is None:
            return None
        t = self.score_calibration.threshold_for(precision)
        return 1.0 if t >= self.score_calibration.cap else t

    def calibration_state(self) -> str:
        if self.score_calibration is not None:
            return self.calibration_label
        return self.calibration_label + (": held for review" if self.holds_uncalibrated() else ": admitted by Theta")

    def holds_uncalibrated(self) -> bool:
        """Whether triples it scored without a calibration wait for review instead of entering the KG by Theta."""
        return self.score_calibration is None and self.uncalibrated_admission == "review"

    def evaluation_signals(self, triple: TripleQuery, probability: float, segment_relevance: float,
                           linked_entities: int) -> EvaluationSignals:
        """KARMA's EA: confidence, clarity and relevance judged by three separate prompts (in parallel)."""
        scores = self.map(
            lambda agent: self.evaluation_score(agent, triple, probability, segment_relevance, linked_entities),
            list(EVALUATOR_PROMPTS),
        )
        return EvaluationSignals(signals={
            "probability": float(probability),
            "segment_relevance": float(segment_relevance),
            "linked_entities": float(linked_entities),
            **{f"llm_{agent.removeprefix('evaluator_')}": score for agent, score in zip(EVALUATOR_PROMPTS, scores)},
        })

    def evaluation_score(self, prompt: str, triple: TripleQuery, probability: float, segment_relevance: float,
                         linked_entities: int) -> float:
        """One of the three judgements (prompt: evaluator_confidence, evaluator_clarity or evaluator_relevance)."""
        if prompt not in EVALUATOR_PROMPTS:
            raise ValueError(f"unknown evaluator prompt {prompt!r}; one of {EVALUATOR_PROMPTS}")
        return self._ask(prompt, ScoreOutput, triple=triple.model_dump(), probability=round(probability, 3),
                         segment_relevance=round(segment_relevance, 3), linked_entities=linked_entities).score

    # ------------------------------------------------------------------ judge (not part of the Backbone ABC)
    def judge(self, triple: TripleQuery) -> JudgeOutput:
        """LLM-as-judge correctness of a triple: likely_correct / uncertain / likely_incorrect."""
        return self._ask("judge", JudgeOutput, triple=triple.model_dump())


def _said(turns: list[DebateTurn]) -> list[dict[str, Any]]:
    """The transcript as the prompts show it: who argued what, in which round."""
    return [{"round": t.round, "advocate_of": t.side, "argument": t.argument} for t in turns]
