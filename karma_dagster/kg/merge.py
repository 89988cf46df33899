"""Merge a date's accepted triples into the KG: one transaction, idempotent per document, with provenance.

Re-materializing a date deletes what its documents contributed before (in this namespace) and inserts the new
rows, so a rerun never duplicates evidence nor reinforces an edge twice. Edge confidence is not stored: the
`edges` view aggregates 1 - prod(1 - s) over seed confidence and one factor per paper, the max score of its rows
(see store.py, kg/reinforcement.py), which is exactly MedKGent's reinforcement applied in any order. A row may
name the paper it stands for (`paper_key`: an accepted review decision's origin document), so it folds into that
paper's factor instead of counting as a paper of its own. An occurrence's score is its `evidence_score` (MedKGent
sampling confidence, else the evaluator's score, else the extractor's probability) when the row has one, else
its `score`. A crash before COMMIT leaves the file as it was.

The merge of day D is also where D's documents meet: each was checked against the KG as of D-1 and against
itself (agents/conflict_resolution.py), so contradictions *between* documents of D are adjudicated here
(kg/adjudication.py `same_day`): the losing triples are kept out of the KG (discard / review), and triples that won
against an older KG edge ("replace") supersede it from D on. Both are stored in `adjudications`, in the same
transaction, and replaced by a re-merge of D like the evidence.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import json
import math
import numbers
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pydantic import BaseModel

from karma_dagster.kg import adjudication as adj
from karma_dagster.kg import admission_rules as rules
from karma_dagster.kg import day_order
from karma_dagster.kg import keyed
from karma_dagster.kg import names as kg_names
from karma_dagster.kg import reinforcement
from karma_dagster.kg import same_entity
from karma_dagster.kg import sizes as kg_sizes
from karma_dagster.kg import supersession
from karma_dagster.kg.identity import Crosswalk
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.store import (
    KGStore,
    NodeIn,
    edge_text,
    load_schema,
    metaedge_by_abbrev,
    schema_relations,
)
from karma_dagster.runtime.params import KarmaParams


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
    n_discarded: int = 0  # same-day contradictions kept out of the KG
    n_review: int = 0  # same-day contradictions sent to review (kept out of the KG)
    n_superseded: int = 0  # older edges replaced by this date's triples (kept in history)
    n_refused: int = 0  # triples an admission rule kept out (kg/admission_rules.py), stored for review
    withdrawn: list[dt.date] = []  # later dates withdrawn before this one merged (withdraw_later): merge them again


TripleLike = Mapping[str, Any] | BaseModel
DocInput = tuple[Sequence[TripleLike], Sequence[NodeIn | Mapping[str, Any]]]

_BATCH_ROWS = 1000  # rows per INSERT; one statement per document costs ~8 ms each on 200-document dates
_REQUIRED_TEXT = ("triple_id", "head_id", "tail_id", "segment_id", "evidence")


def _as_dict(row: TripleLike) -> dict[str, Any]:
    return row.model_dump() if isinstance(row, BaseModel) else dict(row)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))  # NaN: a missing value from pandas


@functools.lru_cache(maxsize=1)
def _default_schema() -> KGSchema:
    return KGSchema.load()


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
        return TripleValidationError(f"doc {doc_key!r}, triple {kg_names.preview(str(tid))}: {problem}")

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
    prop = None if _missing(r.get("property")) else r["property"]  # a KG tool's created property (store.py DDL)
    paper = None if _missing(r.get("paper_key")) or r["paper_key"] == doc_key else r["paper_key"]
    if paper is not None and not isinstance(paper, str):
        raise fail(f"paper_key {paper!r} is not a document key")
    try:  # ids must already be clean (they join nodes and edges); no id or label is written that would not pass
        for f in ("triple_id", "head_id", "tail_id", "segment_id"):
            kg_names.exact(r[f], f"field {f!r}")
        if paper is not None:
            kg_names.exact(paper, "field 'paper_key'")
        kg_names.checked(str(r.get("kg_relation") or r.get("relation")), "relation label", kg_names.LABEL_MAX_CHARS)
        if prop is not None:
            prop = kg_names.checked(str(prop), "field 'property'", kg_names.LABEL_MAX_CHARS)
    except kg_names.NameRejected as exc:
        raise fail(str(exc)) from exc
    relation = r.get("kg_relation") or r.get("relation")
    if relation not in schema_relations():
        raise fail(f"relation {relation!r} is not a schema relation ({', '.join(sorted(schema_relations()))})")
    metaedge = r.get("metaedge")
    if _missing(metaedge):
        metaedge = None
    if metaedge is not None:
        me = metaedge_by_abbrev().get(metaedge)
        if me is None:
            raise fail(f"unknown metaedge {metaedge!r}")
        if me.relation != relation:
            raise fail(f"metaedge {metaedge!r} means {me.relation!r}, not {relation!r}")
    source = "score" if _missing(r.get("evidence_score")) else "evidence_score"
    score = r.get(source)
    if isinstance(score, bool) or not isinstance(score, numbers.Real) or not 0.0 <= float(score) <= 1.0:
        raise fail(f"{source} {score!r} is not a number in [0, 1]")
    action = "keep" if _missing(r.get("action")) else r["action"]
    if action not in ("keep", "replace"):
        raise fail(f"action {action!r}: only triples kept or replacing an older edge enter the KG")
    contradicts = None if _missing(r.get("contradicts")) else str(r["contradicts"])
    if action == "replace":
        if contradicts is None:
            raise fail("action 'replace' names no edge it supersedes (contradicts is empty)")
        try:
            adj.parse_edges(contradicts)
        except adj.EdgeTextError as exc:
            raise fail(f"action 'replace': {exc}") from exc
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
        "score": min(float(score), reinforcement.PAPER_CEILING),  # one reading is never certain
        "segment_id": r["segment_id"],
        "evidence": kg_names.clean_text(r["evidence"]),  # a sentence: cleaned (escapes, control chars), not refused
        "prompt_version": str(r.get("prompt_version") or prompt_version),
        # for the day's adjudication (not evidence columns)
        "action": action,
        "contradicts": contradicts,
        "adjudication": None if _missing(r.get("adjudication")) else str(r["adjudication"]),
        # "skipped": no conflict agent ran for this chain (ablated, or the single-agent baseline): not adjudicated
        "verdict": None if _missing(r.get("verdict")) else str(r["verdict"]),
        "head_kg_type": None if _missing(r.get("head_kg_type")) else r["head_kg_type"],
        "tail_kg_type": None if _missing(r.get("tail_kg_type")) else r["tail_kg_type"],
        # only when stated: a row without one fingerprints (document_fingerprint) as it did before the column
        **({"property": prop} if prop is not None else {}),
        # the paper a review decision stands for; likewise only when stated (a chain row's paper is its doc_key)
        **({"paper_key": paper} if paper is not None else {}),
        # an LLM backbone's debate (the advocates' turns), for the adjudication a "replace" writes; only when there
        # was one
        **({"debate": adj.debate_said(r["debate_transcript"])} if not _missing(r.get("debate_transcript")) else {}),
    }


def _validate_node(node: NodeIn | Mapping[str, Any], doc_key: str, kinds: tuple[str, ...]) -> NodeIn:
    try:
        n = node if isinstance(node, NodeIn) else NodeIn.model_validate(dict(node))
    except ValueError as exc:
        raise TripleValidationError(f"doc {doc_key!r}, new entity {kg_names.preview(str(node), 200)}: {exc}") from exc
    try:  # the last guard (a stage table may have been edited by hand): a clean name is stored, a bad one refused
        clean = n.model_copy(update={
            "id": kg_names.exact(n.id, "field 'id'"),
            "name": kg_names.checked(n.name, "field 'name'"),
            "kind": kg_names.checked(n.kind, "field 'kind'", kg_names.TYPE_MAX_CHARS),
            "vocab_id": None if n.vocab_id is None else kg_names.exact(n.vocab_id, "field 'vocab_id'"),
            "synonyms": [kg_names.checked(s, "field 'synonyms'") for s in n.synonyms],
        })
    except kg_names.NameRejected as exc:
        raise TripleValidationError(f"doc {doc_key!r}, new entity {kg_names.preview(n.id)}: {exc}") from exc
    if clean.kind not in kinds:
        raise TripleValidationError(f"doc {doc_key!r}, new entity {n.id!r}: kind {kg_names.preview(n.kind)} is not a "
                                    "schema node kind")
    return clean


Prepared = dict[str, tuple[list[dict[str, Any]], list[NodeIn]]]  # doc_key -> (evidence rows, new nodes)


@dataclass(frozen=True)
class _Stamp:
    """What every row of one merge carries besides its own values."""

    ns: str
    date: dt.date
    backbone: str
    run_id: str
    merged_at: dt.datetime
    date_sources: Mapping[str, str] = field(default_factory=dict)  # doc_key -> publication | arrival | configured


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
    params: KarmaParams | None = None,
    schema: KGSchema | None = None,
    date_sources: Mapping[str, str] | None = None,
    withdraw_later: bool = False,
) -> IncrementStats:
    """Merge one date's documents (doc_key -> (accepted triples, new entities)) in one transaction.

    namespace defaults to the backbone, so backbones grow side-by-side graphs over the shared seed.
    The increments row of (namespace, date) is replaced: a call carries the whole increment of that date.
    `on_doc(doc_key, i, n)` is called once each document's rows are inserted (inserts go in batches of
    ~1000 rows; progress reporting, and the crash test's hook). `params` (adjudication thresholds) and `schema`
    (which relations contradict) default to KarmaParams() and the packaged schema. `date_sources` (doc_key ->
    the catalog's date source) goes on each evidence row: whether its date is the paper's publication date.
    `withdraw_later`: the namespace's dates after `date` already merged are withdrawn first, in this transaction,
    and listed in the stats' `withdrawn`: the caller merges them again after this date (kg/day_order.py), so the
    KG stays the merge of its dates in ascending order.
    """
    t0 = time.perf_counter()
    if not backbone or not run_id:
        raise TripleValidationError(f"merge of {date}: backbone and run_id must be non-empty")
    prepared = _prepare(docs, prompt_version)
    fingerprints = {doc_key: _fingerprint(rows, nodes) for doc_key, (rows, nodes) in prepared.items()}
    stamp = _Stamp(namespace or backbone, date, backbone, run_id, dt.datetime.now(dt.UTC).replace(tzinfo=None),
                   dict(date_sources or {}))
    # doc_key -> what its triples say against KG edges without entering the KG (kg/supersession.py)
    contradicted: dict[str, list[supersession.Contradiction]] = {}
    for doc_key, (rows, nodes) in list(prepared.items()):
        kept, contradicted[doc_key] = supersession.split(rows)
        prepared[doc_key] = (kept, nodes)
    with store.connect() as con, transaction(con):
        withdrawn = day_order.later_merged(con, stamp.ns, date) if withdraw_later else []
        day_order.withdraw(con, stamp.ns, withdrawn)
        # sizes from the edges this merge can change (kg/sizes.py): no count of the whole graph
        edges_start = kg_sizes.edge_count(con, stamp.ns)
        dropped = _previous_edges(con, stamp, list(prepared))
        live_start = keyed.live_edges(con, dropped, stamp.ns)
        stamp = _delete_previous(con, stamp, list(prepared))
        nodes_before = keyed.count_nodes(con, stamp.ns)
        prepared = _one_node_per_entity(con, stamp.ns, prepared)
        new_ids = {n.id for _, nodes in prepared.values() for n in nodes}
        known_kinds, seed_ids = _known_ids(con, stamp.ns, prepared, new_ids)
        known = set(known_kinds)
        _check_endpoints(prepared, known | new_ids, prompt_version)
        prepared, refused = _admit(con, stamp, prepared, known_kinds, schema or _default_schema())
        _insert_refusals(con, refused)
        judged = _adjudicate_day(con, stamp, prepared, schema or _default_schema(), params or KarmaParams())
        judged = _overturned(con, stamp, contradicted, judged, params or KarmaParams())
        prepared = _without(prepared, judged.removed)
        new_ids = {n.id for _, nodes in prepared.values() for n in nodes}
        keys = {(r["head_id"], r["relation"], r["tail_id"]) for rows, _ in prepared.values() for r in rows}
        touched = dropped | keys | {(r["against_head_id"], r["against_relation"], r["against_tail_id"])
                                    for r in judged.rows if r["action"] == "replace"}
        live_before = keyed.live_edges(con, touched, stamp.ns)
        edges_before = edges_start - len(live_start) + len(live_before & dropped)
        n_reinforced = len(keys & live_before)
        _insert_documents(con, prepared, seed_ids, stamp, on_doc)
        _insert_adjudications(con, judged.rows)
        nodes_after = nodes_before + len(new_ids - known)  # a node of kg_nodes is a seed or extracted_nodes row
        edges_after = edges_before - len(live_before) + len(keyed.live_edges(con, touched, stamp.ns))
        actions = [r["action"] for r in judged.rows]
        stats = IncrementStats(
            date=date, namespace=stamp.ns, backbone=backbone, run_id=run_id, n_docs=len(prepared),
            n_evidence=sum(len(rows) for rows, _ in prepared.values()), nodes_before=nodes_before,
            nodes_after=nodes_after, edges_before=edges_before, edges_after=edges_after,
            n_new_nodes=nodes_after - nodes_before, n_new_edges=len(keys) - n_reinforced, n_reinforced=n_reinforced,
            seconds=0.0, n_discarded=actions.count("discard"), n_review=actions.count("review"),
            n_superseded=len({(r["against_head_id"], r["against_relation"], r["against_tail_id"])
                              for r in judged.rows if r["action"] == "replace"}), n_refused=len(refused),
            withdrawn=withdrawn,
        )
        _record_increment(con, stats, stamp)
        _record_documents(con, fingerprints, stamp)
        kg_sizes.record_edge_count(con, stamp.ns, edges_after)
    return stats.model_copy(update={"seconds": round(time.perf_counter() - t0, 4)})


def _prepare(docs: Mapping[str, DocInput], prompt_version: str) -> Prepared:
    """Validate every row and entity before opening the store: a bad row never opens a transaction."""
    kinds = load_schema()[0]
    prepared: Prepared = {}
    for doc_key, (triples, new_nodes) in docs.items():
        rows = [row for t in triples for row in (
            supersession.validate(_as_dict(t), doc_key) if supersession.is_contradiction(_as_dict(t))
            else [validate_triple(t, doc_key, prompt_version=prompt_version)])]
        seen: set[str] = set()
        for row in rows:
            if supersession.is_contradiction(row):  # one per KG edge it names: recorded, not merged
                continue
            if row["triple_id"] in seen:
                raise TripleValidationError(f"doc {doc_key!r}, triple {row['triple_id']!r}: duplicate triple_id")
            seen.add(row["triple_id"])
        nodes = list({n.id: n for n in (_validate_node(n, doc_key, kinds) for n in new_nodes)}.values())
        prepared[doc_key] = (rows, nodes)
    return prepared


def document_fingerprint(doc_key: str, triples: Sequence[TripleLike], nodes: Sequence[NodeIn | Mapping[str, Any]]) -> str:
    """The fingerprint `merge_increment` records for a document it merged (the `merged_documents` table).

    Computed from the validated rows and entities (not the file), so a caller holding the document's
    evaluated table (integration.collect_document) gets the same value and can tell merged from unmerged.
    The prompt version is left out: a changed prompt alone changes no triple and needs no re-merge."""
    ((rows, valid_nodes),) = _prepare({doc_key: (triples, nodes)}, "").values()
    return _fingerprint(rows, valid_nodes)


def _fingerprint(rows: list[dict[str, Any]], nodes: list[NodeIn]) -> str:
    content = {
        "rows": sorted(({k: v for k, v in r.items() if k != "prompt_version"} for r in rows),
                       key=lambda r: str(r["triple_id"])),
        "nodes": sorted((n.model_dump() for n in nodes), key=lambda n: n["id"]),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _record_documents(con: Any, fingerprints: Mapping[str, str], stamp: _Stamp) -> None:
    """Record which documents this merge took in (their rows were deleted by _delete_previous): same transaction."""
    if fingerprints:
        con.executemany(
            "INSERT INTO merged_documents VALUES (?, ?, ?, ?, ?, ?)",
            [(stamp.ns, k, stamp.date, fp, stamp.run_id, stamp.merged_at) for k, fp in sorted(fingerprints.items())],
        )


@contextmanager
def transaction(con: Any) -> Iterator[None]:
    """BEGIN .. COMMIT, ROLLBACK on any error or interrupt: a failed merge leaves the file as it was."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the transaction is already gone; keep the original error
            pass
        raise


def _temp_table(con: Any, name: str, columns: str, rows: Sequence[tuple]) -> None:
    """A temp table of bound values, for joins against large key sets (the values are never SQL text)."""
    con.execute(f"CREATE TEMP TABLE {name}({columns})")
    if rows:
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)


