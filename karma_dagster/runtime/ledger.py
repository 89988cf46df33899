"""The cost ledger: one row per (run, partition, backbone, agent) with calls, cache hits, tokens and cost.

Asset metadata shows one materialization; the ledger answers "what did this backfill / this backbone cost"
across runs without walking the event log. sqlite in WAL mode in the data dir: several run processes append at
once (short-lived connections, a busy timeout), readers never block them. A step retried inside the same run
replaces its row; a failed step's spend is kept too (status 'failed'), since a failure is paid for as well.
`cost_usd` is NULL when the model has no price in litellm's map (tokens only, never an invented figure).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.backbones.base import Usage
from karma_dagster.runtime.integrity import check_sqlite, sqlite_guarded

LEDGER_FILE = "ledger.sqlite"
LEDGER_REMEDY = "restore it from a backup, or move it away (a new ledger starts empty: past spend is then not counted)"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    run_id TEXT NOT NULL,
    partition TEXT NOT NULL,
    backbone TEXT NOT NULL,
    agent TEXT NOT NULL,
    stage TEXT NOT NULL,
    status TEXT NOT NULL,
    calls INTEGER NOT NULL,
    cache_hits INTEGER NOT NULL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    cost_usd REAL,
    invalid_items INTEGER NOT NULL,
    recorded_at REAL NOT NULL,
    PRIMARY KEY (run_id, partition, backbone, agent)
)
"""

GROUPS = ("backbone", "agent", "stage", "partition", "run_id", "status")


class LedgerRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str = Field(min_length=1)
    partition: str
    backbone: str = Field(min_length=1)
    agent: str = Field(min_length=1)
    stage: str = Field(min_length=1)
    status: Literal["materialized", "failed"] = "materialized"
    calls: int = Field(0, ge=0)
    cache_hits: int = Field(0, ge=0)
    tokens_in: int = Field(0, ge=0)
    tokens_out: int = Field(0, ge=0)
    cost_usd: float | None = None
    invalid_items: int = Field(0, ge=0)

    @classmethod
    def from_usage(cls, usage: Usage, **keys: str) -> "LedgerRow":
        return cls(**keys, calls=usage.calls, cache_hits=usage.cache_hits, tokens_in=usage.prompt_tokens,
                   tokens_out=usage.completion_tokens, cost_usd=usage.cost_usd, invalid_items=usage.invalid_items)


class LedgerTotal(BaseModel):
    """Sums over a group; `cost_usd` covers the priced rows, `unpriced_rows` says how many had no price."""

    group: dict[str, str]
    rows: int
    calls: int
    cache_hits: int
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    unpriced_rows: int


def ledger_path(data_dir: Path | str) -> Path:
    return Path(data_dir) / LEDGER_FILE


