"""The project's Dagster instance: Dagster's SQLite files, each database's connection pool kept for the process."""

from __future__ import annotations

import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from karma_dagster.runtime.dagster_instance import (
    EngineCache,
    KarmaInstance,
    KeptSqliteEventLogStorage,
    KeptSqliteRunStorage,
    KeptSqliteScheduleStorage,
)

REPO = Path(__file__).resolve().parents[1]
STAGE = dg.AssetKey(["local", "entities"])


def _home(tmp_path: Path, name: str, yaml: str | None = None) -> Path:
    home = tmp_path / name
    home.mkdir()
    if yaml is None:
        shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    else:
        (home / "dagster.yaml").write_text(yaml)
    return home


def _materialize(inst: dg.DagsterInstance, keys: list[str]) -> None:
    for key in keys:
        inst.report_runless_asset_event(dg.AssetMaterialization(STAGE, partition=key, metadata={"rows": 3}))


def _partitions(inst: dg.DagsterInstance) -> set[str]:
    return {r.partition_key for r in inst.fetch_materializations(STAGE, limit=10_000).records}


def _db_files(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*.db")}


@pytest.fixture
def connections():
    """New DBAPI connections opened by any SQLAlchemy engine while the test runs."""
    opened: list[int] = []

    def on_connect(_dbapi, _record):
        opened.append(1)

    event.listen(Engine, "connect", on_connect)
    yield opened
    event.remove(Engine, "connect", on_connect)


def test_the_shipped_dagster_yaml_makes_the_karma_instance_with_kept_sqlite_storages(tmp_path):
    with dg.DagsterInstance.from_config(str(_home(tmp_path, "home"))) as inst:
        assert isinstance(inst, KarmaInstance)
        assert isinstance(inst.event_log_storage, KeptSqliteEventLogStorage)
        assert isinstance(inst.run_storage, KeptSqliteRunStorage)
        assert isinstance(inst.schedule_storage, KeptSqliteScheduleStorage)


def test_events_are_written_through_kept_connections_not_one_per_event(tmp_path, connections):
    with dg.DagsterInstance.from_config(str(_home(tmp_path, "home"))) as inst:
        _materialize(inst, ["warm"])
        before = len(connections)
        _materialize(inst, [f"doc-{i}" for i in range(60)])
        opened = len(connections) - before
        assert _partitions(inst) == {"warm", *(f"doc-{i}" for i in range(60))}
    # Dagster's own storage opens one per write (120 here: each materialization is written to two databases)
    assert opened <= 4, f"{opened} new SQLite connections for 60 materializations"


def test_a_home_written_by_dagsters_own_storage_is_read_and_extended_and_the_files_are_the_same(tmp_path):
    stock = "telemetry:\n  enabled: false\n"
    home = _home(tmp_path, "home", yaml=stock)
    with dg.DagsterInstance.from_config(str(home)) as inst:
        assert type(inst) is dg.DagsterInstance
        _materialize(inst, ["a", "b"])
    files_before = _db_files(home)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(home)) as inst:
        assert isinstance(inst, KarmaInstance)
        assert _partitions(inst) == {"a", "b"}
        _materialize(inst, ["c"])
    assert _db_files(home) == files_before  # no new database: the same runs, event and schedule files
    (home / "dagster.yaml").write_text(stock)
    with dg.DagsterInstance.from_config(str(home)) as inst:
        assert _partitions(inst) == {"a", "b", "c"}


def test_what_another_process_commits_is_read_through_the_kept_connections(tmp_path):
    home = _home(tmp_path, "home")
    with dg.DagsterInstance.from_config(str(home)) as inst:
        _materialize(inst, ["parent-1"])
        assert _partitions(inst) == {"parent-1"}  # the parent's engines are open from here on
        code = ("import sys, dagster as dg\n"
                "with dg.DagsterInstance.from_config(sys.argv[1]) as inst:\n"
                "    for k in ('child-1', 'child-2'):\n"
                "        inst.report_runless_asset_event(dg.AssetMaterialization(dg.AssetKey(['local', 'entities']),"
                " partition=k))\n")
        subprocess.run([sys.executable, "-c", code, str(home)], check=True, timeout=300)
        assert _partitions(inst) == {"parent-1", "child-1", "child-2"}
        _materialize(inst, ["parent-2"])
    with dg.DagsterInstance.from_config(str(home)) as again:
        assert _partitions(again) == {"parent-1", "child-1", "child-2", "parent-2"}