def _delete_previous(con: Any, stamp: _Stamp, doc_keys: list[str]) -> _Stamp:
    """Drop what these documents (and this date's increments row) contributed before: reruns replace, not add.
    Returns the stamp with the date sources their evidence had for the documents the caller gave none (a merge
    that re-merges a date's documents without the catalog, e.g. the review's, keeps what they were)."""
    _temp_table(con, "_docs", "doc_key VARCHAR", [(k,) for k in doc_keys])
    known = dict(con.execute(
        "SELECT doc_key, max(date_source) FROM evidence WHERE namespace = ? AND date_source IS NOT NULL AND doc_key IN "
        "(SELECT doc_key FROM _docs) GROUP BY doc_key", [stamp.ns]).fetchall())
    stamp = dataclasses.replace(stamp, date_sources={**known, **stamp.date_sources})
    con.execute("DELETE FROM evidence WHERE namespace = ? AND doc_key IN (SELECT doc_key FROM _docs)", [stamp.ns])
    con.execute(
        "DELETE FROM extracted_nodes WHERE namespace = ? AND doc_key IN (SELECT doc_key FROM _docs)", [stamp.ns]
    )
    con.execute("DELETE FROM increments WHERE namespace = ? AND date = ?", [stamp.ns, stamp.date])
    con.execute("DELETE FROM merged_documents WHERE namespace = ? AND doc_key IN (SELECT doc_key FROM _docs)",
                [stamp.ns])
    con.execute(
        "DELETE FROM adjudications WHERE namespace = ? AND (date = ? OR doc_key IN (SELECT doc_key FROM _docs))",
        [stamp.ns, stamp.date],
    )
    con.execute(supersession.DELETE_SQL, [stamp.ns, stamp.date])
    con.execute(REFUSALS_DDL)  # replaced by a re-merge like the adjudications
    con.execute(
        "DELETE FROM admission_refusals WHERE namespace = ? AND (date = ? OR doc_key IN (SELECT doc_key FROM _docs))",
        [stamp.ns, stamp.date],
    )
    return stamp


