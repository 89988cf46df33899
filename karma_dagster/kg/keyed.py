"""Reads of the KG restricted to given edges or nodes: what a merge touches and what a conflict check looks up.

Why not the views: `kg_edges` / `kg_nodes` aggregate the whole namespace before any filter applies, so one lookup
cost 2-3 s at 1M edges (bench/kg_scale.py: one pair 3.2 s before, 75-90 ms after, ~30 ms of it opening the file).
Every figure of an edge depends only on that edge's own rows (seed row, evidence, supersessions), so reading just
the rows of the wanted (head, tail) pairs and aggregating them gives the same answer as the view; the rows are found by a join on a VALUES list (no full aggregation, no temp table). The
semantics are kg_edges_all's (store.py): seed + evidence dated <= as_of, support dated on or before the edge's
latest supersession (<= as_of) left out, one factor per paper (kg/reinforcement.py). Standard SQL only (no
macros), so it runs on any engine the store does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, NamedTuple

from karma_dagster.kg import reinforcement
from karma_dagster.kg.edges import EdgeFacts

Edge = tuple[str, str, str]


class _Row(NamedTuple):
    score: float
    date: dt.date | None
    doc_key: str | None  # None: the seed row
    paper_key: str | None
    is_seed: bool

_CHUNK = 500  # pairs per statement: bounded parameter lists

# One row per live support of an edge between the given pairs: (head, relation, tail, score, date, doc_key,
# paper_key, seed).
_SUPPORT_SQL = """
WITH p(head_id, tail_id) AS (VALUES {values}),
sup AS (
    SELECT a.against_head_id AS head_id, a.against_relation AS relation, a.against_tail_id AS tail_id,
        max(a.date) AS superseded_on
    FROM adjudications a JOIN p ON p.head_id = a.against_head_id AND p.tail_id = a.against_tail_id
    WHERE a.action = 'replace' AND a.namespace = ? AND (CAST(? AS DATE) IS NULL OR a.date <= CAST(? AS DATE))
    GROUP BY a.against_head_id, a.against_relation, a.against_tail_id),
c AS (
    SELECT s.head_id, s.relation, s.tail_id, s.confidence AS s, CAST(NULL AS DATE) AS date,
        CAST(NULL AS VARCHAR) AS doc_key, CAST(NULL AS VARCHAR) AS paper_key, TRUE AS is_seed
    FROM seed_edges s JOIN p ON p.head_id = s.head_id AND p.tail_id = s.tail_id
    UNION ALL
    SELECT e.head_id, e.relation, e.tail_id, e.score, e.date, e.doc_key, e.paper_key, FALSE
    FROM evidence e JOIN p ON p.head_id = e.head_id AND p.tail_id = e.tail_id
    WHERE e.namespace = ? AND (CAST(? AS DATE) IS NULL OR e.date <= CAST(? AS DATE)))
SELECT c.head_id, c.relation, c.tail_id, c.s, c.date, c.doc_key, c.paper_key, c.is_seed
FROM c LEFT JOIN sup x ON x.head_id = c.head_id AND x.relation = c.relation AND x.tail_id = c.tail_id
WHERE x.superseded_on IS NULL OR c.date > x.superseded_on
"""


def _chunks(items: list[Any], size: int = _CHUNK) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def edge_facts(
    con: Any, pairs: Iterable[tuple[str, str]], namespace: str, as_of: dt.date | None = None
) -> dict[Edge, EdgeFacts]:
    """The namespace's edges head -> tail for the given pairs, as kg_edges(namespace, as_of) states them."""
    support: dict[Edge, list[_Row]] = {}
    for chunk in _chunks(sorted(set(pairs))):
        sql = _SUPPORT_SQL.format(values=", ".join(["(CAST(? AS VARCHAR), CAST(? AS VARCHAR))"] * len(chunk)))
        params = [x for pair in chunk for x in pair] + [namespace, as_of, as_of] * 2
        for h, r, t, s, date, doc, paper, seed in con.execute(sql, params).fetchall():
            support.setdefault((h, r, t), []).append(_Row(float(s), date, doc, paper, bool(seed)))
    return {edge: _aggregate(edge, rows) for edge, rows in support.items()}


def _aggregate(edge: Edge, rows: list[_Row]) -> EdgeFacts:
    """kg_edges_all's figures over one edge's live rows: the seed and one factor per paper (kg/reinforcement.py),
    first/last evidence date, counts."""
    seed = next((r.score for r in rows if r.is_seed), None)
    readings = [reinforcement.reading(r.doc_key, r.paper_key, r.score) for r in rows if r.doc_key is not None]
    dates = [r.date for r in rows if r.date is not None]
    return EdgeFacts(head_id=edge[0], relation=edge[1], tail_id=edge[2],
                     confidence=reinforcement.confidence(seed, readings),
                     first_seen=min(dates, default=None), last_seen=max(dates, default=None),
                     n_evidence=len(readings), in_seed=seed is not None,
                     n_docs=len({r.paper for r in readings}))


