"""Flat pydantic records, one per stage row.

They are flat on purpose: a list of records becomes a stage table (one parquet file per partition) with
`records_to_frame`, and the pandera models in `tables.py` validate exactly these columns.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SourceFormat = Literal["pdf", "jats", "pubtator", "text"]
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
    date_source: Literal["publication", "arrival"]
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


class AlignedRow(TripleRow):
    head_kg_type: str | None
    tail_kg_type: str | None
    kg_relation: str | None  # e.g. "treats"
    metaedge: str | None  # e.g. "CtD"
    alignment_prob: float = Field(ge=0.0, le=1.0)
    schema_status: Literal["aligned", "review"]


class ResolvedRow(AlignedRow):
    conflict: bool
    contradicts: str | None  # the existing KG edge, "head_id -relation-> tail_id"
    verdict: Literal["none", "agree", "contradict"]
    action: Literal["keep", "discard", "review"]


class EvaluatedRow(ResolvedRow):
    confidence: float = Field(ge=0.0, le=1.0)
    clarity: float = Field(ge=0.0, le=1.0)
    relevance: float = Field(ge=0.0, le=1.0)
    score: float = Field(ge=0.0, le=1.0)
    accepted: bool
