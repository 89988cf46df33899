"""Which of a paper's sources is read: a richer source never loses to a poorer one, whatever arrived first.

One paper (one catalog key) may be held by several files: its JATS, its PDF, a BioC export, a MEDLINE citation,
a PubTator abstract. The catalog reads the best of them, and re-runs the paper only when the best one changes:

  tier 0, full text:  JATS, then BioC with body passages, then PDF
  tier 1, abstract:   BioC of title and abstract only, then the MEDLINE citation (its latest revision), then PubTator
  tier 2, your text:  a text file (it may hold a whole paper or three lines: it is read when nothing else holds it)

A BioC document counts as full text from what it holds (a passage of the article's body), not from its format:
PubTator3 exports abstracts and full texts alike. docs/project.md's source table states the same rule for users.
"""

from __future__ import annotations

from karma_dagster.schemas.records import ParsedDocument, SectionKind, SourceFormat

# Section kinds that only an article's body has (an abstract-only record has a title and an abstract).
BODY_KINDS: frozenset[SectionKind] = frozenset(
    {"introduction", "background", "methods", "results", "discussion", "conclusion", "case", "body"})
_FULL_TEXT_FORMATS: frozenset[str] = frozenset({"jats", "pdf"})  # a paper's own full text by what the file is
_FULL_TEXT_ORDER = {"jats": 0, "bioc": 1, "pdf": 2}
_ABSTRACT_ORDER = {"bioc": 10, "pubmed": 11, "pubtator": 12}
_TEXT_RANK = 20
_UNKNOWN_RANK = 30


def is_full_text(doc: ParsedDocument) -> bool:
    """A JATS or PDF file, or a BioC document with a passage of the article's body; never a citation's abstract
    (MEDLINE, PubTator) or a text file."""
    if doc.source_format in _FULL_TEXT_FORMATS:
        return True
    if doc.source_format == "bioc":
        return any(s.kind in BODY_KINDS and s.text.strip() for s in doc.sections)
    return False


def source_rank(source_format: SourceFormat | str, full_text: bool | None) -> int:
    """Lower is read first (see the module docstring). `full_text` None: a source registered before the catalog
    recorded it, ranked by its format alone (a BioC source then counts as an abstract)."""
    if full_text is None:
        full_text = source_format in _FULL_TEXT_FORMATS
    if full_text and source_format in _FULL_TEXT_ORDER:
        return _FULL_TEXT_ORDER[source_format]
    if source_format in _ABSTRACT_ORDER:
        return _ABSTRACT_ORDER[source_format]
    if source_format in _FULL_TEXT_ORDER:  # a JATS/PDF recorded as not full text: still the article's own file
        return _FULL_TEXT_ORDER[source_format]
    return _TEXT_RANK if source_format == "text" else _UNKNOWN_RANK