# The evidence sentences of given edges, newest first (what the conflict agent's debate shows for the KG's side).
_SENTENCES_SQL = """
WITH w(head_id, relation, tail_id) AS (VALUES {values})
SELECT e.head_id, e.relation, e.tail_id, e.evidence
FROM evidence e JOIN w ON w.head_id = e.head_id AND w.relation = e.relation AND w.tail_id = e.tail_id
WHERE e.namespace = ? AND (CAST(? AS DATE) IS NULL OR e.date <= CAST(? AS DATE))
ORDER BY e.date DESC, e.doc_key, e.triple_id
"""


def edge_sentences(con: Any, edges: Iterable[Edge], namespace: str, as_of: dt.date | None = None,
                   per_edge: int = 3) -> dict[Edge, list[str]]:
    """Up to `per_edge` distinct evidence sentences of each edge dated <= as_of, newest first (a seed-only edge has
    none)."""
    out: dict[Edge, list[str]] = {}
    for chunk in _chunks(sorted(set(edges))):
        sql = _SENTENCES_SQL.format(values=", ".join(
            ["(CAST(? AS VARCHAR), CAST(? AS VARCHAR), CAST(? AS VARCHAR))"] * len(chunk)))
        for h, r, t, sentence in con.execute(sql, [x for e in chunk for x in e] + [namespace, as_of, as_of]).fetchall():
            said = out.setdefault((h, r, t), [])
            if len(said) < per_edge and sentence not in said:
                said.append(sentence)
    return out


def live_edges(con: Any, edges: Iterable[Edge], namespace: str, as_of: dt.date | None = None) -> set[Edge]:
    """Which of the edges the namespace's graph holds (as of the date): a row of kg_edges, seed or evidence."""
    wanted = set(edges)
    found = edge_facts(con, {(h, t) for h, _, t in wanted}, namespace, as_of)
    return wanted & found.keys()


# kind of each given id in a namespace: the seed's, else its first extracted row's (by date, doc_key), as kg_nodes
_KINDS_SQL = """
WITH ids(id) AS (VALUES {values})
SELECT s.id, s.kind, TRUE AS in_seed FROM seed_nodes s JOIN ids ON ids.id = s.id
UNION ALL
SELECT id, kind, FALSE FROM (
    SELECT x.id, x.kind, row_number() OVER (PARTITION BY x.id ORDER BY x.date, x.doc_key) AS rn
    FROM extracted_nodes x JOIN ids ON ids.id = x.id
    WHERE x.namespace = ? AND x.id NOT IN (SELECT id FROM seed_nodes)) first_rows
WHERE rn = 1
"""


def known_nodes(con: Any, ids: Iterable[str], namespace: str) -> tuple[dict[str, str], set[str]]:
    """(id -> kind, seed ids) for those ids that are nodes of the namespace (seed or extracted), in one query."""
    kinds: dict[str, str] = {}
    seed: set[str] = set()
    for chunk in _chunks(sorted(set(ids))):
        sql = _KINDS_SQL.format(values=", ".join(["(CAST(? AS VARCHAR))"] * len(chunk)))
        for node_id, kind, in_seed in con.execute(sql, [*chunk, namespace]).fetchall():
            kinds[node_id] = kind
            if in_seed:
                seed.add(node_id)
    return kinds, seed


def node_kinds(con: Any, ids: Iterable[str], namespace: str) -> dict[str, str]:
    """id -> kind of those ids that are nodes of the namespace (seed or extracted); the others are absent."""
    return known_nodes(con, ids, namespace)[0]


_COUNT_NODES_SQL = """
SELECT (SELECT count(*) FROM seed_nodes)
    + (SELECT count(DISTINCT id) FROM extracted_nodes WHERE namespace = ? AND id NOT IN (SELECT id FROM seed_nodes))
"""


def count_nodes(con: Any, namespace: str) -> int:
    """count(*) of kg_nodes(namespace): seed nodes plus the namespace's distinct extracted ids (no edge scan)."""
    return int(con.execute(_COUNT_NODES_SQL, [namespace]).fetchall()[0][0])


def prompt_versions(con: Any, keys: Iterable[str], namespace: str) -> dict[str, str]:
    """doc_key -> the prompt version its evidence carries in the namespace (what a date merged again keeps for it);
    documents without evidence are absent."""
    out: dict[str, str] = {}
    for chunk in _chunks(sorted(set(keys))):
        marks = ", ".join(["CAST(? AS VARCHAR)"] * len(chunk))
        out.update({k: v for k, v in con.execute(
            f"SELECT doc_key, max(prompt_version) FROM evidence WHERE namespace = ? AND doc_key IN ({marks}) "  # noqa: S608
            "GROUP BY doc_key", [namespace, *chunk]).fetchall() if v})
    return out