class Ledger:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._open()

    @sqlite_guarded("cost ledger", LEDGER_REMEDY)
    def _open(self) -> None:
        conn = self._connect()
        try:
            check_sqlite(conn, self.path, "cost ledger", ("ledger",), LEDGER_REMEDY)  # before anything writes to it
            conn.execute("PRAGMA journal_mode=WAL")
            with conn:
                conn.execute(_SCHEMA)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60)
        conn.execute("PRAGMA busy_timeout=60000")
        return conn

    def record(self, row: LedgerRow) -> None:
        self.record_many([row])

    @sqlite_guarded("cost ledger", LEDGER_REMEDY)
    def record_many(self, rows: Sequence[LedgerRow]) -> None:
        """All `rows` in one transaction (a batch of documents books its step's rows at once: one commit)."""
        now = time.time()
        conn = self._connect()
        try:
            with conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO ledger (run_id, partition, backbone, agent, stage, status, calls, "
                    "cache_hits, tokens_in, tokens_out, cost_usd, invalid_items, recorded_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(row.run_id, row.partition, row.backbone, row.agent, row.stage, row.status, row.calls,
                      row.cache_hits, row.tokens_in, row.tokens_out, row.cost_usd, row.invalid_items, now)
                     for row in rows],
                )
        finally:
            conn.close()

    @sqlite_guarded("cost ledger", LEDGER_REMEDY)
    def rows(self, *, run_id: str | None = None, backbone: str | None = None) -> list[LedgerRow]:
        where, args = self._where(run_id, backbone)
        conn = self._connect()
        try:
            cur = conn.execute(
                "SELECT run_id, partition, backbone, agent, stage, status, calls, cache_hits, tokens_in, tokens_out,"
                f" cost_usd, invalid_items FROM ledger{where} ORDER BY recorded_at, run_id, partition, agent", args)
            names = [d[0] for d in cur.description]
            return [LedgerRow(**dict(zip(names, r))) for r in cur.fetchall()]
        finally:
            conn.close()

    @sqlite_guarded("cost ledger", LEDGER_REMEDY)
    def totals(self, by: Sequence[str] = ("backbone", "agent"), *, run_id: str | None = None,
               backbone: str | None = None) -> list[LedgerTotal]:
        bad = [g for g in by if g not in GROUPS]
        if bad or not by:
            raise ValueError(f"ledger totals: group by {list(by)}; allowed columns are {list(GROUPS)}")
        cols = ", ".join(by)
        where, args = self._where(run_id, backbone)
        conn = self._connect()
        try:
            found = conn.execute(
                f"SELECT {cols}, count(*), sum(calls), sum(cache_hits), sum(tokens_in), sum(tokens_out), "
                f"sum(cost_usd), sum(cost_usd IS NULL) FROM ledger{where} GROUP BY {cols} ORDER BY {cols}", args
            ).fetchall()
        finally:
            conn.close()
        n = len(by)
        return [LedgerTotal(group=dict(zip(by, r[:n])), rows=r[n], calls=r[n + 1], cache_hits=r[n + 2],
                            tokens_in=r[n + 3], tokens_out=r[n + 4], cost_usd=r[n + 5], unpriced_rows=r[n + 6])
                for r in found]

    @sqlite_guarded("cost ledger", LEDGER_REMEDY)
    def tokens_per_document(self) -> tuple[float, int]:
        """(mean tokens in + out per document over every backbone and agent, documents counted): the Central
        Controller's cost estimate starts from it. Only document partitions count (their keys hold a '_'; the KG
        increments' date partitions spend no tokens); failed steps count too, they were paid for."""
        conn = self._connect()
        try:
            n, tokens = conn.execute(
                "SELECT count(DISTINCT partition), coalesce(sum(tokens_in + tokens_out), 0) FROM ledger "
                "WHERE partition LIKE '%!_%' ESCAPE '!'"
            ).fetchone()
        finally:
            conn.close()
        return (tokens / n if n else 0.0), n

    @staticmethod
    def _where(run_id: str | None, backbone: str | None) -> tuple[str, list[str]]:
        clauses, args = [], []
        if run_id:
            clauses.append("run_id = ?")
            args.append(run_id)
        if backbone:
            clauses.append("backbone = ?")
            args.append(backbone)
        return (" WHERE " + " AND ".join(clauses) if clauses else "", args)


def format_failed(totals: Sequence[LedgerTotal]) -> str:
    """One line of what failed stages spent (from totals grouped by status); '' when none failed."""
    failed = [t for t in totals if t.group.get("status") == "failed"]
    if not failed:
        return ""
    t = failed[0]
    cost = "unpriced" if t.cost_usd is None else f"{t.cost_usd:.6f}" + (" +?" if t.unpriced_rows else "")
    return (f"of which spent on failed stages: {t.rows} rows, {t.calls} calls, {t.tokens_in} tokens in, "
            f"{t.tokens_out} tokens out, cost_usd {cost} (`--by ...,status` shows them)")


def format_totals(totals: Sequence[LedgerTotal]) -> str:
    """A plain-text table; cost shows 'unpriced' where no row had a price and '+?' where some rows lacked one."""
    if not totals:
        return "(the ledger is empty: no stage has been materialized in this data dir)"
    keys = list(totals[0].group)
    header = [*keys, "rows", "calls", "cache_hits", "tokens_in", "tokens_out", "cost_usd"]

    def cost(t: LedgerTotal) -> str:
        if t.cost_usd is None:
            return "unpriced"
        return f"{t.cost_usd:.6f}" + (" +?" if t.unpriced_rows else "")

    body = [[*(t.group[k] for k in keys), str(t.rows), str(t.calls), str(t.cache_hits), str(t.tokens_in),
             str(t.tokens_out), cost(t)] for t in totals]
    grand = LedgerTotal(
        group={k: "" for k in keys}, rows=sum(t.rows for t in totals), calls=sum(t.calls for t in totals),
        cache_hits=sum(t.cache_hits for t in totals), tokens_in=sum(t.tokens_in for t in totals),
        tokens_out=sum(t.tokens_out for t in totals),
        cost_usd=None if all(t.cost_usd is None for t in totals) else sum(t.cost_usd or 0.0 for t in totals),
        unpriced_rows=sum(t.unpriced_rows for t in totals),
    )
    body.append(["TOTAL", *([""] * (len(keys) - 1)), str(grand.rows), str(grand.calls), str(grand.cache_hits),
                 str(grand.tokens_in), str(grand.tokens_out), cost(grand)])
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) if i < len(keys) else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])
