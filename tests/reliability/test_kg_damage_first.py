"""A KG file damaged in the middle stops `karma run` before any chain runs (issue 26, point 3).

A whole-file fault (truncated, garbage) fails DuckDB's open; a block overwritten inside an otherwise valid file is
met only by the query that reads it: a merge, hours of chains later. `karma run` now reads every column of every
table once where it starts (DuckDB checks each block's checksum), so such a file ends it at once with
`karma run: corrupt KG: kg.duckdb (...)`, exit 3, no document run started and the file left as it was."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from reliability_helpers import SAMPLE_INBOX, dagster_instance

from karma_dagster import runner
from karma_dagster.runtime import services
from karma_dagster.jobs import DOCUMENT_JOB

FIRST = ("PMC4686705.xml", "PMC4686705.json")
SECOND = ("PMC4738914.pdf", "PMC4738914.json")
HEADER = 3 * 4096  # DuckDB's file header and its two database headers; then blocks of the file's block size


@pytest.fixture(scope="module")
def pristine(make_module_pipeline) -> Path:  # noqa: ANN001
    p = make_module_pipeline(inbox_files=FIRST)
    outcome = runner.run_main(p.defs, p.instance, log=lambda _m: None)
    assert not outcome.failed, outcome.failed
    services.clear()
    return p.storage.paths().root


def damage_block_of(kg: Path, table: str) -> None:
    """4 KiB of random bytes inside a block that holds `table`'s data (its header and checksum left intact)."""
    con = duckdb.connect(str(kg), read_only=True)
    try:
        block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()[0]
        blocks = sorted({r[0] for r in con.execute(
            f"SELECT block_id FROM pragma_storage_info('{table}') WHERE block_id >= 0").fetchall()})
    finally:
        con.close()
    assert blocks, f"{table} has data blocks"
    with open(kg, "r+b") as fh:
        fh.seek(HEADER + blocks[len(blocks) // 2] * block_size + 4096)
        fh.write(random.Random(26).randbytes(4096))


@pytest.mark.parametrize("table", ["seed_edges", "evidence"])
def test_a_kg_damaged_in_the_middle_stops_karma_run_before_any_chain(pristine: Path, tmp_path: Path, table: str):
    data = tmp_path / "karma"
    shutil.copytree(pristine, data, ignore=shutil.ignore_patterns("*.lock"))
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name in FIRST + SECOND:  # a new paper: a chain would run for it
        shutil.copy(SAMPLE_INBOX / name, inbox / name)
    kg = data / "kg.duckdb"
    damage_block_of(kg, table)
    before = hashlib.sha256(kg.read_bytes()).hexdigest()
    stages_before = sorted(p.relative_to(data) for p in (data / "stages").rglob("*"))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    done = subprocess.run([sys.executable, "-m", "karma_dagster.cli", "run", "--inbox", str(inbox),
                           "--data-dir", str(data)], capture_output=True, text=True, env=env, timeout=600)

    assert done.returncode == 3, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "karma run: corrupt KG: kg.duckdb (" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    runs = [r for r in dagster_instance(home).get_runs() if r.job_name == DOCUMENT_JOB]
    assert runs == [], f"{len(runs)} document run(s) started over a damaged KG"
    assert sorted(p.relative_to(data) for p in (data / "stages").rglob("*")) == stages_before
    assert hashlib.sha256(kg.read_bytes()).hexdigest() == before, "the damaged file is left as it was"
