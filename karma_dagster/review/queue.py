"""The review queue on disk: items and decisions in one SQLite file under the data dir.

SQLite rather than DuckDB: the web page, the CLI and a sensor open it from different processes at once, and
DuckDB lets only one process hold a writable file. Every write holds a file lock and runs in one transaction;
`decisions.item_id` is the primary key, so of two reviewers deciding one item at the same moment exactly one is
stored and the other is told who decided first. A decision for an item the queue does not hold writes nothing.

One item per fact (models.fact_key): adding a proposal of a fact the queue holds folds it into that item (its
proposals, evidence and best score) instead of adding another; `proposals` maps every proposal id to its item.
A queue written before this is folded once when opened for writing (`_migrate`): the pending items of one fact
become the earliest item of it (a decided one first), every proposal and sentence kept.
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
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review import accepting
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
CREATE TABLE IF NOT EXISTS proposals(proposal_id TEXT PRIMARY KEY, item_id TEXT NOT NULL);
"""
_VERSION = 1  # PRAGMA user_version once the queue holds one item per fact (columns fact, choice, merged_backbones)


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
                        if con.execute("PRAGMA user_version").fetchone()[0] < _VERSION:
                            migrate(con)
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
        """Add new facts, fold a known fact's proposals into its one item (a proposal seen before refreshes its
        scores and change); a decided item keeps what its reviewer saw, and a new backbone's proposal of it is
        listed on it (an accepted fact enters that backbone's KG too)."""
        counts = {"new": 0, "folded": 0, "refreshed": 0, "decided_kept": 0}  # folded: a new proposal, known fact
        now = _now().isoformat()
        with self._connect(write=True) as con:
            decided = {r[0] for r in con.execute("SELECT item_id FROM decisions")}
            by_fact: dict[str, str] = {}  # fact -> its earliest item (two decided items of one fact: the first)
            for i, f in con.execute("SELECT item_id, fact FROM items ORDER BY added_at, item_id"):
                by_fact.setdefault(f, i)
            owner = dict(con.execute("SELECT proposal_id, item_id FROM proposals"))
            for item in items:
                target = owner.get(item.item_id) or by_fact.get(item.fact)
                if target is None:
                    _write(con, item, now, new=True)
                    con.execute("INSERT OR REPLACE INTO proposals VALUES (?, ?)", (item.item_id, item.item_id))
                    by_fact[item.fact] = owner[item.item_id] = item.item_id
                    counts["new"] += 1
                    continue
                stored = ReviewItem.model_validate_json(
                    con.execute("SELECT body FROM items WHERE item_id = ?", (target,)).fetchone()[0])
                known = item.item_id in owner
                if target in decided:
                    counts["decided_kept"] += 1
                    if not known:  # listed; an accepted fact enters the KG again with this proposal's paper too
                        _write(con, stored.model_copy(update={"proposals": _proposals(stored, item)}), now)
                        _unmerge(con, target, stored.backbones, item.backbone)
                else:
                    counts["refreshed" if known else "folded"] += 1
                    _write(con, folded(stored, item), now)
                con.execute("INSERT OR REPLACE INTO proposals VALUES (?, ?)", (item.item_id, target))
                owner[item.item_id] = target
        return counts

    def item_of(self, proposal_id: str) -> str | None:
        """The id of the item a proposal (a per-backbone item id: cogmg_items.completion_item_id) was folded into."""
        with self._connect(write=False) as con:
            row = con.execute("SELECT item_id FROM proposals WHERE proposal_id = ?", (proposal_id,)).fetchone()
        return row[0] if row else None

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
        sql = ("SELECT i.body, " + ", ".join("d." + c for c in _DECISION_COLUMNS.split(", "))
               + " FROM items i LEFT JOIN decisions d USING (item_id)" + where
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
            out = {c: [r[0] for r in con.execute(f"SELECT DISTINCT {c} FROM items ORDER BY 1")]  # noqa: S608
                   for c in ("source", "relation")}
            out["backbone"] = sorted({b for (v,) in con.execute("SELECT DISTINCT backbone FROM items")
                                      for b in v.split(",") if b})
        return out

    # ------------------------------------------------------------ decisions
    def decision(self, item_id: str) -> Decision | None:
        with self._connect(write=False) as con:
            row = con.execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE item_id = ?",  # noqa: S608
                              (item_id,)).fetchone()
        return _decision(row) if row else None

    def decide(self, item_id: str, decision: DecisionIn, *, now: dt.datetime | None = None) -> Decision:
        """Store one decision. UnknownItem, AlreadyDecided or InvalidEdit: nothing is written."""
        with self._connect(write=True) as con:
            row = con.execute("SELECT body FROM items WHERE item_id = ?", (item_id,)).fetchone()
            if row is None:
                raise UnknownItem(f"no review item {item_id!r} in the queue: nothing was written")
            first = con.execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE item_id = ?",  # noqa: S608
                                (item_id,)).fetchone()
            if first is not None:  # checked under the lock; the primary key below is the last guard
                raise AlreadyDecided(_decision(first))
            item = ReviewItem.model_validate_json(row[0])
            edits = _checked_edits(item, decision)
            if decision.action == "accept":
                decision = decision.model_copy(update={"choice": decision.choice or accepting.default_choice(item)})
                try:
                    edits = accepting.chosen_edits(item, decision.choice)
                except ValueError as exc:
                    raise InvalidEdit(str(exc)) from None
            elif decision.choice:
                raise InvalidEdit(f"item {item_id}: a choice ({decision.choice!r}) goes with action 'accept'")
            stored = Decision(item_id=item_id, action=decision.action, reviewer=decision.reviewer,
                              decided_at=now or _now(), edits=edits, choice=decision.choice)
            try:
                con.execute("INSERT INTO decisions (item_id, action, reviewer, decided_at, edits, choice) "
                            "VALUES (?, ?, ?, ?, ?, ?)",
                            (item_id, stored.action, stored.reviewer, stored.decided_at.isoformat(),
                             json.dumps(edits, sort_keys=True), stored.choice))
            except sqlite3.IntegrityError:
                first = con.execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE item_id = ?",  # noqa: S608
                                    (item_id,)).fetchone()
                raise AlreadyDecided(_decision(first)) from None
        return stored

    def accepted(self, *, unmerged_only: bool = False) -> list[tuple[ReviewItem, Decision]]:
        """Accepted (and edit-accepted) items as they were decided: edits applied. `unmerged_only`: those some
        proposing backbone's KG has not taken yet."""
        out = []
        for item, d in self.items(status="decided"):
            if d is not None and d.accepted and not (
                    unmerged_only and all(d.merged_in(b) for b in item.backbones)):
                out.append((final_item(item, d), d))
        return out

    def mark_merged(self, item_ids: Iterable[str], date: dt.date, *, at: dt.datetime | None = None,
                    backbone: str | None = None) -> None:
        """Record the items merged (into `backbone`'s KG; None: every backbone that proposed them)."""
        stamp = (at or _now()).isoformat()
        with self._connect(write=True) as con:
            for i in item_ids:
                row = con.execute("SELECT d.merged_backbones, i.body FROM decisions d JOIN items i USING (item_id) "
                                  "WHERE item_id = ?", (i,)).fetchone()
                if row is None:
                    continue
                item = ReviewItem.model_validate_json(row[1])
                done = [b for b in row[0].split(",") if b] if row[0] else []
                done = item.backbones if backbone is None else list(dict.fromkeys([*done, backbone]))
                con.execute("UPDATE decisions SET merged_at = ?, merge_date = ?, merge_note = '', merged_backbones = ? "
                            "WHERE item_id = ?", (stamp, date.isoformat(), ",".join(done), i))

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
    for column, value in (("i.source", source), ("i.relation", relation)):
        if value:
            where.append(f"{column} = ?")
            args.append(value)
    if backbone:  # items.backbone lists every backbone that proposed the fact, comma-separated
        where.append("instr(',' || i.backbone || ',', ',' || ? || ',') > 0")
        args.append(backbone)
    if min_score is not None:
        where.append("i.score >= ?")
        args.append(min_score)
    if status == "pending":
        where.append("d.item_id IS NULL")
    elif status == "decided":
        where.append("d.item_id IS NOT NULL")
    return (" WHERE " + " AND ".join(where) if where else ""), args


