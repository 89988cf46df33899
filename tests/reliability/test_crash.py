"""A crash in the middle of a KG increment: the kg_increment job runs in its own OS process and is SIGKILLed inside
merge_increment, after the date's rows are inserted and before COMMIT. The KG is exactly as before; rerunning the
increment gives exactly the KG an uninterrupted run gives (compared with a copy of the deployment). On both KG
stores: the DuckDB file, and PostgreSQL ($KARMA_KG_URL; the child inherits it, the copy is a template database)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kg_backends import kg_dump_any
from reliability_helpers import HERE_CHILD, leftovers

from karma_dagster import runner
from karma_dagster.definitions import build_definitions
from karma_dagster.jobs import kg_job_name
from karma_dagster.kg.backends import kg_location
from karma_dagster.kg.location import KG_URL_ENV
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource

FIRST = ("visfatin-hypothyroidism-note.txt",)  # arrival-dated (today)
SECOND = ("PMC4738914.pdf", "PMC4738914.json")  # 2016-01-14: its increment is the one killed


def child_spec(p, shared_cache: Path, **extra) -> dict:
    return {"data_dir": str(p.root), "inbox": str(p.inbox), "cache_dir": str(shared_cache),
            "dagster_home": str(p.root.parent / "dagster_home"), "namespaces": ["local"], **extra}


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_sigkill_mid_increment_leaves_the_kg_as_before_and_a_rerun_equals_an_uninterrupted_run(
    make_pipeline, shared_cache, tmp_path, backend, request, monkeypatch
):
    monkeypatch.delenv(KG_URL_ENV, raising=False)
    server = request.getfixturevalue("pg_server") if backend == "postgres" else None
    if server is not None:
        monkeypatch.setenv(KG_URL_ENV, server.new_database("kg_crash"))
    p = make_pipeline(inbox_files=FIRST)
    kg = kg_location(p.storage.paths())
    assert runner.import_kg(p.defs, p.instance)
    first, _ = runner.register_inbox(p.defs, p.instance)
    assert not runner.run_documents(p.defs, p.instance, first, log=lambda _m: None)
    d1 = date_of_document_key(first[0])
    assert all(runner.run_increments(p.defs, p.instance, "local", [d1]).values())
    # the second paper's chain is done; its date's increment is what gets killed
    p.add_to_inbox(*SECOND)
    second, _ = runner.register_inbox(p.defs, p.instance)
    assert not runner.run_documents(p.defs, p.instance, second, log=lambda _m: None)
    d2 = date_of_document_key(second[0])
    assert d2 != d1
    # the same deployment, copied, for the uninterrupted reference run
    reference = tmp_path / "reference"
    shutil.copytree(p.root, reference, ignore=shutil.ignore_patterns("*.lock"))
    reference_kg = reference / "kg.duckdb" if server is None else server.copy_database("kg_crash", "kg_crash_ref")
    before = kg_dump_any(kg)
    assert before["increments"], "the KG holds the first date's increment"

    stalled = tmp_path / "stalled"
    spec = child_spec(p, shared_cache, job=kg_job_name("local"), partitions=[d2], stall_signal=str(stalled))
    child = subprocess.Popen([sys.executable, str(HERE_CHILD), json.dumps(spec)], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not stalled.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stalled.exists(), f"the child never reached the merge: {child.stderr.read().decode()[-2000:] if child.poll() is not None else 'timeout'}"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stderr.close()

    assert kg_dump_any(kg) == before, "the killed increment left no trace"
    assert leftovers(p.root) == []

    # rerun in this process; the dead child's lock is gone with it
    assert all(runner.run_increments(p.defs, p.instance, "local", [d2]).values())
    after = kg_dump_any(kg)
    assert second[0] in {row[1] for row in after["evidence"]}, "the killed increment had rows to lose"

    if server is not None:
        monkeypatch.setenv(KG_URL_ENV, str(reference_kg))
    ref_defs = build_definitions(backbones={"local": BackboneConfig()}, storage=KarmaStorageResource(
        data_dir=str(reference), inbox=str(p.inbox), cache_dir=str(shared_cache)))
    assert all(runner.run_increments(ref_defs, p.instance, "local", [d2]).values())
    assert after == kg_dump_any(reference_kg), "rerun after the crash == uninterrupted run"
