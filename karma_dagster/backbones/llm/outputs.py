"""Pydantic models of the JSON each prompt asks for; the client validates every reply against one of them.

Extra keys are ignored (models add commentary keys); values out of range fail validation so the client can show
the model its error once. `OUTPUT_MODELS` names each prompt's model (prompt front matter `output:` must match).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Prob = Annotated[float, Field(ge=0.0, le=1.0)]


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- ingestion (IA)
class Correction(_Out):
    wrong: str = Field(min_length=1, description="an exact substring of the text, as extracted")
    right: str = Field(description="what it should read")


class IngestionOutput(_Out):
    title: str | None = None
    authors: list[str] = []
    journal: str | None = None
    pub_date: str | None = Field(None, description="YYYY-MM-DD, YYYY-MM or YYYY")
    doi: str | None = None
    pmid: str | None = None
    corrections: list[Correction] = []


# ---------------------------------------------------------------- reader (RA)
class SectionScore(_Out):
    index: int
    relevance: Prob


class ReaderOutput(_Out):
    scores: list[SectionScore]


# ---------------------------------------------------------------- summarizer (SA)
class SummaryOutput(_Out):
    summary: str = Field(min_length=1)


# ---------------------------------------------------------------- entity extraction (EEA)
class EntityItem(_Out):
    text: str = Field(min_length=1, description="the exact surface string as it appears in the text")
    type: str


class EntityOutput(_Out):
    entities: list[EntityItem]


# ---------------------------------------------------------------- relation extraction (REA)
class PairRelations(_Out):
    pair: int
    probabilities: dict[str, float]


class RelationOutput(_Out):
    pairs: list[PairRelations]


# ---------------------------------------------------------------- schema alignment (SAA)
class AlignmentOutput(_Out):
    kg_relation: str | None
    probability: Prob


# ---------------------------------------------------------------- conflict resolution (CRA)
class DebateOutput(_Out):
    argument_for: str
    argument_against: str
    verdict: Literal["agree", "contradict"]
    confidence: Prob


class AdvocateOutput(_Out):
    """One advocate's turn in the debate (prompt conflict_advocate)."""

    argument: str = Field(min_length=1)


# ---------------------------------------------------------------- evaluator (EA)
class ScoreOutput(_Out):
    """One of the evaluator's three separate judgements (confidence, clarity or relevance)."""

    score: Prob
    rationale: str = ""


# ---------------------------------------------------------------- judge (LLM correctness of a KG triple)
class JudgeOutput(_Out):
    verdict: Literal["likely_correct", "uncertain", "likely_incorrect"]
    rationale: str = ""


OUTPUT_MODELS: dict[str, type[BaseModel]] = {
    "ingestion": IngestionOutput,
    "reader": ReaderOutput,
    "summarizer": SummaryOutput,
    "entity_extraction": EntityOutput,
    "relation_extraction": RelationOutput,
    "schema_alignment": AlignmentOutput,
    "conflict_resolution": DebateOutput,
    "conflict_advocate": AdvocateOutput,
    "evaluator_confidence": ScoreOutput,
    "evaluator_clarity": ScoreOutput,
    "evaluator_relevance": ScoreOutput,
    "judge": JudgeOutput,
}
