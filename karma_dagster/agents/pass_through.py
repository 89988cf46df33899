"""What an ablated agent does instead (KARMA's Table 2: without summarizer, conflict resolution or evaluator).

The stage keeps its asset and its table's columns, so the chain's graph and every metric stay comparable; only
the agent's judgement is gone, and the rows say so (verdict "skipped", C/Cl/R None) instead of inventing one:

- summarizer -> each kept segment's text unchanged (a "summary" of every sentence);
- conflict resolution -> no clash is looked for: verdict "skipped"; an aligned triple is kept, a triple the
  schema could not place stays queued for schema review (that is the alignment's verdict, not a debate's);
- evaluator -> no C, Cl, R, no Theta: accepted = aligned and kept (or replacing) by the earlier agents.

The single-agent baseline uses the same pass-throughs (it has no summarizer, debate or evaluator either).
"""

from __future__ import annotations

from karma_dagster.agents.evaluator import kept_and_aligned
from karma_dagster.dictionary.sentence_memo import split_sentences
from karma_dagster.schemas.records import (
    AlignedRow,
    EvaluatedRow,
    ResolvedRow,
    SegmentRow,
    SummaryRow,
    evidence_score,
)


def unsummarized(segments: list[SegmentRow]) -> list[SummaryRow]:
    """One 'summary' per kept segment holding its text unchanged (id `{segment_id}:sum`, like the summarizer's,
    so later stages address it the same way); sentences in = sentences out."""
    rows = []
    for seg in sorted((s for s in segments if s.kept), key=lambda s: (s.doc_key, s.order)):
        text = seg.text.strip()
        if not text:
            continue
        n = max(1, len(split_sentences(text)))
        rows.append(SummaryRow(doc_key=seg.doc_key, summary_id=f"{seg.segment_id}:sum", segment_id=seg.segment_id,
                               section=seg.section, text=text, n_sentences_in=n, n_sentences_out=n))
    return rows


def unresolved(aligned: list[AlignedRow]) -> list[ResolvedRow]:
    """Every triple through without a conflict check: verdict "skipped", no clash recorded."""
    return [
        ResolvedRow(**t.model_dump(), conflict=False, contradicts=None, verdict="skipped",
                    action="keep" if t.schema_status == "aligned" and t.kg_relation is not None else "review")
        for t in aligned
    ]


def unevaluated(resolved: list[ResolvedRow]) -> list[EvaluatedRow]:
    """C, Cl, R and score None (n/a); accepted when aligned and kept (or replacing); the evidence score is the
    sampling confidence or the extractor's probability."""
    out = []
    for t in resolved:
        row = t.model_dump()
        out.append(EvaluatedRow(**row, confidence=None, clarity=None, relevance=None, score=None,
                                evidence_score=evidence_score(row.get("sample_confidence"), None, t.probability),
                                accepted=kept_and_aligned(t)))
    return out
