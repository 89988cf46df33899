"""One entry point for every source format: `parse_file` picks the parser by the file name (and, for `.xml` and
`.json`, by the first bytes: `source_format_of`).

Every failure is an `IngestError` that names the file (relative to the inbox) and the problem, so the
sensor can report it and go on with the other files; that holds for exceptions no parser anticipated too. The parsers share their vocabulary through
`errors`, `files` and `headings`, never through this module, so they can be imported on their own.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from karma_dagster.ingest.bioc import parse_bioc
from karma_dagster.ingest.dates import apply_dates, dated, find_dates
from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.files import real_path_in_inbox, relative_name
from karma_dagster.ingest.jats import parse_jats
from karma_dagster.ingest.limits import InputLimits, check_file_size, check_text_length
from karma_dagster.ingest.pubmed import PubMedCitation, PubMedItem, is_pubmed, parse_pubmed
from karma_dagster.ingest.pubtator import parse_pubtator
from karma_dagster.ingest.sidecar import EUPMC_RESULT, apply_sidecar, find_sidecar, sidecar_path
from karma_dagster.ingest.sniff import head, looks_like_bioc_json, xml_root
from karma_dagster.ingest.text import parse_text
from karma_dagster.schemas.records import ParsedDocument

__all__ = ["IngestError", "InputLimits", "parse_file", "source_format_of", "stream_pubmed", "stream_pubtator"]  # IngestError stays importable from here

PDF_SUFFIXES = (".pdf",)
JATS_SUFFIXES = (".xml", ".nxml")
XML_GZ_SUFFIXES = (".xml.gz",)  # PubMed's baseline and update files (BioC when its root says so)
BIOC_JSON_SUFFIXES = (".bioc.json",)
PUBTATOR_SUFFIXES = (".pubtator", ".pubtator.txt", ".pubtator.gz")
TEXT_SUFFIXES = (".txt",)
_SOURCE_SUFFIXES = PDF_SUFFIXES + JATS_SUFFIXES + XML_GZ_SUFFIXES + PUBTATOR_SUFFIXES + TEXT_SUFFIXES


def source_format_of(path: Path) -> str | None:
    """'pdf' | 'jats' | 'pubmed' | 'bioc' | 'pubtator' | 'text', or None for a file no parser reads.

    An `.xml` is told by its root element: `<PubmedArticleSet>` PubMed, `<collection>` BioC, anything else JATS
    (whose parser names a wrong root); an `.xml.gz` is PubMed unless its root is BioC's. A `.bioc.json` is BioC;
    a plain `.json` is BioC only when its first bytes are BioC's and it is no source file's sidecar (a sidecar
    `<stem>.json` beside `<stem>.pdf`, or `eupmc_result.json`, stays a sidecar, never a source)."""
    name = path.name.lower()
    if name.endswith(PUBTATOR_SUFFIXES):
        return "pubtator"
    if name.endswith(PDF_SUFFIXES):
        return "pdf"
    if name.endswith(XML_GZ_SUFFIXES):
        return "bioc" if xml_root(path) == "collection" else "pubmed"
    if name.endswith(".xml"):
        root = xml_root(path)
        return "pubmed" if is_pubmed(root) else "bioc" if root == "collection" else "jats"
    if name.endswith(JATS_SUFFIXES):
        return "jats"
    if name.endswith(BIOC_JSON_SUFFIXES):
        return "bioc"
    if name.endswith(".json"):
        return "bioc" if not _is_sidecar(path) and looks_like_bioc_json(head(path)) else None
    if name.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def _is_sidecar(path: Path) -> bool:
    """A `.json` that describes a source file beside it (sidecar.py's names)."""
    if path.name == EUPMC_RESULT:
        return True
    stem = path.name[: -len(".json")]
    try:
        return any(p.name.lower().endswith(_SOURCE_SUFFIXES) and sidecar_path(p) == path
                   for p in path.parent.glob(glob.escape(stem) + ".*"))
    except OSError:
        return False


def parse_file(path: Path, inbox: Path, *, max_pdf_pages: int = 300, use_sidecar: bool = True,
               limits: InputLimits | None = None) -> list[ParsedDocument]:
    """All documents in one source file (PubTator files hold many), metadata completed from a sidecar JSON.

    A symbolic link is read only when it leads to a file inside the inbox, and the documents carry the real
    file's name. Any exception a parser raises becomes an IngestError naming the file: a parser bug or a
    hostile file fails that file, never the scan of the others. A file over the input `limits` (size before
    reading, text length after parsing) is refused with the setting to raise.
    """
    limits = limits or InputLimits()
    real, rel = _admitted(path, inbox, limits)
    with _as_ingest_error(rel):
        docs = _parse(real, rel, max_pdf_pages)
        if use_sidecar and len(docs) == 1:
            docs = [_with_sidecar(docs[0], real, inbox)]
    docs = apply_dates(docs, find_dates(real, inbox))  # `<stem>.dates.tsv`: the user's dates by PMID (dates.py)
    for doc in docs:
        check_text_length(doc, rel, limits)
    return docs


def stream_pubtator(path: Path, inbox: Path, limits: InputLimits | None = None, *, annotations: bool = True
                    ) -> Iterator[tuple[ParsedDocument, int, int]]:
    """The abstracts of a PubTator file one at a time with their byte spans (see `parse_file` for the checks):
    a file of 20,000 abstracts is never held in memory. A file of one abstract gets its sidecar, as in
    `parse_file`; an empty file is an IngestError. `annotations=False` leaves the gold annotations out (checked,
    not kept: registering needs the text and identifiers alone)."""
    limits = limits or InputLimits()
    real, rel = _admitted(path, inbox, limits)
    dates = find_dates(real, inbox)  # a bad line fails the file before any abstract is read
    with _as_ingest_error(rel):
        first: tuple[ParsedDocument, int, int] | None = None
        n = 0
        for item in parse_pubtator(real, rel, annotations=annotations):
            check_text_length(item[0], rel, limits)
            n += 1
            if n == 1:
                first = item  # held back: a lone abstract gets its sidecar
                continue
            if first is not None:
                yield dated(first[0], dates), first[1], first[2]
                first = None
            yield dated(item[0], dates), item[1], item[2]
        if first is not None:
            yield dated(_with_sidecar(first[0], real, inbox), dates), first[1], first[2]
        if n == 0:
            raise IngestError(rel, "no PubTator documents found (expected 'PMID|t|title' lines)")


def stream_pubmed(path: Path, inbox: Path, limits: InputLimits | None = None) -> Iterator[PubMedItem]:
    """The citations and deletions of a PubMed file one at a time (pubmed.parse_pubmed), with the checks of
    `parse_file`: a baseline file of 30,000 citations is never held in memory. Each citation is checked against
    the text limit and dated by a `<stem>.dates.tsv` beside the file when that lists its PMID."""
    limits = limits or InputLimits()
    real, rel = _admitted(path, inbox, limits)
    dates = find_dates(real, inbox)
    with _as_ingest_error(rel):
        for item in parse_pubmed(real, rel):
            if isinstance(item, PubMedCitation):
                check_text_length(item.document, rel, limits)
                if dates is not None:
                    item = item.model_copy(update={"document": dated(item.document, dates)})
            yield item


def _admitted(path: Path, inbox: Path, limits: InputLimits) -> tuple[Path, str]:
    """(real path, relative name) of a regular file inside the inbox within the size limits, else IngestError."""
    real = real_path_in_inbox(path, inbox)
    rel = relative_name(real, inbox)
    if not real.is_file():
        raise IngestError(rel, "no such file" if not real.exists() else "not a regular file")
    with _as_ingest_error(rel):
        check_file_size(real, rel, source_format_of(real), limits)
    return real, rel


def _with_sidecar(doc: ParsedDocument, real: Path, inbox: Path) -> ParsedDocument:
    if doc.source_format in ("pubmed", "bioc") or sidecar_path(real) == real:  # curated records; a `.json` source
        return doc
    record = find_sidecar(real, inbox)
    return doc if record is None else apply_sidecar(doc, record)


@contextmanager
def _as_ingest_error(rel: str) -> Iterator[None]:
    """Any exception becomes an IngestError naming the file."""
    try:
        yield
    except IngestError:
        raise
    except RecursionError as exc:
        raise IngestError(rel, "structure nested too deeply to read") from exc
    except MemoryError as exc:
        raise IngestError(rel, "out of memory while reading the file") from exc
    except Exception as exc:  # noqa: BLE001 - any parser failure is this file's problem, reported with its name
        raise IngestError(rel, f"could not be read: {type(exc).__name__}: {exc}") from exc


def _parse(path: Path, rel: str, max_pdf_pages: int) -> list[ParsedDocument]:
    fmt = source_format_of(path)
    if fmt == "pdf":
        from karma_dagster.ingest.pdf import parse_pdf  # pymupdf loads in ~0.4 s: only in a process that reads a PDF

        return [parse_pdf(path, rel, max_pages=max_pdf_pages)]
    if fmt == "jats":
        return [parse_jats(path, rel)]
    if fmt == "pubtator":
        docs = [doc for doc, _, _ in parse_pubtator(path, rel)]
        if not docs:
            raise IngestError(rel, "no PubTator documents found (expected 'PMID|t|title' lines)")
        return docs
    if fmt == "pubmed":
        return [item.document for item in parse_pubmed(path, rel) if isinstance(item, PubMedCitation)]
    if fmt == "bioc":
        return parse_bioc(path, rel)
    if fmt == "text":
        return [parse_text(path, rel)]
    raise IngestError(rel, f"unsupported file type {path.suffix or '(no suffix)'!r} "
                           "(expected .pdf, .xml/.nxml/.xml.gz, .bioc.json, .pubtator, .txt)")
