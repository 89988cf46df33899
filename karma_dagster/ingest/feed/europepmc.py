"""Europe PMC: the records a saved query finds for one day of first publication (REST `search`,
resultType=core, format=json, FIRST_PDATE:[day TO day]), paged by cursorMark until the cursor stops moving,
within the feed's caps on pages and records a day (paging.py)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from karma_dagster.ingest.feed.http import FeedClient
from karma_dagster.ingest.feed.paging import check_pages, check_records
from karma_dagster.ingest.feed.settings import FeedError, ResolvedFeed

SEARCH = "search"


def day_query(query: str, day: dt.date) -> str:
    return f"({query}) AND (FIRST_PDATE:[{day.isoformat()} TO {day.isoformat()}])"


def search_day(client: FeedClient, feed: ResolvedFeed, day: dt.date) -> list[dict[str, Any]]:
    """Every `core` record the query finds first published on `day`, once each (by source and id)."""
    what = f"{feed.describe()} ({day.isoformat()}, search)"
    params = {"query": day_query(feed.query, day), "resultType": "core", "format": "json",
              "pageSize": str(feed.settings.europepmc_page), "cursorMark": "*"}
    if feed.email:
        params["email"] = feed.email
    records: dict[tuple[str, str], dict[str, Any]] = {}
    pages = 0
    while True:
        pages += 1
        check_pages(pages, feed, what, client.url(SEARCH, params))
        body = _search_body(client.get(SEARCH, params, what=what).text, what)
        check_records(int(body.get("hitCount", 0)), feed, what, client.url(SEARCH, params), announced=True)
        page = body["resultList"]["result"]
        before = len(records)
        for record in page:
            if isinstance(record, dict) and record.get("id"):
                records.setdefault((str(record.get("source", "")), str(record["id"])), record)
        check_records(len(records), feed, what, client.url(SEARCH, params))
        cursor = body.get("nextCursorMark")
        done = len(records) >= int(body.get("hitCount", 0)) or len(records) == before  # all, or a page of repeats
        if done or not cursor or cursor == params["cursorMark"]:
            return list(records.values())
        params["cursorMark"] = str(cursor)


def _search_body(text: str, what: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        raise FeedError(f"{what}: the answer is not Europe PMC JSON (starts {text[:80]!r})") from None
    if not isinstance(body, dict):
        raise FeedError(f"{what}: the answer is not a Europe PMC search result (a JSON object is expected)")
    if body.get("errMsg") or body.get("errCode"):
        raise FeedError(f"{what}: Europe PMC says: {body.get('errMsg') or body.get('errCode')}")
    results = (body.get("resultList") or {}).get("result") if isinstance(body.get("resultList"), dict) else None
    if not isinstance(results, list):
        raise FeedError(f"{what}: the answer has no resultList.result list")
    hit_count = body.get("hitCount", 0)
    if not (isinstance(hit_count, int) or str(hit_count).isdigit()):
        raise FeedError(f"{what}: hitCount {hit_count!r} is not a number")
    return body