def _known_ids(con: Any, ns: str, prepared: Prepared, new_ids: set[str]) -> tuple[dict[str, str], set[str]]:
    """(id -> kind of the ids already in the namespace's graph, ids in the seed) among the ids this merge mentions.

    Read after the deletes, so an entity only these documents introduced counts as new again on a rerun.
    """
    ref_ids = {row[e] for rows, _ in prepared.values() for row in rows for e in ("head_id", "tail_id")}
    return keyed.known_nodes(con, ref_ids | new_ids, ns)


REFUSALS_DDL = (
    "CREATE TABLE IF NOT EXISTS admission_refusals(namespace VARCHAR NOT NULL, date DATE NOT NULL, "
    "doc_key VARCHAR NOT NULL, triple_id VARCHAR NOT NULL, head_id VARCHAR NOT NULL, relation VARCHAR NOT NULL, "
    "tail_id VARCHAR NOT NULL, metaedge VARCHAR, score DOUBLE NOT NULL, segment_id VARCHAR NOT NULL, "
    "evidence VARCHAR NOT NULL, rule VARCHAR NOT NULL, reason VARCHAR NOT NULL, run_id VARCHAR NOT NULL, "
    "merged_at TIMESTAMP NOT NULL)")


def _node_details(con: Any, ns: str, ids: set[str]) -> dict[str, tuple[str, str | None]]:
    """id -> (name, vocab_id) of the KG nodes among `ids` (what the self_edge rule compares)."""
    out: dict[str, tuple[str, str | None]] = {}
    for chunk in keyed._chunks(sorted(ids)):
        values = ", ".join(["(CAST(? AS VARCHAR))"] * len(chunk))
        rows = con.execute(
            f"WITH ids(id) AS (VALUES {values}) "  # noqa: S608 - placeholders only
            "SELECT s.id, s.name, s.vocab_id FROM seed_nodes s JOIN ids ON ids.id = s.id UNION ALL "
            "SELECT x.id, min(x.name), min(x.vocab_id) FROM extracted_nodes x JOIN ids ON ids.id = x.id "
            "WHERE x.namespace = ? GROUP BY x.id", [*chunk, ns]).fetchall()
        for node_id, name, vocab in rows:
            out.setdefault(node_id, (name, vocab))
    return out


