"""One entry point for every source format, and the vocabulary the parsers share.

`parse_file` dispatches on the file name; each parser labels its pieces with a section kind through
`heading_kind`, so a PDF heading "2. Materials and Methods" and a JATS `<sec sec-type="methods">` end up
with the same kind. Every failure is an `IngestError` that names the file (relative to the inbox) and the
problem, so the sensor can report it and go on with the other files.
"""

from __future__ import annotations

import re
from pathlib import Path

from karma_dagster.ingest.pubtator import PubTatorError, read_pubtator
from karma_dagster.schemas.records import ParsedDocument, RawSection, SectionKind

PDF_SUFFIXES = (".pdf",)
JATS_SUFFIXES = (".xml", ".nxml")
PUBTATOR_SUFFIXES = (".pubtator", ".pubtator.txt", ".pubtator.gz")
TEXT_SUFFIXES = (".txt",)


class IngestError(ValueError):
    """A source file that cannot be read; the message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def relative_name(path: Path, inbox: Path | None) -> str:
    """The path as stored and reported: relative to the inbox (never an absolute machine path)."""
    if inbox is not None:
        try:
            return path.resolve().relative_to(inbox.resolve()).as_posix()
        except ValueError:
            pass
    return path.name


def source_format_of(path: Path) -> str | None:
    """'pdf' | 'jats' | 'pubtator' | 'text', or None for a file no parser reads."""
    name = path.name.lower()
    if name.endswith(PUBTATOR_SUFFIXES):
        return "pubtator"
    if name.endswith(PDF_SUFFIXES):
        return "pdf"
    if name.endswith(JATS_SUFFIXES):
        return "jats"
    if name.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def parse_file(path: Path, inbox: Path, *, max_pdf_pages: int = 300, use_sidecar: bool = True) -> list[ParsedDocument]:
    """All documents in one source file (PubTator files hold many), metadata completed from a sidecar JSON."""
    from karma_dagster.ingest import jats, pdf, sidecar, text  # they import this module: import them late

    rel = relative_name(path, inbox)
    if not path.is_file():
        raise IngestError(rel, "no such file")
    fmt = source_format_of(path)
    if fmt == "pdf":
        docs = [pdf.parse_pdf(path, rel, max_pages=max_pdf_pages)]
    elif fmt == "jats":
        docs = [jats.parse_jats(path, rel)]
    elif fmt == "pubtator":
        docs = parse_pubtator(path, rel)
    elif fmt == "text":
        docs = [text.parse_text(path, rel)]
    else:
        raise IngestError(rel, f"unsupported file type {path.suffix or '(no suffix)'!r} "
                               "(expected .pdf, .xml/.nxml, .pubtator, .txt)")
    if use_sidecar and len(docs) == 1:
        record = sidecar.find_sidecar(path, inbox)
        if record is not None:
            docs = [sidecar.apply_sidecar(docs[0], record)]
    return docs


def parse_pubtator(path: Path, rel: str) -> list[ParsedDocument]:
    """Each abstract of a PubTator file becomes its own document; gold annotations travel with it."""
    try:
        items = read_pubtator(path)
    except PubTatorError as exc:
        raise IngestError(rel, f"malformed PubTator file: {str(exc).split(': ', 1)[-1]}") from exc
    except (OSError, EOFError) as exc:  # unreadable or a damaged .gz
        raise IngestError(rel, f"cannot read PubTator file ({exc})") from exc
    if not items:
        raise IngestError(rel, "no PubTator documents found (expected 'PMID|t|title' lines)")
    docs = []
    for item in items:
        sections = [RawSection(heading="Title", kind="title", text=item.title)] if item.title else []
        if item.abstract:
            sections.append(RawSection(heading="Abstract", kind="abstract", text=item.abstract))
        if not sections:
            raise IngestError(rel, f"PubTator document {item.pmid} has neither title nor abstract")
        docs.append(ParsedDocument(
            source_path=rel, source_format="pubtator", title=item.title, pmid=item.pmid,
            sections=sections, gold_mentions=item.mentions, gold_relations=item.relations,
        ))
    return docs


# ---------------------------------------------------------------- section kinds from headings
_NUMBERING = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[IVXLC]+\.|[A-Z]\.)\s+")
_KIND_PATTERNS: list[tuple[SectionKind, re.Pattern[str]]] = [
    ("abstract", re.compile(r"^(abstract|summary|synopsis)$")),
    ("references", re.compile(r"^(references?|bibliography|literature cited|works cited|reference list)$")),
    ("acknowledgements", re.compile(r"^acknowledge?ments?$")),
    ("conflicts", re.compile(r"^(conflicts? of interests?|competing (financial )?interests?|disclosures?"
                             r"|declarations? of (competing )?interests?|conflict of interest statement)$")),
    ("funding", re.compile(r"^(funding( information| sources?| statement)?|financial (support|disclosure)"
                           r"|sources? of funding|grant support)$")),
    ("affiliations", re.compile(r"^(author )?affiliations?$")),
    ("introduction", re.compile(r"^introduction\b")),
    ("background", re.compile(r"^background\b")),
    ("case", re.compile(r"^(case (reports?|presentations?|descriptions?|histor(y|ies)|studies|study|series)"
                        r"|case( \d+)?|clinical (case|presentation))$")),
    ("methods", re.compile(r"^((materials?|patients?|subjects?|participants?|study design)( and| &) methods?"
                           r"|methods?( and materials?)?|methodology|experimental( procedures| section| design)?"
                           r"|study design|statistical analys[ie]s)$")),
    ("results", re.compile(r"^results?\b")),
    ("discussion", re.compile(r"^(discussion|general discussion|comment)\b")),
    ("conclusion", re.compile(r"^(conclusions?|concluding remarks|summary and conclusions?)\b")),
    ("other", re.compile(r"^(abbreviations|authors?'? contributions?|supplementary (material|data|information)"
                         r"|consent|ethic(s|al) (statement|approval)|data availability|additional (files|information))")),
]


def strip_numbering(heading: str) -> str:
    """'2.1. Cell Lines.' -> 'Cell Lines'."""
    return _NUMBERING.sub("", heading).strip().rstrip(".:").strip()


def heading_depth(heading: str) -> int:
    """1 for '2. Methods' or 'Methods', 2 for '2.1. Animals', 3 for '2.1.1 ...'."""
    m = re.match(r"^\s*(\d+(?:\.\d+)*)\.?\s", heading)
    return m.group(1).count(".") + 1 if m else 1


def heading_kind(heading: str) -> SectionKind | None:
    """The section kind a heading announces, None when it names no standard part (a topical heading)."""
    words = re.sub(r"\s+", " ", strip_numbering(heading).lower().replace("’", "'")).strip()
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(words):
            return kind
    return None
