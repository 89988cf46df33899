"""Caps on one day's paging: how many pages are followed and how many records a day may bring.

Why: a paging answer that never ends (a cursor that keeps moving, a count that keeps growing, a page of one new
record at a time) was followed forever, holding every record in memory. A day over a cap is refused, never cut
short: the day is not recorded, and the message names the query, the cap, its setting and the URL (without the
key), so the query can be narrowed or the cap raised.
"""

from __future__ import annotations

from karma_dagster.ingest.feed.settings import FeedError, ResolvedFeed


def check_pages(pages: int, feed: ResolvedFeed, what: str, url: str) -> None:
    """Refuse to ask for page `pages` (1-based) of a day beyond the feed's `max_pages`."""
    cap = feed.settings.max_pages
    if pages > cap:
        raise FeedError(f"{what}: the day's answer goes on past {cap} pages, the bound max_pages={cap} (feed "
                        f"setting): stopped, the day not recorded (narrow the query or raise the bound); "
                        f"next page's URL: {url}")


def check_records(records: int, feed: ResolvedFeed, what: str, url: str, *, announced: bool = False) -> None:
    """Refuse a day of more records than the feed's `max_day_records` (`announced`: the service's count says so)."""
    cap = feed.settings.max_day_records
    if records > cap:
        said = "the service announces" if announced else "the pages brought"
        raise FeedError(f"{what}: {said} {records:,} records for one day, over the bound max_day_records={cap:,} "
                        f"(feed setting): stopped, the day not recorded (narrow the query or raise the bound); "
                        f"URL: {url}")
