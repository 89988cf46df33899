"""Scanning the inbox folder: which files are new, changed, unchanged or unreadable, and their document keys.

A file is identified by its path relative to the inbox and its content hash (with its sidecar's bytes, so a
corrected sidecar counts as a change). Unchanged files are not parsed again; a file that fails is reported
with its message and skipped, and the scan goes on with the others.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

from pydantic import BaseModel

from karma_dagster.ingest.catalog import Catalog, Registration
from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.files import relative_name
from karma_dagster.ingest.parse import parse_file, source_format_of
from karma_dagster.ingest.sidecar import sidecar_path
from karma_dagster.schemas.records import ParsedDocument


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


def file_hash(path: Path) -> str:
    """sha256 of the file's bytes followed by its sidecar's bytes (when there is one)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    side = sidecar_path(path)
    if side != path and side.is_file():
        h.update(b"\x00sidecar\x00")
        h.update(side.read_bytes())
    return h.hexdigest()


def inbox_files(inbox: Path) -> tuple[list[Path], list[Path]]:
    """(source files, skipped files) under the inbox, in path order; hidden files and folders are ignored."""
    sources, skipped = [], []
    for path in sorted(p for p in inbox.rglob("*") if p.is_file()):
        rel = path.relative_to(inbox)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if source_format_of(path) is None:
            skipped.append(path)
        else:
            sources.append(path)
    return sources, skipped


def scan_inbox(inbox: Path, catalog: Catalog, arrival_date: dt.date, *, max_pdf_pages: int = 300) -> ScanResult:
    result = ScanResult()
    sources, skipped = inbox_files(inbox)
    result.skipped = [relative_name(p, inbox) for p in skipped]
    for path in sources:
        rel = relative_name(path, inbox)
        try:
            digest = file_hash(path)
        except OSError as exc:
            result.failed.append(FailedFile(path=rel, error=f"{rel}: cannot read file ({exc.strerror or exc})"))
            continue
        previous = catalog.file_record(rel)
        if previous is not None and previous.file_hash == digest:
            if previous.status == "failed":
                result.failed.append(FailedFile(path=rel, error=previous.error or "failed before"))
            else:
                result.unchanged_files.append(rel)
            continue
        try:
            docs = parse_file(path, inbox, max_pdf_pages=max_pdf_pages)
        except IngestError as exc:
            catalog.record_file(rel, digest, "failed", str(exc))
            result.failed.append(FailedFile(path=rel, error=str(exc)))
            continue
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
    result.new_keys = list(dict.fromkeys(result.new_keys))
    result.changed_keys = [k for k in dict.fromkeys(result.changed_keys) if k not in result.new_keys]
    result.attached_keys = [k for k in dict.fromkeys(result.attached_keys) if k not in result.new_keys]
    return result


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
