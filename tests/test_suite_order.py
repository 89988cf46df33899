"""The suite's file order (tests/suite_order.py, applied by tests/conftest.py): the slowest files run first, so the
two xdist workers of scripts/test.sh end together; and the per-file times printed at the end."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from suite_order import SLOW_FILES, FileSeconds, file_of, slow_files_first

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Item:
    nodeid: str


def test_every_slow_file_exists_and_is_listed_once() -> None:
    """A renamed or deleted file would silently drop out of the order."""
    assert len(set(SLOW_FILES)) == len(SLOW_FILES)
    missing = [name for name in SLOW_FILES if not (REPO / name).is_file()]
    assert not missing, f"suite_order.SLOW_FILES names files that do not exist: {missing}"


def test_slow_files_lead_in_their_order_and_the_rest_keep_theirs() -> None:
    collected = [Item(n) for n in (
        "tests/test_a.py::test_1", "tests/test_a.py::test_2",
        "tests/slow_two.py::test_x[1]", "tests/slow_two.py::test_x[2]",
        "tests/reliability/test_b.py::test_1",
        "tests/slow_one.py::Cls::test_y", "tests/slow_one.py::test_z",
        "tests/test_c.py::test_1",
    )]
    ordered = [i.nodeid for i in slow_files_first(collected, ("tests/slow_one.py", "tests/slow_two.py"))]
    assert ordered == [
        "tests/slow_one.py::Cls::test_y", "tests/slow_one.py::test_z",  # each file's tests together, in order
        "tests/slow_two.py::test_x[1]", "tests/slow_two.py::test_x[2]",
        "tests/test_a.py::test_1", "tests/test_a.py::test_2",  # the others as collected
        "tests/reliability/test_b.py::test_1",
        "tests/test_c.py::test_1",
    ]
    assert file_of("tests/slow_one.py::Cls::test_y") == "tests/slow_one.py"


def test_this_sessions_collection_puts_the_slow_files_first(request: pytest.FixtureRequest) -> None:
    """The hook is applied: in the session's own items (the whole suite under scripts/test.sh), the slow files that
    were collected come first, in SLOW_FILES' order, each file's tests together."""
    files = list(dict.fromkeys(file_of(i.nodeid) for i in request.session.items))
    slow = [f for f in files if f in SLOW_FILES]
    assert files[:len(slow)] == sorted(slow, key=SLOW_FILES.index)
    runs = [f for k, f in enumerate(file_of(i.nodeid) for i in request.session.items)
            if k == 0 or file_of(request.session.items[k - 1].nodeid) != f]
    assert len(runs) == len(files), "a file's tests were split apart"


def test_file_seconds_sum_set_up_call_and_tear_down_by_file() -> None:
    times = FileSeconds()
    for nodeid, seconds in [("tests/a.py::t1", 1.0), ("tests/a.py::t1", 30.0), ("tests/a.py::t2", 2.5),
                            ("tests/b.py::t", 4.0), ("tests/c.py::t[x]", 0.25)]:
        times.add(nodeid, seconds)
    assert times.slowest(2) == ["     33.5s  tests/a.py", "      4.0s  tests/b.py"]
    assert len(times.slowest(15)) == 3
