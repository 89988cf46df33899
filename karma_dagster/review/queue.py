"""The review queue on disk: items and decisions in one SQLite file under the data dir.

SQLite rather than DuckDB: the web page, the CLI and a sensor open it from different processes at once, and
DuckDB lets only one process hold a writable file. Every write holds a file lock and runs in one transaction;
`decisions.item_id` is the primary key, so of two reviewers deciding one item at the same moment exactly one is
stored and the other is told who decided first. A decision for an item the queue does not hold writes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from karma_dagster.kg import names as kg_names
from karma_dagster.kg.store import schema_relations
from karma_dagster.paths import DataPaths
from karma_dagster.review.models import STATUSES, Decision, DecisionIn, QueueCounts, ReviewItem

_DDL = """
CREATE TABLE IF NOT EXISTS items(
    item_id TEXT PRIMARY KEY, source TEXT NOT NULL, backbone TEXT NOT NULL, relation TEXT NOT NULL,
    score REAL NOT NULL, origin TEXT NOT NULL, body TEXT NOT NULL, added_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS decisions(
    item_id TEXT PRIMARY KEY REFERENCES items(item_id),
    action TEXT NOT NULL CHECK (action IN ('accept', 'edit', 'reject')),
    reviewer TEXT NOT NULL, decided_at TEXT NOT NULL, edits TEXT NOT NULL, merged_at TEXT, merge_date TEXT,
    merge_note TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS items_order ON items(score DESC, item_id);
"""


_SCHEMA_READY: set[str] = set()  # queue files whose tables this process has seen created


class ReviewError(ValueError):
    """A decision the queue refuses; nothing was written."""


class UnknownItem(ReviewError):
    pass


class AlreadyDecided(ReviewError):
    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        super().__init__(f"item {decision.item_id} was already decided ({decision.action}) by {decision.reviewer} at "
                         f"{decision.decided_at:%Y-%m-%d %H:%M:%S} UTC; a decision is final, nothing was changed")


class InvalidEdit(ReviewError):
    pass


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)


def default_path(paths: DataPaths) -> Path:
    return paths.root / "review" / "queue.sqlite"


class ReviewQueue:
    def __init__(self, path: Path | str, lock_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self._lock = FileLock(str(self.path) + ".lock", timeout=lock_timeout)

    @classmethod
    def for_data(cls, paths: DataPaths) -> "ReviewQueue":
        return cls(default_path(paths))

    # ------------------------------------------------------------ connection
    def _ensure_schema(self) -> None:
        """The tables exist before a reader opens the file. The file existing is not enough: a writer in another
        process creates it (sqlite3.connect) a moment before its DDL runs, and a reader then met "no such table:
        items" (seen with four KG increments merging at once). Checked under the writers' lock once per process."""
        key = str(self.path.resolve())
        if key in _SCHEMA_READY and self.path.exists():
            return
        with self._connect(write=True):
            pass
        _SCHEMA_READY.add(key)

    @contextmanager
    def _connect(self, write: bool) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if write:
            with self._lock:
                con = sqlite3.connect(self.path, timeout=30, isolation_level=None)
                try:
                    con.execute("PRAGMA journal_mode=WAL")
                    con.executescript(_DDL)
                    con.execute("BEGIN IMMEDIATE")
                    try:
                        yield con
                        con.execute("COMMIT")
                    except BaseException:
                        con.execute("ROLLBACK")
                        raise
                finally:
                    con.close()
        else:
            self._ensure_schema()
            con = sqlite3.connect(self.path, timeout=30)
            try:
                yield con
            finally:
                con.close()

    # ------------------------------------------------------------ items
    def add_items(self, items: Iterable[ReviewItem]) -> dict[str, int]:
        """Add new items, refresh undecided ones (scores, change); a decided item keeps what its reviewer saw."""
        counts = {"new": 0, "refreshed": 0, "decided_kept": 0}
        now = _now().isoformat()
        with self._connect(write=True) as con:
            decided = {r[0] for r in con.execute("SELECT item_id FROM decisions")}
            existing = {r[0] for r in con.execute("SELECT item_id FROM items")}
            for item in items:
                if item.item_id in decided:
                    counts["decided_kept"] += 1
                    continue
                row = (item.source, item.backbone, item.relation, item.score, item.origin, item.model_dump_json())
                if item.item_id in existing:
                    con.execute("UPDATE items SET source=?, backbone=?, relation=?, score=?, origin=?, body=?, "
                                "updated_at=? WHERE item_id=?", (*row, now, item.item_id))
                    counts["refreshed"] += 1
                else:
                    con.execute("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (item.item_id, *row, now, now))
                    existing.add(item.item_id)
                    counts["new"] += 1
        return counts

    def item(self, item_id: str) -> ReviewItem:
        with self._connect(write=False) as con:
            row = con.execute("SELECT body FROM items WHERE item_id = ?", (item_id,)).fetchone()
        if row is None:
            raise UnknownItem(f"no review item {item_id!r} in the queue: nothing was written")
        return ReviewItem.model_validate_json(row[0])

    def items(
        self, *, source: str | None = None, relation: str | None = None, min_score: float | None = None,
        status: str = "pending", backbone: str | None = None, limit: int | None = None, offset: int = 0,
    ) -> list[tuple[ReviewItem, Decision | None]]:
        """The queue, best score first (then item id: a total order a decision never changes, so pages hold still).
        status: pending (undecided), decided, or all; `limit`/`offset` take one page of it."""
        where, args = _where(source, relation, min_score, status, backbone)
        sql = ("SELECT i.body, d.item_id, d.action, d.reviewer, d.decided_at, d.edits, d.merged_at, d.merge_date, "
               "d.merge_note FROM items i LEFT JOIN decisions d USING (item_id)" + where
               + " ORDER BY i.score DESC, i.item_id")
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            args += [int(limit), int(offset)]
        with self._connect(write=False) as con:
            rows = con.execute(sql, args).fetchall()
        return [(ReviewItem.model_validate_json(r[0]), _decision(r[1:]) if r[1] else None) for r in rows]

    def counts(
        self, *, source: str | None = None, relation: str | None = None, min_score: float | None = None,
        backbone: str | None = None,
    ) -> QueueCounts:
        """Items per source and state (pending or the decision's action) under these filters, in one query."""
        where, args = _where(source, relation, min_score, "all", backbone)
        sql = ("SELECT i.source, COALESCE(d.action, 'pending'), COUNT(*) FROM items i LEFT JOIN decisions d "
               "USING (item_id)" + where + " GROUP BY 1, 2")
        out: dict[str, dict[str, int]] = {}
        with self._connect(write=False) as con:
            for src, state, n in con.execute(sql, args):
                out.setdefault(src, {})[state] = n
        return QueueCounts(by_source=out)

    def facets(self) -> dict[str, list[str]]:
        """The values the page's filters offer."""
        with self._connect(write=False) as con:
            return {c: [r[0] for r in con.execute(f"SELECT DISTINCT {c} FROM items ORDER BY 1")]  # noqa: S608
                    for c in ("source", "relation", "backbone")}

    # ------------------------------------------------------------ decisions
    def decision(self, item_id: str) -> Decision | None:
        with self._connect(write=False) as con:
            row = con.execute("SELECT item_id, action, reviewer, decided_at, edits, merged_at, merge_date, merge_note "
                              "FROM decisions WHERE item_id = ?", (item_id,)).fetchone()
        return _decision(row) if row else None

    def decide(self, item_id: str, decision: DecisionIn, *, now: dt.datetime | None = None) -> Decision:
        """Store one decision. UnknownItem, AlreadyDecided or InvalidEdit: nothing is written."""
        with self._connect(write=True) as con:
            row = con.execute("SELECT body FROM items WHERE item_id = ?", (item_id,)).fetchone()
            if row is None:
                raise UnknownItem(f"no review item {item_id!r} in the queue: nothing was written")
            first = con.execute("SELECT item_id, action, reviewer, decided_at, edits, merged_at, merge_date, merge_note "
                                "FROM decisions WHERE item_id = ?", (item_id,)).fetchone()
            if first is not None:  # checked under the lock; the primary key below is the last guard
                raise AlreadyDecided(_decision(first))
            item = ReviewItem.model_validate_json(row[0])
            edits = _checked_edits(item, decision)
            stored = Decision(item_id=item_id, action=decision.action, reviewer=decision.reviewer,
                              decided_at=now or _now(), edits=edits)
            try:
                con.execute("INSERT INTO decisions (item_id, action, reviewer, decided_at, edits) "
                            "VALUES (?, ?, ?, ?, ?)",
                            (item_id, stored.action, stored.reviewer, stored.decided_at.isoformat(),
                             json.dumps(edits, sort_keys=True)))
            except sqlite3.IntegrityError:
                first = con.execute("SELECT item_id, action, reviewer, decided_at, edits, merged_at, merge_date, "
                                    "merge_note FROM decisions WHERE item_id = ?", (item_id,)).fetchone()
                raise AlreadyDecided(_decision(first)) from None
        return stored

    def accepted(self, *, unmerged_only: bool = False) -> list[tuple[ReviewItem, Decision]]:
        """Accepted (and edit-accepted) items as they were decided: edits applied."""
        out = []
        for item, d in self.items(status="decided"):
            if d is not None and d.accepted and not (unmerged_only and d.merged_at is not None):
                out.append((final_item(item, d), d))
        return out

    def mark_merged(self, item_ids: Iterable[str], date: dt.date, *, at: dt.datetime | None = None) -> None:
        stamp = (at or _now()).isoformat()
        with self._connect(write=True) as con:
            con.executemany("UPDATE decisions SET merged_at = ?, merge_date = ?, merge_note = '' WHERE item_id = ?",
                            [(stamp, date.isoformat(), i) for i in item_ids])

    def note(self, item_id: str, note: str) -> None:
        """Why an accepted item has not entered the KG (shown on the page; the merge tries again next time)."""
        with self._connect(write=True) as con:
            con.execute("UPDATE decisions SET merge_note = ? WHERE item_id = ?", (note, item_id))


def final_item(item: ReviewItem, decision: Decision) -> ReviewItem:
    """The item as accepted: the reviewer's edits applied."""
    if not decision.edits:
        return item
    return item.model_copy(update={k: new for k, (_, new) in decision.edits.items()})


def _checked_edits(item: ReviewItem, decision: DecisionIn) -> dict[str, list[str]]:
    if decision.action != "edit":
        if decision.edits:
            raise InvalidEdit(f"edits are given with action {decision.action!r}: use action 'edit' to edit then accept")
        return {}
    edits = {k: [str(getattr(item, k)), v] for k, v in decision.edits.items() if v != str(getattr(item, k))}
    if not edits:
        raise InvalidEdit(f"item {item.item_id}: the edit changes nothing; accept it as it is instead")
    for field, (_, new) in edits.items():
        try:
            if field.endswith("_id"):
                kg_names.exact(new, f"edited {field}")
            else:
                kg_names.checked(new, f"edited {field}", kg_names.LABEL_MAX_CHARS if field == "relation" else
                                 kg_names.NAME_MAX_CHARS)
        except kg_names.NameRejected as exc:
            raise InvalidEdit(f"item {item.item_id}: {exc}") from exc
    relation = edits.get("relation", [None, None])[1]
    if relation is not None and item.source != "new_relation_type" and relation not in schema_relations():
        raise InvalidEdit(f"item {item.item_id}: edited relation {relation!r} is not a KG schema relation "
                          f"({', '.join(sorted(schema_relations()))})")
    return edits


def _where(source: str | None, relation: str | None, min_score: float | None, status: str,
           backbone: str | None) -> tuple[str, list]:
    """The WHERE clause the list and its counts share (items `i` left-joined with decisions `d`)."""
    if status not in STATUSES:
        raise ReviewError(f"status {status!r}: use pending, decided or all")
    where, args = [], []
    for column, value in (("i.source", source), ("i.relation", relation), ("i.backbone", backbone)):
        if value:
            where.append(f"{column} = ?")
            args.append(value)
    if min_score is not None:
        where.append("i.score >= ?")
        args.append(min_score)
    if status == "pending":
        where.append("d.item_id IS NULL")
    elif status == "decided":
        where.append("d.item_id IS NOT NULL")
    return (" WHERE " + " AND ".join(where) if where else ""), args


def _decision(row: tuple) -> Decision:
    item_id, action, reviewer, decided_at, edits, merged_at, merge_date, note = row
    return Decision(item_id=item_id, action=action, reviewer=reviewer, decided_at=dt.datetime.fromisoformat(decided_at),
                    edits=json.loads(edits), merged_at=dt.datetime.fromisoformat(merged_at) if merged_at else None,
                    merge_date=dt.date.fromisoformat(merge_date) if merge_date else None, merge_note=note or "")
