"""`karma run` SIGKILLed at several points, then run again, gives exactly the KG of an uninterrupted run (issue 11,
"Done when"): during the inbox scan (the first file registered in the catalog, its file record not yet written),
inside a chain stage of the second document (its first date already merged), and inside a KG merge (rows
inserted, transaction open; the dead run's slot of the KG writer pool is freed by the rerun, which would
otherwise wait for it forever). Each `karma run` is a real child process (run_child.py, the CLI with its signal
set-up) over two papers of two dates with the local backbone; the pause points are test-only monkeypatches in
the child (run_child.install_pause), the product has no hook. KG = nodes, edges, evidence, increments and
merged_documents (run ids and times left out)."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from reliability_helpers import (
    SAMPLE_INBOX, kg_state, leftovers, run_karma, start_karma, wait_for_pause, karma_spec, dagster_instance,
)

from karma_dagster.jobs import DOCUMENT_JOB
from partition_views import partition_of

PAPERS = ("PMC4686705.xml", "PMC4686705.json", "PMC4738914.pdf", "PMC4738914.json")  # 2015-12-08, 2016-01-14
FIRST, SECOND = "2015-12-08_pmc4686705", "2016-01-14_pmc4738914"


def make_inbox(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in PAPERS:
        shutil.copy(SAMPLE_INBOX / name, path / name)
    return path


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> dict:
    root = tmp_path_factory.mktemp("uninterrupted")
    code, out, err = run_karma(karma_spec(root, shared_cache, make_inbox(root / "inbox")), root / "child")
    assert code == 0, err[-3000:]
    state = kg_state(root / "karma" / "kg.duckdb")
    assert {r[1] for r in state["merged_documents"]} == {FIRST, SECOND}
    assert state["evidence"], "the papers give the KG evidence to lose"
    return state


@pytest.mark.parametrize(
    ("pause", "where"),
    [
        ({"pause": "scan"}, "scan"),
        ({"pause": "stage", "stage": "relations", "nth": 2}, f"stage relations {SECOND}"),
        ({"pause": "merge"}, f"merge {FIRST}"),
    ],
    ids=["during-ingestion", "inside-a-stage", "inside-a-merge"],
)
def test_sigkill_then_rerun_gives_the_kg_of_an_uninterrupted_run(
    pause: dict, where: str, uninterrupted: dict, tmp_path: Path, shared_cache: Path
):
    inbox = make_inbox(tmp_path / "inbox")
    signal_file = tmp_path / "paused"
    spec = karma_spec(tmp_path, shared_cache, inbox, signal=str(signal_file), **pause)
    child = start_karma(spec, tmp_path / "killed")
    try:
        assert wait_for_pause(child, signal_file, tmp_path / "killed") == where
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)

    kg = tmp_path / "karma" / "kg.duckdb"
    if pause["pause"] == "stage":  # the first date was merged before the second paper's chain began
        assert {r[1] for r in kg_state(kg)["merged_documents"]} == {FIRST}
    if pause["pause"] == "merge":  # the killed merge left nothing in the KG
        assert kg_state(kg)["merged_documents"] == [] and kg_state(kg)["evidence"] == []

    rerun = {k: v for k, v in spec.items() if k not in ("pause", "signal", "stage", "nth")}
    code, out, err = run_karma(rerun, tmp_path / "rerun")
    assert code == 0, f"rerun after a kill {where}: {err[-3000:]}"
    if pause["pause"] == "merge":  # the dead run held the KG writer's one pool slot: freed, not waited for forever
        assert "marked failed and their pool slots freed" in out, out
    assert kg_state(kg) == uninterrupted, f"the KG after a kill {where} and a rerun differs from an uninterrupted run"
    assert leftovers(tmp_path / "karma") == []
    # the rerun finished every document the killed run left: its last run of each succeeded
    runs = dagster_instance(tmp_path / "dagster_home").get_runs()
    latest = {}
    for run in runs:  # newest first
        if run.job_name == DOCUMENT_JOB:
            latest.setdefault(run.tags.get("dagster/partition"), run.status.value)
    assert latest == {partition_of(FIRST): "SUCCESS", partition_of(SECOND): "SUCCESS"}  # by date, their days
