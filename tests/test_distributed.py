"""Beyond one machine (issue 16): Dagster's Postgres instance storage, the Celery executor over a Redis broker,
stage tables and the entity index on S3, against real servers on 127.0.0.1 (tests/distributed_harness.py).

The end-to-end test backfills abstracts through a real daemon, Postgres storage, two Celery workers (separate
processes) and moto's S3 server, and checks the KG equals `karma run`'s on one machine (same triples, evidence,
scores, merged-document fingerprints): 10 abstracts with the KG in Postgres (the whole multi-machine stack), the
same 10 with the KG in a DuckDB file on a shared volume, both against one `karma run` of them. Ten abstracts make
two document runs of five, so both workers get steps and runs overlap; bench/distributed.py measures the same
path at scale (`--n 200 --kg-postgres`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

import distributed_harness as h
from kg_backends import kg_dump_any

from karma_dagster.runtime import executors, shared_storage
from karma_dagster.runtime.integrity import StoreCorrupt
from karma_dagster.kg.location import KG_URL_ENV
from karma_dagster.partitioning.mode import partition_mode
from karma_dagster.runtime.stage_store import StageStore

sys.path.insert(0, str(Path(__file__).parent / "reliability"))
from reliability_helpers import kg_state  # noqa: E402


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory):
    """moto's S3 server (a separate process) and the AWS variables that reach it."""
    work = tmp_path_factory.mktemp("s3")
    child, endpoint = h.start_s3(work)
    env = {**h.S3_KEYS, "AWS_ENDPOINT_URL": endpoint}
    try:
        yield env
    finally:
        child.stop()


