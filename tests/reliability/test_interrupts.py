"""SIGTERM / Ctrl-C stop `karma run` cleanly (issue 11, item 7): the document in progress stops (its Dagster run is
tagged karma/interrupted and `runner.interrupted_documents` names it), no further document or increment starts,
stderr says what was stopped and what remains, the exit code is 128 + the signal (143, 130); a rerun completes
the interrupted document and the KG equals an uninterrupted run's. A second signal quits at once.

Each `karma run` is a child process (run_child.py: the CLI with its signal set-up), paused inside the `relations`
stage of the first paper by a test-only monkeypatch (run_child.install_pause) until the parent sends its signal.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from partition_views import BY_DATE, partition_of
from reliability_helpers import (
    dagster_instance, karma_spec, kg_state, leftovers, run_karma, start_karma, wait_for_pause, child_output,
)
from test_crash_points import FIRST, SECOND, make_inbox

from karma_dagster import runner
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.jobs import DOCUMENT_JOB, kg_job_name
from karma_dagster.runtime.paths import DataPaths

PAUSE = {"pause": "stage", "stage": "relations", "nth": 1}


def _interrupt(tmp_path: Path, cache: Path, signum: int, *, stubborn: bool = False, signals: int = 1):
    """Start `karma run`, wait until it sleeps inside the first paper's `relations` step, send `signals` signals;
    returns (exit code, stdout, stderr, seconds from the first signal to the exit, spec)."""
    signal_file = tmp_path / "paused"
    spec = karma_spec(tmp_path, cache, make_inbox(tmp_path / "inbox"), signal=str(signal_file), stubborn=stubborn,
                      **PAUSE)
    child = start_karma(spec, tmp_path / "interrupted")
    try:
        assert wait_for_pause(child, signal_file, tmp_path / "interrupted") == f"stage relations {FIRST}"
        t0 = time.monotonic()
        for i in range(signals):
            if i:
                time.sleep(1.0)
            child.send_signal(signum)
        code = child.wait(60)
        seconds = time.monotonic() - t0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    return (code, *child_output(tmp_path / "interrupted"), seconds, spec)


def _stopped(doc: str) -> str:
    """What the interrupt says it stopped: the paper's run, or its day's run naming the paper (date partitions)."""
    return f"stopped date {partition_of(doc)}: document {doc}" if BY_DATE else f"stopped document {doc}"


def _catalog(tmp_path: Path) -> Catalog | None:
    """By date, the catalog that names a stopped day's documents (runner.interrupted_documents)."""
    return Catalog(DataPaths(tmp_path / "karma").catalog) if BY_DATE else None


def _rerun_spec(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k not in ("pause", "signal", "stage", "nth", "stubborn")}


def test_sigterm_stops_the_current_document_and_a_rerun_completes_it(tmp_path, shared_cache):
    code, out, err, seconds, spec = _interrupt(tmp_path, shared_cache, signal.SIGTERM)
    assert code == 143, f"exit {code}: {err[-3000:]}"
    assert seconds < 30, "stopped promptly, not after the rest of the run"
    assert f"{FIRST}: INTERRUPTED" in out
    assert f"INTERRUPTED by SIGTERM: {_stopped(FIRST)}" in err and "tagged karma/interrupted" in err
    assert f"document {SECOND}" in err and "KG increment local 2015-12-08" in err, "what remains is named"
    assert "report" not in out.lower(), "no report after an interrupt"

    inst = dagster_instance(tmp_path / "dagster_home")
    doc_runs = inst.get_runs(filters=__import__("dagster").RunsFilter(job_name=DOCUMENT_JOB))
    assert [r.tags.get("dagster/partition") for r in doc_runs] == [partition_of(FIRST)], "the second never started"
    assert doc_runs[0].tags.get(runner.INTERRUPTED_TAG) == "SIGTERM"
    assert not inst.get_runs(filters=__import__("dagster").RunsFilter(job_name=kg_job_name("local"))), \
        "no increment started"
    assert runner.interrupted_documents(inst, _catalog(tmp_path)) == {
        FIRST: f"interrupted (SIGTERM) in run {doc_runs[0].run_id[:8]}"}
    data = tmp_path / "karma"
    assert not (data / "stages" / "local" / "relations" / f"{FIRST}.parquet").exists()
    assert leftovers(data) == []

    # a rerun completes it; the KG is the one of an uninterrupted run
    code, out, err = run_karma(_rerun_spec(spec), tmp_path / "rerun")
    assert code == 0, err[-3000:]
    assert runner.interrupted_documents(dagster_instance(tmp_path / "dagster_home"), _catalog(tmp_path)) == {}
    ref = tmp_path / "reference"
    code, _, err = run_karma(karma_spec(ref, shared_cache, make_inbox(ref / "inbox")), ref / "child")
    assert code == 0, err[-3000:]
    assert kg_state(data / "kg.duckdb") == kg_state(ref / "karma" / "kg.duckdb")
    assert {r[1] for r in kg_state(data / "kg.duckdb")["merged_documents"]} == {FIRST, SECOND}


def test_ctrl_c_exits_130_and_tags_the_run_sigint(tmp_path, shared_cache):
    code, out, err, seconds, _ = _interrupt(tmp_path, shared_cache, signal.SIGINT)
    assert code == 130, f"exit {code}: {err[-3000:]}"
    assert f"INTERRUPTED by SIGINT: {_stopped(FIRST)}" in err
    inst = dagster_instance(tmp_path / "dagster_home")
    assert set(runner.interrupted_documents(inst, _catalog(tmp_path))) == {FIRST}
    assert "interrupted (SIGINT)" in runner.interrupted_documents(inst, _catalog(tmp_path))[FIRST]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_quits_at_once_when_the_step_does_not_stop(tmp_path, shared_cache, signum):
    # the paused step swallows the first interrupt (like a call stuck in C code): only the second one ends it
    code, out, err, seconds, _ = _interrupt(tmp_path, shared_cache, signum, stubborn=True, signals=2)
    assert code == 128 + signum, f"exit {code}: {err[-3000:]}"
    assert seconds < 15
    assert "second interrupt: quitting now" in err
