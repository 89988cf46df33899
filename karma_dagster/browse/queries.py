"""The browser's reads: one entity, one edge, one day, each as of a date, in one namespace (backbone).

Why not the kg_nodes / kg_edges views: they aggregate the whole namespace before any filter applies (seconds at 1M
edges, kg/keyed.py). Every figure here depends only on the rows of the entity or edge asked about (its seed edges,
its evidence, the supersessions naming it), so each query filters on head_id / tail_id first and aggregates that
little with kg_edges_all's semantics: seed + evidence dated <= as_of, support dated on or before the edge's latest
supersession (<= as_of) left out, confidence 1 - prod(1 - s) over one factor per paper (a paper's best reading; a
review decision stands for the paper it was read from) beside the seed's prior (kg/reinforcement.py), and a node's or
edge's paper count counts papers, not decisions. Lists are bounded (LIMIT): a hub's page shows the
strongest edges of each relation and says how many it left out. Portable SQL (`product` is an aggregate both
engines have, pg_store.py defines it), so the same text runs on DuckDB and PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel

from karma_dagster.backbones.llm.calibration import UNCALIBRATED
from karma_dagster.kg import keyed
from karma_dagster.kg import reinforcement as kg_reinforcement
from karma_dagster.kg.store import KGStore

PER_RELATION = 12  # neighbours shown per (relation, direction) on an entity page
ENTITY_EVIDENCE = 40
NEIGHBOURHOOD = 30  # neighbours drawn
LITERATURE = 40  # edges with evidence listed on an entity page, earliest first  # latest evidence sentences on an entity page
EDGE_EVIDENCE = 500  # evidence rows on an edge page (an edge rarely has more; the page says when it does)
DAY_ROWS = 300  # evidence rows of one day read for the timeline's day view
TIMELINE_DAYS = 90


class BrowseError(ValueError):
    """A request the KG cannot answer as asked (unknown entity or edge); the page names the input."""


class UnknownEntity(BrowseError):
    pass


class NodeInfo(BaseModel):
    id: str
    name: str
    kind: str
    source: str  # seed | extracted
    vocab_id: str | None = None
    created_by_doc: str | None = None
    first_seen: dt.date | None = None  # its first evidence (or first merge) in the namespace, as of the date
    last_seen: dt.date | None = None
    n_papers: int = 0  # distinct papers with evidence on it (a review decision counts as the paper it came from)
    n_evidence: int = 0


class Neighbour(BaseModel):
    head_id: str
    relation: str
    tail_id: str
    direction: Literal["out", "in"]
    other_id: str
    other_name: str
    other_kind: str
    confidence: float
    first_seen: dt.date | None
    last_seen: dt.date | None
    n_evidence: int
    n_papers: int
    in_seed: bool


class RelationGroup(BaseModel):
    relation: str
    direction: Literal["out", "in"]
    total: int
    rows: list[Neighbour]


class EvidenceRow(BaseModel):
    head_id: str
    head_name: str
    relation: str
    tail_id: str
    tail_name: str
    date: dt.date
    doc_key: str
    triple_id: str
    score: float
    segment_id: str
    evidence: str
    backbone: str
    prompt_version: str
    property: str | None = None
    date_source: str | None = None
    paper_key: str | None = None  # the paper a review decision stands for (None: the row's own document)
    status: Literal["live", "superseded", "after as-of"] = "live"

    def uncalibrated(self) -> bool:  # a method: the field `property` shadows the builtin in this class body
        """Scored by an LLM evaluator never calibrated (its chain version says so): a score, not a P(right)."""
        return self.prompt_version.endswith(f"@{UNCALIBRATED}")


class EntityView(BaseModel):
    node: NodeInfo
    n_edges: int
    groups: list[RelationGroup]
    evidence: list[EvidenceRow]
    n_evidence_shown_of: int
    literature: list[Neighbour]  # edges with evidence, earliest first (at most LITERATURE)
    n_literature: int
    strongest: list[Neighbour]  # the edges to the NEIGHBOURHOOD neighbours with the strongest edges: the drawing


class EdgeState(BaseModel):
    confidence: float
    first_seen: dt.date | None
    last_seen: dt.date | None
    n_evidence: int
    in_seed: bool
    n_papers: int = 0  # distinct papers among the live evidence (a review decision counts as the paper it came from)


class Reinforcement(BaseModel):
    date: dt.date | None  # None: the seed row
    confidence: float
    n_evidence: int
    event: str


class Supersession(BaseModel):
    date: dt.date
    doc_key: str
    action: str  # replace | discard | review
    role: Literal["superseded", "supersedes", "lost to", "kept out against"]
    other: tuple[str, str, str]
    reason: str
    edge: tuple[str, str, str] | None = None  # the acting triple (a day's view; an edge page's is the edge itself)


class PaperSupport(BaseModel):
    """One paper's factor in the edge's probability: its best reading (a review decision stands for its paper)."""

    paper: str
    probability: float
    n_readings: int
    first_date: dt.date
    decision_only: bool  # no chain reading of the edge from this paper: the factor is a curator's decision


class EdgeView(BaseModel):
    head: NodeInfo
    relation: str
    tail: NodeInfo
    metaedge: str | None
    seed_confidence: float | None
    as_of: EdgeState | None  # None: not in the graph as of the date (not yet asserted, or superseded)
    now: EdgeState | None
    evidence: list[EvidenceRow]
    n_evidence_total: int
    reinforcement: list[Reinforcement]
    history: list[Supersession]
    papers: list[PaperSupport] = []  # the live evidence's papers, strongest first (the rows shown on the page)


class DaySummary(BaseModel):
    date: dt.date
    n_docs: int
    n_evidence: int
    n_new_edges: int | None  # from the increments row of the merge (None: no row, e.g. review decisions only)
    n_reinforced: int | None
    n_new_nodes: int | None
    edges_after: int | None


class DayEdge(BaseModel):
    head_id: str
    head_name: str
    relation: str
    tail_id: str
    tail_name: str
    new: bool  # first asserted that day (not a seed edge, no earlier evidence)
    n_evidence: int
    confidence: float


class DayPaper(BaseModel):
    """What one paper of the day added: its evidence rows, the edges they assert, how many of those the day made
    new (among the day's listed edges), and the entities it was the first to add."""

    doc_key: str
    n_evidence: int
    n_edges: int
    n_new_edges: int
    n_new_nodes: int


class DayView(BaseModel):
    date: dt.date
    edges: list[DayEdge]
    new_nodes: list[NodeInfo]
    supersessions: list[Supersession]
    truncated: bool
    papers: list[DayPaper] = []  # the day's papers, most evidence first


# ---------------------------------------------------------------- helpers
def _names(con: Any, ids: set[str], namespace: str) -> dict[str, tuple[str, str, str]]:
    """id -> (name, kind, source) of those ids that are nodes of the namespace (seed first, else first merge).

    One bound list per query (`list_contains(?, id)`; `id = ANY(%s)` on PostgreSQL, pg_connection.py): a hub's
    thousands of neighbours in two statements, not one per VALUES chunk."""
    wanted = sorted(ids)
    if not wanted:
        return {}
    out = {i: (n, k, "seed") for i, n, k in con.execute(
        "SELECT id, name, kind FROM seed_nodes WHERE list_contains(?, id)", [wanted]).fetchall()}
    rest = [i for i in wanted if i not in out]
    if rest:
        for node_id, name, kind in con.execute(
                "SELECT id, name, kind FROM (SELECT id, name, kind, row_number() OVER (PARTITION BY id ORDER BY date, "
                "doc_key) AS rn FROM extracted_nodes WHERE namespace = ? AND list_contains(?, id)) f WHERE rn = 1",
                [namespace, rest]).fetchall():
            out[node_id] = (name, kind, "extracted")
    return out


def _node(con: Any, node_id: str, namespace: str, as_of: dt.date | None, stats: bool = True) -> NodeInfo:
    """The node as of the date; `stats`: with its first/last seen and paper counts (a scan of its evidence)."""
    seed = con.execute("SELECT name, kind, vocab_id FROM seed_nodes WHERE id = ?", [node_id]).fetchall()
    if seed:
        name, kind, vocab_id = seed[0]
        source, created = "seed", None
    else:
        rows = con.execute(
            "SELECT name, kind, vocab_id, doc_key, date FROM extracted_nodes WHERE namespace = ? AND id = ? "
            "AND (CAST(? AS DATE) IS NULL OR date <= CAST(? AS DATE)) ORDER BY date, doc_key LIMIT 1",
            [namespace, node_id, as_of, as_of]).fetchall()
        if not rows:
            when = f" as of {as_of}" if as_of else ""
            raise UnknownEntity(f"entity {node_id!r} is not a node of the KG of backbone {namespace!r}{when}")
        name, kind, vocab_id, created, _ = rows[0]
        source = "extracted"
    if not stats:
        return NodeInfo(id=node_id, name=name, kind=kind, source=source, vocab_id=vocab_id, created_by_doc=created)
    first, last, n_docs, n_ev = con.execute(_NODE_STATS_SQL, {"ns": namespace, "id": node_id, "as_of": as_of}
                                            ).fetchall()[0]
    if source == "extracted":  # merged as an entity before any evidence of it counts too
        merged = con.execute("SELECT min(date) FROM extracted_nodes WHERE namespace = ? AND id = ?",
                             [namespace, node_id]).fetchall()[0][0]
        first = min(d for d in (first, merged) if d is not None)
        last = max(d for d in (last, merged) if d is not None)
    return NodeInfo(id=node_id, name=name, kind=kind, source=source, vocab_id=vocab_id, created_by_doc=created,
                    first_seen=first, last_seen=last, n_papers=int(n_docs), n_evidence=int(n_ev))


_AS_OF = "(CAST($as_of AS DATE) IS NULL OR date <= CAST($as_of AS DATE))"
_EITHER_END = "(head_id = $id OR tail_id = $id)"  # one scan with the OR: faster in DuckDB than a UNION ALL of two
_PAPER = "coalesce(paper_key, doc_key)"  # the paper an evidence row stands for (a review decision: where it came from)
_DECISION = "coalesce(paper_key <> doc_key, FALSE)"  # a review decision attributed to a paper
_CONFIDENCE = kg_reinforcement.sql_confidence("max(s) FILTER (WHERE is_seed)", "product(1 - s) FILTER (WHERE NOT is_seed)")

# the live edges of one node: its seed edges and evidence, supersessions applied (kg_edges_all, filtered first)
_NODE_EDGES_SQL = f"""
WITH sup AS (
    SELECT against_head_id AS head_id, against_relation AS relation, against_tail_id AS tail_id,
        max(date) AS superseded_on
    FROM adjudications
    WHERE action = 'replace' AND namespace = $ns AND (against_head_id = $id OR against_tail_id = $id) AND {_AS_OF}
    GROUP BY against_head_id, against_relation, against_tail_id),
c AS (
    SELECT head_id, relation, tail_id, confidence AS s, CAST(NULL AS DATE) AS date, CAST(NULL AS VARCHAR) AS doc_key,
        CAST(NULL AS VARCHAR) AS paper, FALSE AS is_decision, TRUE AS is_seed
    FROM seed_edges WHERE {_EITHER_END}
    UNION ALL
    SELECT head_id, relation, tail_id, score, date, doc_key, {_PAPER}, {_DECISION}, FALSE FROM evidence
    WHERE namespace = $ns AND {_EITHER_END} AND {_AS_OF}),
p AS (
    SELECT c.head_id, c.relation, c.tail_id, c.paper,
        coalesce(max(c.s) FILTER (WHERE NOT c.is_decision), max(c.s)) AS s, min(c.date) AS first_seen,
        max(c.date) AS last_seen, count(c.doc_key) AS n_evidence, bool_or(c.is_seed) AS is_seed
    FROM c LEFT JOIN sup x ON x.head_id = c.head_id AND x.relation = c.relation AND x.tail_id = c.tail_id
    WHERE x.superseded_on IS NULL OR c.date > x.superseded_on
    GROUP BY c.head_id, c.relation, c.tail_id, c.paper)
SELECT head_id, relation, tail_id, {_CONFIDENCE}, min(first_seen), max(last_seen), sum(n_evidence),
    count(paper), bool_or(is_seed)
FROM p GROUP BY head_id, relation, tail_id
"""
_NODE_STATS_SQL = (f"SELECT min(date), max(date), count(DISTINCT {_PAPER}), count(*) FROM evidence "
                   f"WHERE namespace = $ns AND {_EITHER_END} AND {_AS_OF}")


class _Edge(NamedTuple):
    """One live edge of a node before its other end's name is looked up (a hub has thousands; a page shows ~100)."""

    head_id: str
    relation: str
    tail_id: str
    direction: Literal["out", "in"]
    other_id: str
    confidence: float
    first_seen: dt.date | None
    last_seen: dt.date | None
    n_evidence: int
    n_papers: int
    in_seed: bool


def _edges(con: Any, node_id: str, namespace: str, as_of: dt.date | None) -> list[_Edge]:
    """The node's live edges as of the date, strongest first."""
    rows = con.execute(_NODE_EDGES_SQL, {"ns": namespace, "id": node_id, "as_of": as_of}).fetchall()
    out = [_Edge(h, r, t, "out" if h == node_id else "in", t if h == node_id else h, float(c), first, last, int(n),
                 int(d), bool(seed)) for h, r, t, c, first, last, n, d, seed in rows]
    out.sort(key=lambda e: (-e.confidence, e.relation, e.other_id))
    return out


def _named(con: Any, namespace: str, edges: list[_Edge]) -> dict[_Edge, Neighbour]:
    """The edges as Neighbours, their other ends named (one query for them all)."""
    names = _names(con, {e.other_id for e in edges}, namespace)
    return {e: Neighbour(**e._asdict(), other_name=names.get(e.other_id, (e.other_id,))[0],
                         other_kind=names.get(e.other_id, ("", "?"))[1]) for e in edges}


_EVIDENCE_COLUMNS = ("head_id", "relation", "tail_id", "date", "doc_key", "triple_id", "score", "segment_id",
                     "evidence", "backbone", "prompt_version", "property", "date_source", "paper_key")


def _evidence_rows(con: Any, rows: list[tuple], namespace: str) -> list[EvidenceRow]:
    names = _names(con, {r[0] for r in rows} | {r[2] for r in rows}, namespace)
    out = []
    for r in rows:
        d = dict(zip(_EVIDENCE_COLUMNS, r, strict=True))
        d["score"] = float(d["score"])
        out.append(EvidenceRow(head_name=names.get(d["head_id"], (d["head_id"],))[0],
                               tail_name=names.get(d["tail_id"], (d["tail_id"],))[0], **d))
    return out


# ---------------------------------------------------------------- pages
def entity(store: KGStore, node_id: str, namespace: str, as_of: dt.date | None = None,
           per_relation: int = PER_RELATION, n_evidence: int = ENTITY_EVIDENCE) -> EntityView:
    """One node as of the date: who it is, its live edges grouped by (relation, direction), strongest first, and
    its latest evidence sentences."""
    with store.connect(read_only=True) as con:
        node = _node(con, node_id, namespace, as_of)
        edges = _edges(con, node_id, namespace, as_of)
        rows = con.execute(
            f"SELECT {', '.join(_EVIDENCE_COLUMNS)} FROM evidence "  # noqa: S608 - fixed text
            f"WHERE namespace = $ns AND {_EITHER_END} AND {_AS_OF} ORDER BY date DESC, doc_key, triple_id LIMIT $n",
            {"ns": namespace, "id": node_id, "as_of": as_of, "n": n_evidence}).fetchall()
        evidence = _evidence_rows(con, rows, namespace)
        grouped: dict[tuple[str, str], list[_Edge]] = defaultdict(list)
        for e in edges:
            grouped[(e.relation, e.direction)].append(e)
        literature = sorted((e for e in edges if e.n_evidence),
                            key=lambda e: (e.first_seen or dt.date.min, -e.confidence, e.relation, e.other_id))
        strongest = _strongest(edges, node_id, NEIGHBOURHOOD)
        shown = _named(con, namespace, list({*strongest, *literature[:LITERATURE],
                                             *(e for es in grouped.values() for e in es[:per_relation])}))
    groups = [RelationGroup(relation=r, direction=d, total=len(es), rows=[shown[e] for e in es[:per_relation]])
              for (r, d), es in sorted(grouped.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    return EntityView(node=node, n_edges=len(edges), groups=groups, evidence=evidence,
                      n_evidence_shown_of=node.n_evidence, literature=[shown[e] for e in literature[:LITERATURE]],
                      n_literature=len(literature), strongest=[shown[e] for e in strongest])


def neighbourhood(store: KGStore, node_id: str, namespace: str, as_of: dt.date | None = None,
                  limit: int = NEIGHBOURHOOD) -> tuple[NodeInfo, list[Neighbour]]:
    """The node and its edges to the `limit` neighbours with the strongest live edges: what the drawing shows."""
    with store.connect(read_only=True) as con:
        node = _node(con, node_id, namespace, as_of, stats=False)
        strongest = _strongest(_edges(con, node_id, namespace, as_of), node_id, limit)
        return node, list(_named(con, namespace, strongest).values())


def _strongest(edges: list[_Edge], node_id: str, limit: int) -> list[_Edge]:
    """Every edge to the `limit` neighbours with the strongest edges (edges come sorted by confidence)."""
    picked: set[str] = set()
    for n in edges:
        if len(picked) == limit:
            break
        if n.other_id != node_id:
            picked.add(n.other_id)
    return [n for n in edges if n.other_id in picked]


def _state(facts: dict, edge: tuple[str, str, str]) -> EdgeState | None:
    f = facts.get(edge)
    return None if f is None else EdgeState(confidence=f.confidence, first_seen=f.first_seen, last_seen=f.last_seen,
                                            n_evidence=f.n_evidence, in_seed=f.in_seed, n_papers=f.n_docs)


def edge(store: KGStore, head_id: str, relation: str, tail_id: str, namespace: str,
         as_of: dt.date | None = None) -> EdgeView:
    """One edge: every piece of evidence (marked live, superseded or after the as-of date), its state as of the
    date and now, its confidence after each day that changed it, and the supersessions it took part in."""
    key = (head_id, relation, tail_id)
    with store.connect(read_only=True) as con:
        head, tail = _node(con, head_id, namespace, None, False), _node(con, tail_id, namespace, None, False)
        seed = con.execute("SELECT metaedge, confidence FROM seed_edges WHERE head_id = ? AND relation = ? "
                           "AND tail_id = ?", list(key)).fetchall()
        rows = con.execute(
            f"SELECT {', '.join(_EVIDENCE_COLUMNS)}, metaedge, count(*) OVER () "  # noqa: S608 - fixed names
            "FROM evidence WHERE namespace = ? AND head_id = ? AND relation = ? AND tail_id = ? "
            "ORDER BY date, doc_key, triple_id LIMIT ?", [namespace, *key, EDGE_EVIDENCE]).fetchall()
        n_total = rows[0][-1] if rows else 0
        metaedge = seed[0][0] if seed else max((r[-2] for r in rows if r[-2]), default=None)
        rows = [r[:-2] for r in rows]
        adjudications = con.execute(
            "SELECT date, doc_key, action, head_id, relation, tail_id, against_head_id, against_relation, "
            "against_tail_id, reason FROM adjudications WHERE namespace = ? AND ((against_head_id = ? AND "
            "against_relation = ? AND against_tail_id = ?) OR (head_id = ? AND relation = ? AND tail_id = ?)) "
            "ORDER BY date, doc_key, triple_id", [namespace, *key, *key]).fetchall()
        evidence = _evidence_rows(con, rows, namespace)
        if n_total > len(rows):  # more rows than the page lists: the states from the store (kg/keyed.py)
            at = _state(keyed.edge_facts(con, [(head_id, tail_id)], namespace, as_of), key)
            now = _state(keyed.edge_facts(con, [(head_id, tail_id)], namespace, None), key) if as_of else at
    if not seed and not n_total:
        raise BrowseError(f"no edge {head_id} -{relation}-> {tail_id} in the KG of backbone {namespace!r}")
    history = []
    for date, doc, action, h, r, t, ah, ar, at_, reason in adjudications:
        if (ah, ar, at_) == key:  # this edge was the older side
            role = "superseded" if action == "replace" else "kept out against"
            history.append(Supersession(date=date, doc_key=doc, action=action, role=role, other=(h, r, t),
                                        reason=reason))
        else:
            role = "supersedes" if action == "replace" else "lost to"
            history.append(Supersession(date=date, doc_key=doc, action=action, role=role, other=(ah, ar, at_),
                                        reason=reason))
    replaced = sorted(s.date for s in history if s.role == "superseded")
    cut = max((d for d in replaced if as_of is None or d <= as_of), default=None)
    for e in evidence:
        if as_of is not None and e.date > as_of:
            e.status = "after as-of"
        elif cut is not None and e.date <= cut:
            e.status = "superseded"
    seed_conf = float(seed[0][1]) if seed else None
    if n_total <= len(rows):  # every row at hand: the states are what kg_edges says, computed from them
        at, now = _state_of(seed_conf, evidence, replaced, as_of), _state_of(seed_conf, evidence, replaced, None)
    return EdgeView(head=head, relation=relation, tail=tail, metaedge=metaedge, seed_confidence=seed_conf,
                    as_of=at, now=now, evidence=evidence, n_evidence_total=int(n_total),
                    reinforcement=reinforcement(seed_conf, evidence, replaced), history=history,
                    papers=paper_support([e for e in evidence if e.status == "live"]))


def paper_support(rows: list[EvidenceRow]) -> list[PaperSupport]:
    """The papers behind an edge, each with the one factor it contributes (kg/reinforcement.py's rule)."""
    readings = _readings(rows)
    factors = kg_reinforcement.paper_scores(readings)
    out = []
    for paper, p in factors.items():
        mine = [(e, r) for e, r in zip(rows, readings, strict=True) if r.paper == paper]
        out.append(PaperSupport(paper=paper, probability=p, n_readings=len(mine),
                                first_date=min(e.date for e, _ in mine),
                                decision_only=all(r.decision for _, r in mine)))
    return sorted(out, key=lambda s: (-s.probability, s.first_date, s.paper))


def _state_of(seed_confidence: float | None, evidence: list[EvidenceRow], superseded_on: list[dt.date],
              as_of: dt.date | None) -> EdgeState | None:
    """kg_edges_all's figures for one edge from all its rows: seed + evidence dated <= as_of, support dated on or
    before its latest supersession (<= as_of) left out; None when nothing supports it then."""
    cut = max((d for d in superseded_on if as_of is None or d <= as_of), default=None)
    live = [e for e in evidence if (as_of is None or e.date <= as_of) and (cut is None or e.date > cut)]
    seed = seed_confidence is not None and cut is None
    if not live and not seed:
        return None
    readings = _readings(live)
    confidence = kg_reinforcement.confidence(seed_confidence if seed else None, readings)
    return EdgeState(confidence=confidence, n_papers=len({r.paper for r in readings}),
                     first_seen=min((e.date for e in live), default=None),
                     last_seen=max((e.date for e in live), default=None), n_evidence=len(live), in_seed=seed)


def _readings(rows: list[EvidenceRow]) -> list[kg_reinforcement.Reading]:
    return [kg_reinforcement.reading(e.doc_key, e.paper_key, e.score) for e in rows]


def reinforcement(seed_confidence: float | None, evidence: list[EvidenceRow],
                  superseded_on: list[dt.date]) -> list[Reinforcement]:
    """The edge's confidence after each day that changed it: one factor per paper of the evidence dated up to that
    day beside the seed's prior (kg/reinforcement.py), minus support dated on or before its latest supersession by
    then."""
    days = sorted({e.date for e in evidence} | set(superseded_on))
    out = [Reinforcement(date=None, confidence=kg_reinforcement.seed_prior(seed_confidence), n_evidence=0,
                         event="seed edge")] \
        if seed_confidence is not None else []
    for day in days:
        cut = max((d for d in superseded_on if d <= day), default=None)
        live = [e for e in evidence if e.date <= day and (cut is None or e.date > cut)]
        seed = seed_confidence if seed_confidence is not None and cut is None else None
        n_today = sum(e.date == day for e in evidence)
        event = " + ".join([*(["superseded"] if day in superseded_on else []),
                            *([f"{n_today} evidence"] if n_today else [])])
        out.append(Reinforcement(date=day, confidence=kg_reinforcement.confidence(seed, _readings(live)),
                                 n_evidence=len(live), event=event))
    return out


def timeline(store: KGStore, namespace: str, as_of: dt.date | None = None,
             days: int = TIMELINE_DAYS) -> list[DaySummary]:
    """What each day's increment added, latest first: documents and evidence rows (from the evidence), new and
    reinforced edges and new nodes (from the merge's increments row when there is one)."""
    with store.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT date, count(DISTINCT doc_key), count(*) FROM evidence WHERE namespace = ? "
            "AND (CAST(? AS DATE) IS NULL OR date <= CAST(? AS DATE)) GROUP BY date ORDER BY date DESC LIMIT ?",
            [namespace, as_of, as_of, days]).fetchall()
        inc = {r[0]: r[1:] for r in con.execute(
            "SELECT date, n_new_edges, n_reinforced, n_new_nodes, edges_after FROM increments WHERE namespace = ? "
            "AND (CAST(? AS DATE) IS NULL OR date <= CAST(? AS DATE)) ORDER BY date DESC LIMIT ?",
            [namespace, as_of, as_of, days]).fetchall()}
    out = []
    for date, n_docs, n_ev in rows:
        new, reinforced, new_nodes, after = inc.get(date, (None, None, None, None))
        out.append(DaySummary(date=date, n_docs=int(n_docs), n_evidence=int(n_ev), n_new_edges=new,
                              n_reinforced=reinforced, n_new_nodes=new_nodes, edges_after=after))
    return out


def day(store: KGStore, namespace: str, date: dt.date) -> DayView:
    """One day's increment: the edges its evidence asserted (new or reinforcing), its new nodes, its supersessions."""
    with store.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT head_id, relation, tail_id, count(*) FROM evidence WHERE namespace = ? AND date = ? "
            "GROUP BY head_id, relation, tail_id ORDER BY head_id, relation, tail_id LIMIT ?",
            [namespace, date, DAY_ROWS + 1]).fetchall()
        truncated = len(rows) > DAY_ROWS
        rows = rows[:DAY_ROWS]
        facts = keyed.edge_facts(con, {(h, t) for h, _, t, _ in rows}, namespace, date)
        nodes = con.execute(
            "SELECT x.id, min(x.name), min(x.kind), min(x.doc_key) FROM extracted_nodes x WHERE x.namespace = ? "
            "AND x.date = ? AND x.id NOT IN (SELECT id FROM seed_nodes) AND NOT EXISTS (SELECT 1 FROM "
            "extracted_nodes y WHERE y.namespace = x.namespace AND y.id = x.id AND y.date < x.date) "
            "GROUP BY x.id ORDER BY x.id LIMIT ?", [namespace, date, DAY_ROWS]).fetchall()
        sups = con.execute(
            "SELECT date, doc_key, action, head_id, relation, tail_id, against_head_id, against_relation, "
            "against_tail_id, reason FROM adjudications WHERE namespace = ? AND date = ? "
            "ORDER BY doc_key, triple_id LIMIT ?", [namespace, date, DAY_ROWS]).fetchall()
        names = _names(con, {r[0] for r in rows} | {r[2] for r in rows}, namespace)
        per_paper = con.execute(
            "SELECT doc_key, head_id, relation, tail_id, count(*) FROM evidence WHERE namespace = ? AND date = ? "
            "GROUP BY doc_key, head_id, relation, tail_id ORDER BY doc_key LIMIT ?",
            [namespace, date, DAY_ROWS * 4]).fetchall()
    edges = []
    for h, r, t, n in rows:
        f = facts.get((h, r, t))
        edges.append(DayEdge(head_id=h, head_name=names.get(h, (h,))[0], relation=r, tail_id=t,
                             tail_name=names.get(t, (t,))[0], n_evidence=int(n),
                             new=f is not None and not f.in_seed and f.first_seen == date,
                             confidence=f.confidence if f else 0.0))
    edges.sort(key=lambda e: (not e.new, e.head_name.lower(), e.relation, e.tail_name.lower()))
    return DayView(
        date=date, edges=edges, truncated=truncated, papers=_day_papers(per_paper, edges, nodes),
        new_nodes=[NodeInfo(id=i, name=n, kind=k, source="extracted", created_by_doc=d, first_seen=date)
                   for i, n, k, d in nodes],
        supersessions=[Supersession(date=d, doc_key=doc, action=a, role="supersedes" if a == "replace" else "lost to",
                                    other=(ah, ar, at), reason=reason, edge=(h, r, t))
                       for d, doc, a, h, r, t, ah, ar, at, reason in sups])


def _day_papers(per_paper: list[tuple], edges: list[DayEdge], nodes: list[tuple]) -> list[DayPaper]:
    """(doc_key, head, relation, tail, rows) of a day's evidence -> what each paper added, most evidence first."""
    new = {(e.head_id, e.relation, e.tail_id) for e in edges if e.new}
    created: dict[str, int] = {}
    for _id, _name, _kind, doc in nodes:
        created[doc] = created.get(doc, 0) + 1
    out: dict[str, DayPaper] = {}
    for doc, h, r, t, n in per_paper:
        p = out.setdefault(doc, DayPaper(doc_key=doc, n_evidence=0, n_edges=0, n_new_edges=0,
                                         n_new_nodes=created.get(doc, 0)))
        p.n_evidence += int(n)
        p.n_edges += 1
        p.n_new_edges += (h, r, t) in new
    return sorted(out.values(), key=lambda p: (-p.n_evidence, p.doc_key))


def namespaces(store: KGStore) -> list[str]:
    """The backbones with a KG namespace ('local' always)."""
    return store.namespace_names() if store.exists() else []
