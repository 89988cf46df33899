"""Which date a document feeds, and why: never a date invented silently.

MedKGent grows the KG day by day by publication date, so a document's date decides its key, its increment, its
first/last-seen dates and its half-life discount. A document whose file gives no publication date is dated by
the storage setting `undated`: `arrival` (the day it was registered, the default), `skip` (not registered;
reported as skipped-undated) or a fixed `YYYY-MM-DD` (date_source 'configured'). Whatever the choice, the
catalog keeps the date's source and a note saying where the date came from or why there is none, and the status,
the report, the document asset's metadata and each KG evidence row show it.

The user can supply dates: `<stem>.dates.tsv` beside a file of many documents (a PubTator file) holds
`pmid<TAB>date` lines (a header line `pmid<TAB>date` is optional; `#` starts a comment line). Dates are
`YYYY-MM-DD`, `YYYY-MM` or `YYYY`; a month counts as its 1st day and a year as its 1 January (the convention
Europe PMC uses for a year-only print date, and what a sidecar with a year and month already gives). The file
counts in its source file's hash, like a sidecar: a corrected dates file registers the file again, and a
document whose date it changes moves to its new date's increment (catalog.py re-keys it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.files import real_path_in_inbox, relative_name
from karma_dagster.schemas.records import ParsedDocument

DateSource = Literal["publication", "arrival", "configured"]
DATE_SOURCES: tuple[str, ...] = ("publication", "arrival", "configured")
UNDATED_SETTING = "undated"
UNDATED_ENV = "KARMA_UNDATED"  # what an empty `undated` setting reads (the sensor's resource has no CLI flag)
DATES_SUFFIX = ".dates.tsv"
_MULTI_SUFFIXES = (".pubtator.txt", ".pubtator.gz", ".xml.gz", ".json.gz", ".bioc.xml", ".bioc.json")
_PARTIAL = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?")
_MAX_LINE_SHOWN = 80
# how a partial date was completed (stated in the catalog's note, never silent)
PRECISION_NOTE = {"day": "", "month": " (month only: dated its 1st)", "season": " (season only: dated its first day)",
                  "year": " (year only: dated 1 January)"}


# ---------------------------------------------------------------- the `undated` setting
class UndatedPolicy(BaseModel):
    """What a document without a publication date does: dated by arrival, skipped, or dated `date`."""

    model_config = ConfigDict(frozen=True)
    mode: Literal["arrival", "skip", "date"] = "arrival"
    date: dt.date | None = None

    def __str__(self) -> str:
        return self.date.isoformat() if self.mode == "date" and self.date else self.mode


def parse_undated(value: str | None, setting: str = UNDATED_SETTING) -> UndatedPolicy:
    """`arrival` | `skip` | `YYYY-MM-DD` (empty: arrival); anything else is a ValueError naming the setting."""
    text = (value or "").strip()
    if text in ("", "arrival"):
        return UndatedPolicy()
    if text == "skip":
        return UndatedPolicy(mode="skip")
    try:
        day = dt.date.fromisoformat(text) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) else None
    except ValueError:
        day = None
    if day is None:
        raise ValueError(f"storage setting {setting}={text[:_MAX_LINE_SHOWN]!r}: expected 'arrival' (date an "
                         "undated document by the day it arrived), 'skip' (do not register it) or a date "
                         "YYYY-MM-DD (date every undated document so)")
    return UndatedPolicy(mode="date", date=day)


def undated_from_env() -> UndatedPolicy:
    return parse_undated(os.environ.get(UNDATED_ENV, ""), setting=f"${UNDATED_ENV}")


# ---------------------------------------------------------------- one document's date
class DocumentDate(BaseModel):
    """The date a document is registered under, its source and a note (where from, or why there is none)."""

    model_config = ConfigDict(frozen=True)
    date: dt.date
    source: DateSource
    note: str


def undated_reason(doc: ParsedDocument) -> str:
    """Why a parsed document has no publication date, in the user's terms (what to supply to date it)."""
    fmt = doc.source_format
    side = f"{_stem(doc.source_path)}.json"
    if fmt == "pubtator":
        return (f"PubTator file gives no date (no {dates_name(doc.source_path)} lists PMID {doc.pmid})"
                if doc.pmid else "PubTator file gives no date")
    if fmt == "text":
        return f"text file gives no date (no 'Published:' or 'Date:' line, no sidecar {side})"
    if fmt == "pdf":
        return f"no publication date found on the PDF's first page and no sidecar {side}"
    if fmt == "jats":
        return "the JATS XML has no <pub-date>"
    return f"the {fmt} file gives no date for it" + (f" (no {dates_name(doc.source_path)} lists PMID {doc.pmid})"
                                                     if doc.pmid else "")


def decide_date(doc: ParsedDocument, arrival_date: dt.date, policy: UndatedPolicy | None = None
                ) -> DocumentDate | None:
    """Its publication date when it has one; else what the `undated` policy says (None: skip it)."""
    if doc.pub_date is not None:
        where = doc.pub_date_source or f"the {doc.source_format} file"
        convention = PRECISION_NOTE.get(doc.pub_date_precision or "day", "")
        return DocumentDate(date=doc.pub_date, source="publication",
                            note=f"publication date from {where}{convention}")
    policy = policy or UndatedPolicy()
    why = undated_reason(doc)
    if policy.mode == "skip":
        return None
    if policy.mode == "date" and policy.date is not None:
        return DocumentDate(date=policy.date, source="configured",
                            note=f"undated: {why}; dated by the storage setting {UNDATED_SETTING}={policy.date}")
    return DocumentDate(date=arrival_date, source="arrival", note=f"undated: {why}; dated by its arrival")


