"""Run the saved query over a range of publication days, one day at a time: fetch the day, drop its files into
the inbox, then record the day in the cursor. A day is the unit of retry: one that fails is not recorded and
is fetched again next time; the days before it stay recorded."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from karma_dagster.ingest.feed import europepmc, eutils
from karma_dagster.ingest.feed.http import FeedClient
from karma_dagster.ingest.feed.settings import FeedError, ResolvedFeed
from karma_dagster.ingest.feed.state import Cursor, FeedState
from karma_dagster.ingest.feed.writer import Written, record_tag, write_europepmc_hit, write_pubmed_day


class DayResult(BaseModel):
    day: dt.date
    hits: int
    written: list[Written] = []
    no_abstract: list[str] = []  # Europe PMC hits left out: a title alone is no document

    def line(self) -> str:
        changed = [w for w in self.written if w.status != "unchanged"]
        if len(changed) == 1:
            files = f"{changed[0].path} ({changed[0].status})"
        else:  # a Europe PMC day: a text and its record per paper, in the day's folder
            statuses = ", ".join(f"{n} {s}" for s in ("new", "updated") if (n := sum(w.status == s for w in changed)))
            files = f"{len(changed)} files ({statuses}) under {changed[0].path.rsplit('/', 1)[0]}/" if changed else ""
        same = len(self.written) - len(changed)
        parts = [f"{self.day.isoformat()}: {self.hits} hit(s)"]
        parts.append(f"wrote {files}" if changed else "nothing new")
        if same:
            parts.append(f"{same} file(s) unchanged")
        if self.no_abstract:
            parts.append(f"{len(self.no_abstract)} without abstract left out")
        return "; ".join(parts)


class FetchReport(BaseModel):
    feed: str
    days: list[DayResult] = []
    remaining: list[dt.date] = []  # days not reached within the time budget
    requests: int = 0

    @property
    def files_changed(self) -> list[str]:
        return [w.path for d in self.days for w in d.written if w.status != "unchanged"]

    def summary(self) -> str:
        hits = sum(d.hits for d in self.days)
        text = (f"{self.feed}: {len(self.days)} day(s), {hits} hit(s), {len(self.files_changed)} file(s) written, "
                f"{self.requests} request(s)")
        return text + (f"; {len(self.remaining)} day(s) left for next time (from {self.remaining[0]})"
                       if self.remaining else "")


def days_between(since: dt.date, until: dt.date) -> list[dt.date]:
    if until < since:
        raise FeedError(f"the range ends ({until}) before it starts ({since})")
    return [since + dt.timedelta(days=i) for i in range((until - since).days + 1)]


def due_days(feed: ResolvedFeed, state: FeedState, today: dt.date) -> list[dt.date]:
    """The days the sensor fetches: after its cursor (less `refetch_days`), else from `since` (default
    yesterday), through yesterday: a day is fetched once it is over (UTC)."""
    last = today - dt.timedelta(days=1)
    if state.through is not None:
        start = state.through + dt.timedelta(days=1 - feed.settings.refetch_days)
    else:
        start = feed.since or last
    return days_between(start, last) if start <= last else []


def client_for(feed: ResolvedFeed) -> FeedClient:
    s = feed.settings
    return FeedClient(feed.base_url, rate=feed.rate, retries=s.retries, backoff_s=s.backoff_s,
                      max_backoff_s=s.max_backoff_s, timeout_s=s.timeout_s, max_response_bytes=s.max_response_bytes,
                      request_deadline_s=s.request_deadline_s, fetch_deadline_s=s.max_fetch_s)


def fetch_days(feed: ResolvedFeed, days: list[dt.date], inbox: Path, data_dir: Path, *,
               budget_s: float | None = None, log: Callable[[str], None] | None = None) -> FetchReport:
    """Fetch `days` in order into `inbox`, recording each in the cursor under `data_dir`. With `budget_s`, days
    not started within that many seconds are left in `remaining`. FeedError when a day cannot be fetched (the
    days before it are written and recorded)."""
    report = FetchReport(feed=feed.describe())
    cursor = Cursor(data_dir)
    deadline = time.monotonic() + budget_s if budget_s is not None else None
    with client_for(feed) as client:
        try:
            for i, day in enumerate(days):
                if deadline is not None and i and time.monotonic() > deadline:
                    report.remaining = days[i:]
                    break
                result = _fetch_day(client, feed, day, inbox)
                cursor.record_day(feed, day, result.hits, len(result.written))
                report.days.append(result)
                if log is not None:
                    log(result.line())
        finally:
            report.requests = client.requests
    return report


def _fetch_day(client: FeedClient, feed: ResolvedFeed, day: dt.date, inbox: Path) -> DayResult:
    if feed.source == "pubmed":
        citations = eutils.day_citations(client, feed, day)
        written = [write_pubmed_day(inbox, feed, day, citations.xml)] if citations.xml else []
        return DayResult(day=day, hits=len(citations.pmids), written=written)
    records = europepmc.search_day(client, feed, day)
    result = DayResult(day=day, hits=len(records))
    for record in records:
        files = write_europepmc_hit(inbox, feed, day, record)
        if files:
            result.written += files
        else:
            result.no_abstract.append(record_tag(record))
    return result