_DECISION_COLUMNS = ("item_id, action, reviewer, decided_at, edits, merged_at, merge_date, merge_note, choice, "
                     "merged_backbones")


def _decision(row: tuple) -> Decision:
    item_id, action, reviewer, decided_at, edits, merged_at, merge_date, note, choice, merged_in = row
    return Decision(item_id=item_id, action=action, reviewer=reviewer, decided_at=dt.datetime.fromisoformat(decided_at),
                    edits=json.loads(edits), merged_at=dt.datetime.fromisoformat(merged_at) if merged_at else None,
                    merge_date=dt.date.fromisoformat(merge_date) if merge_date else None, merge_note=note or "",
                    choice=choice or "", merged_backbones=[b for b in (merged_in or "").split(",") if b])


# ---------------------------------------------------------------- one item per fact
def _proposals(stored: ReviewItem, new: ReviewItem) -> list:
    """The stored item's proposals with `new`'s own (a proposal seen before is replaced by its fresh copy)."""
    mine = new.own_proposal()
    kept = [p for p in stored.all_proposals() if p.proposal_id != mine.proposal_id]
    at = next((k for k, p in enumerate(stored.all_proposals()) if p.proposal_id == mine.proposal_id), len(kept))
    return [*kept[:at], mine, *kept[at:]]


