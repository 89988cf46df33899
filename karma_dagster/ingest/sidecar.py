"""Optional Europe PMC search record next to a source file, completing its metadata.

Where it is looked for: `<stem>.json` beside the file; else `eupmc_result.json` in the file's folder when the
folder is one paper's, the layout getpapers and Europe PMC bulk downloads use (`PMC1234567/fulltext.pdf` +
`PMC1234567/eupmc_result.json`): the file is named `fulltext.*` or after its folder. Both shapes are read: the
REST API's plain values (`resultType=core`) and getpapers' records, where every value is wrapped in a
one-element list. Identifiers and dates from the record override what a PDF layout suggested, because the
record is curated and the layout is a guess.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.files import real_path_in_inbox, relative_name
from karma_dagster.ingest.text import clean_doi
from karma_dagster.schemas.records import ParsedDocument


class SidecarRecord(BaseModel):
    pmid: str | None = None
    pmcid: str | None = None
    doi: str | None = None
    title: str | None = None
    authors: list[str] = []
    journal: str | None = None
    pub_date: dt.date | None = None
    pub_date_precision: Literal["day", "month", "year"] | None = None  # a month or year only: dated its first day
    license: str | None = None


def _unwrap(value: Any) -> Any:
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value


def _get(record: dict, *path: str) -> Any:
    value: Any = record
    for key in path:
        value = _unwrap(value)
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return _unwrap(value)


EUPMC_RESULT = "eupmc_result.json"  # getpapers' name for the record in a paper's folder


def _date(value: Any) -> dt.date | None:
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()) else None


def _year_month(raw: dict) -> tuple[dt.date, Literal["month", "year"]] | None:
    """First of the month (or 1 January, Europe PMC's own convention for a year-only printPublicationDate) from the
    journal issue's year and month or `pubYear`: a record without a day date still beats the arrival date."""
    year = _int(_get(raw, "journalInfo", "yearOfPublication")) or _int(_get(raw, "pubYear"))
    if year is None or not 1000 <= year <= 9999:
        return None
    month = _int(_get(raw, "journalInfo", "monthOfPublication")) or 0
    return (dt.date(year, month, 1), "month") if 1 <= month <= 12 else (dt.date(year, 1, 1), "year")


def _pub_date(raw: dict) -> tuple[dt.date, Literal["day", "month", "year"]] | tuple[None, None]:
    """The first publication (online or print, as Europe PMC dates it), else the most precise date it gives."""
    day = (_date(_get(raw, "firstPublicationDate")) or _date(_get(raw, "electronicPublicationDate"))
           or _date(_get(raw, "journalInfo", "printPublicationDate")))
    if day is not None:
        return day, "day"
    return _year_month(raw) or (None, None)


def _plain(value: Any) -> str | None:
    """Text without the HTML Europe PMC leaves in titles ('<i>BRCA1</i>', 'The lancet. <h2>HIV</h2>')."""
    if not isinstance(value, (str, int)) or not str(value).strip():
        return None
    text = html.unescape(re.sub(r"<[^>]{0,200}>", "", str(value)))
    return re.sub(r"\s+", " ", text).strip() or None


def _authors(record: dict) -> list[str]:
    authors = _get(record, "authorList", "author")
    if isinstance(authors, dict):
        authors = [authors]
    names: list[str] = []
    for a in authors or []:
        a = {k: _unwrap(v) for k, v in a.items()} if isinstance(a, dict) else {}
        if a.get("firstName") and a.get("lastName"):
            names.append(f"{a['firstName']} {a['lastName']}")
        elif a.get("fullName") or a.get("collectiveName"):
            names.append(a.get("fullName") or a.get("collectiveName"))
    if not names and isinstance(author_string := _get(record, "authorString"), str):
        names = [n.strip().rstrip(".") for n in author_string.split(",") if n.strip()]
    return names


def read_sidecar(path: Path, rel: str | None = None) -> SidecarRecord:
    rel = rel or path.name
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise IngestError(rel, f"cannot read sidecar JSON ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise IngestError(rel, f"sidecar is not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    raw = _unwrap(raw)
    if isinstance(raw, dict) and isinstance(_get(raw, "resultList", "result"), (dict, list)):
        raw = _unwrap(_get(raw, "resultList", "result"))  # a whole search response with one hit
    if isinstance(raw, list) and raw and all(isinstance(r, dict) for r in raw):
        raise IngestError(rel, f"sidecar holds {len(raw)} Europe PMC records; one paper's record is expected")
    if not isinstance(raw, dict):
        raise IngestError(rel, "sidecar JSON is not a Europe PMC record (expected an object)")
    pmcid = _plain(_get(raw, "pmcid"))
    pmid = _plain(_get(raw, "pmid")) or (_plain(_get(raw, "id")) if _get(raw, "source") == "MED" else None)
    title = _plain(_get(raw, "title"))
    doi = _plain(_get(raw, "doi"))
    lic = _plain(_get(raw, "license"))
    return SidecarRecord(
        pmid=pmid if pmid and pmid.isdigit() else None,
        pmcid=pmcid.upper() if pmcid else None,
        doi=clean_doi(doi) if doi else None,
        title=title.removesuffix(".") if title else None,
        authors=_authors(raw),
        journal=_plain(_get(raw, "journalInfo", "journal", "title")) or _plain(_get(raw, "journalTitle")),
        pub_date=(dated := _pub_date(raw))[0],
        pub_date_precision=dated[1],
        license=lic,
    )


def _own_sidecar(path: Path) -> Path:
    name = path.name
    for suffix in (".pubtator.txt", ".pubtator.gz"):
        if name.lower().endswith(suffix):
            return path.with_name(name[: -len(suffix)] + ".json")
    return path.with_suffix(".json")


def in_paper_folder(path: Path) -> bool:
    """True when `path` is the full text in one paper's folder (getpapers: `PMC123/fulltext.pdf`, or `PMC123/PMC123.pdf`),
    where the folder's `eupmc_result.json` describes it; a file among others in a shared folder is not."""
    stem = path.name.split(".", 1)[0].lower()
    return stem == "fulltext" or (bool(path.parent.name) and stem == path.parent.name.lower())


def sidecar_path(path: Path) -> Path:
    """The record that describes `path`: its own `<stem>.json` when present, else its paper folder's
    `eupmc_result.json` when present, else the (absent) `<stem>.json`."""
    own = _own_sidecar(path)
    if os.path.lexists(own):
        return own
    folder_record = path.with_name(EUPMC_RESULT)
    if in_paper_folder(path) and os.path.lexists(folder_record):
        return folder_record
    return own


def find_sidecar(path: Path, inbox: Path | None = None) -> SidecarRecord | None:
    """The record next to `path`, if any; a sidecar that is a link leading out of the inbox is refused, not read."""
    side = sidecar_path(path)
    if not os.path.lexists(side):
        return None
    if inbox is not None:
        side = real_path_in_inbox(side, inbox)
    if not side.is_file():
        return None
    return read_sidecar(side, relative_name(side, inbox))


def apply_sidecar(doc: ParsedDocument, record: SidecarRecord) -> ParsedDocument:
    """The record's non-empty fields override the metadata a layout suggested; sections are left alone."""
    update: dict[str, Any] = {k: v for k, v in record.model_dump().items() if v not in (None, [], "")}
    if record.pub_date is not None:  # the catalog's date note says where the date came from
        update["pub_date_source"] = "its sidecar (Europe PMC record)"
    if "license" in update and doc.license:
        update.pop("license")  # the article's own licence text says more than a code like 'cc by'
    if doc.source_format == "jats":  # JATS metadata is curated too: the record only fills what it lacks
        for name in ("title", "authors", "journal"):
            if getattr(doc, name):
                update.pop(name, None)
    return doc.model_copy(update=update)
