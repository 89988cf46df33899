"""pandera models of each stage's table: what the asset checks (and the KG merge, again) validate.

Columns mirror `records.py`; checks add what a row model cannot see (unique ids across the table,
scores in range, consistency between columns).
"""

from __future__ import annotations

from typing import Optional

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

def Score() -> object:  # noqa: N802 - a fresh Field per column (pandera binds a Field to one column name)
    return pa.Field(ge=0.0, le=1.0)


class _Strict(pa.DataFrameModel):
    class Config:
        strict = True
        coerce = False


class DocumentsTable(_Strict):
    doc_key: Series[str] = pa.Field(unique=True, str_matches=r"^\d{4}-\d{2}-\d{2}_[a-z0-9._-]+$")
    source_path: Series[str] = pa.Field(str_length={"min_value": 1})
    source_format: Series[str] = pa.Field(isin=["pdf", "jats", "pubtator", "pubmed", "bioc", "text"])
    content_hash: Series[str]
    title: Series[str]
    authors: Series[str]
    journal: Series[str] = pa.Field(nullable=True)
    pub_date: Series[pa.DateTime] = pa.Field(nullable=True, coerce=True)
    date: Series[pa.DateTime] = pa.Field(coerce=True)
    date_source: Series[str] = pa.Field(isin=["publication", "arrival", "configured"])
    doi: Series[str] = pa.Field(nullable=True)
    pmid: Series[str] = pa.Field(nullable=True)
    pmcid: Series[str] = pa.Field(nullable=True)
    license: Series[str] = pa.Field(nullable=True)
    n_chars: Series[int] = pa.Field(gt=0)
    n_sections: Series[int] = pa.Field(gt=0)
    text: Series[str] = pa.Field(str_length={"min_value": 1})
    sections_json: Series[str]


class SegmentsTable(_Strict):
    doc_key: Series[str]
    segment_id: Series[str] = pa.Field(unique=True)
    order: Series[int] = pa.Field(ge=0)
    section: Series[str]
    heading: Series[str]
    text: Series[str]
    relevance: Series[float] = Score()
    kept: Series[bool]
    drop_reason: Series[str] = pa.Field(nullable=True)

    @pa.dataframe_check
    def dropped_have_reason(cls, df: pd.DataFrame) -> Series[bool]:
        return df["kept"] | df["drop_reason"].notna()


class SummariesTable(_Strict):
    doc_key: Series[str]
    summary_id: Series[str] = pa.Field(unique=True)
    segment_id: Series[str]
    section: Series[str]
    text: Series[str] = pa.Field(str_length={"min_value": 1})
    n_sentences_in: Series[int] = pa.Field(ge=1)
    n_sentences_out: Series[int] = pa.Field(ge=1)

    @pa.dataframe_check
    def condensed(cls, df: pd.DataFrame) -> Series[bool]:
        return df["n_sentences_out"] <= df["n_sentences_in"]


class EntitiesTable(_Strict):
    doc_key: Series[str]
    mention_id: Series[str] = pa.Field(unique=True)
    summary_id: Series[str]
    segment_id: Series[str]
    start: Series[int] = pa.Field(ge=0)
    end: Series[int] = pa.Field(gt=0)
    text: Series[str] = pa.Field(str_length={"min_value": 1})
    long_form: Series[str] = pa.Field(nullable=True)
    type: Series[str]
    vocab_id: Series[str] = pa.Field(nullable=True)
    entity_id: Series[str] = pa.Field(str_length={"min_value": 1})
    kg_id: Series[str] = pa.Field(nullable=True)
    kg_name: Series[str] = pa.Field(nullable=True)
    distance: Series[float] = pa.Field(ge=0.0)
    status: Series[str] = pa.Field(isin=["linked", "new"])
    # optional: tables written before entity typing and index growth lack them and stay valid
    kind: Optional[Series[str]] = pa.Field(nullable=True)
    in_dictionary: Optional[Series[bool]]
    linked_to: Optional[Series[str]] = pa.Field(nullable=True, isin=["seed", "extracted"])
    # optional: a KG tool instance's comment and tool-created class (tables written before them stay valid)
    comment: Optional[Series[str]] = pa.Field(nullable=True)
    class_label: Optional[Series[str]] = pa.Field(nullable=True)

    @pa.dataframe_check
    def linked_have_kg_id(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["status"] == "new") | df["kg_id"].notna()

    @pa.dataframe_check
    def linked_say_where(cls, df: pd.DataFrame) -> Series[bool]:
        if "linked_to" not in df:
            return pd.Series(True, index=df.index)
        return (df["status"] == "new") == df["linked_to"].isna()

    @pa.dataframe_check
    def spans_ordered(cls, df: pd.DataFrame) -> Series[bool]:
        return df["end"] > df["start"]