def _admit(
    con: Any, stamp: _Stamp, prepared: Prepared, known_kinds: Mapping[str, str], schema: KGSchema
) -> tuple[Prepared, list[dict[str, Any]]]:
    """The admission rules (kg/admission_rules.py) on every row, with the kinds the KG (or the new entity) gives its
    ends: an admitted row gets its metaedge filled in; a refused one leaves the merge -- not the date: the other rows
    go on -- and is returned as a row of `admission_refusals`, which review collects (what is not admitted goes to
    review, never away). A new entity whose id belongs to another kind is refused with every row that names it."""
    new_nodes = {n.id: n for _, nodes in prepared.values() for n in nodes}
    ids = {r[e] for rows, _ in prepared.values() for r in rows for e in ("head_id", "tail_id")}
    details = _node_details(con, stamp.ns, ids)
    kinds = {**{i: n.kind for i, n in new_nodes.items()}, **known_kinds}
    bad_nodes = {i: ref for i, n in new_nodes.items() if i not in known_kinds
                 and (ref := rules.check_node(i, n.kind, n.vocab_id)) is not None}
    crosswalk = Crosswalk.load()
    out: Prepared = {}
    refused: list[dict[str, Any]] = []
    for doc_key, (rows, nodes) in prepared.items():
        kept = []
        for r in rows:
            fact = rules.Fact(
                head_id=r["head_id"], relation=r["relation"], tail_id=r["tail_id"], metaedge=r["metaedge"],
                head_kind=kinds.get(r["head_id"]), tail_kind=kinds.get(r["tail_id"]), evidence=r["evidence"],
                date=stamp.date, **_ends(r, new_nodes, details))
            bad = next((bad_nodes[r[e]] for e in ("head_id", "tail_id") if r[e] in bad_nodes), None)
            result = (bad.model_copy(update={"fact": f"{fact.text()}: {bad.fact}"}) if bad is not None
                      else rules.check(fact, schema=schema, crosswalk=crosswalk))
            if isinstance(result, rules.Refusal):
                refused.append({
                    "namespace": stamp.ns, "date": stamp.date, "doc_key": doc_key, "triple_id": r["triple_id"],
                    "head_id": r["head_id"], "relation": r["relation"], "tail_id": r["tail_id"],
                    "metaedge": r["metaedge"], "score": r["score"], "segment_id": r["segment_id"],
                    "evidence": r["evidence"], "rule": result.rule, "reason": result.message(),
                    "run_id": stamp.run_id, "merged_at": stamp.merged_at})
                continue
            kept.append({**r, "metaedge": result.metaedge})
        used = {r[e] for r in kept for e in ("head_id", "tail_id")}
        named = {r[e] for r in rows for e in ("head_id", "tail_id")}  # a node no row names stays as it came
        out[doc_key] = (kept, [n for n in nodes if n.id not in bad_nodes and (n.id in used or n.id not in named)])
    return out, refused


