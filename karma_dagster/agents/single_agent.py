"""The single-agent baseline's two agent steps of its own (KARMA paper, Table 1's single-agent row).

- `paper_chunks`: the paper as the one generation reads it: all its content in one segment, or in paper-sized
  chunks when it exceeds the model's context (`max_chars`), cut at section, then sentence boundaries. No reader
  filter: every content chunk is kept with relevance 1.0. Bibliography, acknowledgements, affiliations, funding
  and conflict statements are left out by their section kind (text preparation, not a relevance judgement), and
  listed as dropped so the table shows what the generation did not see.
- `own_answer_params`: the relation answer the model gives by itself instead of the chain's tuned theta_r (the
  local classifier's decision boundary; any triple an LLM lists).
"""

from __future__ import annotations

from pydantic import TypeAdapter

from karma_dagster.agents.reader import NON_CONTENT_KINDS, clean_text
from karma_dagster.backbones.base import Backbone
from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import RawSection, SectionKind, SegmentRow

_SECTIONS = TypeAdapter(list[RawSection])
PAPER_HEADING = "whole paper"


class SingleAgentError(ValueError):
    """Bad input to a single-agent step; the message names the document or the backbone."""


def _pieces(text: str, max_chars: int) -> list[str]:
    """`text` cut at sentence boundaries into pieces of at most `max_chars` (a longer sentence at whitespace)."""
    out: list[str] = []
    start = 0
    for s, e, _ in split_sentences(text):
        if e - start > max_chars and s > start:
            out.append(text[start:s].strip())
            start = s
        while e - start > max_chars:
            cut = text.rfind(" ", start, start + max_chars)
            cut = start + max_chars if cut <= start else cut
            out.append(text[start:cut].strip())
            start = cut
    if text[start:].strip():
        out.append(text[start:].strip())
    return [p for p in out if p]


def paper_chunks(doc_key: str, sections: list[RawSection], max_chars: int) -> list[SegmentRow]:
    """Kept chunks (in document order) then the dropped non-content sections; ids `{doc_key}:s{order:03d}`."""
    if max_chars < 1:
        raise SingleAgentError(f"paper_chunks({doc_key}): max_chars must be >= 1, got {max_chars}")
    sections = _SECTIONS.validate_python(sections)
    chunks: list[tuple[list[SectionKind], list[str]]] = []  # (kinds, texts) per chunk
    dropped: list[tuple[SectionKind, str, str]] = []
    size = 0
    for section in sections:
        text = clean_text(section.text)
        if not text:
            continue
        if section.kind in NON_CONTENT_KINDS:
            dropped.append((section.kind, clean_text(section.heading), text))
            continue
        for piece in _pieces(text, max_chars):
            joined = len(piece) + (2 if chunks and chunks[-1][1] else 0)
            if not chunks or size + joined > max_chars:
                chunks.append(([], []))
                size, joined = 0, len(piece)
            chunks[-1][0].append(section.kind)
            chunks[-1][1].append(piece)
            size += joined
    rows: list[SegmentRow] = []
    for kinds, texts in chunks:
        order = len(rows)
        heading = PAPER_HEADING if len(chunks) == 1 else f"part {order + 1} of {len(chunks)}"
        rows.append(SegmentRow(doc_key=doc_key, segment_id=f"{doc_key}:s{order:03d}", order=order,
                               section=kinds[0] if len(set(kinds)) == 1 else "body", heading=heading,
                               text="\n\n".join(texts), relevance=1.0, kept=True))
    for kind, heading, text in dropped:
        order = len(rows)
        rows.append(SegmentRow(doc_key=doc_key, segment_id=f"{doc_key}:s{order:03d}", order=order, section=kind,
                               heading=heading, text=text, relevance=0.0, kept=False,
                               drop_reason=f"non-content section ({kind})"))
    return rows


def own_answer_params(params: KarmaParams, backbone: Backbone) -> KarmaParams:
    """`params` with theta_r replaced, for every relation type, by the backbone's own decision threshold."""
    threshold = getattr(backbone, "own_threshold", None)
    if not isinstance(threshold, float) or not 0.0 < threshold <= 1.0:
        raise SingleAgentError(f"backbone {getattr(backbone, 'name', backbone)!r} gives no own relation threshold "
                               "in (0, 1]: the single-agent stages need a single_agent-mode backbone")
    return params.model_copy(update={"theta": {"default": threshold}})