class RelationsTable(_Strict):
    doc_key: Series[str]
    triple_id: Series[str] = pa.Field(unique=True)
    summary_id: Series[str]
    segment_id: Series[str]
    head_mention_id: Series[str]
    head_id: Series[str] = pa.Field(str_length={"min_value": 1})
    head_name: Series[str]
    head_type: Series[str]
    relation: Series[str] = pa.Field(str_length={"min_value": 1})
    tail_mention_id: Series[str]
    tail_id: Series[str] = pa.Field(str_length={"min_value": 1})
    tail_name: Series[str]
    tail_type: Series[str]
    probability: Series[float] = Score()
    evidence: Series[str] = pa.Field(str_length={"min_value": 1})
    sample_confidence: Series[float] = pa.Field(ge=0.0, le=1.0, nullable=True)  # None (NaN) when N == 1

    @pa.dataframe_check
    def no_self_loops(cls, df: pd.DataFrame) -> Series[bool]:
        return df["head_id"] != df["tail_id"]


class AlignedTable(RelationsTable):
    head_kg_type: Series[str] = pa.Field(nullable=True)
    tail_kg_type: Series[str] = pa.Field(nullable=True)
    kg_relation: Series[str] = pa.Field(nullable=True)
    metaedge: Series[str] = pa.Field(nullable=True)
    alignment_prob: Series[float] = Score()
    schema_status: Series[str] = pa.Field(isin=["aligned", "review"])

    @pa.dataframe_check
    def aligned_have_relation(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["schema_status"] == "review") | (df["kg_relation"].notna() & df["metaedge"].notna())


class ResolvedTable(AlignedTable):
    conflict: Series[bool]
    contradicts: Series[str] = pa.Field(nullable=True)
    verdict: Series[str] = pa.Field(isin=["none", "agree", "contradict", "skipped"])
    action: Series[str] = pa.Field(isin=["keep", "discard", "replace", "review"])
    against: Series[str] = pa.Field(isin=["none", "kg", "same_document"])
    against_date: Series[pa.DateTime] = pa.Field(nullable=True, coerce=True)
    against_confidence: Series[float] = pa.Field(ge=0.0, le=1.0, nullable=True)
    debate_confidence: Series[float] = pa.Field(ge=0.0, le=1.0, nullable=True)
    argument_for: Series[str] = pa.Field(nullable=True)
    argument_against: Series[str] = pa.Field(nullable=True)
    debate_transcript: Optional[Series[str]] = pa.Field(nullable=True)  # tables written before the debate lack it
    adjudication: Series[str] = pa.Field(nullable=True)

    @pa.dataframe_check
    def conflicts_name_the_edge(cls, df: pd.DataFrame) -> Series[bool]:
        return ~df["conflict"] | df["contradicts"].notna()


class EvaluatedTable(ResolvedTable):
    # null = the evaluator did not run (ablated, single-agent baseline): n/a, not zero
    confidence: Series[float] = pa.Field(ge=0.0, le=1.0, nullable=True)
    clarity: Series[float] = pa.Field(ge=0.0, le=1.0, nullable=True)
    relevance: Series[float] = pa.Field(ge=0.0, le=1.0, nullable=True)
    score: Series[float] = pa.Field(ge=0.0, le=1.0, nullable=True)
    evidence_score: Series[float] = Score()
    accepted: Series[bool]
    # optional: the tool-created property a KG tool statement was made with (tables written before it stay valid)
    property: Optional[Series[str]] = pa.Field(nullable=True)
    # optional: a calibrated P(right) and the admission decision's reason (tables written before them stay valid)
    correctness: Optional[Series[float]] = pa.Field(ge=0.0, le=1.0, nullable=True)
    admission: Optional[Series[str]] = pa.Field(nullable=True)

    @pa.dataframe_check
    def accepted_only_if_kept_and_aligned(cls, df: pd.DataFrame) -> Series[bool]:
        return ~df["accepted"] | (df["action"].isin(["keep", "replace"]) & (df["schema_status"] == "aligned"))

    @pa.dataframe_check
    def judged_all_or_none(cls, df: pd.DataFrame) -> Series[bool]:
        judged = df[["confidence", "clarity", "relevance", "score"]].notna()
        return judged.all(axis=1) | ~judged.any(axis=1)
