"""Repair a KG grown before "one node per entity" (issue 27): `karma dedupe [--dry-run]`.

An extracted node that is an existing node (kg/same_entity.py: a seed node, or another extracted node, by id,
cross-reference or exact name) is folded into it: its evidence and adjudications are re-pointed to that node, its
rows leave `extracted_nodes` (into the other extracted node's, as another name of it, when the target is extracted),
and `dedupe_log` records each fold (namespace, old id, new id, name, kind, how many evidence rows moved, when). One
transaction per namespace; a second run finds nothing more (idempotent). A re-merge of the date afterwards reaches
the same KG by itself: merges keep the same rule. The stage tables are not touched.

A fold writes edges (the re-pointed evidence), so each re-pointed row passes the admission rules
(kg/admission_rules.py) as the merge's rows do: a row the fold would turn into a self-edge, or whose ends would no
longer fit its metaedge, leaves `evidence` for `admission_refusals` (what review collects) instead.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel

from karma_dagster.kg import admission_rules as rules
from karma_dagster.kg import keyed, same_entity
from karma_dagster.kg.identity import Crosswalk
from karma_dagster.kg.merge import REFUSALS_DDL, transaction
from karma_dagster.kg.store import KGStore, NodeIn

LOG_DDL = ("CREATE TABLE IF NOT EXISTS dedupe_log(namespace VARCHAR NOT NULL, old_id VARCHAR NOT NULL, "
           "new_id VARCHAR NOT NULL, name VARCHAR NOT NULL, kind VARCHAR NOT NULL, target VARCHAR NOT NULL, "
           "n_evidence INTEGER NOT NULL, merged_at TIMESTAMP NOT NULL)")


class Fold(BaseModel):
    """One extracted node that is another node."""

    namespace: str
    old_id: str
    new_id: str
    name: str
    kind: str
    target: str  # "seed" or "extracted"
    n_evidence: int = 0  # evidence rows naming the old id (head or tail)
    refused: list[str] = []  # the re-pointed rows an admission rule refuses (they go to review, not into the KG)


def find(store: KGStore, namespace: str) -> list[Fold]:
    """The namespace's extracted nodes that are another node (what a merge today would not have created)."""
    with store.connect(read_only=True) as con:
        return find_in(con, namespace)


def find_in(con: Any, namespace: str) -> list[Fold]:
    """`find` on an open connection (read only; `karma check` asks it beside the admission rules)."""
    rows = con.execute(
        "SELECT id, min(name), min(kind), min(vocab_id) FROM extracted_nodes WHERE namespace = ? "
        "AND id NOT IN (SELECT id FROM seed_nodes) GROUP BY id ORDER BY id", [namespace]).fetchall()
    nodes = [NodeIn(id=i, name=n, kind=k, vocab_id=v) for i, n, k, v in rows]
    same = same_entity.existing_nodes(con, namespace, nodes, Crosswalk.load())
    if not same:
        return []
    targets = sorted(set(same.values()))  # two nodes may fold into one (Jagged1 and Jagged1-2 into JAG1)
    seed = {r[0] for r in con.execute(
        f"SELECT id FROM seed_nodes WHERE id IN ({', '.join(['CAST(? AS VARCHAR)'] * len(targets))})",
        targets).fetchall()}
    counts = dict(con.execute(
        "SELECT node, count(*) FROM (SELECT head_id AS node FROM evidence WHERE namespace = ? UNION ALL "
        "SELECT tail_id FROM evidence WHERE namespace = ?) e GROUP BY node", [namespace, namespace]).fetchall())
    by_id = {n.id: n for n in nodes}
    folds = [Fold(namespace=namespace, old_id=old, new_id=new, name=by_id[old].name, kind=by_id[old].kind,
                  target="seed" if new in seed else "extracted", n_evidence=int(counts.get(old, 0)))
             for old, new in sorted(same.items())]
    return [f.model_copy(update={"refused": [r["reason"] for r in _refusals(con, f, same)]}) for f in folds]


