"""The feed's cursor: which publication days of which query were fetched, when, and with how many hits.

One JSON file under the data folder (`<data_dir>/feed/cursor.json`), shared by the sensor and `karma fetch`,
changed under a file lock and replaced atomically (temporary file + rename), so a crash mid-write leaves the
previous cursor whole. A day is recorded only after its files are in the inbox: a fetch that dies loses no day.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path

from filelock import FileLock
from pydantic import BaseModel

from karma_dagster.ingest.feed.settings import FeedError, ResolvedFeed

CURSOR_FILE = "cursor.json"


class DayRecord(BaseModel):
    hits: int
    files: int  # files written or found unchanged in the inbox
    fetched_at: str  # UTC, ISO


class FeedState(BaseModel):
    source: str
    query: str
    days: dict[str, DayRecord] = {}  # ISO date -> what was fetched

    @property
    def through(self) -> dt.date | None:
        """The latest publication day fetched."""
        return dt.date.fromisoformat(max(self.days)) if self.days else None


class Cursor:
    """The cursor file of one data folder."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "feed" / CURSOR_FILE
        self._lock = FileLock(str(self.path) + ".lock", timeout=60)

    def _read(self) -> dict[str, FeedState]:
        if not self.path.is_file():
            return {}
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return {k: FeedState.model_validate(v) for k, v in raw.get("feeds", {}).items()}
        except (ValueError, AttributeError) as exc:
            raise FeedError(f"feed cursor {self.path.name} is unreadable ({exc}); move it aside to start the feed "
                            "again from its `since` date") from None

    def state(self, feed: ResolvedFeed) -> FeedState:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            return self._read().get(feed.feed_id) or FeedState(source=feed.source, query=feed.query)

    def record_day(self, feed: ResolvedFeed, day: dt.date, hits: int, files: int) -> FeedState:
        """Remember that `day` was fetched (read, changed and replaced under the lock)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            feeds = self._read()
            state = feeds.get(feed.feed_id) or FeedState(source=feed.source, query=feed.query)
            state.days[day.isoformat()] = DayRecord(
                hits=hits, files=files, fetched_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
            state.days = dict(sorted(state.days.items()))
            feeds[feed.feed_id] = state
            self._write({"feeds": {k: v.model_dump() for k, v in sorted(feeds.items())}})
            return state

    def _write(self, data: dict) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
