"""Merge a date's accepted triples into the KG: one transaction, idempotent per document, with provenance.

Re-materializing a date deletes what its documents contributed before (in this namespace) and inserts the new
rows, so a rerun never duplicates evidence nor reinforces an edge twice. Edge confidence is not stored: the
`edges` view aggregates 1 - prod(1 - s) over seed confidence and evidence scores (see store.py), which is
exactly MedKGent's reinforcement applied in any order. A crash before COMMIT leaves the file as it was.
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
from pydantic import BaseModel

from karma_dagster.kg.store import (
    KGStore,
    NodeIn,
    load_schema,
    metaedge_by_abbrev,
    schema_relations,
)


class TripleValidationError(ValueError):
    """An accepted triple (or new node) that cannot enter the KG; the message names the document and triple."""


class IncrementStats(BaseModel):
    date: dt.date
    namespace: str
    backbone: str
    run_id: str
    n_docs: int
    n_evidence: int
    nodes_before: int
    nodes_after: int
    edges_before: int
    edges_after: int
    n_new_nodes: int
    n_new_edges: int
    n_reinforced: int
    seconds: float


TripleLike = Mapping[str, Any] | BaseModel
DocInput = tuple[Sequence[TripleLike], Sequence[NodeIn | Mapping[str, Any]]]

_BATCH_ROWS = 1000  # rows per INSERT; one statement per document costs ~8 ms each on 200-document dates
_REQUIRED_TEXT = ("triple_id", "head_id", "tail_id", "segment_id", "evidence")


def _as_dict(row: TripleLike) -> dict[str, Any]:
    return row.model_dump() if isinstance(row, BaseModel) else dict(row)


def validate_triple(
    row: TripleLike,
    doc_key: str,
    node_ids: set[str] | None = None,
    *,
    prompt_version: str = "",
) -> dict[str, Any]:
    """Check one accepted triple and return its evidence fields; raise TripleValidationError otherwise.

    `node_ids`, when given, are the node ids the head and tail must be among (the KG plus this merge's new nodes).
    The KG relation is `kg_relation` when the row has one (an aligned row), else `relation`.
    """
    r = _as_dict(row)
    tid = r.get("triple_id") or "<no triple_id>"

    def fail(problem: str) -> TripleValidationError:
        return TripleValidationError(f"doc {doc_key!r}, triple {tid!r}: {problem}")

    if not doc_key:
        raise fail("empty doc_key")
    if r.get("doc_key") not in (None, doc_key):
        raise fail(f"row says doc_key {r.get('doc_key')!r}, but it was given under {doc_key!r}")
    if r.get("accepted") is not None and not bool(r["accepted"]):
        raise fail("triple was not accepted by the evaluator")
    for field in _REQUIRED_TEXT:
        v = r.get(field)
        if not isinstance(v, str) or not v.strip():
            raise fail(f"provenance field {field!r} is empty or missing")
    relation = r.get("kg_relation") or r.get("relation")
    if relation not in schema_relations():
        raise fail(f"relation {relation!r} is not a schema relation ({', '.join(sorted(schema_relations()))})")
    metaedge = r.get("metaedge")
    if isinstance(metaedge, float) and math.isnan(metaedge):  # a missing value from a pandas frame
        metaedge = None
    if metaedge is not None:
        me = metaedge_by_abbrev().get(metaedge)
        if me is None:
            raise fail(f"unknown metaedge {metaedge!r}")
        if me.relation != relation:
            raise fail(f"metaedge {metaedge!r} means {me.relation!r}, not {relation!r}")
    score = r.get("score")
    if isinstance(score, bool) or not isinstance(score, numbers.Real) or not 0.0 <= float(score) <= 1.0:
        raise fail(f"score {score!r} is not a number in [0, 1]")
    if node_ids is not None:
        for end in ("head_id", "tail_id"):
            if r[end] not in node_ids:
                raise fail(f"{end} {r[end]!r} is neither a KG node nor a new entity of this merge")
    return {
        "doc_key": doc_key,
        "triple_id": r["triple_id"],
        "head_id": r["head_id"],
        "relation": relation,
        "tail_id": r["tail_id"],
        "metaedge": metaedge,
        "score": float(score),
        "segment_id": r["segment_id"],
        "evidence": r["evidence"],
        "prompt_version": str(r.get("prompt_version") or prompt_version),
    }


def _validate_node(node: NodeIn | Mapping[str, Any], doc_key: str, kinds: tuple[str, ...]) -> NodeIn:
    try:
        n = node if isinstance(node, NodeIn) else NodeIn.model_validate(dict(node))
    except ValueError as exc:
        raise TripleValidationError(f"doc {doc_key!r}, new entity {node!r}: {exc}") from exc
    if n.kind not in kinds:
        raise TripleValidationError(f"doc {doc_key!r}, new entity {n.id!r}: kind {n.kind!r} is not a schema node kind")
    return n


def merge_increment(
    store: KGStore,
    date: dt.date,
    backbone: str,
    docs: Mapping[str, DocInput],
    run_id: str,
    *,
    namespace: str | None = None,
    prompt_version: str = "",
    on_doc: Callable[[str, int, int], None] | None = None,
) -> IncrementStats:
    """Merge one date's documents (doc_key -> (accepted triples, new entities)) in one transaction.

    namespace defaults to the backbone, so backbones grow side-by-side graphs over the shared seed.
    The increments row of (namespace, date) is replaced: a call carries the whole increment of that date.
    `on_doc(doc_key, i, n)` is called once each document's rows are inserted (inserts go in batches of
    ~1000 rows; progress reporting, and the crash test's hook).
    """
    t0 = time.perf_counter()
    if not backbone or not run_id:
        raise TripleValidationError(f"merge of {date}: backbone and run_id must be non-empty")
    ns = namespace or backbone
    kinds = load_schema()[0]

    # Pure checks first, outside the lock: a bad row never opens a transaction.
    prepared: dict[str, tuple[list[dict[str, Any]], list[NodeIn]]] = {}
    for doc_key, (triples, new_nodes) in docs.items():
        rows = [validate_triple(t, doc_key, prompt_version=prompt_version) for t in triples]
        seen: set[str] = set()
        for row in rows:
            if row["triple_id"] in seen:
                raise TripleValidationError(f"doc {doc_key!r}, triple {row['triple_id']!r}: duplicate triple_id")
            seen.add(row["triple_id"])
        nodes = list({n.id: n for n in (_validate_node(n, doc_key, kinds) for n in new_nodes)}.values())
        prepared[doc_key] = (rows, nodes)

    doc_keys = list(prepared)
    new_ids = {n.id for _, nodes in prepared.values() for n in nodes}
    ref_ids = {row[e] for rows, _ in prepared.values() for row in rows for e in ("head_id", "tail_id")}
    merged_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)

    with store.connect() as con:
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute("CREATE TEMP TABLE _docs(doc_key VARCHAR)")
            if doc_keys:
                con.executemany("INSERT INTO _docs VALUES (?)", [(k,) for k in doc_keys])
            con.execute("DELETE FROM evidence WHERE namespace = ? AND doc_key IN (SELECT doc_key FROM _docs)", [ns])
            con.execute(
                "DELETE FROM extracted_nodes WHERE namespace = ? AND doc_key IN (SELECT doc_key FROM _docs)", [ns]
            )
            con.execute("DELETE FROM increments WHERE namespace = ? AND date = ?", [ns, date])

            nodes_before, edges_before = _sizes(con, ns)
            con.execute("CREATE TEMP TABLE _ids(id VARCHAR)")
            if ref_ids | new_ids:
                con.executemany("INSERT INTO _ids VALUES (?)", [(i,) for i in sorted(ref_ids | new_ids)])
            known = {r[0] for r in con.execute(
                "SELECT id FROM kg_nodes(?) WHERE id IN (SELECT id FROM _ids)", [ns]).fetchall()}
            seed_ids = {r[0] for r in con.execute(
                "SELECT id FROM seed_nodes WHERE id IN (SELECT id FROM _ids)").fetchall()}
            allowed = known | new_ids
            for doc_key, (rows, _) in prepared.items():
                for row in rows:
                    validate_triple(row, doc_key, allowed, prompt_version=prompt_version)

            keys = {(r["head_id"], r["relation"], r["tail_id"]) for rows, _ in prepared.values() for r in rows}
            con.execute("CREATE TEMP TABLE _keys(head_id VARCHAR, relation VARCHAR, tail_id VARCHAR)")
            if keys:
                con.executemany("INSERT INTO _keys VALUES (?, ?, ?)", sorted(keys))
            (n_reinforced,) = con.execute(
                "SELECT count(*) FROM kg_edges(?) JOIN _keys USING (head_id, relation, tail_id)", [ns]
            ).fetchall()[0]
            n_new_nodes = len(new_ids - known)

            pending_nodes: list[dict[str, Any]] = []
            pending_rows: list[dict[str, Any]] = []
            pending_docs: list[str] = []
            for i, (doc_key, (rows, nodes)) in enumerate(prepared.items(), start=1):
                pending_nodes += [
                    {"id": n.id, "name": n.name, "kind": n.kind, "vocab_id": n.vocab_id, "synonyms": list(n.synonyms),
                     "doc_key": doc_key} for n in nodes if n.id not in seed_ids
                ]
                pending_rows += rows
                pending_docs.append(doc_key)
                if len(pending_rows) + len(pending_nodes) >= _BATCH_ROWS or i == len(prepared):
                    _insert(con, pending_nodes, pending_rows, ns, date, backbone, run_id, merged_at)
                    if on_doc is not None:
                        for j, key in enumerate(pending_docs, start=i - len(pending_docs) + 1):
                            on_doc(key, j, len(prepared))
                    pending_nodes, pending_rows, pending_docs = [], [], []

            nodes_after, edges_after = _sizes(con, ns)
            n_evidence = sum(len(rows) for rows, _ in prepared.values())
            n_new_edges = len(keys) - n_reinforced
            con.execute(
                "INSERT INTO increments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [ns, date, len(doc_keys), n_new_nodes, n_new_edges, n_reinforced, n_evidence, nodes_before,
                 nodes_after, edges_before, edges_after, run_id, backbone, merged_at],
            )
            con.execute("COMMIT")
        except BaseException:
            try:
                con.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - the transaction is already gone; keep the original error
                pass
            raise
    return IncrementStats(
        date=date, namespace=ns, backbone=backbone, run_id=run_id, n_docs=len(doc_keys), n_evidence=n_evidence,
        nodes_before=nodes_before, nodes_after=nodes_after, edges_before=edges_before, edges_after=edges_after,
        n_new_nodes=n_new_nodes, n_new_edges=n_new_edges, n_reinforced=n_reinforced,
        seconds=round(time.perf_counter() - t0, 4),
    )


def _insert(
    con: Any, nodes: list[dict[str, Any]], rows: list[dict[str, Any]], ns: str, date: dt.date, backbone: str,
    run_id: str, merged_at: dt.datetime,
) -> None:
    """Insert a batch through registered frames: values are data, never SQL text."""
    if nodes:
        nf = pd.DataFrame(nodes)
        con.register("_nf", nf)
        con.execute(
            "INSERT INTO extracted_nodes SELECT ?, id, name, kind, vocab_id::VARCHAR, synonyms::VARCHAR[], doc_key, "
            "?::DATE, ?, ?::TIMESTAMP FROM _nf",
            [ns, date, run_id, merged_at],
        )
        con.unregister("_nf")
    if rows:
        ev = pd.DataFrame(rows)
        con.register("_ev", ev)
        con.execute(
            "INSERT INTO evidence SELECT ?, doc_key, ?::DATE, triple_id, head_id, relation, tail_id, "
            "metaedge::VARCHAR, score, segment_id, evidence, ?, prompt_version, ?, ?::TIMESTAMP FROM _ev",
            [ns, date, backbone, run_id, merged_at],
        )
        con.unregister("_ev")


def _sizes(con: Any, ns: str) -> tuple[int, int]:
    (n,) = con.execute("SELECT count(*) FROM kg_nodes(?)", [ns]).fetchall()[0]
    (e,) = con.execute("SELECT count(*) FROM kg_edges(?)", [ns]).fetchall()[0]
    return int(n), int(e)
