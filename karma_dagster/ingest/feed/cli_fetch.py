"""`karma fetch --query Q --since DATE [--until DATE] [--source pubmed|europepmc] [--inbox DIR]`: run a saved
query over a range of publication days into the inbox, as the `literature_feed` sensor does, and say what it wrote."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

EXIT_FAILURE, EXIT_USAGE = 1, 2


def _day(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return value


def cmd_fetch(args: argparse.Namespace) -> int:
    from karma_dagster.runtime.date_range import today
    from karma_dagster.ingest.feed.fetch import days_between, fetch_days
    from karma_dagster.ingest.feed.settings import FeedError, FeedSettings
    from karma_dagster.runtime.paths import DataPaths, display_path

    until = args.until or today()
    if until < args.since:
        print(f"karma fetch: --until {until} is before --since {args.since}", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = FeedSettings(query=args.query, source=args.source or "", email=args.email or "")
        if args.retries is not None:
            settings = settings.model_copy(update={"retries": args.retries})
        if args.max_fetch_s is not None:
            settings = settings.model_copy(update={"max_fetch_s": args.max_fetch_s})
        feed = settings.resolved()
    except FeedError as exc:
        print(f"karma fetch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    paths = DataPaths(args.data_dir or "", args.inbox or "")
    print(f"{feed.describe()}: {args.since} .. {until} into {display_path(paths.inbox)}"
          f" ({feed.rate:g} requests/s)")
    try:
        report = fetch_days(feed, days_between(args.since, until), paths.inbox, paths.root, log=print)
    except FeedError as exc:
        print(f"karma fetch: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_FAILURE
    print(report.summary())
    if report.files_changed:
        print("the new_papers sensor (or `karma run`) registers them")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fetch", help="run a saved PubMed or Europe PMC query over publication days into the inbox")
    p.add_argument("--query", required=True, help="the query, in the source's syntax (e.g. 'BRCA1 AND breast cancer')")
    p.add_argument("--since", type=_day, required=True, help="first publication day (YYYY-MM-DD)")
    p.add_argument("--until", type=_day, help="last publication day (default: today, UTC)")
    p.add_argument("--source", choices=["pubmed", "europepmc"],
                   help="pubmed: NCBI E-utilities (default; $NCBI_API_KEY raises the rate to 10/s); europepmc")
    p.add_argument("--email", help="contact address sent to the service (default: $KARMA_FEED_EMAIL)")
    p.add_argument("--retries", type=int, choices=range(0, 21), metavar="0-20",
                   help="retries of a request after 429, 5xx or a connection error (default 5, backoff 1 s doubling)")
    p.add_argument("--max-fetch-s", type=_seconds, metavar="SECONDS",
                   help="wall-clock bound on the whole fetch (default 3600); the days fetched before it stay recorded")
    p.add_argument("--inbox", help="folder of papers (default: $KARMA_INBOX, else the project's inbox/, else the repo's data/inbox sample)")
    p.add_argument("--data-dir", help="run-time data folder, where the feed's cursor lives (default: "
                                      "$KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.set_defaults(func=cmd_fetch)
