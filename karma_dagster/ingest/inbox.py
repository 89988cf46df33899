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
from time import monotonic
from typing import Literal

from pydantic import BaseModel

from karma_dagster.ingest.catalog import (
    PMID_MEMBERS,
    Catalog,
    DocumentEntry,
    Registration,
    SkippedUndated,
    SourceRef,
    identity_differs,
)
from karma_dagster.ingest.dates import UNDATED_SETTING, UndatedPolicy, dated, dates_path, find_dates
from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.files import real_path_in_inbox, relative_name
from karma_dagster.ingest.limits import InputLimits, check_file_size, check_text_length
from karma_dagster.ingest.parse import parse_file, source_format_of, stream_pubmed, stream_pubtator
from karma_dagster.ingest.pubmed import PubMedCitation, read_pubmed_member
from karma_dagster.ingest.pubtator import read_pubtator_member
from karma_dagster.ingest.sidecar import find_sidecar, sidecar_path
from karma_dagster.schemas.records import ParsedDocument

log = logging.getLogger(__name__)
LIMITS_SETTING = "input_limits"
PUBTATOR_BATCH = 500  # abstracts registered per catalog transaction


class FailedFile(BaseModel):
    path: str
    error: str


class ScanResult(BaseModel):
    new_keys: list[str] = []  # keys minted in this scan
    changed_keys: list[str] = []  # existing keys whose preferred source now holds other text: re-request their runs
    attached_keys: list[str] = []  # existing keys that got one more source file read after the one they have
    registrations: list[Registration] = []
    new_files: list[str] = []
    changed_files: list[str] = []
    unchanged_files: list[str] = []
    failed: list[FailedFile] = []
    skipped: list[str] = []  # files no parser reads (sidecars, notes, dates files)
    skipped_undated: list[SkippedUndated] = []  # documents without a publication date `undated: skip` left out
    rekeyed: dict[str, str] = {}  # old key -> new key of documents whose date changed (their old results retire)
    # documents a PubMed file's <DeleteCitation> left without any source: pending in the catalog until the runner
    # or the sensor removes them as `karma remove` does (removal.remove_deleted_citations: the scan has no KG or
    # stage store); a document it withdrew only a citation of, read from another source, stays (in changed_keys
    # when that citation was the source it was read from)
    deleted_keys: list[str] = []
    # a scan stopped by its time budget (scan_inbox `budget_s`): the last file it looked at, where the next scan
    # goes on, and how many files it left for then (None / 0: every file was looked at)
    resume_after: str | None = None
    deferred_files: int = 0

    @property
    def keys_to_run(self) -> list[str]:
        return [k for k in dict.fromkeys([*self.new_keys, *self.changed_keys]) if k not in self.deleted_keys]


def file_hash(path: Path, inbox: Path | None = None) -> str:
    """sha256 of the file's bytes followed by its sidecar's and its dates file's bytes (when there are).

    A sidecar that is a link out of the inbox is not read: its link text stands in for it (the parse refuses it).
    """
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    for side, tag in ((sidecar_path(path), b"sidecar"), (dates_path(path), b"dates")):
        if side != path and os.path.lexists(side):
            real = side.resolve()
            if inbox is not None and not real.is_relative_to(inbox.resolve()):
                h.update(b"\x00outside-link\x00" + os.fsencode(os.readlink(side) if side.is_symlink() else str(real)))
            elif real.is_file():
                h.update(b"\x00" + tag + b"\x00")
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


_WARNED: set[tuple[str, str]] = set()  # (file, error) whose traceback this process logged


