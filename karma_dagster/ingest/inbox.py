"""Scanning the inbox folder: which files are new, changed, unchanged or unreadable, and their document keys.

A file is identified by its path relative to the inbox and its content hash (with its sidecar's bytes, so a
corrected sidecar counts as a change). Unchanged files are not parsed again; a file that fails is reported
with its message and skipped, and the scan goes on with the others, whatever the exception. Symbolic links
are followed only inside the inbox, and a file is known by its real name there.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
from pathlib import Path

from pydantic import BaseModel

from karma_dagster.ingest.catalog import Catalog, Registration
from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.files import real_path_in_inbox, relative_name
from karma_dagster.ingest.parse import parse_file, source_format_of
from karma_dagster.ingest.sidecar import sidecar_path
from karma_dagster.schemas.records import ParsedDocument

log = logging.getLogger(__name__)


class FailedFile(BaseModel):
    path: str
    error: str


class ScanResult(BaseModel):
    new_keys: list[str] = []  # keys minted in this scan
    changed_keys: list[str] = []  # existing keys whose source file changed: re-request their runs
    attached_keys: list[str] = []  # existing keys that got one more source file (a copy, the JATS of a PDF)
    registrations: list[Registration] = []
    new_files: list[str] = []
    changed_files: list[str] = []
    unchanged_files: list[str] = []
    failed: list[FailedFile] = []
    skipped: list[str] = []  # files no parser reads (sidecars, notes)

    @property
    def keys_to_run(self) -> list[str]:
        return list(dict.fromkeys([*self.new_keys, *self.changed_keys]))


def file_hash(path: Path, inbox: Path | None = None) -> str:
    """sha256 of the file's bytes followed by its sidecar's bytes (when there is one).

    A sidecar that is a link out of the inbox is not read: its link text stands in for it (the parse refuses it).
    """
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    side = sidecar_path(path)
    if side != path and os.path.lexists(side):
        real = side.resolve()
        if inbox is not None and not real.is_relative_to(inbox.resolve()):
            h.update(b"\x00outside-link\x00" + os.fsencode(os.readlink(side) if side.is_symlink() else str(real)))
        elif real.is_file():
            h.update(b"\x00sidecar\x00")
            h.update(real.read_bytes())
    return h.hexdigest()


class InboxListing(BaseModel):
    """The inbox's source files by their real paths, the files no parser reads, and the links refused."""

    sources: list[Path] = []
    skipped: list[Path] = []
    refused: list[FailedFile] = []


