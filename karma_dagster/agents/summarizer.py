"""SA, the summarizer agent: condense each kept segment so extraction reads less text and keeps the facts.

The agent decides which segments are summarized (kept ones only) and counts sentences in and out with the
shared splitter, so the compression figures of every backbone are measured the same way; the backbone only
writes the condensed text.
"""

from __future__ import annotations

import logging

from pydantic import TypeAdapter, ValidationError

from karma_dagster.backbones.base import Backbone, backbone_map
from karma_dagster.dictionary.sentence_memo import split_sentences
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import RawSection, SegmentRow, SummaryRow

log = logging.getLogger(__name__)

_SEGMENTS = TypeAdapter(list[SegmentRow])


class SummarizerError(ValueError):
    """Bad input to the summarizer or a bad answer from its backbone; the message names the segment."""


def summarize_segments(segments: list[SegmentRow], backbone: Backbone, params: KarmaParams) -> list[SummaryRow]:
    """One summary per kept segment, in segment order; id `{segment_id}:sum`.

    A backbone that answers with empty text for a segment gets that segment skipped (logged): an empty summary
    carries nothing for the extractors, and a row with no text would fail the stage's schema.
    """
    try:
        segments = _SEGMENTS.validate_python(segments)
    except ValidationError as exc:
        raise SummarizerError(f"summarize_segments: segments are not SegmentRow records: {exc}") from exc
    ids = [s.segment_id for s in segments]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise SummarizerError(f"summarize_segments: duplicate segment ids {dup[:5]}")

    rows: list[SummaryRow] = []
    kept = sorted((s for s in segments if s.kept), key=lambda s: (s.doc_key, s.order))
    # the segments' calls overlap up to the backbone's concurrency limit; answers come back in segment order
    answers = backbone_map(backbone, 
        lambda seg: backbone.summarize(RawSection(heading=seg.heading, kind=seg.section, text=seg.text),
                                       params.summary_max_sentences),
        kept,
    )
    for seg, summary in zip(kept, answers, strict=True):
        if not isinstance(summary, str):
            raise SummarizerError(
                f"summarize_segments({seg.segment_id}): backbone {backbone.name!r} returned "
                f"{type(summary).__name__}, expected str"
            )
        summary = summary.strip()
        if not summary:
            log.warning("summarizer: backbone %s gave an empty summary for %s; skipped", backbone.name, seg.segment_id)
            continue
        n_in, n_out = len(split_sentences(seg.text)), len(split_sentences(summary))
        if n_out > n_in:
            # a "summary" longer than what it read (a small model restating a title at length) condenses nothing
            # and may add what the paper does not say: the segment's own text stands in for it
            log.warning("summarizer: backbone %s wrote %d sentences for the %d of %s; kept the segment's text",
                        backbone.name, n_out, n_in, seg.segment_id)
            summary, n_out = seg.text.strip(), n_in
        rows.append(
            SummaryRow(
                doc_key=seg.doc_key, summary_id=f"{seg.segment_id}:sum", segment_id=seg.segment_id,
                section=seg.section, text=summary, n_sentences_in=n_in, n_sentences_out=n_out,
            )
        )
    return rows