def scan_inbox(inbox: Path, catalog: Catalog, arrival_date: dt.date, *, max_pdf_pages: int = 300,
               limits: InputLimits | None = None, undated: UndatedPolicy | None = None,
               budget_s: float | None = None, resume_after: str | None = None) -> ScanResult:
    """Register what is new or changed in the inbox. Whatever goes wrong with one file (any exception, not
    only the anticipated IngestError) is reported for that file in `failed`, and the scan goes on. A file over
    the input `limits` is refused from its size before it is read; the limits are remembered in the catalog
    for the loads of what this scan registers, and when they changed, files that failed before are tried again
    (a raised limit admits what it refused). `undated` (ingest/dates.py) is what a new document without a
    publication date does; when it changed since the last scan, files with documents it skipped are read again.
    `budget_s`: stop starting files once that many seconds have passed (a sensor tick must end well within
    Dagster's limit, however many files arrive or however loaded the machine): the result says where the next
    scan goes on (`resume_after`, given back here: the files after it come first, then the scan wraps round), so
    every file is reached within a few ticks. A file is registered whole or not at all."""
    limits = limits or InputLimits()
    undated = undated or UndatedPolicy()
    retry_failed = catalog.set_setting(LIMITS_SETTING, limits.model_dump_json())
    retry_skipped = catalog.set_setting(UNDATED_SETTING, str(undated))
    result = ScanResult()
    listing = list_inbox(inbox)
    result.skipped = [relative_name(p, inbox) for p in listing.skipped]
    result.failed.extend(listing.refused)
    sources = [(relative_name(p, inbox), p) for p in listing.sources]
    if resume_after is not None:  # go on after the file the last scan stopped at, then wrap round
        sources = [s for s in sources if s[0] > resume_after] + [s for s in sources if s[0] <= resume_after]
    started = monotonic()
    for i, (rel, path) in enumerate(sources):
        if budget_s is not None and i and monotonic() - started >= budget_s:
            result.resume_after, result.deferred_files = sources[i - 1][0], len(sources) - i
            break
        try:
            _scan_file(path, rel, inbox, catalog, arrival_date, max_pdf_pages, limits, result, retry_failed,
                       undated, retry_skipped)
        except Exception as exc:  # noqa: BLE001 - one file never stops the scan of the others
            error = str(exc) if isinstance(exc, IngestError) else f"{rel}: {type(exc).__name__}: {exc}"
            if (rel, error) not in _WARNED:  # a sensor scans every 15 s: the traceback once per process, not per tick
                _WARNED.add((rel, error))
                log.warning("inbox scan: %s failed", rel, exc_info=True)
            else:
                log.debug("inbox scan: %s failed again: %s", rel, error)
            result.failed.append(FailedFile(path=rel, error=error))
    result.new_keys = list(dict.fromkeys(result.new_keys))
    result.changed_keys = [k for k in dict.fromkeys(result.changed_keys) if k not in result.new_keys]
    result.attached_keys = [k for k in dict.fromkeys(result.attached_keys) if k not in result.new_keys]
    result.rekeyed = {r.rekeyed_from: r.doc_key for r in result.registrations if r.rekeyed_from}
    return result


def _scan_file(path: Path, rel: str, inbox: Path, catalog: Catalog, arrival_date: dt.date, max_pdf_pages: int,
               limits: InputLimits, result: ScanResult, retry_failed: bool = False,
               undated: UndatedPolicy | None = None, retry_skipped: bool = False) -> None:
    """Check the size, hash, parse and register one file, adding it to `result`; a failure is recorded in the
    catalog (an oversized file under its size, so it is not even hashed again until it changes)."""
    try:
        size = path.stat().st_size
        check_file_size(path, rel, source_format_of(path), limits)
    except IngestError as exc:
        marker = f"refused:{size}"  # stands in for the hash: an oversized file is not read, not even hashed
        if (previous := catalog.file_record(rel)) is None or previous.file_hash != marker:
            catalog.record_file(rel, marker, "failed", str(exc))
        result.failed.append(FailedFile(path=rel, error=str(exc)))
        return
    except OSError as exc:
        raise IngestError(rel, f"cannot read file ({exc.strerror or exc})") from exc
    try:
        digest = file_hash(path, inbox)
    except OSError as exc:
        raise IngestError(rel, f"cannot read file ({exc.strerror or exc})") from exc
    previous = catalog.file_record(rel)
    if previous is not None and previous.file_hash == digest and not (retry_failed and previous.status == "failed") \
            and not (retry_skipped and catalog.has_skipped(rel)):
        if previous.status == "failed":
            result.failed.append(FailedFile(path=rel, error=previous.error or "failed before"))
        else:
            result.unchanged_files.append(rel)
        return
    # an unchanged file read again for the documents the `undated` setting skipped: only new keys run
    unchanged = previous is not None and previous.file_hash == digest and previous.status == "ok"
    request: Literal["created", "all"] = "all" if previous is not None and not unchanged else "created"
    skipped: list[SkippedUndated] = []
    try:
        fmt = source_format_of(path)
        if fmt == "pubtator":
            regs = _register_pubtator(path, inbox, catalog, arrival_date, digest, request, limits, undated, skipped)
        elif fmt == "pubmed":
            regs = _register_pubmed(path, inbox, catalog, arrival_date, digest, request, limits, undated, skipped,
                                    result)
        else:
            docs = parse_file(path, inbox, max_pdf_pages=max_pdf_pages, limits=limits)
            catalog.clear_skipped(rel)
            outcome = catalog.register_batch(docs, arrival_date, file_hash=digest, request=request, undated=undated)
            regs, skipped = outcome.registrations, outcome.skipped_undated
    except IngestError as exc:  # parse_file turns every parser exception into one
        catalog.record_file(rel, digest, "failed", str(exc))
        result.failed.append(FailedFile(path=rel, error=str(exc)))
        return
    catalog.record_file(rel, digest, "ok", None, [r.doc_key for r in regs])
    result.registrations.extend(regs)
    result.skipped_undated.extend(skipped)
    (result.changed_files if request == "all" else result.new_files).append(rel)
    for reg in regs:  # the catalog decided what is requested (catalog.register_batch: the preferred source's text)
        if reg.created or reg.rekeyed_from:
            result.new_keys.append(reg.doc_key)
        elif reg.requested:
            result.changed_keys.append(reg.doc_key)
        else:
            result.attached_keys.append(reg.doc_key)


