"""The KG's date range: which dates have a daily `knowledge_graph` partition for their documents to merge into.

Setting: the environment variable KARMA_KG_START_DATE (an ISO date; default 1975-01-01, where MedKGent's
1975-2023 PubMed corpus begins). partitioning/definitions.py builds the daily partitions from it when the code location
loads, so after changing it reload the code location (restart `dagster dev`, or "Reload" in the UI). The range
ends today (UTC, as Dagster's daily partitions do): a later date has no partition yet.

A document is keyed by its date (ingest/keys.py). One dated outside [start, today] cannot feed an increment, so
it fails alone, at its first stage (`documents`), with an error naming the setting and its date; it is never
evaluated, so no increment waits on it, and the increment launchers skip any such date (naming it) instead of
failing the others. Dagster-free: the stages and the launchers share it.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable

ENV_START = "KARMA_KG_START_DATE"
DEFAULT_START = dt.date(1975, 1, 1)


class DateRangeError(ValueError):
    """KARMA_KG_START_DATE is not an ISO date, or lies in the future."""


class DocumentOutOfRange(ValueError):
    """A document's date has no KG date partition (before KARMA_KG_START_DATE, or after today)."""


def today() -> dt.date:
    """The last date with a partition: today in UTC (Dagster's daily partitions are UTC days)."""
    return dt.datetime.now(dt.timezone.utc).date()


def kg_start_date() -> dt.date:
    """The first KG date partition: $KARMA_KG_START_DATE, else 1975-01-01."""
    raw = os.environ.get(ENV_START, "").strip()
    if not raw:
        return DEFAULT_START
    try:
        start = dt.date.fromisoformat(raw)
    except ValueError as exc:
        raise DateRangeError(f"{ENV_START}={raw!r} is not an ISO date (YYYY-MM-DD)") from exc
    if start > today():
        raise DateRangeError(f"{ENV_START}={raw} lies in the future: the KG would have no date partition")
    return start


def out_of_range(date: dt.date | str, *, what: str = "a document", start: dt.date | None = None) -> str:
    """'' when `date` has a KG partition, else why not, naming the setting and the date. `start`: the loaded
    partitions' first date (default: the setting now)."""
    day = dt.date.fromisoformat(date) if isinstance(date, str) else date
    start, end = start or kg_start_date(), today()
    if day < start:
        return (f"{what} is dated {day.isoformat()}, before the KG's first date partition {start.isoformat()} "
                f"({ENV_START}); set {ENV_START} to {day.isoformat()} or earlier and reload the code location to "
                "merge it")
    if day > end:
        return (f"{what} is dated {day.isoformat()}, after today ({end.isoformat()}): its KG date partition does "
                "not exist yet; rematerialize it on or after that date")
    return ""


def check_document(doc_key: str) -> None:
    """Raise DocumentOutOfRange when the date a document key leads with has no KG partition."""
    head = doc_key.split("_", 1)[0]
    try:
        day = dt.date.fromisoformat(head)
    except ValueError as exc:
        raise DocumentOutOfRange(f"document {doc_key!r}: its key does not start with an ISO date") from exc
    why = out_of_range(day, what=f"document {doc_key}")
    if why:
        raise DocumentOutOfRange(why)


def split_dates(dates: Iterable[str], start: dt.date | None = None) -> tuple[list[str], dict[str, str]]:
    """(dates that have a KG partition, in order; {date: why not} for the others). `start`: the loaded
    partitions' first date (default: the setting now)."""
    ok: list[str] = []
    skipped: dict[str, str] = {}
    for date in sorted(set(dates)):
        why = out_of_range(date, what=f"KG increment {date}", start=start)
        if why:
            skipped[date] = why
        else:
            ok.append(date)
    return ok, skipped