@pytest.fixture
def s3_env(s3: dict[str, str], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """The AWS variables set in this process; returns a fresh prefix URL of the bucket for the test."""
    for k, v in s3.items():
        monkeypatch.setenv(k, v)
    return f"s3://{h.BUCKET}/{request.node.name.replace('[', '_').replace(']', '')}"


def _frame(n: int) -> pd.DataFrame:
    return pd.DataFrame({"doc": [f"d{i}" for i in range(n)], "text": [f"sentence {i} " * 8 for i in range(n)]})


# ------------------------------------------------------------------ stage tables on S3
def test_stage_tables_on_s3(s3_env: str) -> None:
    store = StageStore(f"{s3_env}/stages")
    assert store.remote
    frame = _frame(50)
    target = store.write("local", "evaluated", "2016-01-01_pmid1", frame)
    assert str(target) == f"{s3_env}/stages/local/evaluated/2016-01-01_pmid1.parquet"
    pd.testing.assert_frame_equal(store.read("local", "evaluated", "2016-01-01_pmid1"), frame)
    store.write("local", "entities", "2016-01-01_pmid1", frame.head(3))
    assert store.partitions("local", "evaluated") == ["2016-01-01_pmid1"]
    assert store.exists("local", "entities", "2016-01-01_pmid1")
    # a rewrite replaces the object whole; no temporary key is ever left beside it
    store.write("local", "evaluated", "2016-01-01_pmid1", frame.head(7))
    assert len(store.read("local", "evaluated", "2016-01-01_pmid1")) == 7
    keys = sorted(p.name for p in store.root.glob("**/*") if p.is_file())
    assert keys == ["2016-01-01_pmid1.parquet", "2016-01-01_pmid1.parquet"]
    # karma remove: every table of the document, evaluated first
    removed = store.remove_partition("2016-01-01_pmid1")
    assert [p.parent.name for p in removed] == ["evaluated", "entities"]
    assert store.partitions("local", "evaluated") == [] and not store.exists("local", "entities", "2016-01-01_pmid1")
    with pytest.raises(FileNotFoundError, match="materialize it first"):
        store.read("local", "evaluated", "2016-01-01_pmid1")
    with pytest.raises(ValueError, match="unsafe partition"):
        store.path("local", "evaluated", "../x")


def test_damaged_object_is_reported_with_its_url(s3_env: str) -> None:
    store = StageStore(f"{s3_env}/stages")
    store.write("local", "segments", "k1", _frame(20))
    path = store.path("local", "segments", "k1")
    path.write_bytes(path.read_bytes()[:-40])  # a truncated object: its footer is gone
    with pytest.raises(StoreCorrupt, match=r"corrupt stage table: s3://.*/stages/local/segments/k1\.parquet"):
        store.read("local", "segments", "k1")


_WRITER = textwrap.dedent("""
    import os, sys, pandas as pd
    from karma_dagster.runtime.stage_store import StageStore
    store = StageStore(sys.argv[1])
    big = pd.DataFrame({"x": [os.urandom(48).hex() for i in range(int(sys.argv[2]))]})  # ~15 MB, incompressible
    print("writing", flush=True)
    while True:
        store.write("local", "summaries", "k1", big)
""")


def test_sigkill_during_an_upload_leaves_the_old_table_or_the_new_one(s3_env: str, tmp_path: Path) -> None:
    """A writer killed mid-upload: the table reads back whole (old or new), never half, and no stray key."""
    store = StageStore(f"{s3_env}/stages")
    old = pd.DataFrame({"x": ["old"] * 5})
    store.write("local", "summaries", "k1", old)
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    for delay in (0.5, 1.3, 2.1):
        proc = subprocess.Popen([sys.executable, str(script), f"{s3_env}/stages", "150000"], stdout=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": str(h.REPO)})
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"writing"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        got = store.read("local", "summaries", "k1")  # checksummed read: a torn object would raise StoreCorrupt
        assert len(got) in (5, 150000) and got["x"].notna().all()
        assert (got["x"] == "old").all() or got["x"].str.len().eq(96).all()
    assert [p.name for p in store.root.glob("**/*") if p.is_file()] == ["k1.parquet"]


def test_storage_url_errors_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KARMA_STORAGE_URL", "s4://bucket/x")
    with pytest.raises(ValueError, match="KARMA_STORAGE_URL='s4://bucket/x': expected s3://bucket"):
        shared_storage.storage_url()
    monkeypatch.setenv("KARMA_STORAGE_URL", "")
    from karma_dagster.runtime.paths import DataPaths

    local = DataPaths("/data/karma")
    assert local.stages_dir == Path("/data/karma/stages") and local.index == Path("/data/karma/entity_index.lance")
    remote = DataPaths("/data/karma", storage_url="s3://bucket/pre/")
    assert str(remote.stages_dir) == "s3://bucket/pre/stages" and str(remote.index) == "s3://bucket/pre/entity_index.lance"
    assert remote.kg == Path("/data/karma/kg.duckdb")  # the KG is not an object-store file


# ------------------------------------------------------------------ the entity index on S3
def test_entity_index_on_s3_shared_by_processes(s3_env: str, tmp_path: Path) -> None:
    import datetime as dt

    from karma_dagster.kg.entity_index import EntityIndex, ExtractedEntity, KGEntity

    uri = f"{s3_env}/entity_index.lance"
    index = EntityIndex(uri)
    assert index.build([KGEntity(id="MESH:D001249", name="asthma", kind="Disease", synonyms=["bronchial asthma"]),
                        KGEntity(id="NCBIGene:1", name="TP53", kind="Gene", synonyms=[])]) == 3
    assert not (tmp_path / "entity_index.lance").exists()
    # another process (another machine) opens the same index and syncs a namespace's entities
    code = textwrap.dedent(f"""
        import datetime as dt
        from karma_dagster.kg.entity_index import EntityIndex, ExtractedEntity
        i = EntityIndex({uri!r})
        print(i.sync_namespace("local", [ExtractedEntity(id="new:1", name="wheezy bronchitis", kind="Disease",
                                                          first_seen=dt.date(2020, 1, 2))]).added)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(h.REPO)})
    assert out.stdout.strip().splitlines()[-1] == "1"
    again = EntityIndex(uri)
    assert again.search(["bronchial asthma"])[0][0].entity_id == "MESH:D001249"
    view = again.view("local", dt.date(2020, 1, 3))
    assert view.search(["wheezy bronchitis"])[0][0].entity_id == "new:1"
    assert again.view("local", dt.date(2020, 1, 2)).search(["wheezy bronchitis"])[0][0].entity_id != "new:1"
    assert again.sync_namespace("local", [ExtractedEntity(id="new:1", name="wheezy bronchitis", kind="Disease",
                                                          first_seen=dt.date(2020, 1, 2))]).added == 0


def test_shared_lock_serialises_through_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        child, url = h.start_redis(tmp_path)
    except h.Unavailable as exc:
        pytest.skip(str(exc))
    try:
        monkeypatch.setenv("KARMA_LOCK_URL", f"{url}/2")
        first, second = (shared_storage.shared_lock("s3://b/x.sync.lock") for _ in range(2))
        assert first.acquire()
        assert not second.acquire(blocking=False)  # another holder (process, machine) waits
        first.release()
        assert second.acquire(blocking=False)
        second.release()
        assert type(shared_storage.shared_lock(str(tmp_path / "i.sync.lock"))).__name__.endswith("FileLock")
    finally:
        child.stop()


# ------------------------------------------------------------------ instance storage and executor selection
def test_postgres_instance_config(pg_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    import dagster as dg

    pg_server.new_database("dagster_cfg")
    shutil.copy(h.REPO / "deploy" / "dagster.postgres.yaml", tmp_path / "dagster.yaml")
    for k, v in {"DAGSTER_HOME": str(tmp_path), "DAGSTER_PG_HOST": pg_server.host, "DAGSTER_PG_PORT": str(pg_server.port),
                 "DAGSTER_PG_USER": "postgres", "DAGSTER_PG_PASSWORD": "unused", "DAGSTER_PG_DB": "dagster_cfg"}.items():
        monkeypatch.setenv(k, v)

    @dg.asset(pool="kg_writer")
    def writer() -> None:
        return None

    with dg.DagsterInstance.get() as inst:
        assert type(inst).__name__ == "KarmaInstance" and inst.get_backfill_settings() == {"pass_interval_seconds": 5}
        assert type(inst.run_storage).__name__ == "PostgresRunStorage"
        assert type(inst.event_log_storage).__name__ == "PostgresEventLogStorage"
        inst.event_log_storage.set_concurrency_slots("kg_writer", 1)
        assert dg.materialize([writer], instance=inst).success
        assert inst.event_log_storage.get_concurrency_info("kg_writer").slot_count == 1
    with dg.DagsterInstance.get() as again:  # another process's view: the same storage
        assert len(again.get_runs()) == 1
    assert not list(tmp_path.glob("**/*.db"))  # nothing went to SQLite
    monkeypatch.delenv("DAGSTER_PG_HOST")
    with pytest.raises(Exception, match="DAGSTER_PG_HOST"):
        dg.DagsterInstance.get()


def test_executor_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    monkeypatch.delenv("KARMA_EXECUTOR", raising=False)
    assert executors.selected_executor() is dg.in_process_executor
    monkeypatch.setenv("KARMA_EXECUTOR", "celerey")
    with pytest.raises(ValueError, match="KARMA_EXECUTOR='celerey': expected one of in_process, celery"):
        executors.selected_executor()
    monkeypatch.setenv("KARMA_EXECUTOR", "celery")
    monkeypatch.delenv("KARMA_CELERY_BROKER", raising=False)
    with pytest.raises(ValueError, match="needs KARMA_CELERY_BROKER"):
        executors.selected_executor()
    monkeypatch.setenv("KARMA_CELERY_BROKER", "redis://127.0.0.1:1/0")
    assert executors.selected_executor().name == "celery"


# ------------------------------------------------------------------ the whole stack
N_ABSTRACTS, PER_RUN = 6, 3  # two document runs of three: several runs at once, both workers get steps


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> tuple[Path, h.Outcome]:
    """The abstracts' inbox and `karma run` of them on one machine (SQLite instance, local disk, in process): the
    reference both stacks below are compared with, run once for the module."""
    work = tmp_path_factory.mktemp("one-machine")
    inbox = work / "inbox"
    h.write_abstracts(inbox / "abstracts.pubtator", N_ABSTRACTS)
    return inbox, h.reference_run(work / "one", inbox, shared_cache)


@pytest.mark.timeout(1800)  # a backfill of 6 abstracts on the stack, and for the first the reference run
# (with a cold cache: the lexicon and the relation models built first) on a loaded machine
@pytest.mark.parametrize("kg_on", ["duckdb", "postgres"])
def test_distributed_backfill_equals_one_machine(pg_server, tmp_path: Path, shared_cache: Path,  # noqa: F811
                                                 one_machine: tuple[Path, h.Outcome], kg_on: str) -> None:
    """Postgres instance + daemon + 2 Celery workers + S3 give the KG of `karma run` on one machine, with the KG in
    a DuckDB file on the shared volume or in Postgres (KARMA_KG_URL: the whole multi-machine stack)."""
    inbox, reference = one_machine
    n, per_run = N_ABSTRACTS, PER_RUN
    try:
        stack = h.start_stack(tmp_path / "dist")
    except h.Unavailable as exc:
        pytest.skip(str(exc))
    stack.env["KARMA_DOCUMENTS_PER_RUN"] = str(per_run)  # several runs at once: both workers get steps
    stack.backfill_pass_seconds = 2  # what the stack computes is tested, not Dagster's 30 s between daemon passes
    if kg_on == "postgres":
        stack.env[KG_URL_ENV] = stack.postgres.new_database("karma_kg")
    try:
        outcome = h.distributed_backfill(stack, inbox, shared_cache, workers=2, timeout_s=900)
        worker_logs = [c.tail(10**7) for c in stack.children if c.name.startswith("worker")]
        with h.environ(stack.env):  # stage tables in the bucket, while its server runs
            in_bucket = StageStore(f"{stack.env['KARMA_STORAGE_URL']}/stages").partitions("local", "evaluated")
        # the Postgres KG is read while its server runs (stack.stop() ends it)
        pg_kg = kg_dump_any(stack.env[KG_URL_ENV]) if kg_on == "postgres" else None
    finally:
        stack.stop()
    assert outcome.statuses == {"documents": "COMPLETED_SUCCESS", "increments": "COMPLETED_SUCCESS"}
    assert outcome.documents == reference.documents == n
    # the document runs, then one KG increment (the abstracts share a date); by date, the date's papers are one run
    assert outcome.runs == (1 if partition_mode() == "date" else n // per_run) + 1
    for log in worker_logs:  # every step ran in a worker, and both workers ran steps
        assert re.search(r"Task execute_plan\[[0-9a-f-]+\] succeeded", log)
    # stage tables and the index live in the bucket only
    data = tmp_path / "dist" / "karma"
    assert not (data / "stages").exists() and not (data / "entity_index.lance").exists()
    assert len(in_bucket) == n
    if kg_on == "postgres":  # compared through the store interface: rows, edges with confidences, merged documents
        assert not outcome.kg_path.exists(), "the KG lives in Postgres only"
        theirs = kg_dump_any(reference.kg_path)
        assert pg_kg is not None and pg_kg["evidence"], f"the {n} abstracts merged no evidence: nothing was compared"
        for part in theirs:
            assert pg_kg[part] == theirs[part], part
        return
    ours, theirs = kg_state(outcome.kg_path), kg_state(reference.kg_path)
    for state in (ours, theirs):  # the report's table: `karma run` writes it, the daemon only if its sensor ran
        state["tables"] = [t for t in state["tables"] if t != "kg_sizes"]
    assert ours["evidence"], f"the {n} abstracts merged no evidence: nothing was compared"
    for part in ours:
        assert ours[part] == theirs[part], part


_POOL_JOB = textwrap.dedent('''
    """Generated by tests/test_distributed.py: two steps in one pool, each recording when it ran."""
    import os, time
    import dagster as dg
    from karma_dagster.runtime.executors import selected_executor

    def _step(name):
        @dg.op(name=name, pool="llm_probe")
        def op() -> None:
            start = time.time()
            time.sleep(3)
            with open(os.environ["PROBE_FILE"], "a") as f:
                f.write(f"{name} {start} {time.time()} {os.getpid()}\\n")
        return op

    a, b = _step("a"), _step("b")

    @dg.job(executor_def=selected_executor())
    def probe():
        a()
        b()
''')


@pytest.fixture(scope="module")
def celery_stack(pg_server, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811 - skips without PostgreSQL
    """Postgres instance storage, a Redis broker and two Celery workers (separate processes), started once for the
    module's pool tests; the workers load the job from its file and record its steps into PROBE_FILE."""
    work = tmp_path_factory.mktemp("celery-stack")
    try:
        stack = h.start_stack(work, postgres=True, s3=False, celery=True)
    except h.Unavailable as exc:
        pytest.skip(str(exc))
    (work / "probe_job.py").write_text(_POOL_JOB)
    stack.env["PROBE_FILE"] = str(work / "probe.txt")
    try:
        stack.start_workers(2)
        yield stack
    finally:
        stack.stop()


@pytest.mark.parametrize("limit", [1, 2])
def test_pool_limit_holds_across_celery_workers(celery_stack: h.Stack, limit: int) -> None:
    """Two independent steps of one pool on two workers: with the limit 1 they never overlap, with 2 they do."""
    import dagster as dg
    from dagster._core.definitions.reconstruct import ReconstructableJob

    stack = celery_stack
    probe = Path(stack.env["PROBE_FILE"])
    probe.unlink(missing_ok=True)  # the steps of this test's run only
    with h.environ(stack.env), dg.DagsterInstance.get() as inst:
        inst.event_log_storage.set_concurrency_slots("llm_probe", limit)
        job = ReconstructableJob.for_file(str(stack.work / "probe_job.py"), "probe")
        with dg.execute_job(job, instance=inst) as result:
            assert result.success
    stack.check_alive()
    rows = [line.split() for line in probe.read_text().splitlines()]
    assert sorted(r[0] for r in rows) == ["a", "b"]
    assert rows[0][3] != rows[1][3] or limit == 1  # with room for both, two worker processes ran them
    (s1, e1), (s2, e2) = sorted((float(r[1]), float(r[2])) for r in rows)
    overlap = s2 < e1
    assert overlap == (limit == 2), (limit, rows)