def _register_pubtator(path: Path, inbox: Path, catalog: Catalog, arrival_date: dt.date, digest: str,
                       request: Literal["created", "all"], limits: InputLimits, undated: UndatedPolicy | None = None,
                       skipped: list[SkippedUndated] | None = None) -> list[Registration]:
    """A PubTator file, streamed twice: once to check every abstract (a malformed line or an abstract over the
    limits fails the file before anything is registered), then registered `PUBTATOR_BATCH` abstracts per
    transaction with their byte spans. Memory stays bounded by one batch, whatever the file's length."""
    for _ in stream_pubtator(path, inbox, limits, annotations=False):
        pass
    regs: list[Registration] = []
    skipped = skipped if skipped is not None else []
    batch: list[ParsedDocument] = []
    spans: list[tuple[int, int] | None] = []
    catalog.clear_skipped(relative_name(path, inbox))

    def register() -> None:
        outcome = catalog.register_batch(batch, arrival_date, file_hash=digest, request=request, spans=spans,
                                         undated=undated)
        regs.extend(outcome.registrations)
        skipped.extend(outcome.skipped_undated)

    for doc, start, end in stream_pubtator(path, inbox, limits, annotations=False):
        batch.append(doc)
        spans.append((start, end))
        if len(batch) >= PUBTATOR_BATCH:
            register()
            batch, spans = [], []
    if batch:
        register()
    return regs


def _register_pubmed(path: Path, inbox: Path, catalog: Catalog, arrival_date: dt.date, digest: str,
                     request: Literal["created", "all"], limits: InputLimits, undated: UndatedPolicy | None,
                     skipped: list[SkippedUndated], result: ScanResult) -> list[Registration]:
    """A PubMed file like a PubTator one: streamed once to check every citation (a malformed one fails the file
    before anything is registered), then registered `PUBTATOR_BATCH` citations per transaction with their byte
    spans and MEDLINE revisions; memory stays bounded by one batch. A newer revision of a known citation becomes
    its preferred citation, read when no full text holds the paper (catalog.register_batch). `<DeleteCitation>`
    withdraws the PMID's citations of this file and of files sorting before it (catalog.record_deletions); a
    citation that a file sorting at or after this one deleted is not registered (MEDLINE numbers its files in
    order: what the files say is decided by that order, not by the order they arrive in)."""
    rel = relative_name(path, inbox)
    deleted: list[str] = []
    for item in stream_pubmed(path, inbox, limits):
        if not isinstance(item, PubMedCitation):
            deleted += item.pmids
    withdrawn = catalog.withdrawn_pmids(rel)
    regs: list[Registration] = []
    batch: list[PubMedCitation] = []
    catalog.clear_skipped(rel)

    def register() -> None:
        outcome = catalog.register_batch([c.document for c in batch], arrival_date, file_hash=digest,
                                         request=request, spans=[(c.start, c.end) for c in batch], undated=undated,
                                         revisions=[c.revised for c in batch])
        regs.extend(outcome.registrations)
        skipped.extend(outcome.skipped_undated)

    for item in stream_pubmed(path, inbox, limits):
        if isinstance(item, PubMedCitation) and item.document.pmid not in withdrawn:
            batch.append(item)
            if len(batch) >= PUBTATOR_BATCH:
                register()
                batch = []
    if batch:
        register()
    withdrawals = catalog.record_deletions(rel, deleted)
    result.deleted_keys += withdrawals.removed
    result.changed_keys += withdrawals.rerun
    return regs


