"""Document keys: readable, stable, led by the date, valid as Dagster dynamic partition keys.

`2016-02-12_pmc4745298`: the date makes keys sort by publication (or arrival) date in the UI and lets a
date-range backfill pick its documents by prefix; the id tag is the strongest identifier the file gives
(PMCID > PMID > DOI > a hash of the normalized text), so the same paper from another file finds its key.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import unicodedata

from karma_dagster.schemas.records import ParsedDocument

KEY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}_[a-z0-9._-]+$")
DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")  # a date partition's key (the KG's, and with date partitions the stages')
_MAX_TAG = 80


def normalized_text(doc: ParsedDocument) -> str:
    """Text that survives copying and re-extraction unchanged: NFKC, casefolded, words only, single spaces."""
    text = " ".join(s.text for s in doc.sections)
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.findall(r"\w+", text))


def content_hash(doc: ParsedDocument) -> str:
    """sha256 (hex) of the normalized text: the same text gives the same hash whatever the file name."""
    return hashlib.sha256(normalized_text(doc).encode("utf-8")).hexdigest()


def slug(value: str) -> str:
    """Lowercase ASCII with '-', '_' and '.' only (what a partition key may hold)."""
    value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii").lower()
    value = re.sub(r"[^a-z0-9._-]+", "-", value)
    value = re.sub(r"-{2,}", "-", value).strip("-._")
    if len(value) > _MAX_TAG:
        value = value[: _MAX_TAG - 9].rstrip("-._") + "-" + hashlib.sha256(value.encode()).hexdigest()[:8]
    return value


def id_tag(doc: ParsedDocument, text_hash: str | None = None) -> str:
    if doc.pmcid:
        return slug(doc.pmcid if doc.pmcid.lower().startswith("pmc") else f"pmc{doc.pmcid}")
    if doc.pmid:
        return f"pmid-{slug(doc.pmid)}"
    if doc.doi:
        return f"doi-{slug(doc.doi)}"
    return f"sha-{(text_hash or content_hash(doc))[:12]}"


def document_date(doc: ParsedDocument, arrival_date: dt.date) -> tuple[dt.date, str]:
    """The date a document feeds: its publication date, else the day it arrived."""
    return (doc.pub_date, "publication") if doc.pub_date else (arrival_date, "arrival")


def document_key(doc: ParsedDocument, arrival_date: dt.date, text_hash: str | None = None,
                 date: dt.date | None = None) -> str:
    """`date`: the date the catalog decided (ingest/dates.py: an undated document's configured date); default
    its publication date, else `arrival_date`."""
    date = date or document_date(doc, arrival_date)[0]
    key = f"{date.isoformat()}_{id_tag(doc, text_hash)}"
    if not KEY_RE.match(key):  # pragma: no cover - slug() guarantees it; a guard against future edits
        raise ValueError(f"invalid document key {key!r}")
    return key


KEY_MAX_CHARS = len("YYYY-MM-DD_pmid-") + _MAX_TAG  # the longest key document_key() forms ("pmid-", "doi-" + a slug)


def check_document_key(doc_key: object) -> str:
    """A key given from outside (a tool call, a command line) checked by the rule document_key() forms keys by;
    raises ValueError naming the key (shown shortened) and what is wrong."""
    shown = repr(doc_key[:100]) + ("..." if len(doc_key) > 100 else "") if isinstance(doc_key, str) else repr(doc_key)
    if not isinstance(doc_key, str) or len(doc_key) > KEY_MAX_CHARS or not KEY_RE.fullmatch(doc_key):
        raise ValueError(f"document {shown} is not a document key: it must look like 2016-02-12_pmc4737013 (the "
                         f"date the KG increment takes it in, '_', lower-case letters, digits, '.', '-'; at most "
                         f"{KEY_MAX_CHARS} characters)")
    try:
        date_of_document_key(doc_key)
    except ValueError as exc:
        raise ValueError(f"document {shown}: its date part is not a date ({exc})") from exc
    return doc_key


def date_of_document_key(doc_key: str) -> str:
    """The date a key leads with (`2016-02-12_pmc4745298` -> '2016-02-12'): the KG increment it feeds."""
    head = doc_key.split("_", 1)[0]
    dt.date.fromisoformat(head)  # raises a ValueError naming the bad key's date part
    return head
