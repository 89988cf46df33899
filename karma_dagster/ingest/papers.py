"""A paper as people name it: title, first author, journal and date (the catalog keeps them at registration).

Why: pages and reports named documents by key (`2016-01-14_pmc4738914`), which nobody recognises; they show this
label and keep the key one click away. A paper the catalog does not know (a review decision's, a KG from elsewhere)
is shown by its key alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from pydantic import BaseModel

from karma_dagster.schemas.records import ParsedDocument

TITLE_CHARS = 160  # a longer title is cut (with "…") where a page lists many papers


def first_author(doc: ParsedDocument) -> str | None:
    """The first listed author, "Family Given" as the source gave it; None when the source names none."""
    for name in doc.authors:
        if name.strip():
            return " ".join(name.split())
    return None


class PaperInfo(BaseModel):
    doc_key: str
    title: str | None = None
    first_author: str | None = None
    journal: str | None = None
    date: dt.date | None = None
    date_source: str | None = None  # publication | arrival | configured (ingest/dates.py)
    pmid: str | None = None
    doi: str | None = None

    @property
    def short_title(self) -> str:
        title = " ".join((self.title or "").split())
        if not title:
            return self.doc_key
        return title if len(title) <= TITLE_CHARS else title[:TITLE_CHARS - 1].rstrip() + "…"

    @property
    def byline(self) -> str:
        """e.g. "Smith J et al., Nature, 2016-01-14" (what is known of it; the date says when it is not the
        publication date)."""
        who = f"{self.first_author} et al." if self.first_author else ""
        when = ""
        if self.date is not None:
            when = self.date.isoformat() if self.date_source in (None, "publication") else \
                f"{self.date.isoformat()} ({self.date_source} date)"
        return ", ".join(part for part in (who, self.journal or "", when) if part)

    def label(self) -> str:
        """One line: title — byline (the key when the catalog knows nothing else)."""
        return f"{self.short_title} — {self.byline}" if self.byline else self.short_title


PaperLookup = Callable[[Iterable[str]], dict[str, PaperInfo]]  # doc_keys -> the papers known of them (catalog_lookup)