def recorded_limits(catalog: Catalog) -> InputLimits:
    """The input limits of the catalog's last scan (the defaults before any scan)."""
    raw = catalog.setting(LIMITS_SETTING)
    return InputLimits.model_validate_json(raw) if raw else InputLimits()


def load_document(doc_key: str, inbox: Path, catalog: Catalog, *, max_pdf_pages: int = 300,
                  limits: InputLimits | None = None) -> ParsedDocument:
    """Read the key's preferred source again (ingest/source_rank.py: full text, then abstracts, then text) and pick
    its member.

    When the preferred file is gone or unreadable, the next source is tried; the error names every attempt.
    A PubTator abstract or PubMed citation is read from its recorded byte span, not by parsing the whole file.
    A source that now holds another paper (different identifiers) is never read for this key: a document whose
    every file was replaced fails, naming the files and the documents they hold now (its results and KG evidence
    are kept; `karma remove <doc_key>` removes them). `limits`: those of the last scan unless given.
    """
    entry = catalog.lookup(doc_key)
    if entry is None:
        raise IngestError(doc_key, "unknown document key (not in the catalog; scan the inbox first)")
    limits = limits or recorded_limits(catalog)
    problems = [f"{r.source_path} now holds another paper ({r.by_doc_key}, since {r.at}); this document's "
                f"results are kept (`karma remove {doc_key}` removes them)" for r in entry.replaced]
    for src in entry.sources:
        try:
            doc = _read_source(src, inbox, catalog, max_pdf_pages, limits)
        except IngestError as exc:
            problems.append(str(exc))
            continue
        if doc is None:
            problems.append(f"{src.source_path}: member {src.member} no longer in the file")
            continue
        if (other := _identity_clash(entry, doc)) is not None:
            problems.append(f"{src.source_path}: now holds another paper ({other}); scan the inbox to register it")
            continue
        return doc
    raise IngestError(doc_key, "no readable source: " + "; ".join(problems or ["no sources registered"]))


_SPAN_READERS = {"pubtator": read_pubtator_member, "pubmed": read_pubmed_member}  # one member by its byte span


def _read_source(src: SourceRef, inbox: Path, catalog: Catalog, max_pdf_pages: int,
                 limits: InputLimits) -> ParsedDocument | None:
    path = inbox / src.source_path
    span_reader = _SPAN_READERS.get(src.source_format)
    if span_reader is not None and not (src.source_format == "pubtator" and find_sidecar(path, inbox) is not None):
        # read from its recorded byte span, never the whole file (a PubTator file with a sidecar: parse_file applies it)
        real = real_path_in_inbox(path, inbox)
        if not real.is_file():
            raise IngestError(src.source_path, "no such file")
        try:
            doc = span_reader(real, src.source_path, src.member, catalog.member_span(src.source_path, src.member))
            doc = None if doc is None else dated(doc, find_dates(real, inbox))
        except IngestError:
            raise
        except Exception as exc:  # noqa: BLE001 - like parse_file: any failure is this file's, with its name
            raise IngestError(src.source_path, f"could not be read: {type(exc).__name__}: {exc}") from exc
        if doc is not None:
            check_text_length(doc, src.source_path, limits)
        return doc
    docs = parse_file(path, inbox, max_pdf_pages=max_pdf_pages, limits=limits)
    by_pmid = next((doc for doc in docs if doc.pmid and doc.pmid == src.member), None)
    if src.source_format in PMID_MEMBERS:  # many documents per file, each known by its PMID there
        if by_pmid is None and src.member.isdigit() and int(src.member) < len(docs) and not docs[int(src.member)].pmid:
            return docs[int(src.member)]  # (a BioC document without a PMID: by its index)
        return by_pmid
    if src.member.isdigit() and int(src.member) < len(docs):
        return docs[int(src.member)]
    return by_pmid


def _identity_clash(entry: DocumentEntry, doc: ParsedDocument) -> str | None:
    """How `doc` is another paper than the catalog's entry (the catalog's own identity rule), else None."""
    ids = identity_differs((entry.pmcid, entry.pmid, entry.doi, entry.title), doc)
    return None if ids is None else f"{ids[0].upper()} {ids[2]}, not {ids[1]}"
