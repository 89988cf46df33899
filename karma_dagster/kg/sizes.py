"""A namespace's edge count for the merge's increments row (edges_before / edges_after), kept instead of counted.

Why: count(*) of kg_edges aggregates every edge of the namespace (~2 s at 1M edges, three times per merge before).
A merge knows which edges it can change (kg/merge.py), so it updates the count from those and stores it in
`kg_sizes` with the state it was counted in: seed row counts and, for the namespace, the count and latest
merged_at of its evidence and of its replace adjudications (the rows an edge's existence depends on; reading them
costs a few ms at 1M rows). Any other change of those rows (a removed document, a seed re-import, which also
empties the table, a hand edit) changes the state, and the next merge counts the whole graph once, as before.
Known blind spot: rows deleted and as many inserted by hand with older merged_at values than the newest kept.
"""

from __future__ import annotations

from typing import Any

SIZES_DDL = ("CREATE TABLE IF NOT EXISTS kg_sizes(namespace VARCHAR PRIMARY KEY, n_edges BIGINT NOT NULL, "
             "state VARCHAR NOT NULL)")  # also in store.SEED_DDL (new files); here for files made before it

_STATE_SQL = """
SELECT (SELECT count(*) FROM seed_nodes), (SELECT count(*) FROM seed_edges),
    (SELECT count(*) FROM evidence WHERE namespace = ?), (SELECT max(merged_at) FROM evidence WHERE namespace = ?),
    (SELECT count(*) FROM adjudications WHERE namespace = ? AND action = 'replace'),
    (SELECT max(merged_at) FROM adjudications WHERE namespace = ? AND action = 'replace')
"""


def state(con: Any, namespace: str) -> str:
    """What the namespace's edge count depends on, summarized (changes with any insert or delete of those rows)."""
    return "|".join(str(v) for v in con.execute(_STATE_SQL, [namespace] * 4).fetchall()[0])


def full_edge_count(con: Any, namespace: str) -> int:
    return int(con.execute("SELECT count(*) FROM kg_edges(?)", [namespace]).fetchall()[0][0])


def edge_count(con: Any, namespace: str) -> int:
    """count(*) of kg_edges(namespace): the kept count when the state still matches, else counted (and not kept:
    the merge that asks records its own result)."""
    con.execute(SIZES_DDL)
    rows = con.execute("SELECT n_edges, state FROM kg_sizes WHERE namespace = ?", [namespace]).fetchall()
    if rows and rows[0][1] == state(con, namespace):
        return int(rows[0][0])
    return full_edge_count(con, namespace)


def record_edge_count(con: Any, namespace: str, n_edges: int) -> None:
    """Keep the namespace's edge count with the current state (call after the merge's last write)."""
    con.execute(SIZES_DDL)
    con.execute("INSERT INTO kg_sizes VALUES (?, ?, ?) ON CONFLICT (namespace) DO UPDATE SET n_edges = "
                "excluded.n_edges, state = excluded.state", [namespace, n_edges, state(con, namespace)])
