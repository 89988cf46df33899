"""Where some documents stand in a dynamic partition order, read for those documents only.

A multi-document run names a range (its first and last partition) and holds every partition between them, so
`karma run`'s batches, the controller's backfill tiers and `karma status`'s reading of a range run need each
document's place and whether another partition lies between two of them. Listing every partition to learn it
took ~5 s at a million documents and grows with the corpus. Dagster's SQL storages (SQLite, Postgres, MySQL)
keep dynamic partitions in one table whose ids are the order, so here: the documents' ids (a query per 500
keys), then one indexed "anything between?" query per gap between two of them. A month registered together
(as sensors and backfills register it) has no gap: the cost follows the documents asked about, not the corpus.
This reads Dagster's own table through its own SQLAlchemy definitions (not public API: dagster is pinned in
pyproject.toml); any other storage falls back to the full listing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg

CHUNK = 500


@contextmanager
def _partitions_table(inst: dg.DagsterInstance) -> Iterator[tuple[Any, Any] | None]:
    """(connection, the dynamic partitions table) on a SQL event log storage, else None."""
    from dagster._core.storage.event_log.schema import DynamicPartitionsTable
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

    storage = inst.event_log_storage
    if not isinstance(storage, SqlEventLogStorage):
        yield None
        return
    with storage.index_connection() as conn:
        yield conn, DynamicPartitionsTable


def _ids(conn: Any, table: Any, name: str, keys: list[str]) -> dict[str, int]:
    import sqlalchemy as db

    found: dict[str, int] = {}
    for lo in range(0, len(keys), CHUNK):
        query = db.select(table.c.partition, table.c.id).where(
            table.c.partitions_def_name == name, table.c.partition.in_(keys[lo:lo + CHUNK]))
        found.update({str(row[0]): int(row[1]) for row in conn.execute(query)})
    return found


def _anything_between(conn: Any, table: Any, name: str, low: int, high: int) -> bool:
    import sqlalchemy as db

    if high == low + 1:
        return False
    query = db.select(table.c.id).where(
        table.c.partitions_def_name == name, table.c.id > low, table.c.id < high).limit(1)
    return conn.execute(query).first() is not None


def positions(inst: dg.DagsterInstance, name: str, keys: Iterable[str]) -> dict[str, int]:
    """{key: position} for those of `keys` that are partitions of `name`: increasing in partition order, and two
    keys' positions differ by exactly 1 when no other partition lies between them (they can share a run's range).
    The numbers are not indexes into the full list."""
    wanted = list(dict.fromkeys(keys))
    with _partitions_table(inst) as found:
        if found is None:
            return _positions_from_listing(inst.get_dynamic_partitions(name), wanted)
        conn, table = found
        ids = _ids(conn, table, name, wanted)
        out: dict[str, int] = {}
        place, previous = 0, None
        for key in sorted(ids, key=ids.__getitem__):
            if previous is not None:
                place += 2 if _anything_between(conn, table, name, ids[previous], ids[key]) else 1
            out[key] = place
            previous = key
        return out


def _positions_from_listing(order: list[str] | tuple[str, ...], wanted: list[str]) -> dict[str, int]:
    want = set(wanted)
    return {k: i for i, k in enumerate(order) if k in want}


def keys_between(inst: dg.DagsterInstance, name: str, first: str, last: str) -> list[str]:
    """The partitions of `name` from `first` to `last` inclusive, in order (what a range run over them holds);
    empty when either end is not a partition (any more)."""
    with _partitions_table(inst) as found:
        if found is None:
            order = list(inst.get_dynamic_partitions(name))
            return order[order.index(first):order.index(last) + 1] if first in order and last in order else []
        import sqlalchemy as db

        conn, table = found
        ids = _ids(conn, table, name, [first, last])
        if first not in ids or last not in ids:
            return []
        query = db.select(table.c.partition).where(
            table.c.partitions_def_name == name, table.c.id >= ids[first], table.c.id <= ids[last]).order_by(table.c.id)
        return [str(row[0]) for row in conn.execute(query)]
