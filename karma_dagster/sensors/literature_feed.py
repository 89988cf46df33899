"""`literature_feed` (off by default): runs the saved PubMed or Europe PMC query for the publication days since
its cursor and drops what it fetched into the inbox, where `new_papers` registers it.

It requests no run itself: the inbox is the one way in, so a fetched paper is registered, keyed and dated like a
paper dropped there by hand. The cursor of fetched days lives under the data folder (ingest/feed/state.py), shared
with `karma fetch`; the tick's own cursor repeats its last day for the UI. A day is fetched once it is over (UTC);
a tick stops starting new days after `max_tick_s` seconds (the daemon's tick has a time limit) and the next tick
goes on. A service that keeps failing fails the tick with its message (the query and the URL, never the key);
the days fetched before it stay recorded.
"""

from __future__ import annotations

import json

import dagster as dg

from karma_dagster.runtime.date_range import today
from karma_dagster.ingest.feed.fetch import due_days, fetch_days
from karma_dagster.ingest.feed.settings import FeedError
from karma_dagster.ingest.feed.state import Cursor
from karma_dagster.resources.feed import LiteratureFeedResource
from karma_dagster.resources.storage import KarmaStorageResource

DAY_S = 24 * 3600


def build_literature_feed_sensor(interval_s: int = DAY_S) -> dg.SensorDefinition:
    @dg.sensor(
        name="literature_feed",
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Runs the saved PubMed (E-utilities) or Europe PMC query for the publication days since its "
                    "cursor, once a day, and drops the results into the inbox for `new_papers` (settings: the "
                    "literature_feed resource or KARMA_FEED_QUERY / KARMA_FEED_SOURCE / KARMA_FEED_SINCE; "
                    "NCBI_API_KEY for 10 requests/s).",
    )
    def literature_feed(context: dg.SensorEvaluationContext, storage: KarmaStorageResource,
                        literature_feed: LiteratureFeedResource) -> dg.SensorResult:
        try:
            feed = literature_feed.feed()
        except FeedError as exc:
            return dg.SensorResult(skip_reason=f"feed not configured: {exc}")
        cursor = Cursor(storage.root())
        days = due_days(feed, cursor.state(feed), today())
        if not days:
            through = cursor.state(feed).through
            done = f"fetched through {through}" if through else f"nothing fetched yet (since {feed.since})"
            return dg.SensorResult(skip_reason=f"{feed.describe()}: {done}; the next day is fetched once it is over "
                                               "(UTC)", cursor=context.cursor)
        report = fetch_days(feed, days, storage.inbox_dir(), storage.root(),
                            budget_s=feed.settings.max_tick_s, log=context.log.info)
        context.log.info(report.summary())
        state = cursor.state(feed)
        tick_cursor = json.dumps({"feed": feed.feed_id, "through": str(state.through),
                                  "files": len(report.files_changed), "remaining": len(report.remaining)})
        return dg.SensorResult(skip_reason=report.summary() + (
            "; new_papers registers them" if report.files_changed else ""), cursor=tick_cursor)

    return literature_feed
