"""The seed import is one unit across the KG (DuckDB) and the entity index (LanceDB) (issue 26, point 3).

`karma run` on a fresh data dir imports the seed KG: its tables in one transaction, then the index of its names.
Stopped between the two (SIGKILL once the KG committed), inside the index build (SIGKILL while the rows stream
into LanceDB) or by a full disk during the index build, the next `karma run` must see the index is not the KG's,
rebuild it from the KG and end with exactly the KG and the linked mentions of an uninterrupted run — before this
check, it skipped the import (the KG held seed nodes), exited 0 and linked almost nothing. Each `karma run` is a
real child process (run_child.py) over two papers of two dates with the local backbone."""

from __future__ import annotations

import signal
from pathlib import Path

import pandas as pd
import pytest
from reliability_helpers import karma_spec, kg_state, leftovers, run_karma, start_karma, wait_for_pause
from test_crash_points import make_inbox


def linked_mentions(root: Path) -> dict[str, int]:
    """document -> its mentions the entities stage linked to a KG entity (what the entity index decides)."""
    out = {}
    for path in sorted((root / "stages" / "local" / "entities").glob("*.parquet")):
        out[path.stem] = int((pd.read_parquet(path)["status"] == "linked").sum())
    return out


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> dict:
    root = tmp_path_factory.mktemp("clean")
    code, _, err = run_karma(karma_spec(root, shared_cache, make_inbox(root / "inbox")), root / "child")
    assert code == 0, err[-3000:]
    out = {"kg": kg_state(root / "karma" / "kg.duckdb"), "linked": linked_mentions(root / "karma")}
    assert sum(out["linked"].values()) > 20, out["linked"]  # the papers link enough mentions to miss
    return out


def _rerun_equals_clean(spec: dict, tmp_path: Path, clean: dict) -> str:
    rerun = {k: v for k, v in spec.items() if k not in ("pause", "signal", "index_fsize_limit")}
    code, out, err = run_karma(rerun, tmp_path / "rerun")
    assert code == 0, err[-3000:]
    root = tmp_path / "karma"
    assert linked_mentions(root) == clean["linked"], "the rerun linked other mentions than an uninterrupted run"
    assert kg_state(root / "kg.duckdb") == clean["kg"], "the KG after the rerun differs from an uninterrupted run"
    assert leftovers(root) == []
    return err


@pytest.mark.parametrize("pause", ["seed-index", "seed-index-mid"],
                         ids=["kg-committed-index-not-built", "inside-the-index-build"])
def test_sigkill_during_the_seed_import_then_run_gives_the_uninterrupted_result(
    pause: str, clean: dict, tmp_path: Path, shared_cache: Path
):
    signal_file = tmp_path / "paused"
    spec = karma_spec(tmp_path, shared_cache, make_inbox(tmp_path / "inbox"), signal=str(signal_file), pause=pause)
    child = start_karma(spec, tmp_path / "killed")
    try:
        assert wait_for_pause(child, signal_file, tmp_path / "killed") == pause
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert kg_state(tmp_path / "karma" / "kg.duckdb")["n_nodes"], "the KG's seed was committed before the kill"

    err = _rerun_equals_clean(spec, tmp_path, clean)
    assert "entity index entity_index.lance: " in err and "rebuilding it from the KG" in err, err[-3000:]


def test_a_full_disk_during_the_index_build_fails_the_run_and_the_next_run_completes_it(
    clean: dict, tmp_path: Path, shared_cache: Path
):
    spec = karma_spec(tmp_path, shared_cache, make_inbox(tmp_path / "inbox"), index_fsize_limit=256 * 1024)
    code, _, err = run_karma(spec, tmp_path / "full")
    assert code != 0, "a full disk during the import must fail the run"
    assert "importing the seed KG failed" in err, err[-3000:]

    err = _rerun_equals_clean(spec, tmp_path, clean)
    assert "rebuilding it from the KG" in err, err[-3000:]
