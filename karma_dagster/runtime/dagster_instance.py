"""The local Dagster instance with its SQLite databases kept open for the process.

Dagster's SQLite storages build a new SQLAlchemy engine for every write and every query and throw it away after
(`poolclass=NullPool`, `engine.dispose()`): each event a run logs opens the database file, runs SQLAlchemy's
first-connect checks and closes it again, and a materialized asset does that twice (its run's database and the
cross-run index). A run of 50 papers by document logs ~900 such events. Measured on 2 idle cores
(`bench/dagster_events.py`): 7.4 ms a materialization with Dagster's engines, 2.3 ms with one kept per file.

What is kept is only the engine (SQLAlchemy's connection pool) per database file: the files, their schema and
migrations, the WAL journal, the busy timeout, Dagster's lock around each use and every commit stay Dagster's own,
so a crash loses nothing a committed event had written, and other processes (the UI, the daemon, run workers)
read and write the same files as before. dagster_home/dagster.yaml selects it with `instance_class`; a
`storage:` section there (Postgres) is used as Dagster would use it.

A step that materializes many partitions (a batch of papers) logs one planned event per paper and stage at the
run's start and one materialization per paper at the step's end. Dagster marks those as a batch and can store a
batch at once (its opt-in DAGSTER_EVENT_BATCH_SIZE); its SQLite storage then still writes them one by one, two
transactions each. Here the kept storage writes a batch's asset events in one transaction per file (the run's
and the index), the same rows in the same order, and the instance turns batching on for that storage only.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from itertools import groupby
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import yaml
from dagster import DagsterInstance
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS
from dagster._core.events.log import EventLogEntry
from dagster._core.errors import DagsterInvariantViolationError
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.event_log.schema import AssetKeyTable
from dagster._core.storage.sqlalchemy_compat import db_result
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import (
    DagsterSqliteStorage,
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)
from dagster._serdes.config_class import ConfigurableClassData
from sqlalchemy import create_engine
from sqlalchemy import exc as db_exc
from sqlalchemy.engine import Connection, Engine

from karma_dagster.runtime.backfill_passes import DAGSTER_PASS_SECONDS, apply_pass_interval, backfills_config_field

# Open database files per storage. The event log has one file per run plus its index; a UI or daemon process
# that reads many runs keeps the most recent ones open and closes the others (their engines disposed).
MAX_OPEN_FILES = 16
# Events stored at once when Dagster marks them a batch (a run's planned events, a step's materializations); a
# batch of 50 papers by document plans 400 (8 stages x 50). DAGSTER_EVENT_BATCH_SIZE, when set, is Dagster's.
EVENT_BATCH_SIZE = 1000


class EngineCache:
    """One SQLAlchemy engine per SQLite file, for this process only (a forked child builds its own)."""

    def __init__(self, max_open: int = MAX_OPEN_FILES) -> None:
        self._max_open = max_open
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def engine(self, conn_string: str) -> tuple[Engine, bool]:
        """(the engine of this file, whether it was created now)."""
        with self._lock:
            if self._pid != os.getpid():  # inherited over fork: the parent's connections are not ours to use
                self._engines = OrderedDict()
                self._pid = os.getpid()
            engine = self._engines.get(conn_string)
            if engine is not None:
                self._engines.move_to_end(conn_string)
                return engine, False
            # check_same_thread=False: Dagster's threads (the UI's watchers, the daemon's) share the pool; each
            # connection is used by one of them at a time (the pool hands it out, the storage holds its lock)
            engine = create_engine(conn_string, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS,
                                                              "check_same_thread": False})
            self._engines[conn_string] = engine
            while len(self._engines) > self._max_open:
                _, oldest = self._engines.popitem(last=False)
                oldest.dispose()
            return engine, True

    def dispose(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), OrderedDict()
        for engine in engines:
            engine.dispose()


class KeptSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log (a database per run plus the index) with each file's engine kept."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._kept = EngineCache()
        # events a failed store_event_batch had written (in full, or to the run's file only), by id(): Dagster
        # then stores the batch again one event at a time, and store_event completes each, once
        self._after_failed_batch: dict[int, tuple[EventLogEntry, str]] = {}
        super().__init__(base_dir, inst_data)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:  # same as Dagster's, the engine kept
        with self._db_lock:
            engine, _ = self._kept.engine(self.conn_string_for_shard(shard))
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """What store_event writes for each event, in order: a run of plain asset events (planned,
        materialized, failed) of one run in one transaction on the run's file and one on the index.

        When a write fails, Dagster stores the whole batch again event by event (its fallback calls store_event
        for each): what this call had already stored is remembered, so that the retry neither repeats an event
        nor misses the index half of one whose run-file half was written."""
        stored: list[EventLogEntry] = []
        try:
            for group in _batch_groups(events):
                self._store_asset_events(group)
                stored += group
        except Exception:
            for event in stored:
                self._after_failed_batch[id(event)] = (event, "stored")
            raise

    def store_event(self, event: EventLogEntry) -> None:
        """Dagster's, except for an event a failed batch already wrote (store_event_batch): not written twice."""
        kept = self._after_failed_batch.pop(id(event), None)
        if kept is not None and kept[0] is event:
            if kept[1] == "run file only":
                with self.index_transaction() as conn:
                    self._mirror_in_index(conn, [event], [self.prepare_insert_event(event)])
            return
        super().store_event(event)

    def _store_asset_events(self, events: Sequence[EventLogEntry]) -> None:
        """One group of _batch_groups: a lone event as Dagster stores it, several in a transaction per file."""
        if len(events) == 1:
            self.store_event(events[0])
            return
        inserts = [self.prepare_insert_event(event) for event in events]  # each event serialised once, for both
        with self.run_connection(events[0].run_id) as conn:
            for insert in inserts:
                conn.execute(insert)
        try:
            with self.index_transaction() as conn:  # mirrored as SqliteEventLogStorage.store_event mirrors each
                self._mirror_in_index(conn, events, inserts)
        except Exception:
            for event in events:
                self._after_failed_batch[id(event)] = (event, "run file only")
            raise

    def _mirror_in_index(self, conn: Connection, events: Sequence[EventLogEntry], inserts: Sequence[Any]) -> None:
        ids: list[int] = []
        for insert in inserts:
            with db_result(conn, insert) as result:
                ids.append(result.inserted_primary_key[0])
        if any(i is None for i in ids):
            raise DagsterInvariantViolationError("Cannot store asset event tags for null event id.")
        self._store_asset_event_tags(conn, events, ids)
        self._store_asset_entries(conn, events, ids)

    def _store_asset_entries(self, conn: Connection, events: Sequence[EventLogEntry], ids: Sequence[int]) -> None:
        """Each asset key's row as _store_asset_event leaves it after these events in order, written once: every
        event overwrites the columns it sets with values of its own, so the last event of each kind decides."""
        last: dict[str, dict[Any, int]] = {}  # asset key -> event kind -> index of its last event
        for i, event in enumerate(events):
            last.setdefault(event.get_dagster_event().asset_key.to_string(), {})[event.dagster_event_type] = i
        index_cols = self._has_asset_key_index_cols_on_connection(conn)
        for key, kinds in last.items():
            values: dict[str, Any] = {}
            for i in sorted(kinds.values()):
                values.update(self._get_asset_entry_values(events[i], ids[i], index_cols))
            if not values:
                continue
            try:
                conn.execute(AssetKeyTable.insert().values(asset_key=key, **values))
            except db_exc.IntegrityError:
                conn.execute(AssetKeyTable.update().values(**values).where(AssetKeyTable.c.asset_key == key))

    def wipe(self) -> None:
        self._kept.dispose()  # wipe deletes the run files: no connection may stay on a deleted file
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._kept.dispose()


