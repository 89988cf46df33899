"""The order the suite's files run in, and what each file cost: scripts/test.sh runs the files on two xdist workers
(`--dist loadfile --no-loadscope-reorder`), a whole file at a time in collection order, so the slowest files are
collected first (tests/conftest.py) and the many short ones fill in at the end; the two workers then end
together. In xdist's own order (most tests first) a file of a few long tests could start when the other worker
was nearly done, and the run waited for it alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

# The slowest files, slowest first: the "slowest files" list the suite prints at its end tells what belongs here.
SLOW_FILES = (  # measured: a whole run, 2 cores, the suite alone (load ~2.5), 2026-12-08
    "tests/test_llm_real.py",
    "tests/test_distributed.py",
    "tests/reliability/test_crash_points.py",
    "tests/reliability/test_seed_import_unit.py",
    "tests/reliability/test_interrupts.py",
    "tests/reliability/test_concurrency.py",
    "tests/reliability/test_corruption.py",
    "tests/reliability/test_import_guard.py",
    "tests/test_sensors.py",
    "tests/test_kg_merge.py",
    "tests/reliability/test_one_line_errors.py",
    "tests/test_relations_reproducibility.py",
    "tests/test_ui_clarity.py",
    "tests/test_packaging.py",
    "tests/reliability/test_url_secrets.py",
)


class _Item(Protocol):
    nodeid: str


T = TypeVar("T", bound=_Item)


def file_of(nodeid: str) -> str:
    """`tests/x.py::test_y[1]` -> `tests/x.py` (xdist's loadfile unit)."""
    return nodeid.split("::", 1)[0]


def slow_files_first(items: Sequence[T], slow_files: Sequence[str] = SLOW_FILES) -> list[T]:
    """SLOW_FILES' tests first, in that order; every other file after them in collection order. A stable sort: a
    file's tests stay together and in their order (its module fixtures are built once)."""
    rank = {name: i for i, name in enumerate(slow_files)}
    return sorted(items, key=lambda item: rank.get(file_of(item.nodeid), len(rank)))


class FileSeconds:
    """Each test's set-up, call and tear-down seconds, summed by file."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, nodeid: str, seconds: float) -> None:
        name = file_of(nodeid)
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def slowest(self, n: int) -> list[str]:
        """The n slowest files, a line each: seconds, then the file."""
        ranked = sorted(self.seconds.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
        return [f"{seconds:9.1f}s  {name}" for name, seconds in ranked]