def list_inbox(inbox: Path) -> InboxListing:
    """Every file under the inbox, hidden files and folders ignored, links resolved to their real paths.

    A link (to a file or a folder) leading out of the inbox, or to nothing, is refused and never read; a link
    to a folder inside the inbox is not descended, since that folder's files are listed where they really are.
    A file reached twice (itself and a link to it) is listed once.
    """
    listing = InboxListing()
    seen: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(inbox, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        here = Path(dirpath)
        for d in dirnames:
            if (here / d).is_symlink():
                try:
                    real_path_in_inbox(here / d, inbox)
                except IngestError as exc:
                    listing.refused.append(FailedFile(path=exc.path, error=str(exc)))
        for name in sorted(f for f in filenames if not f.startswith(".")):
            try:
                real = real_path_in_inbox(here / name, inbox)
            except IngestError as exc:
                listing.refused.append(FailedFile(path=exc.path, error=str(exc)))
                continue
            if real in seen or not real.is_file():
                continue  # listed already, or a link to a folder (not descended: its files are listed where they are)
            seen.add(real)
            (listing.skipped if source_format_of(real) is None else listing.sources).append(real)
    listing.sources.sort()
    listing.skipped.sort()
    return listing


def inbox_files(inbox: Path) -> tuple[list[Path], list[Path]]:
    """(source files, skipped files) under the inbox by their real paths, in path order (refused links left out)."""
    listing = list_inbox(inbox)
    return listing.sources, listing.skipped


def scan_inbox(inbox: Path, catalog: Catalog, arrival_date: dt.date, *, max_pdf_pages: int = 300) -> ScanResult:
    """Register what is new or changed in the inbox. Whatever goes wrong with one file (any exception, not
    only the anticipated IngestError) is reported for that file in `failed`, and the scan goes on."""
    result = ScanResult()
    listing = list_inbox(inbox)
    result.skipped = [relative_name(p, inbox) for p in listing.skipped]
    result.failed.extend(listing.refused)
    for path in listing.sources:
        rel = relative_name(path, inbox)
        try:
            _scan_file(path, rel, inbox, catalog, arrival_date, max_pdf_pages, result)
        except Exception as exc:  # noqa: BLE001 - one file never stops the scan of the others
            log.warning("inbox scan: %s failed", rel, exc_info=True)
            error = str(exc) if isinstance(exc, IngestError) else f"{rel}: {type(exc).__name__}: {exc}"
            result.failed.append(FailedFile(path=rel, error=error))
    result.new_keys = list(dict.fromkeys(result.new_keys))
    result.changed_keys = [k for k in dict.fromkeys(result.changed_keys) if k not in result.new_keys]
    result.attached_keys = [k for k in dict.fromkeys(result.attached_keys) if k not in result.new_keys]
    return result


def _scan_file(path: Path, rel: str, inbox: Path, catalog: Catalog, arrival_date: dt.date, max_pdf_pages: int,
               result: ScanResult) -> None:
    """Hash, parse and register one file, adding it to `result`; a parse failure is recorded in the catalog."""
    try:
        digest = file_hash(path, inbox)
    except OSError as exc:
        raise IngestError(rel, f"cannot read file ({exc.strerror or exc})") from exc
    previous = catalog.file_record(rel)
    if previous is not None and previous.file_hash == digest:
        if previous.status == "failed":
            result.failed.append(FailedFile(path=rel, error=previous.error or "failed before"))
        else:
            result.unchanged_files.append(rel)
        return
    try:
        docs = parse_file(path, inbox, max_pdf_pages=max_pdf_pages)
    except IngestError as exc:  # parse_file turns every parser exception into one
        catalog.record_file(rel, digest, "failed", str(exc))
        result.failed.append(FailedFile(path=rel, error=str(exc)))
        return
    regs = catalog.register(docs, arrival_date, file_hash=digest,
                            request="all" if previous is not None else "created")
    catalog.record_file(rel, digest, "ok", None, [r.doc_key for r in regs])
    result.registrations.extend(regs)
    (result.changed_files if previous is not None else result.new_files).append(rel)
    for reg in regs:
        if reg.created:
            result.new_keys.append(reg.doc_key)
        elif previous is not None:
            result.changed_keys.append(reg.doc_key)
        else:
            result.attached_keys.append(reg.doc_key)


def load_document(doc_key: str, inbox: Path, catalog: Catalog, *, max_pdf_pages: int = 300) -> ParsedDocument:
    """Parse the key's preferred source again (JATS before PubTator before PDF before text) and pick its member.

    When the preferred file is gone or unreadable, the next source is tried; the error names every attempt.
    """
    entry = catalog.lookup(doc_key)
    if entry is None:
        raise IngestError(doc_key, "unknown document key (not in the catalog; scan the inbox first)")
    problems: list[str] = []
    for src in entry.sources:
        try:
            docs = parse_file(inbox / src.source_path, inbox, max_pdf_pages=max_pdf_pages)
        except IngestError as exc:
            problems.append(str(exc))
            continue
        if src.member.isdigit() and src.source_format != "pubtator" and int(src.member) < len(docs):
            return docs[int(src.member)]
        for doc in docs:
            if doc.pmid == src.member:
                return doc
        problems.append(f"{src.source_path}: member {src.member} no longer in the file")
    raise IngestError(doc_key, "no readable source: " + "; ".join(problems or ["no sources registered"]))
