"""Flat pydantic records, one per stage row.

They are flat on purpose: a list of records becomes a stage table (one parquet file per partition) with
`records_to_frame`, and the pandera models in `tables.py` validate exactly these columns.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SourceFormat = Literal["pdf", "jats", "pubtator", "pubmed", "bioc", "text"]
SectionKind = Literal[
    "title", "abstract", "introduction", "background", "methods", "results", "discussion",
    "conclusion", "case", "body", "figure", "table", "references", "acknowledgements",
    "affiliations", "funding", "conflicts", "other",
]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- ingestion (IA)
class RawSection(Record):
    """A piece of a parsed source file as its layout gives it (before the reader judges it)."""

    heading: str = ""
    kind: SectionKind = "other"
    text: str


class GoldMention(Record):
    start: int
    end: int
    text: str
    type: str
    identifier: str


class GoldRelation(Record):
    relation: str
    id1: str
    id2: str
    novel: str | None = None


class ParsedDocument(Record):
    """What a file parser returns; one source file may hold many (PubTator)."""

    source_path: str = Field(description="path relative to the inbox; never an absolute machine path")
    source_format: SourceFormat
    title: str = ""
    authors: list[str] = []
    journal: str | None = None
    pub_date: dt.date | None = None
    # How much of pub_date the source gave (a month, season or year is dated its first day: stated, never silent)
    # and where it comes from (e.g. "PubMed ArticleDate (Electronic)", "PubMed MedlineDate '1998 Dec-1999 Jan'").
    pub_date_precision: Literal["day", "month", "season", "year"] | None = None
    pub_date_source: str | None = None
    doi: str | None = None
    pmid: str | None = None
    pmcid: str | None = None
    license: str | None = None
    sections: list[RawSection]
    gold_mentions: list[GoldMention] = []
    gold_relations: list[GoldRelation] = []


class DocumentRow(Record):
    doc_key: str
    source_path: str
    source_format: SourceFormat
    content_hash: str
    title: str
    authors: str  # "; "-joined
    journal: str | None
    pub_date: dt.date | None
    date: dt.date  # the KG increment this document feeds
    date_source: Literal["publication", "arrival", "configured"]  # configured: the storage setting `undated`
    doi: str | None
    pmid: str | None
    pmcid: str | None
    license: str | None
    n_chars: int
    n_sections: int
    text: str
    sections_json: str  # JSON list of RawSection dicts: the layout the reader (RA) segments


# ---------------------------------------------------------------- reader (RA)
class SegmentRow(Record):
    doc_key: str
    segment_id: str
    order: int
    section: SectionKind
    heading: str
    text: str
    relevance: float = Field(ge=0.0, le=1.0)
    kept: bool
    drop_reason: str | None = None


# ---------------------------------------------------------------- summarizer (SA)
class SummaryRow(Record):
    doc_key: str
    summary_id: str
    segment_id: str
    section: SectionKind
    text: str
    n_sentences_in: int
    n_sentences_out: int


# ---------------------------------------------------------------- entity extraction (EEA)
class MentionSpan(Record):
    """A proposed mention in a text (what a backbone's NER returns), before normalization."""

    start: int
    end: int
    text: str
    type: str
    long_form: str | None = None  # abbreviation expansion, when the short form was used
    vocab_id: str | None = None  # identifier from the lexicon (MESH:D003924, NCBIGene:6616, ...)


class MentionRow(Record):
    doc_key: str
    mention_id: str
    summary_id: str
    segment_id: str
    start: int
    end: int
    text: str
    long_form: str | None
    type: str
    vocab_id: str | None
    entity_id: str  # kg_id when linked, else the new candidate's id
    kg_id: str | None
    kg_name: str | None
    distance: float
    status: Literal["linked", "new"]
    # The KG node kind: a linked entity's own; a new entity's from its type (KARMA Eq. 14: the backbone's typed
    # answer mapped through kg/schema.yaml ner_type_to_kind). None only in tables written before it existed.
    kind: str | None = None
    in_dictionary: bool = True  # the local NER (lexicon or learned model) found the span; False: kept as unlisted
    linked_to: Literal["seed", "extracted"] | None = None  # the shared seed, or an entity an earlier merge added
    # A KG tool instance (kg_tools create_instance): its comment, and its class when that is a tool-created class
    # (`type` holds the class label too, `kind` the schema kind it leads to); the merge stores both on the node.
    # None for a chain's mentions, and in tables written before they existed.
    comment: str | None = None
    class_label: str | None = None


# ---------------------------------------------------------------- relation extraction (REA) and later stages
class TripleRow(Record):
    doc_key: str
    triple_id: str
    summary_id: str
    segment_id: str
    head_mention_id: str
    head_id: str
    head_name: str
    head_type: str
    relation: str
    tail_mention_id: str
    tail_id: str
    tail_name: str
    tail_type: str
    probability: float = Field(ge=0.0, le=1.0)
    evidence: str
    # MedKGent sampling confidence: the fraction of the N relation samples that produced this triple (kept when
    # >= min_sample_confidence); None when N == 1 (no sampling). The evidence score reinforcement aggregates.
    sample_confidence: float | None = Field(None, ge=0.0, le=1.0)


class AlignedRow(TripleRow):
    head_kg_type: str | None
    tail_kg_type: str | None
    kg_relation: str | None  # e.g. "treats"
    metaedge: str | None  # e.g. "CtD"
    alignment_prob: float = Field(ge=0.0, le=1.0)
    schema_status: Literal["aligned", "review"]


class ResolvedRow(AlignedRow):
    """CRA's outcome for one aligned triple: what it clashes with, the debate, and the adjudication.

    `contradicts` names the deciding clash ("head_id -relation-> tail_id"; for "replace", every KG edge the triple
    supersedes, "; "-joined). `verdict` "skipped" = the CRA did not run (ablated, or the single-agent baseline).
    `action` "replace" = the new triple wins and the older KG edge is superseded at merge (kept in history).
    """

    conflict: bool
    contradicts: str | None
    verdict: Literal["none", "agree", "contradict", "skipped"]
    action: Literal["keep", "discard", "replace", "review"]
    against: Literal["none", "kg", "same_document"] = "none"  # what the deciding clash is
    against_date: dt.date | None = None  # its date: the KG edge's last evidence (None: seed only), or the document's
    against_confidence: float | None = Field(None, ge=0.0, le=1.0)  # its support: edge confidence or triple's
    debate_confidence: float | None = Field(None, ge=0.0, le=1.0)  # the debate's confidence in its verdict
    argument_for: str | None = None  # the debate's case for the new triple
    argument_against: str | None = None  # the debate's case against it
    # the advocates' turns as JSON ([{"round", "side": "new"|"existing", "argument"}]); None: no multi-agent debate
    debate_transcript: str | None = None
    adjudication: str | None = None  # why the action (human-readable: both sides' support and dates)


def evidence_score(sample_confidence: float | None, score: float | None, probability: float) -> float:
    """What one occurrence of a triple adds to its KG edge (MedKGent's s in 1 - prod(1 - s)): the fraction of
    the N samples that produced it when sampled, else the evaluator's mean score, else the extractor's p."""
    if sample_confidence is not None:
        return sample_confidence
    return score if score is not None else probability


class EvaluatedRow(ResolvedRow):
    """C, Cl, R and their mean `score` are None when the evaluator did not run (ablated, or the single-agent
    baseline): n/a, never a made-up number. `evidence_score` is what the KG's reinforcement aggregates for this
    occurrence: the MedKGent sampling confidence when sampled, else the evaluator's score, else the extractor's
    probability (filled so when not given)."""

    confidence: float | None = Field(ge=0.0, le=1.0)
    clarity: float | None = Field(ge=0.0, le=1.0)
    relevance: float | None = Field(ge=0.0, le=1.0)
    score: float | None = Field(ge=0.0, le=1.0)
    evidence_score: float = Field(ge=0.0, le=1.0)
    accepted: bool
    # The calibrated P(right) of a backbone with a correctness model (None: no model; C, Cl, R and Theta decided),
    # and why the triple was admitted or not (a not-admitted integrable triple goes to review, ranked by it).
    correctness: float | None = Field(None, ge=0.0, le=1.0)
    admission: str | None = None
    # A KG tool statement made with a tool-created property (kg_tools create_property): that property's label
    # (`kg_relation` is the schema relation it leads to); the merge stores it on the evidence row. None otherwise,
    # and in tables written before it existed.
    property: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_evidence_score(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("evidence_score") is None and data.get("probability") is not None:
            return {**data, "evidence_score": evidence_score(data.get("sample_confidence"), data.get("score"),
                                                             data["probability"])}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "EvaluatedRow":
        judged = [v is not None for v in (self.confidence, self.clarity, self.relevance, self.score)]
        if any(judged) and not all(judged):
            raise ValueError(f"triple {self.triple_id}: confidence, clarity, relevance and score are all set (the "
                             "evaluator ran) or all None (it did not)")
        if self.accepted and not (self.action in ("keep", "replace") and self.schema_status == "aligned"):
            raise ValueError(f"triple {self.triple_id}: accepted, but action {self.action!r} / schema status "
                             f"{self.schema_status!r} (needs keep or replace, aligned)")
        return self
