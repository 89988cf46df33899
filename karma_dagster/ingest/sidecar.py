"""Optional `<stem>.json` next to a source file: a Europe PMC search record that completes its metadata.

Both shapes are read: the REST API's plain values and getpapers' `eupmc_result.json`, where every value is
wrapped in a one-element list. Identifiers and dates from the record override what a PDF layout suggested,
because the record is curated and the layout is a guess.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from typing import Any

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


def _date(value: Any) -> dt.date | None:
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


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
    if not isinstance(raw, dict):
        raise IngestError(rel, "sidecar JSON is not a Europe PMC record (expected an object)")
    pmcid = _get(raw, "pmcid")
    title = _get(raw, "title")
    doi = _get(raw, "doi")
    date = (_date(_get(raw, "firstPublicationDate")) or _date(_get(raw, "electronicPublicationDate"))
            or _date(_get(raw, "journalInfo", "printPublicationDate")))
    lic = _get(raw, "license")
    return SidecarRecord(
        pmid=str(_get(raw, "pmid")) if _get(raw, "pmid") else None,
        pmcid=str(pmcid).upper() if pmcid else None,
        doi=clean_doi(str(doi)) if doi else None,
        title=re.sub(r"\s+", " ", str(title)).strip().removesuffix(".") if title else None,
        authors=_authors(raw),
        journal=_get(raw, "journalInfo", "journal", "title"),
        pub_date=date,
        license=str(lic) if lic else None,
    )


def sidecar_path(path: Path) -> Path:
    name = path.name
    for suffix in (".pubtator.txt", ".pubtator.gz"):
        if name.lower().endswith(suffix):
            return path.with_name(name[: -len(suffix)] + ".json")
    return path.with_suffix(".json")


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
    if "license" in update and doc.license:
        update.pop("license")  # the article's own licence text says more than a code like 'cc by'
    if doc.source_format == "jats":  # JATS metadata is curated too: the record only fills what it lacks
        for name in ("title", "authors", "journal"):
            if getattr(doc, name):
                update.pop(name, None)
    return doc.model_copy(update=update)