def _ends(r: Mapping[str, Any], new_nodes: Mapping[str, NodeIn],
          details: Mapping[str, tuple[str, str | None]]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for end in ("head", "tail"):
        node_id = r[f"{end}_id"]
        name, vocab = details.get(node_id) or ((new_nodes[node_id].name, new_nodes[node_id].vocab_id)
                                               if node_id in new_nodes else (None, None))
        out[f"{end}_name"], out[f"{end}_vocab_id"] = name, vocab
    return out


def _insert_refusals(con: Any, rows: list[dict[str, Any]]) -> None:
    if rows:
        columns = list(rows[0])
        con.executemany(
            f"INSERT INTO admission_refusals ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            [[row[c] for c in columns] for row in rows],
        )


def _one_node_per_entity(con: Any, ns: str, prepared: Prepared) -> Prepared:
    """The documents with each new entity that already is a node (kg/same_entity.py) re-pointed to that node: its
    triples name the node, and it is stored only as another name of an extracted node, never as a second node.
    A triple whose end moved loses its metaedge: the node may be of another kind than the mention (a paper's
    "cardiac arrhythmia" Disease is the seed's Side Effect), so _admit re-picks the relation's metaedge for the
    kinds of the nodes it lands on (causes: CcD becomes CcSE), or refuses it with the kinds named."""
    nodes = list({n.id: n for _, ns_nodes in prepared.values() for n in ns_nodes}.values())
    same = same_entity.existing_nodes(con, ns, nodes, Crosswalk.load())
    if not same:
        return prepared
    out: Prepared = {}
    for doc_key, (rows, doc_nodes) in prepared.items():
        moved = [r if r["head_id"] not in same and r["tail_id"] not in same else
                 {**r, "head_id": same.get(r["head_id"], r["head_id"]), "tail_id": same.get(r["tail_id"], r["tail_id"]),
                  "metaedge": None}
                 for r in rows]
        # "ERα binds ESR1" once both are one node says nothing about two entities: no self-loop is made here
        rows = [m for m, r in zip(moved, rows, strict=True)
                if m["head_id"] != m["tail_id"] or r["head_id"] == r["tail_id"]]
        kept = {}
        for n in doc_nodes:
            target = same.get(n.id, n.id)
            node = n if target == n.id else n.model_copy(update={"id": target})
            kept.setdefault(target, node)
        out[doc_key] = (rows, list(kept.values()))
    return out


def _check_endpoints(prepared: Prepared, allowed: set[str], prompt_version: str) -> None:
    """Every head and tail must be a KG node or a new entity of this merge (needs the store, so inside)."""
    for doc_key, (rows, _) in prepared.items():
        for row in rows:
            validate_triple(row, doc_key, allowed, prompt_version=prompt_version)


def _previous_edges(con: Any, stamp: _Stamp, doc_keys: list[str]) -> set[tuple[str, str, str]]:
    """The edges _delete_previous can change: those of the documents' stored evidence, and those the replace
    adjudications it deletes superseded (read before it deletes them)."""
    if not doc_keys:
        return set()
    values = ", ".join(["(CAST(? AS VARCHAR))"] * len(doc_keys))
    return set(map(tuple, con.execute(
        f"WITH d(doc_key) AS (VALUES {values}) "  # noqa: S608 - placeholders only
        "SELECT e.head_id, e.relation, e.tail_id FROM evidence e JOIN d ON d.doc_key = e.doc_key WHERE e.namespace = ? "
        "UNION SELECT against_head_id, against_relation, against_tail_id FROM adjudications WHERE namespace = ? "
        "AND action = 'replace' AND (date = ? OR doc_key IN (SELECT doc_key FROM d))",
        [*doc_keys, stamp.ns, stamp.ns, stamp.date]).fetchall()))


Edge = tuple[str, str, str]
_SEVERITY = {"review": 1, "discard": 2}


@dataclass(frozen=True)
class _DayJudgement:
    removed: frozenset[tuple[str, str]]  # (doc_key, triple_id) kept out of the KG
    rows: list[dict[str, Any]]  # what goes into `adjudications`


def _adjudicate_day(
    con: Any, stamp: _Stamp, prepared: Prepared, schema: KGSchema, params: KarmaParams
) -> _DayJudgement:
    """The day's cross-document contradictions first (losers leave the merge), then the supersessions that the
    triples which stay carry ("replace" rows of the conflict agent)."""
    removed = _same_day(con, stamp, prepared, schema, params)
    kept = [(doc, r) for doc, (rows, _) in prepared.items() for r in rows if (doc, r["triple_id"]) not in removed]
    return _DayJudgement(frozenset(removed), list(removed.values()) + _supersessions(con, stamp, kept))


def _same_day(
    con: Any, stamp: _Stamp, prepared: Prepared, schema: KGSchema, params: KarmaParams
) -> dict[tuple[str, str], dict[str, Any]]:
    """(doc_key, triple_id) -> its adjudication row, for every triple that loses (or cannot win) a contradiction
    with another document of the day. Occurrences of one edge reinforce each other (1 - prod(1 - s) over one factor
    per paper, its best occurrence: kg/reinforcement.py) before the two edges are weighed; edges that only one
    document asserts were judged by that document's own chain."""
    by_pair: dict[frozenset[str], dict[Edge, list[tuple[str, dict[str, Any]]]]] = {}
    for doc, (rows, _) in prepared.items():
        for r in rows:
            if r.get("verdict") == "skipped":  # the chain has no conflict resolution: the merge does not add one
                continue
            edge = (r["head_id"], r["relation"], r["tail_id"])
            by_pair.setdefault(frozenset((edge[0], edge[2])), {}).setdefault(edge, []).append((doc, r))
    contested = {p: e for p, e in by_pair.items() if len({edge[1] for edge in e}) > 1}
    if not contested:
        return {}
    kind_of = _kinds(con, stamp.ns, prepared, {i for pair in contested for i in pair})
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for edges in contested.values():
        items = sorted(edges.items())
        for i, (e1, occ1) in enumerate(items):
            for e2, occ2 in items[i + 1:]:
                kinds = (kind_of.get(e1[0]), kind_of.get(e1[2]))
                if kinds[0] is None or kinds[1] is None or not schema.incompatible(e1[1], e2[1], kinds[0], kinds[1]):
                    continue
                if len({d for d, _ in occ1} | {d for d, _ in occ2}) < 2:
                    continue
                s1, s2 = _support(occ1), _support(occ2)
                a1, a2 = adj.same_day(s1, s2, params)
                outcome = "too close to call" if a1 == a2 == "review" else (
                    f"{edge_text(*(e1 if a1 == 'keep' else e2))} leads by >= {params.conflict_replace_margin:.2f}")
                reason = (f"same day {stamp.date}: {_side(e1, occ1, s1)} vs {_side(e2, occ2, s2)}: {outcome}")
                for action, occ, other, other_occ, s_other in ((a1, occ1, e2, occ2, s2), (a2, occ2, e1, occ1, s1)):
                    if action == "keep":
                        continue
                    for doc, r in occ:
                        key = (doc, r["triple_id"])
                        if key in out and _SEVERITY[out[key]["action"]] >= _SEVERITY[action]:
                            continue
                        out[key] = _adjudication_row(
                            stamp, doc, r, action, other, reason, confidence=s_other, first_seen=stamp.date,
                            last_seen=stamp.date, n_evidence=len(other_occ), in_seed=False,
                        )
    return out


def _support(occ: list[tuple[str, dict[str, Any]]]) -> float:
    """An edge's support from the day's occurrences: one factor per paper (kg/reinforcement.py)."""
    readings = [reinforcement.reading(doc, r.get("paper_key"), r["score"]) for doc, r in occ]
    return reinforcement.confidence(None, readings)


def _side(edge: Edge, occ: list[tuple[str, dict[str, Any]]], support: float) -> str:
    docs = sorted({d for d, _ in occ})
    return f"{edge_text(*edge)} {support:.2f} ({len(occ)} triple(s) of {', '.join(docs)})"


def _kinds(con: Any, ns: str, prepared: Prepared, ids: set[str]) -> dict[str, str]:
    """Node kind of each id (what makes two relations incompatible): from the rows and new entities, else the KG."""
    kinds: dict[str, str] = {}
    by_abbrev = metaedge_by_abbrev()
    for rows, nodes in prepared.values():
        for n in nodes:
            kinds.setdefault(n.id, n.kind)
        for r in rows:
            me = by_abbrev.get(r["metaedge"]) if r["metaedge"] else None
            for end, orient in (("head", "source"), ("tail", "target")):
                kind = r.get(f"{end}_kg_type") or (getattr(me, orient) if me is not None else None)
                if kind:
                    kinds.setdefault(r[f"{end}_id"], kind)
    rest = ids - kinds.keys()
    if rest:
        kinds.update(keyed.node_kinds(con, rest, ns))
    return kinds


def _overturned(con: Any, stamp: _Stamp, contradicted: Mapping[str, list[supersession.Contradiction]],
                judged: _DayJudgement, params: KarmaParams) -> _DayJudgement:
    """Record the day's contradictions of KG edges and supersede the edges whose contradicting papers now outweigh
    them (kg/supersession.py): one 'replace' adjudication row each, beside the day's own."""
    supersession.record(con, stamp.ns, stamp.date, stamp.run_id, stamp.merged_at, contradicted)
    replaced = {(r["against_head_id"], r["against_relation"], r["against_tail_id"]) for r in judged.rows
                if r["action"] == "replace"}
    rows = []
    for c, edge, f, reason in supersession.weigh_day(con, stamp.ns, stamp.date, contradicted, replaced, params):
        row = {"triple_id": c.triple_id, "head_id": c.head_id, "relation": c.relation, "tail_id": c.tail_id,
               "score": c.p}
        rows.append(_adjudication_row(
            stamp, c.doc_key, row, "replace", edge, reason, confidence=f.confidence, first_seen=f.first_seen,
            last_seen=f.last_seen, n_evidence=f.n_evidence, in_seed=f.in_seed))
    return _DayJudgement(judged.removed, judged.rows + rows) if rows else judged


def _supersessions(con: Any, stamp: _Stamp, kept: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """A "replace" row's older edges are superseded from the merge's date: one adjudication row per edge, with the
    edge's support as it stood the day before (its history: the edge itself and its evidence stay stored)."""
    wanted = [(doc, r, e) for doc, r in kept if r["action"] == "replace" for e in adj.parse_edges(r["contradicts"])]
    if not wanted:
        return []
    facts = keyed.edge_facts(con, {(h, t) for _, _, (h, _, t) in wanted}, stamp.ns, stamp.date - dt.timedelta(days=1))
    out = []
    for doc, r, e in wanted:
        f = facts.get(e)
        reason = (r["adjudication"] or "the conflict agent replaced it") + r.get("debate", "")
        if f is None:
            reason += f" (the edge was not in the KG as of {stamp.date - dt.timedelta(days=1)})"
        out.append(_adjudication_row(
            stamp, doc, r, "replace", e, reason, confidence=f.confidence if f else None,
            first_seen=f.first_seen if f else None, last_seen=f.last_seen if f else None,
            n_evidence=f.n_evidence if f else None, in_seed=f.in_seed if f else None,
        ))
    return out


def _adjudication_row(
    stamp: _Stamp, doc: str, r: dict[str, Any], action: str, against: Edge, reason: str, *,
    confidence: float | None, first_seen: dt.date | None, last_seen: dt.date | None, n_evidence: int | None,
    in_seed: bool | None,
) -> dict[str, Any]:
    return {
        "namespace": stamp.ns, "date": stamp.date, "doc_key": doc, "triple_id": r["triple_id"],
        "head_id": r["head_id"], "relation": r["relation"], "tail_id": r["tail_id"], "support": r["score"],
        "action": action, "against_head_id": against[0], "against_relation": against[1],
        "against_tail_id": against[2], "against_confidence": confidence, "against_first_seen": first_seen,
        "against_last_seen": last_seen, "against_n_evidence": n_evidence, "against_in_seed": in_seed,
        "reason": reason, "run_id": stamp.run_id, "merged_at": stamp.merged_at,
    }


def _insert_adjudications(con: Any, rows: list[dict[str, Any]]) -> None:
    if rows:
        columns = list(rows[0])
        con.executemany(
            f"INSERT INTO adjudications ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            [[row[c] for c in columns] for row in rows],
        )


def _without(prepared: Prepared, removed: frozenset[tuple[str, str]]) -> Prepared:
    """The merge minus the triples the day's adjudication kept out, and the new entities only those needed."""
    if not removed:
        return prepared
    out: Prepared = {}
    for doc, (rows, nodes) in prepared.items():
        kept = [r for r in rows if (doc, r["triple_id"]) not in removed]
        dropped_ids = {r[e] for r in rows if (doc, r["triple_id"]) in removed for e in ("head_id", "tail_id")}
        kept_ids = {r[e] for r in kept for e in ("head_id", "tail_id")}
        out[doc] = (kept, [n for n in nodes if n.id not in dropped_ids or n.id in kept_ids])
    return out


def _insert_documents(
    con: Any, prepared: Prepared, seed_ids: set[str], stamp: _Stamp,
    on_doc: Callable[[str, int, int], None] | None,
) -> None:
    """Insert the documents' nodes and evidence in batches of ~_BATCH_ROWS rows, reporting each document.

    A new entity that is a seed node is not stored again: the seed row already describes it.
    """
    pending_nodes: list[dict[str, Any]] = []
    pending_rows: list[dict[str, Any]] = []
    pending_docs: list[str] = []
    for i, (doc_key, (rows, nodes)) in enumerate(prepared.items(), start=1):
        pending_nodes += [
            {"id": n.id, "name": n.name, "kind": n.kind, "vocab_id": n.vocab_id, "synonyms": list(n.synonyms),
             "doc_key": doc_key, "comment": n.comment, "class_label": n.class_label}
            for n in nodes if n.id not in seed_ids
        ]
        pending_rows += rows
        pending_docs.append(doc_key)
        if len(pending_rows) + len(pending_nodes) >= _BATCH_ROWS or i == len(prepared):
            _insert(con, pending_nodes, pending_rows, stamp)
            if on_doc is not None:
                for j, key in enumerate(pending_docs, start=i - len(pending_docs) + 1):
                    on_doc(key, j, len(prepared))
            pending_nodes, pending_rows, pending_docs = [], [], []


def _record_increment(con: Any, stats: IncrementStats, stamp: _Stamp) -> None:
    """Store the date's increment statistics (the row _delete_previous removed), in the same transaction."""
    con.execute(
        "INSERT INTO increments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [stamp.ns, stamp.date, stats.n_docs, stats.n_new_nodes, stats.n_new_edges, stats.n_reinforced,
         stats.n_evidence, stats.nodes_before, stats.nodes_after, stats.edges_before, stats.edges_after,
         stamp.run_id, stamp.backbone, stamp.merged_at],
    )


def _insert(con: Any, nodes: list[dict[str, Any]], rows: list[dict[str, Any]], stamp: _Stamp) -> None:
    """Insert a batch through registered frames: values are data, never SQL text. Columns are named (a store
    opened before has its added columns at the end, as a fresh one: store.ADDED_COLUMNS)."""
    if nodes:
        nf = pd.DataFrame(nodes)
        for column in ("comment", "class_label"):  # a KG tool instance's comment and created class, else NULL
            if column not in nf.columns:
                nf[column] = None
        con.register("_nf", nf)
        con.execute(
            "INSERT INTO extracted_nodes (namespace, id, name, kind, vocab_id, synonyms, doc_key, date, run_id, "
            "merged_at, comment, class_label) SELECT ?, id, name, kind, vocab_id::VARCHAR, synonyms::VARCHAR[], "
            "doc_key, ?::DATE, ?, ?::TIMESTAMP, comment::VARCHAR, class_label::VARCHAR FROM _nf",
            [stamp.ns, stamp.date, stamp.run_id, stamp.merged_at],
        )
        con.unregister("_nf")
    if rows:
        ev = pd.DataFrame(rows)
        for column in ("property", "paper_key"):  # a KG tool's created property, a decision's paper; else NULL
            if column not in ev.columns:
                ev[column] = None
        ev["date_source"] = [stamp.date_sources.get(k) for k in ev["doc_key"]]  # NULL: not a catalog document
        con.register("_ev", ev)
        con.execute(
            "INSERT INTO evidence (namespace, doc_key, date, triple_id, head_id, relation, tail_id, metaedge, score, "
            "segment_id, evidence, backbone, prompt_version, run_id, merged_at, property, date_source, paper_key) "
            "SELECT ?, doc_key, ?::DATE, triple_id, head_id, relation, tail_id, metaedge::VARCHAR, score, segment_id, "
            "evidence, ?, prompt_version, ?, ?::TIMESTAMP, property::VARCHAR, date_source::VARCHAR, "
            "paper_key::VARCHAR FROM _ev",
            [stamp.ns, stamp.date, stamp.backbone, stamp.run_id, stamp.merged_at],
        )
        con.unregister("_ev")
