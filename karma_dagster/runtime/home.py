"""First use of a DAGSTER_HOME: instance creation serialised across processes.

Dagster creates its SQLite schema (runs, events, schedules) when an instance is first opened, without a lock:
two processes opening a fresh home at once race, the second dies with `table jobs already exists` and the
home is left with two alembic heads ("more than one head"), unusable after. Holding a file lock in the home
while the instance is created makes the second process wait, then open the schema the first one finished.
(A new home pointed at an existing data dir knows none of the documents its catalog holds:
partitioning.definitions.ensure_partitions adds the missing ones before they are run.)
Dagster-free on purpose: it guards any callable that opens the instance.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import filelock

LOCK_NAME = ".karma-instance.lock"
T = TypeVar("T")


def lock_path(home: Path) -> Path:
    return home / LOCK_NAME


def under_home_lock(home: Path | str, create: Callable[[], T], timeout_s: float = 300.0) -> T:
    """`create()` while holding the home's lock; a home that is not a folder is left to `create` to report.

    The timeout is generous (a first schema set-up takes seconds); when it passes, the error names the lock file
    so an operator can see which process holds it."""
    home = Path(home)
    if not home.is_dir():
        return create()
    lock = filelock.FileLock(str(lock_path(home)), timeout=timeout_s)
    try:
        with lock:
            return create()
    except filelock.Timeout as exc:
        raise TimeoutError(f"another process has held {lock_path(home)} for {timeout_s:.0f} s while opening the "
                           "Dagster instance in that DAGSTER_HOME; is one stuck?") from exc
