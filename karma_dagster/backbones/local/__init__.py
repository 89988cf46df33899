"""The offline `local` backbone: classic NLP (rules, lexicons, small classifiers), no network and no key."""

from __future__ import annotations

from collections.abc import Sequence

from karma_dagster.backbones.base import (
    DOCUMENT_VIEW,
    AlignmentAnswer,
    Backbone,
    DebateAnswer,
    DebateSide,
    EvaluationSignals,
    TripleQuery,
)
from karma_dagster.backbones.local import cleanup, reader, summarizer
from karma_dagster.backbones.local.correctness import CorrectnessModel, CorrectnessModelError
from karma_dagster.backbones.local.correctness import load as load_correctness
from karma_dagster.backbones.local.doc_relations import DocRelationModel
from karma_dagster.backbones.local.judge import JUDGE_VERSION, LocalJudge
from karma_dagster.backbones.local.relations import LocalRelationModel
from karma_dagster.backbones.local.sampling import SAMPLER_VERSION, RelationSampler
from karma_dagster.dictionary.ner import DictionaryNER
from karma_dagster.schemas.records import MentionSpan, ParsedDocument, RawSection
from karma_dagster.schemas.triple_context import TripleContext

CLEANUP_VERSION = "local-cleanup-v1"
SUMMARIZER_VERSION = "local-summarizer-v1"


class LocalBackbone(Backbone):
    """Classic NLP behind the agent interface: honest about what it is, zero calls, zero tokens.

    IA: rule clean-up; RA: section prior + lexicon hits + relation cues; SA: extractive; EEA: the lexicon's
    PhraseMatcher with abbreviations resolved; REA: a document-level logistic regression over entity pairs
    (backbones/local/doc_relations.py; the mention-pair one answers mention-pair questions), both trained on the
    shipped train corpora;
    SAA/CRA/EA: the schema tables and hedge/negation rules.
    """

    name = "local"

    def __init__(self, ner: DictionaryNER, relations: LocalRelationModel, judge: LocalJudge | None = None,
                 doc_relations: DocRelationModel | None = None) -> None:
        self.ner = ner
        self.relations = relations
        self.doc_relations = doc_relations or DocRelationModel(relations.cache_dir)
        self.judge = judge or LocalJudge()
        self._sampler = RelationSampler(relations.probabilities)

    def prompt_id(self, agent: str) -> str:
        if agent == "evaluator":  # without its model file the stage fails when it runs, saying how to train it
            try:
                return f"{JUDGE_VERSION}+{self.correctness_model.version}"
            except CorrectnessModelError:
                return f"{JUDGE_VERSION}+no-evaluator-model"
        versions = {
            "ingestion": CLEANUP_VERSION,
            "reader": f"{reader.VERSION}+{self.ner.version}",
            "summarizer": f"{SUMMARIZER_VERSION}+{self.ner.version}",
            "entity_extraction": self.ner.version,
            "relation_extraction": f"{self.doc_relations.version}+{SAMPLER_VERSION}+{DOCUMENT_VIEW}",
        }
        return versions.get(agent, JUDGE_VERSION)

    def clean_document(self, doc: ParsedDocument) -> ParsedDocument:
        return cleanup.clean_document(doc)

    def score_relevance(self, sections: list[RawSection], kg_context: Sequence[str]) -> list[float]:
        self.ner.prefetch(s.text for s in sections)  # the paper's sections in one NER batch (the summarizer reuses it)
        return reader.score_sections(sections, self.ner.count_hits, kg_context)

    def summarize(self, section: RawSection, max_sentences: int) -> str:
        spans = [(m.start, m.end) for m in self.ner.recognize(section.text)]  # abbreviations in context
        text, _n_in, _n_out = summarizer.summarize(section.text, max_sentences, self.ner.count_hits, spans)
        return text

    def recognize(self, text: str) -> list[MentionSpan]:
        return self.ner.recognize(text)

    def relation_probabilities(
        self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]]
    ) -> list[dict[str, float]]:
        return self.relations.probabilities(text, pairs)

    def sample_relation_probabilities(
        self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]], sample: int, temperature: float
    ) -> list[dict[str, float]]:
        """MedKGent sample `sample`: the classifier's answer with seeded logistic noise on each relation's logit
        at `temperature` (backbones/local/sampling.py): samples differ, reruns repeat them exactly."""
        return self._sampler.sample(text, pairs, sample, temperature)

    def document_relation_probabilities(
        self, text: str, entities: list[list[MentionSpan]], pairs: list[tuple[int, int]]
    ) -> list[dict[str, float]]:
        """REA over entity pairs (agents/relation_extraction.py asks this when a backbone offers it): p(r) for
        entities[i], entities[j] from all their mentions in `text`."""
        return self.doc_relations.probabilities(text, entities, pairs)

    def sample_document_relation_probabilities(
        self, text: str, entities: list[list[MentionSpan]], pairs: list[tuple[int, int]], sample: int,
        temperature: float,
    ) -> list[dict[str, float]]:
        """MedKGent sample `sample` of the entity-pair answer (same seeded logit noise as the mention pairs)."""
        return self.doc_relations.sample(text, entities, pairs, sample, temperature)

    def align(self, triple: TripleQuery, candidates: list[str]) -> AlignmentAnswer:
        return self.judge.align(triple, candidates)

    def debate(self, triple: TripleQuery, existing_relation: str, existing: DebateSide | None = None) -> DebateAnswer:
        return self.judge.debate(triple, existing_relation, existing)

    def evaluation_signals(
        self, triple: TripleQuery, probability: float, segment_relevance: float, linked_entities: int
    ) -> EvaluationSignals:
        return self.judge.evaluation_signals(triple, probability, segment_relevance, linked_entities)

    def correctness(self, contexts: list[TripleContext]) -> list[float] | None:
        """The shipped learned evaluator (correctness.py): calibrated on the training splits' own triples."""
        return self.correctness_model.probabilities(contexts)

    def admission_threshold(self, precision: float) -> float | None:
        return self.correctness_model.threshold_for(precision)

    def calibration_state(self) -> str:
        return "calibrated (shipped learned evaluator)"

    @property
    def correctness_model(self) -> CorrectnessModel:
        return load_correctness()