def test_after_a_wipe_the_instance_runs_and_records_again(tmp_path):
    home = _home(tmp_path, "home")
    with dg.DagsterInstance.from_config(str(home)) as inst:
        result = dg.materialize([dg.asset(name="probe")(lambda: 1)], instance=inst)
        assert result.success
        inst.wipe()
        assert not inst.get_runs()
        again = dg.materialize([dg.asset(name="probe")(lambda: 2)], instance=inst)
        assert again.success
        assert [r.run_id for r in inst.get_runs()] == [again.run_id]
        assert len(inst.all_logs(again.run_id)) > 3  # its events are in its run's database
    with dg.DagsterInstance.from_config(str(home)) as fresh:
        assert len(fresh.all_logs(again.run_id)) == len(inst.all_logs(again.run_id))


def test_the_cache_keeps_at_most_its_size_and_reopens_an_evicted_file(tmp_path):
    cache = EngineCache(max_open=2)
    urls = [f"sqlite:///{tmp_path / name}.db" for name in "abc"]
    assert [cache.engine(u)[1] for u in urls] == [True, True, True]
    assert cache.engine(urls[2]) == (cache.engine(urls[2])[0], False)
    assert cache.engine(urls[0])[1] is True  # evicted as the oldest, made again
    cache.dispose()
    assert cache.engine(urls[1])[1] is True


def _engine_is_new(cache: EngineCache, url: str, out) -> None:
    out.put(cache.engine(url)[1])


def test_a_forked_process_makes_its_own_engine_instead_of_sharing_the_parents_connections(tmp_path):
    cache = EngineCache()
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert cache.engine(url)[1] is True
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_engine_is_new, args=(cache, url, out))
    child.start()
    child.join(60)
    assert out.get(timeout=5) is True
    assert cache.engine(url)[1] is False



_PARTS = dg.StaticPartitionsDefinition([f"doc-{i:02d}" for i in range(30)])


@dg.asset(partitions_def=_PARTS, backfill_policy=dg.BackfillPolicy.single_run(),
          check_specs=[dg.AssetCheckSpec("rows_ok", asset="papers")])
def papers(context):  # noqa: ANN001 - Dagster reads the annotation; postponed annotations are strings here
    """One step for many partitions, as a batch of papers: per-partition planned events and materializations."""
    return dg.MaterializeResult(metadata={"papers": len(context.partition_keys)},
                                check_results=[dg.AssetCheckResult(check_name="rows_ok", passed=True)])


@dg.asset(partitions_def=_PARTS, deps=[papers], backfill_policy=dg.BackfillPolicy.single_run())
def tables(context):  # noqa: ANN001
    return dg.MaterializeResult(metadata={"keys": len(context.partition_keys)})


def _run_and_read(home: Path, monkeypatch: pytest.MonkeyPatch, batch: str | None) -> tuple[dict, int]:
    """A 30-partition run of two assets: what the event log and the asset index hold, and its commits."""
    if batch is None:
        monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    else:
        monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", batch)
    commits: list[int] = []

    def on_commit(_conn):  # noqa: ANN001
        commits.append(1)

    with dg.DagsterInstance.from_config(str(home)) as inst:
        event.listen(Engine, "commit", on_commit)
        try:
            result = dg.materialize([papers, tables], instance=inst,  # one run of the 30, as `karma run`'s
                                    tags={"dagster/asset_partition_range_start": "doc-00",
                                          "dagster/asset_partition_range_end": "doc-29"})
        finally:
            event.remove(Engine, "commit", on_commit)
        assert result.success
        kinds = [e.dagster_event_type.value for e in inst.all_logs(result.run_id) if e.is_dagster_event]
        records = {}
        for key in (dg.AssetKey("papers"), dg.AssetKey("tables")):
            entry = inst.get_asset_records([key])[0].asset_entry
            latest = inst.fetch_materializations(key, limit=1).records[0]
            records[key.to_user_string()] = {
                "materialized": sorted(inst.get_materialized_partitions(key)),
                "latest": (latest.partition_key, dict(latest.asset_materialization.metadata)),
                "index_entry_is_latest": entry.last_materialization_record.storage_id == latest.storage_id,
                "last_run_id": entry.last_run_id == result.run_id,
            }
    return {"kinds": kinds, "records": records}, len(commits)


