"""Bounds on what the inbox admits: file size before a byte is parsed, text length after parsing.

Why: without them a 50 MB text file was parsed for a minute and then failed deep in the chain on spaCy's
1,000,000-character limit. A file over a bound is refused at the scan with its name, its size and the setting
to raise (the storage resource's `max_file_mb`, `max_pubtator_mb`, `max_text_chars`), and never registered.
PubTator and PubMed files hold many abstracts and are streamed, so they have their own, larger, size bound.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.ingest.errors import IngestError
from karma_dagster.schemas.records import ParsedDocument

SPACY_MAX_CHARS = 1_000_000  # spaCy's default `nlp.max_length`: a longer text fails in the entity agent
_MB = 1_000_000
_CHUNK = 1 << 20
STREAMED_FORMATS = ("pubtator", "pubmed")  # read one document at a time: the larger bound max_pubtator_mb
_MANY = {"pubtator": "PubTator document", "pubmed": "PubMed citation", "bioc": "BioC document"}


class InputLimits(BaseModel):
    """The bounds one scan (and the loads of what it registered) applies; defaults admit every shipped file."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    max_file_mb: float = Field(50.0, gt=0, description="largest PDF, JATS or text file read (MB)")
    max_pubtator_mb: float = Field(1000.0, gt=0, description="largest PubTator or PubMed XML file (MB; streamed)")
    max_text_chars: int = Field(900_000, gt=0, le=SPACY_MAX_CHARS,
                                description="longest text of one document, in characters")


def _size_text(n_bytes: int) -> str:
    return f"{n_bytes / _MB:.1f} MB" if n_bytes >= _MB // 10 else f"{n_bytes:,} bytes"


def check_file_size(path: Path, rel: str, source_format: str | None, limits: InputLimits) -> None:
    """Refuse a file larger than its bound from its size alone (stat), before it is hashed or parsed."""
    setting, bound_mb = (("max_pubtator_mb", limits.max_pubtator_mb) if source_format in STREAMED_FORMATS
                         else ("max_file_mb", limits.max_file_mb))
    size = path.stat().st_size
    if size > bound_mb * _MB:
        raise IngestError(rel, f"file of {_size_text(size)} exceeds the input limit {setting}={bound_mb:g} MB "
                               "(storage resource setting): refused, not read")
    if source_format == "text" and size > limits.max_text_chars:
        _check_plain_text_length(path, rel, limits)


def _check_plain_text_length(path: Path, rel: str, limits: InputLimits) -> None:
    """A plain text file is its text: count its characters in chunks and stop at the bound (never read it whole)."""
    n = 0
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        while chunk := fh.read(_CHUNK):
            n += len(chunk)
            if n > limits.max_text_chars:
                raise IngestError(rel, f"text file of {_size_text(path.stat().st_size)} holds more than "
                                       f"{limits.max_text_chars:,} characters, the input limit max_text_chars "
                                       "(storage resource setting): refused, not parsed")


def text_length(doc: ParsedDocument) -> int:
    """Characters of the document's text as the chain sees it (headings, texts and their separators)."""
    return sum(len(s.heading) + len(s.text) + 3 for s in doc.sections)


def check_text_length(doc: ParsedDocument, rel: str, limits: InputLimits) -> None:
    """Refuse a parsed document whose text is longer than `max_text_chars` (under spaCy's limit)."""
    n = text_length(doc)
    if n > limits.max_text_chars:
        which = f"{_MANY[doc.source_format]} {doc.pmid}: " if doc.source_format in _MANY and doc.pmid else ""
        raise IngestError(rel, f"{which}text of {n:,} characters exceeds the input limit max_text_chars="
                               f"{limits.max_text_chars:,} (storage resource setting; spaCy reads at most "
                               f"{SPACY_MAX_CHARS:,}): refused")
