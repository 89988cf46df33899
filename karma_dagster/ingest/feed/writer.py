"""What the feed fetched, dropped into the inbox so that the scanner can never read half a file.

Every file is written to a hidden temporary file in its own folder (the inbox scan ignores dot files), flushed to
disk and renamed over its name: the scanner sees the old file or the new one, whole. A file that already holds
the same bytes is not touched, so fetching a day again changes nothing the catalog would see. A Europe PMC hit
is its record (`<tag>.json`, the sidecar the inbox reads identifiers and dates from) written *before* its text
(`<tag>.txt`), so the text is never registered without its dates.

Layout under the inbox (the query's folder name is readable and unique, settings.ResolvedFeed.query_slug):
  feed/pubmed/<query>/<YYYY-MM-DD>.xml              efetch's PubmedArticleSet of the day
  feed/europepmc/<query>/<YYYY-MM-DD>/<tag>.txt     title + abstract (tag: pmid<PMID>, else pmc<ID>, else source-id)
  feed/europepmc/<query>/<YYYY-MM-DD>/<tag>.json    the hit's resultType=core record
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from karma_dagster.ingest.feed.settings import ResolvedFeed
from karma_dagster.ingest.keys import slug
from karma_dagster.project.safe_files import make_dirs, replace_file

FEED_DIR = "feed"


class Written(BaseModel):
    path: str  # relative to the inbox
    status: Literal["new", "updated", "unchanged"]


def atomic_write(path: Path, data: bytes, root: Path | None = None) -> Literal["new", "updated", "unchanged"]:
    """`data` at `path` through a hidden temporary file and a rename; nothing written when `path` holds it already.
    A link at `path` is replaced, never written through, and with `root` (the inbox) a folder between `root` and
    `path` that is a link is refused (project/safe_files.py)."""
    existed = path.is_file() and not path.is_symlink()
    if existed and path.stat().st_size == len(data) and path.read_bytes() == data:
        return "unchanged"
    make_dirs(path.parent, root)
    replace_file(path, data)
    return "updated" if existed else "new"


def _written(path: Path, inbox: Path, data: bytes) -> Written:
    return Written(path=path.relative_to(inbox).as_posix(), status=atomic_write(path, data, inbox))


def query_folder(inbox: Path, feed: ResolvedFeed) -> Path:
    return inbox / FEED_DIR / feed.source / feed.query_slug


def write_pubmed_day(inbox: Path, feed: ResolvedFeed, day: dt.date, xml: bytes) -> Written:
    return _written(query_folder(inbox, feed) / f"{day.isoformat()}.xml", inbox, xml)


def record_tag(record: dict[str, Any]) -> str:
    """The hit's file name: its PMID, else its PMCID, else Europe PMC's source and id (a preprint: ppr-ppr123)."""
    pmid, pmcid = str(record.get("pmid") or "").strip(), str(record.get("pmcid") or "").strip()
    if pmid.isdigit():
        return f"pmid{pmid}"
    if pmcid:
        return slug(pmcid)
    return slug(f"{record.get('source', '')}-{record.get('id', '')}") or "record"


def _plain(value: Any) -> str:
    """One line of text from Europe PMC's HTML-bearing values ('<i>BRCA1</i>' -> 'BRCA1')."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]{0,200}>", "", str(value or "")))).strip()


def abstract_paragraphs(abstract_html: str) -> list[str]:
    """Europe PMC's abstractText as paragraphs: headings (<h4>Background</h4>, <b>Methods:</b> at a paragraph's
    start) on lines of their own, so the text parser makes them sections."""
    text = re.sub(r"<h\d[^>]*>(.*?)</h\d>", r"\n\n\1\n\n", abstract_html, flags=re.I | re.S)
    text = re.sub(r"<br\s*/?>|</?p[^>]*>|</?div[^>]*>", "\n\n", text, flags=re.I)
    paragraphs = []
    for raw in re.split(r"\n\s*\n", text):
        para = _plain(raw)
        if not para:
            continue
        label = re.match(r"^<b>([^<]{2,60}?):?</b>:?\s*(.+)$", raw.strip(), flags=re.I | re.S)
        if label and _plain(label.group(2)):
            paragraphs += [_plain(label.group(1)).rstrip(":"), _plain(label.group(2))]
        else:
            paragraphs.append(para)
    return paragraphs


def record_text(record: dict[str, Any]) -> str | None:
    """The hit as the inbox's text format reads it: title, identifier lines, 'Abstract', its paragraphs; None
    when the record has no abstract (a title alone is no document)."""
    paragraphs = abstract_paragraphs(str(record.get("abstractText") or ""))
    if not paragraphs:
        return None
    title = _plain(record.get("title")).rstrip(".")  # a title line ends without a full stop (ingest/text.py)
    meta = [f"{label}: {value}" for label, value in (
        ("PMID", record.get("pmid")), ("PMCID", record.get("pmcid")), ("DOI", record.get("doi")),
        ("Published", record.get("firstPublicationDate"))) if value]
    blocks = ([title] if title else []) + (["\n".join(meta)] if meta else []) + ["Abstract", *paragraphs]
    return "\n\n".join(blocks) + "\n"


def write_europepmc_hit(inbox: Path, feed: ResolvedFeed, day: dt.date, record: dict[str, Any]) -> list[Written]:
    """The hit's record, then its text (see the module's docstring); [] when it has no abstract."""
    text = record_text(record)
    if text is None:
        return []
    folder = query_folder(inbox, feed) / day.isoformat()
    tag = record_tag(record)
    side = json.dumps(record, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    return [_written(folder / f"{tag}.json", inbox, side.encode("utf-8")),
            _written(folder / f"{tag}.txt", inbox, text.encode("utf-8"))]