# ---------------------------------------------------------------- the dates file
class DatedLine(BaseModel):
    model_config = ConfigDict(frozen=True)
    date: dt.date
    line: int
    precision: Literal["day", "month", "year"]


def _stem(name: str) -> str:
    base = name
    lower = base.lower()
    for suffix in _MULTI_SUFFIXES:
        if lower.endswith(suffix):
            return base[: -len(suffix)]
    return base.rsplit(".", 1)[0] if "." in Path(base).name else base


def dates_name(source_path: str) -> str:
    """`abstracts.pubtator` -> `abstracts.dates.tsv` (the name beside the file the user may write)."""
    return Path(_stem(source_path)).name + DATES_SUFFIX


def dates_path(path: Path) -> Path:
    return path.with_name(dates_name(path.name))


def is_dates_file(path: Path) -> bool:
    return path.name.lower().endswith(DATES_SUFFIX)


def parse_partial_date(text: str) -> tuple[dt.date, Literal["day", "month", "year"]]:
    """YYYY-MM-DD, YYYY-MM (its 1st) or YYYY (1 January); ValueError otherwise."""
    m = _PARTIAL.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{text.strip()[:_MAX_LINE_SHOWN]!r} is not a date (YYYY-MM-DD, YYYY-MM or YYYY)")
    year, month, day = int(m[1]), int(m[2] or 1), int(m[3] or 1)
    precision: Literal["day", "month", "year"] = "day" if m[3] else "month" if m[2] else "year"
    try:
        return dt.date(year, month, day), precision
    except ValueError as exc:
        raise ValueError(f"{text.strip()!r} is not a date ({exc})") from exc


def read_dates(path: Path, rel: str) -> dict[str, DatedLine]:
    """PMID -> date of a dates file; an IngestError names the file, the line and what is wrong with it."""
    return parse_dates(_read_bytes(path, rel), rel)


def _read_bytes(path: Path, rel: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise IngestError(rel, f"cannot read dates file ({exc.strerror or exc})") from exc


def parse_dates(raw: bytes, rel: str) -> dict[str, DatedLine]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IngestError(rel, f"dates file is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    out: dict[str, DatedLine] = {}
    first = _first_content_line(text)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = [c.strip() for c in line.split("\t")]
        if lineno == first and [c.lower() for c in cols[:2]] == ["pmid", "date"]:
            continue  # the optional header
        shown = line[:_MAX_LINE_SHOWN]
        if len(cols) != 2:
            raise IngestError(rel, f"line {lineno}: expected 'pmid<TAB>date', got {len(cols)} tab-separated "
                                   f"column(s): {shown!r}")
        pmid, value = cols
        if not pmid.isdigit():
            raise IngestError(rel, f"line {lineno}: PMID {pmid[:_MAX_LINE_SHOWN]!r} is not a number")
        try:
            day, precision = parse_partial_date(value)
        except ValueError as exc:
            raise IngestError(rel, f"line {lineno}: {exc}") from exc
        if pmid in out and out[pmid].date != day:
            raise IngestError(rel, f"line {lineno}: PMID {pmid} is dated {value} here and "
                                   f"{out[pmid].date} on line {out[pmid].line}")
        out[pmid] = DatedLine(date=day, line=lineno, precision=precision)
    return out


def _first_content_line(text: str) -> int:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            return lineno
    return 0


class DatesFile(BaseModel):
    rel: str  # its name relative to the inbox
    dates: dict[str, DatedLine]


def find_dates(path: Path, inbox: Path) -> DatesFile | None:
    """The dates file beside `path` (a real path in the inbox), read and checked; None when there is none. A
    link leading out of the inbox is refused (IngestError), like a sidecar's."""
    side = dates_path(path)
    if not os.path.lexists(side):
        return None
    real = real_path_in_inbox(side, inbox)
    if not real.is_file():
        return None
    rel = relative_name(real, inbox)
    raw = _read_bytes(real, rel)
    version = (str(real), rel, hashlib.blake2b(raw, digest_size=16).digest())
    if (known := _PARSED.get(version)) is None:
        known = DatesFile(rel=rel, dates=parse_dates(raw, rel))
        _PARSED.clear()  # one file's version kept: the file a day's papers share
        _PARSED[version] = known
    return known


# The last dates file parsed, by its path and content: a day's run reads each of its papers from the same file,
# and parsing that file's dates again for each of a PubMed day's 4,000 papers cost more than their chains
# (bench/throughput.py --n 4000 --dates 1). Its bytes are read each time (an edit is seen at once), not parsed.
_PARSED: dict[tuple, DatesFile] = {}


def apply_dates(docs: Iterable[ParsedDocument], dates: DatesFile | None) -> list[ParsedDocument]:
    """Each document the dates file lists (by PMID) gets that date: the user's word overrides the file's."""
    if dates is None:
        return list(docs)
    return [_dated(doc, dates) for doc in docs]


def dated(doc: ParsedDocument, dates: DatesFile | None) -> ParsedDocument:
    return doc if dates is None else _dated(doc, dates)


def _dated(doc: ParsedDocument, dates: DatesFile) -> ParsedDocument:
    entry = dates.dates.get(doc.pmid or "")
    if entry is None:
        return doc
    return doc.model_copy(update={"pub_date": entry.date, "pub_date_precision": entry.precision,
                                  "pub_date_source": f"{dates.rel} line {entry.line}"})