def folded(stored: ReviewItem, new: ReviewItem) -> ReviewItem:
    """One fact's item with another proposal of it: every proposal and sentence, the best score, the notes told
    apart; the item keeps its id and first proposal (refreshed when `new` is that proposal again)."""
    base = new if new.item_id == stored.item_id else stored
    notes = list(dict.fromkeys(n for n in (*stored.note.split(" || "), new.note) if n))
    proposals = _proposals(stored, new)
    return base.model_copy(update={
        "item_id": stored.item_id, "proposals": proposals, "score": max(p.score for p in proposals),
        "evidence": stored.evidence + [e for e in new.evidence if e not in stored.evidence],
        "note": " || ".join(notes), "contradicts": stored.contradicts or new.contradicts,
        "scores": {**new.scores, **stored.scores} if base is stored else {**stored.scores, **new.scores},
        "change": new.change or stored.change})


def _unmerge(con: sqlite3.Connection, item_id: str, backbones: list[str], backbone: str) -> None:
    """A decided item got a new proposal from `backbone`: its KG document there changes, so it is merged again."""
    row = con.execute(f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE item_id = ?", (item_id,)).fetchone()  # noqa: S608
    d = _decision(row)
    done = [b for b in backbones if d.merged_in(b) and b != backbone]
    con.execute("UPDATE decisions SET merged_backbones = ?, merged_at = CASE WHEN ? = '' THEN NULL ELSE merged_at END "
                "WHERE item_id = ?", (",".join(done), ",".join(done), item_id))


def _write(con: sqlite3.Connection, item: ReviewItem, now: str, *, new: bool = False) -> None:
    row = (item.source, ",".join(item.backbones), item.relation, item.score, item.origin, item.model_dump_json(),
           item.fact)
    if new:
        con.execute("INSERT INTO items (source, backbone, relation, score, origin, body, fact, item_id, added_at, "
                    "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (*row, item.item_id, now, now))
    else:
        con.execute("UPDATE items SET source=?, backbone=?, relation=?, score=?, origin=?, body=?, fact=?, "
                    "updated_at=? WHERE item_id=?", (*row, now, item.item_id))


def migrate(con: sqlite3.Connection) -> dict[str, int]:
    """Bring a queue written before one-item-per-fact up to it, in the caller's transaction: the new columns,
    each item's fact, and the pending items of one fact folded into its earliest item (a decided one first, its
    decision kept); every folded item's proposals and sentences are kept on the survivor and its id maps to it.
    Two decided items of one fact stay two (each decision and its KG document stand). Returns what it did."""
    for table, column, ddl in (("items", "fact", "TEXT"), ("decisions", "choice", "TEXT NOT NULL DEFAULT ''"),
                               ("decisions", "merged_backbones", "TEXT NOT NULL DEFAULT ''")):
        if column not in {r[1] for r in con.execute(f"PRAGMA table_info({table})")}:  # noqa: S608 - fixed names
            con.execute(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}")
    con.execute("CREATE INDEX IF NOT EXISTS items_fact ON items(fact)")
    decided = {r[0] for r in con.execute("SELECT item_id FROM decisions")}
    rows = con.execute("SELECT item_id, body, added_at FROM items ORDER BY added_at, item_id").fetchall()
    groups: dict[str, list[ReviewItem]] = {}
    for item_id, body, _ in rows:
        item = ReviewItem.model_validate_json(body)
        groups.setdefault(item.fact, []).append(item)
    now = _now().isoformat()
    out = {"items_before": len(rows), "folded": 0, "facts": len(groups), "decided_twice": 0}
    for members in groups.values():
        survivor = next((m for m in members if m.item_id in decided), members[0])
        out["decided_twice"] += max(0, sum(m.item_id in decided for m in members) - 1)
        kept = survivor
        for m in members:
            con.execute("INSERT OR IGNORE INTO proposals VALUES (?, ?)", (m.item_id, m.item_id))
            if m is survivor or m.item_id in decided:
                continue
            if survivor.item_id in decided:  # what the reviewer saw stays; the proposal is listed
                kept = kept.model_copy(update={"proposals": _proposals(kept, m)})
            else:
                kept = folded(kept, m)
            for p in m.all_proposals():
                con.execute("INSERT OR REPLACE INTO proposals VALUES (?, ?)", (p.proposal_id, survivor.item_id))
            con.execute("DELETE FROM items WHERE item_id = ?", (m.item_id,))
            out["folded"] += 1
        _write(con, kept, now)
    con.execute(f"PRAGMA user_version = {_VERSION}")
    return out
