"""Concurrent KG writers lose nothing: two separate runs at once (two OS processes, started together), each a
multiprocess-executor run whose steps merge two namespaces' increments in parallel processes: four writers on one
DuckDB file. The KG's rows equal those of a sequential in-process run of the same increments, and every run
succeeds (no "database is locked", no lock timeout). On both KG stores: the DuckDB file, and PostgreSQL
($KARMA_KG_URL, inherited by the child runs; the concurrent deployment's KG is a template copy)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from kg_backends import kg_dump_any
from reliability_helpers import HERE_CHILD

from karma_dagster import runner
from karma_dagster.definitions import build_definitions
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.kg.backends import kg_location
from karma_dagster.kg.location import KG_URL_ENV
from karma_dagster.resources.backbones import BackboneConfig

PAPERS = ("PMC4738914.pdf", "PMC4738914.json", "PMC4686705.xml", "PMC4686705.json")  # 2016-01-14, 2015-12-08
NAMESPACES = ["local", "alt"]


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_two_runs_of_parallel_kg_steps_equal_a_sequential_run(make_pipeline, shared_cache, tmp_path, backend, request,
                                                              monkeypatch):
    monkeypatch.delenv(KG_URL_ENV, raising=False)
    server = request.getfixturevalue("pg_server") if backend == "postgres" else None
    if server is not None:
        monkeypatch.setenv(KG_URL_ENV, server.new_database("kg_concurrency"))
    p = make_pipeline(inbox_files=PAPERS)
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    dates = sorted({date_of_document_key(k) for k in keys})
    assert len(dates) == 2
    # a second namespace with the same stage tables: its increments write the same KG file at the same time
    shutil.copytree(p.root / "stages" / "local", p.root / "stages" / "alt")
    concurrent_root = tmp_path / "concurrent"
    shutil.copytree(p.root, concurrent_root, ignore=shutil.ignore_patterns("*.lock"))
    concurrent_kg = concurrent_root / "kg.duckdb" if server is None else server.copy_database(
        "kg_concurrency", "kg_concurrency_copy")

    # sequential reference, in process
    both = build_definitions(backbones={ns: BackboneConfig() for ns in NAMESPACES}, storage=p.storage)
    for ns in NAMESPACES:
        assert all(runner.run_increments(both, p.instance, ns, dates).values())
    sequential = kg_dump_any(kg_location(p.storage.paths()), with_increment_stats=False)
    assert {r[0] for r in sequential["evidence"]} == set(NAMESPACES)

    # two OS processes, one date each, released together; each runs both namespaces' steps in parallel processes
    barrier = tmp_path / "go"
    if server is not None:
        monkeypatch.setenv(KG_URL_ENV, str(concurrent_kg))  # the child runs write the copy
    children = []
    for i, date in enumerate(dates):
        spec = {"data_dir": str(concurrent_root), "inbox": str(p.inbox), "cache_dir": str(shared_cache),
                "dagster_home": str(tmp_path / "dagster_home"), "namespaces": NAMESPACES,
                "job": "kg_all_namespaces", "partitions": [date], "barrier": str(barrier),
                "ready": str(tmp_path / f"ready-{i}")}
        children.append(subprocess.Popen([sys.executable, str(HERE_CHILD), json.dumps(spec)], cwd=tmp_path,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{i}").exists() for i in range(len(dates))) and time.monotonic() < deadline:
        assert all(c.poll() is None for c in children), [c.stderr.read().decode()[-2000:] for c in children]
        time.sleep(0.05)
    barrier.write_text("go")
    errors = []
    for c in children:
        _, err = c.communicate(timeout=300)
        errors.append(err.decode())
    assert [c.returncode for c in children] == [0, 0], _failures(tmp_path / "dagster_home", errors)
    for text in errors:
        assert "database is locked" not in text and "Could not set lock" not in text

    runs = p.instance.get_runs()
    kg_runs = [r for r in runs if r.job_name == "kg_all_namespaces"]
    assert len(kg_runs) == 2 and all(r.is_success for r in kg_runs)
    steps = [e for r in kg_runs for e in p.instance.all_logs(r.run_id) if e.is_dagster_event
             and e.dagster_event.event_type_value == "STEP_SUCCESS"]
    assert len(steps) == 4, "four KG writer steps ran, each in its own process"

    concurrent = kg_dump_any(concurrent_kg, with_increment_stats=False)
    assert concurrent == sequential, "no lost or duplicated writes"
    assert {ns for ns, *_ in concurrent["evidence"]} == set(NAMESPACES)


def _failures(home, errors: list[str]) -> list[str]:
    """What failed in the child runs: each failed step's error from the runs' event logs (the children's stderr is
    mostly DEBUG lines; its tail rarely holds the error), else the stderr lines that name an error."""
    from reliability_helpers import dagster_instance

    with dagster_instance(home) as instance:
        found = [f"{e.step_key}: {e.dagster_event.event_specific_data.error.to_string()}"
                 for r in instance.get_runs() for e in instance.all_logs(r.run_id)
                 if e.is_dagster_event and e.dagster_event.event_type_value in ("STEP_FAILURE", "RUN_FAILURE")
                 and getattr(e.dagster_event.event_specific_data, "error", None) is not None]
    return found or [line for text in errors for line in text.splitlines()
                     if "Error" in line or "Traceback" in line or "error" in line][-40:]