def test_a_many_partition_step_writes_its_events_at_once_with_the_records_of_dagsters_per_event_path(
        tmp_path, monkeypatch):
    batched, batched_commits = _run_and_read(_home(tmp_path, "batched"), monkeypatch, None)
    one_by_one, one_by_one_commits = _run_and_read(_home(tmp_path, "per_event"), monkeypatch, "0")
    assert batched == one_by_one
    assert batched["records"]["papers"]["materialized"] == list(_PARTS.get_partition_keys())
    assert batched["records"]["papers"]["index_entry_is_latest"] and batched["records"]["tables"]["last_run_id"]
    assert batched["kinds"].count("ASSET_MATERIALIZATION_PLANNED") == 60
    assert batched["kinds"].count("ASSET_MATERIALIZATION") == 60
    # per event: two transactions for each of the 120 asset events; batched: a few for each step
    assert one_by_one_commits > 2 * 120
    assert batched_commits < one_by_one_commits - 200, (batched_commits, one_by_one_commits)


@pytest.mark.parametrize("fails", ["index", "second group"])
def test_a_batch_write_that_fails_half_way_is_completed_by_dagsters_fallback_without_a_double(
        tmp_path, monkeypatch, fails):
    """Dagster stores a batch again event by event when its write raises: an event the batch had written to the run's
    file (the index write failed) gets only its index half, one written whole is not written again."""
    reference, _ = _run_and_read(_home(tmp_path, "per_event"), monkeypatch, "0")
    original = KeptSqliteEventLogStorage._mirror_in_index
    calls = {"n": 0}

    def failing(self, conn, events, inserts):  # noqa: ANN001
        calls["n"] += 1
        if len(events) > 1 and (fails == "index" or calls["n"] == 2):
            raise OSError("disk I/O error (planted)")
        return original(self, conn, events, inserts)

    monkeypatch.setattr(KeptSqliteEventLogStorage, "_mirror_in_index", failing)
    after, _ = _run_and_read(_home(tmp_path, "batched"), monkeypatch, None)
    assert calls["n"] > 1, "the planted failure never ran"
    assert after == reference


def _shipped_yaml_with_pass_interval(value: str) -> str:
    shipped = (REPO / "dagster_home" / "dagster.yaml").read_text()
    assert "  pass_interval_seconds: 5\n" in shipped  # the shipped setting: a UI backfill's passes 5 s apart
    return shipped.replace("  pass_interval_seconds: 5\n", f"  pass_interval_seconds: {value}\n")


def test_the_backfill_daemon_passes_at_the_interval_dagster_yaml_sets(tmp_path, monkeypatch):
    """Dagster's backfill loop, run as `dagster-daemon` runs it in a process whose instance is made from the
    shipped dagster.yaml (pass interval set to 2 s here), passes every 2 s, not every 30 s (Dagster's constant);
    Dagster's other use of that constant (the asset daemon outside sensors) keeps 30 s."""
    import logging
    import threading
    import time

    import dagster._daemon.controller as controller
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import EmptyWorkspaceTarget
    from dagster._daemon.backfill import execute_backfill_iteration_loop
    from dagster._daemon.daemon import SpanMarker

    monkeypatch.setattr(controller, "DEFAULT_DAEMON_INTERVAL_SECONDS", 30)  # as a new process starts
    home = _home(tmp_path, "home", _shipped_yaml_with_pass_interval("2"))
    with dg.DagsterInstance.from_config(str(home)) as inst:
        daemons = {type(d).__name__: d for d in controller.create_daemons_from_instance(inst)}
        assert daemons["AssetDaemon"]._pre_sensor_interval_seconds == 30  # noqa: SLF001
        with WorkspaceProcessContext(inst, EmptyWorkspaceTarget()) as context:
            passes = [time.monotonic() for marker in execute_backfill_iteration_loop(
                context, logging.getLogger("backfill"), threading.Event(), until=time.time() + 5.5)
                if marker is SpanMarker.START_SPAN]
    gaps = [b - a for a, b in zip(passes, passes[1:])]
    assert len(passes) >= 2 and all(g < 10 for g in gaps), f"passes {gaps} s apart"  # with 30 s: one pass


@pytest.mark.parametrize("value, problem", [("0", "backfills.pass_interval_seconds is 0"),
                                            ("soon", "pass_interval_seconds")])
def test_a_bad_backfill_pass_interval_is_refused_with_its_setting_named(tmp_path, value, problem):
    home = _home(tmp_path, "home", _shipped_yaml_with_pass_interval(value))
    with pytest.raises(Exception, match=problem):
        dg.DagsterInstance.from_config(str(home))
