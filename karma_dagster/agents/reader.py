"""RA, the reader agent: cut a document into segments and keep those relevant enough for the KG (R(s) >= delta).

The agent owns the segmentation and the threshold; the backbone only answers "how relevant is each segment"
(a logistic score in the local backbone, a judgement in an LLM backbone). Sections that never hold findings
(references, acknowledgements, affiliations, funding, conflicts) are dropped by kind before any backbone call,
so no model is paid to read a bibliography.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence

from pydantic import TypeAdapter, ValidationError

from karma_dagster.backbones.base import Backbone
from karma_dagster.dictionary.sentence_memo import split_sentences
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import RawSection, SectionKind, SegmentRow

# Kinds that carry no biomedical findings, dropped without scoring.
NON_CONTENT_KINDS: frozenset[str] = frozenset({"references", "acknowledgements", "affiliations", "funding", "conflicts"})
MAX_SEGMENT_SENTENCES = 12
MAX_SEGMENT_CHARS = 4000  # a "sentence" longer than this (a table flattened to text) is cut at whitespace
BELOW_DELTA = "relevance below delta"

_SECTIONS = TypeAdapter(list[RawSection])
_ODD_SPACES = re.compile(r"[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000\t\f\v]")
_INVISIBLE = re.compile(r"[\u200b\u200c\u200d\u2060\ufeff\u00ad]")


class ReaderError(ValueError):
    """Bad input to the reader or a bad answer from its backbone; the message names the document."""


def clean_text(text: str) -> str:
    """Normalize unicode and whitespace, keeping paragraph breaks (blank lines) as sentence boundaries."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _INVISIBLE.sub("", _ODD_SPACES.sub(" ", text))
    text = re.sub(r" *\n *", "\n", text)
    text = re.sub(r"\n{2,}", "\n\n", text)
    text = re.sub(r"(?<!\n)\n(?!\n)", " ", text)  # a single line break is layout, not structure
    return re.sub(r" {2,}", " ", text).strip()


def _bounded(sentences: list[tuple[int, int, str]], max_chars: int) -> list[tuple[int, int]]:
    """Sentence spans, with any span longer than `max_chars` cut at the last whitespace before the limit."""
    spans: list[tuple[int, int]] = []
    for start, end, sent in sentences:
        while end - start > max_chars:
            cut = sent.rfind(" ", 0, max_chars)
            cut = max_chars if cut <= 0 else cut
            spans.append((start, start + cut))
            sent = sent[cut:].lstrip()
            start = end - len(sent)
        spans.append((start, end))
    return spans


def segment_text(text: str, max_sentences: int = MAX_SEGMENT_SENTENCES,
                 max_chars: int = MAX_SEGMENT_CHARS) -> list[str]:
    """Cut a cleaned section text at sentence boundaries into balanced chunks of at most `max_sentences`.

    Balanced (14 sentences -> 7 + 7, not 12 + 2) so no segment is a stub without context.
    """
    if max_sentences < 1:
        raise ValueError(f"segment_text: max_sentences must be >= 1, got {max_sentences}")
    spans = _bounded(split_sentences(text), max_chars)
    if not spans:
        return []
    n_chunks = math.ceil(len(spans) / max_sentences)
    size = math.ceil(len(spans) / n_chunks)
    return [text[spans[i][0] : spans[min(i + size, len(spans)) - 1][1]] for i in range(0, len(spans), size)]


def read_document(
    doc_key: str,
    sections: list[RawSection],
    backbone: Backbone,
    params: KarmaParams,
    kg_context: Sequence[str] = (),
    max_segment_sentences: int = MAX_SEGMENT_SENTENCES,
) -> list[SegmentRow]:
    """All segments of one document, kept or dropped (a dropped row says why), in document order.

    Segment ids are `{doc_key}:s{order:03d}`; `order` counts segments over the whole document, so the ids are
    stable for the same input (the content hash of the document lives in `doc_key`'s partition).
    """
    if not isinstance(doc_key, str) or not doc_key.strip():
        raise ReaderError(f"read_document: doc_key must be a non-empty string, got {doc_key!r}")
    try:
        sections = _SECTIONS.validate_python(sections)
    except ValidationError as exc:
        raise ReaderError(f"read_document({doc_key}): sections are not RawSection records: {exc}") from exc

    pieces: list[tuple[SectionKind, str, str]] = []  # (kind, heading, segment text)
    for section in sections:
        text = clean_text(section.text)
        if not text:
            continue
        heading = clean_text(section.heading)
        for chunk in segment_text(text, max_segment_sentences):
            pieces.append((section.kind, heading, chunk))

    to_score = [i for i, (kind, _, _) in enumerate(pieces) if kind not in NON_CONTENT_KINDS]
    scores: dict[int, float] = {}
    if to_score:
        queries = [RawSection(kind=pieces[i][0], heading=pieces[i][1], text=pieces[i][2]) for i in to_score]
        answer = backbone.score_relevance(queries, list(kg_context))
        if len(answer) != len(queries):
            raise ReaderError(
                f"read_document({doc_key}): backbone {backbone.name!r} returned {len(answer)} relevance scores "
                f"for {len(queries)} segments"
            )
        for i, r in zip(to_score, answer):
            if not isinstance(r, (int, float)) or not math.isfinite(r) or not 0.0 <= r <= 1.0:
                raise ReaderError(
                    f"read_document({doc_key}): backbone {backbone.name!r} gave relevance {r!r} outside [0, 1]"
                )
            scores[i] = float(r)

    rows: list[SegmentRow] = []
    for order, (kind, heading, text) in enumerate(pieces):
        if kind in NON_CONTENT_KINDS:
            relevance, kept, reason = 0.0, False, f"non-content section ({kind})"
        else:
            relevance = scores[order]
            kept = relevance >= params.delta
            reason = None if kept else BELOW_DELTA
        rows.append(
            SegmentRow(
                doc_key=doc_key, segment_id=f"{doc_key}:s{order:03d}", order=order, section=kind,
                heading=heading, text=text, relevance=relevance, kept=kept, drop_reason=reason,
            )
        )
    return rows