def _refusals(con: Any, f: Fold, same: dict[str, str]) -> list[dict[str, Any]]:
    """The evidence rows naming f.old_id that the admission rules refuse once re-pointed (every fold applied)."""
    rows = con.execute(
        "SELECT namespace, date, doc_key, triple_id, head_id, relation, tail_id, metaedge, score, segment_id, evidence "
        "FROM evidence WHERE namespace = ? AND (head_id = ? OR tail_id = ?) ORDER BY doc_key, triple_id",
        [f.namespace, f.old_id, f.old_id]).fetchall()
    cols = ("namespace", "date", "doc_key", "triple_id", "head_id", "relation", "tail_id", "metaedge", "score",
            "segment_id", "evidence")
    rows = [dict(zip(cols, r, strict=True)) for r in rows]
    ends = {same.get(r[e], r[e]) for r in rows for e in ("head_id", "tail_id")}
    kinds = keyed.node_kinds(con, ends, f.namespace)
    out = []
    for r in rows:
        head, tail = same.get(r["head_id"], r["head_id"]), same.get(r["tail_id"], r["tail_id"])
        result = rules.check(rules.Fact(head_id=head, relation=r["relation"], tail_id=tail, metaedge=r["metaedge"],
                                        head_kind=kinds.get(head), tail_kind=kinds.get(tail), evidence=r["evidence"]))
        if isinstance(result, rules.Refusal):
            out.append({**r, "rule": result.rule, "reason": f"karma dedupe ({f.old_id} -> {f.new_id}): "
                                                            f"{result.message()}"})
    return out


def namespaces(store: KGStore) -> list[str]:
    with store.connect(read_only=True) as con:
        return [r[0] for r in con.execute(
            "SELECT DISTINCT namespace FROM extracted_nodes ORDER BY namespace").fetchall()]


def repair(store: KGStore, namespace: str) -> list[Fold]:
    """Fold every duplicate of the namespace in one transaction; returns what was folded ([] when nothing was due)."""
    with store.connect() as con, transaction(con):
        folds = find_in(con, namespace)
        con.execute(LOG_DDL)
        con.execute(REFUSALS_DDL)
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        same = {f.old_id: f.new_id for f in folds}
        refused = {f.old_id: _refusals(con, f, same) for f in folds}  # read before any row moves
        for f in folds:
            _refuse(con, refused[f.old_id], now)
            _fold(con, f)
            con.execute("INSERT INTO dedupe_log VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [f.namespace, f.old_id, f.new_id, f.name, f.kind, f.target, f.n_evidence, now])
        if folds:  # edge counts change: the next merge counts the namespace's graph once (kg/sizes.py)
            con.execute("DELETE FROM kg_sizes WHERE namespace = ?", [namespace])
    return folds


def _refuse(con: Any, rows: list[dict[str, Any]], now: dt.datetime) -> None:
    """Refused rows leave `evidence` for `admission_refusals`, kept as they were stored, with the reason."""
    for r in rows:
        con.execute(
            "DELETE FROM evidence WHERE namespace = ? AND doc_key = ? AND triple_id = ?",
            [r["namespace"], r["doc_key"], r["triple_id"]])
        con.execute(
            "INSERT INTO admission_refusals (namespace, date, doc_key, triple_id, head_id, relation, tail_id, "
            "metaedge, score, segment_id, evidence, rule, reason, run_id, merged_at) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [r["namespace"], r["date"], r["doc_key"], r["triple_id"], r["head_id"], r["relation"], r["tail_id"],
             r["metaedge"], r["score"], r["segment_id"], r["evidence"], r["rule"], r["reason"], "karma-dedupe", now])


def _fold(con: Any, f: Fold) -> None:
    ns, old, new = f.namespace, f.old_id, f.new_id
    for column in ("head_id", "tail_id"):
        con.execute(f"UPDATE evidence SET {column} = ? WHERE namespace = ? AND {column} = ?", [new, ns, old])
    for column in ("head_id", "tail_id", "against_head_id", "against_tail_id"):
        con.execute(f"UPDATE adjudications SET {column} = ? WHERE namespace = ? AND {column} = ?", [new, ns, old])
    if f.target == "seed":
        con.execute("DELETE FROM extracted_nodes WHERE namespace = ? AND id = ?", [ns, old])
        return
    # another name of the extracted node it is: a document that has both keeps the target's row only
    con.execute("DELETE FROM extracted_nodes WHERE namespace = ? AND id = ? AND doc_key IN "
                "(SELECT doc_key FROM extracted_nodes WHERE namespace = ? AND id = ?)", [ns, old, ns, new])
    con.execute("UPDATE extracted_nodes SET id = ?, kind = (SELECT min(kind) FROM extracted_nodes WHERE namespace = ? "
                "AND id = ?) WHERE namespace = ? AND id = ?", [new, ns, new, ns, old])
