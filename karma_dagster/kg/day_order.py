"""The KG's day order: the KG of a namespace always equals the merge of its dates in ascending order.

Why: MedKGent's day D builds on D-1 (a new entity of D is the node a later day's mention is re-pointed to, an
increment's "before" sizes are the KG as of D-1, a replace supersedes the edge as it stood the day before). Dagster
runs date partitions in whatever order they leave the queue, so an earlier date can reach the KG after later ones.
The rule: when date D merges and dates after D are already merged, their contribution is withdrawn in D's own
transaction (kg/merge.py, `withdraw_later`) and they are merged again after D, in date order (`merge_in_order`).

A date's contribution is every row stamped with it: evidence, new entities, adjudications, contradictions, the
increments row and the merged-documents records (merge_increment stamps each row with the date it merges).
Withdrawn and merged again from the same documents, a date's rows are what an in-order merge writes. Standard SQL on the merge's connection,
so the DuckDB file and the Postgres store alike.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import Any

# Every table whose rows a date's merge writes, stamped with that date (store.py DDL).
DATED_TABLES = ("evidence", "extracted_nodes", "adjudications", "contradictions", "increments", "merged_documents")


def merged_dates(con: Any, namespace: str) -> list[dt.date]:
    """The dates the namespace holds anything of, ascending."""
    union = " UNION ".join(f"SELECT date FROM {t} WHERE namespace = ?" for t in DATED_TABLES)  # noqa: S608
    rows = con.execute(f"SELECT DISTINCT date FROM ({union}) d ORDER BY date", [namespace] * len(DATED_TABLES))
    return [_as_date(r[0]) for r in rows.fetchall()]


def later_merged(con: Any, namespace: str, date: dt.date) -> list[dt.date]:
    """The dates after `date` the namespace already holds: merged too early, they are merged again after it."""
    union = " UNION ".join(f"SELECT date FROM {t} WHERE namespace = ? AND date > ?" for t in DATED_TABLES)  # noqa: S608
    rows = con.execute(f"SELECT DISTINCT date FROM ({union}) d ORDER BY date",
                       [v for _ in DATED_TABLES for v in (namespace, date)])
    return [_as_date(r[0]) for r in rows.fetchall()]


def held_documents(con: Any, namespace: str, dates: Sequence[dt.date]) -> dict[dt.date, list[str]]:
    """date -> the documents the namespace's merges of `dates` took in (what merging them again must carry)."""
    if not dates:
        return {}
    marks = ", ".join("?" * len(dates))
    union = " UNION ".join(f"SELECT date, doc_key FROM {t} WHERE namespace = ? AND date IN ({marks})"  # noqa: S608
                           for t in DATED_TABLES if t != "increments")
    out: dict[dt.date, list[str]] = {}
    for date, key in con.execute(f"SELECT DISTINCT date, doc_key FROM ({union}) d ORDER BY date, doc_key",
                                 [v for _ in range(len(DATED_TABLES) - 1) for v in (namespace, *dates)]).fetchall():
        out.setdefault(_as_date(date), []).append(key)
    return out


def withdrawable(
    con: Any, namespace: str, date: dt.date, can_carry: Callable[[dt.date, list[str]], Iterable[str]]
) -> tuple[dict[dt.date, list[str]], list[str]]:
    """(the dates after `date` already merged -> the documents the KG holds of each, the held documents a merge of
    their date could not carry again). `can_carry(day, held)` says which of a later day's held documents the
    caller's merge of that day would carry (their tables exist). Every merge path withdraws the later dates only
    when the second is empty: a date merged out of order stays so, rather than lose what the KG holds."""
    held = held_documents(con, namespace, later_merged(con, namespace, date))
    lost: list[str] = []
    for day, keys in held.items():
        carried = set(can_carry(day, keys))
        lost += [k for k in keys if k not in carried]
    return held, sorted(lost)


def withdraw(con: Any, namespace: str, dates: Sequence[dt.date]) -> dict[str, int]:
    """Delete everything the namespace's merges of `dates` wrote (call inside the merge's transaction); returns
    the rows removed per table. Edge confidence and counts are views over these rows, so nothing else changes."""
    removed = {table: 0 for table in DATED_TABLES}
    if not dates:
        return removed
    marks = ", ".join("?" * len(dates))
    for table in DATED_TABLES:
        (n,) = con.execute(f"SELECT count(*) FROM {table} WHERE namespace = ? AND date IN ({marks})",  # noqa: S608
                           [namespace, *dates]).fetchall()[0]
        if n:
            con.execute(f"DELETE FROM {table} WHERE namespace = ? AND date IN ({marks})",  # noqa: S608
                        [namespace, *dates])
        removed[table] = int(n)
    return removed


def merge_in_order(
    dates: Iterable[dt.date], merge_one: Callable[[dt.date], Sequence[dt.date]]
) -> list[dt.date]:
    """Merge `dates` earliest first; `merge_one(day)` merges a date and returns the later dates it withdrew, which
    join the dates still to merge (each after the date that withdrew it). Returns the dates merged, in order."""
    pending = set(dates)
    done: list[dt.date] = []
    while pending:
        day = min(pending)
        pending.discard(day)
        withdrawn = list(merge_one(day))
        if any(d <= day for d in withdrawn):
            raise ValueError(f"merge of {day} withdrew a date not after it: {sorted(withdrawn)}")
        pending.update(withdrawn)
        done.append(day)
    return done


def _as_date(value: object) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value))
