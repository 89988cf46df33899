"""What the evaluator (EA) knows about one candidate triple when it asks for P(this triple is right).

The chain's stage tables hold it in pieces (the resolved row, each end's mention in the entities table, the
segment's section and relevance); the evaluator agent gathers them into one record so a backbone's correctness
model reads a single, typed boundary and the training script (scripts/train_evaluator.py) builds exactly the
same records from the training splits' stage tables.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EndFacts(BaseModel):
    """How one end of the triple was found and linked (from its mention row and its entity's other mentions)."""

    model_config = ConfigDict(extra="forbid")
    text: str  # the mention's text (the name the evidence uses)
    type: str  # the NER type (Chemical, Disease, Gene, ...)
    has_vocab_id: bool  # the lexicon/vocabulary named it (MeSH, NCBI Gene, ...)
    status: str  # "linked" to a KG node, or "new"
    linked_to: str | None = None  # "seed" | "extracted" | None
    in_dictionary: bool = True  # False: only the learned NER found the span
    distance: float = Field(0.0, ge=0.0)  # the index distance of its link (0 for identity links)
    n_mentions: int = Field(1, ge=1)  # the entity's mentions in the document (salience)


class TripleContext(BaseModel):
    """One aligned, kept triple with everything the evaluator may weigh; no Dagster, no store."""

    model_config = ConfigDict(extra="forbid")
    relation: str  # the extractor's label (Positive_Correlation, ...)
    kg_relation: str | None  # the schema relation it aligned to (treats, causes, ...)
    probability: float = Field(ge=0.0, le=1.0)  # REA's probability
    sample_confidence: float | None = Field(None, ge=0.0, le=1.0)  # MedKGent's share of agreeing samples
    alignment_prob: float = Field(1.0, ge=0.0, le=1.0)
    evidence: str
    head: EndFacts
    tail: EndFacts
    section: str = "other"
    segment_relevance: float = Field(1.0, ge=0.0, le=1.0)
    segment_order: int = 0
    conflict: bool = False  # the CRA met a clash (and kept or replaced)
    n_doc_entities: int = Field(2, ge=0)  # distinct entities the document's kept summaries name