def _batch_groups(events: Sequence[EventLogEntry]) -> list[list[EventLogEntry]]:
    """The batch in order: consecutive plain asset events of one run together, every other event alone."""
    return [list(g) for _, g in groupby(events, key=lambda e: e.run_id if _plain_asset_event(e) else id(e))]


def _plain_asset_event(event: EventLogEntry) -> bool:
    """An asset event that store_event writes to the run's file and mirrors in the index, nothing else."""
    kind = event.dagster_event_type if event.is_dagster_event else None
    return (kind in ASSET_EVENTS and kind not in ASSET_CHECK_EVENTS
            and event.get_dagster_event().asset_key is not None)


class _KeptEngine:
    """`connect()` of Dagster's one-file SQLite storages (runs.db, schedules.db) with the file's engine kept."""

    _conn_string: str

    def __init__(self, conn_string: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._kept = EngineCache(max_open=1)
        super().__init__(conn_string, inst_data)  # type: ignore[call-arg]  # the Dagster storage beside it

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        engine, _ = self._kept.engine(self._conn_string)
        with engine.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        self._kept.dispose()


class KeptSqliteRunStorage(_KeptEngine, SqliteRunStorage):
    """Dagster's SQLite run storage (runs.db) with its engine kept."""


class KeptSqliteScheduleStorage(_KeptEngine, SqliteScheduleStorage):
    """Dagster's SQLite schedule and sensor storage (schedules.db) with its engine kept."""


class KeptSqliteStorage(DagsterSqliteStorage):
    """Dagster's local storage (the same files under the instance folder) built from the kept-engine storages."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        # DagsterSqliteStorage.__init__ with the kept-engine classes (each creates or migrates its files as
        # Dagster's does); DagsterStorage's own __init__ after, as Dagster's calls it
        self.base_dir = base_dir
        self._run_storage = KeptSqliteRunStorage.from_local(_runs_directory(base_dir))
        self._event_log_storage = KeptSqliteEventLogStorage(_event_logs_directory(base_dir))
        self._schedule_storage = KeptSqliteScheduleStorage.from_local(_schedule_directory(base_dir))
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Any) -> KeptSqliteStorage:
        return cls.from_local(inst_data=inst_data, **config_value)  # Dagster's names its own class here


class KarmaInstance(DagsterInstance):
    """The instance `dagster_home/dagster.yaml` names: Dagster's own, whose default storage keeps its engines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        apply_pass_interval(self.get_backfill_settings())  # before a daemon process starts its backfill loop

    @classmethod
    def config_schema(cls) -> Mapping[str, Any]:
        return {"backfills": backfills_config_field()}  # Dagster's section and the backfill daemon's pass interval

    @property
    def auto_materialize_minimum_interval_seconds(self) -> int:
        """Dagster's, unchanged by the backfill pass interval (its fallback is the same constant)."""
        seconds = super().auto_materialize_minimum_interval_seconds
        return DAGSTER_PASS_SECONDS if seconds is None else seconds

    @staticmethod
    def config_defaults(base_dir: str) -> Mapping[str, ConfigurableClassData | None]:
        defaults = dict(InstanceRef.config_defaults(base_dir))
        defaults["storage"] = ConfigurableClassData(
            __name__, KeptSqliteStorage.__name__, yaml.dump({"base_dir": base_dir}, default_flow_style=False))
        return defaults

    def _get_event_batch_size(self) -> int:
        """Dagster's setting when given; otherwise batches on the kept storage, which writes them at once."""
        if os.getenv("DAGSTER_EVENT_BATCH_SIZE") is not None:
            return super()._get_event_batch_size()
        return EVENT_BATCH_SIZE if isinstance(self.event_log_storage, KeptSqliteEventLogStorage) else 0
