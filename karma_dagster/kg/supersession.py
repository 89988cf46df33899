"""When dated literature overturns a KG edge: contradicting papers, each weighed once, against the edge over time.

Why: the conflict agent weighs one new triple against a KG edge (kg/adjudication.py), so a seed edge's 0.9 prior
is never beaten by one paper (at most 0.95 against 0.9 + a 0.15 margin): contradicting literature ended in review
or discard whatever its weight over the years. So each triple the agent sent to review or discarded against a KG
edge is recorded per paper in `contradictions` (its date and its calibrated probability p of being right: the
evaluator's evidence score, capped like any reading at reinforcement.PAPER_CEILING), and at every merge the edges
the day's contradictions name are weighed again:

- the contradiction's posterior C = 1 - prod(1 - p) over one factor per paper (its best p: a paper counts once,
  as in kg/reinforcement.py), over the papers dated after the edge's latest supersession and up to the merge's date;
- the edge's posterior E = its confidence as of the day before (the seed prior and its papers), time-discounted as
  the conflict agent discounts it (adjudication.discounted_confidence: a seed edge is not discounted);
- the rule: the edge is superseded from the merge's date when at least MIN_PAPERS papers contradict it and
  logit(C) >= logit(E) + LOGIT_MARGIN, i.e. the odds of the contradiction are e (~2.7) times the edge's.

For the seed's 0.9 that takes C >= 0.961: never one paper, two strong ones (0.85 each), three of 0.7. A superseded
edge is what a replace makes it (store.kg_superseded): an adjudication 'replace' row names it, the paper that tipped
the balance and the numbers; its seed row and evidence stay stored (its history), and support dated after the
supersession may assert it again. The contradicting triples themselves stay where the agent put them (review).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.kg import adjudication as adj
from karma_dagster.kg import keyed
from karma_dagster.kg import names as kg_names
from karma_dagster.kg import reinforcement
from karma_dagster.kg.edges import EdgeFacts
from karma_dagster.runtime.params import KarmaParams

MIN_PAPERS = 2  # one paper never overturns an edge on its own weight (the agent's margin already judged it)
LOGIT_MARGIN = 1.0  # log-odds the contradiction must lead the edge by
ROW_FLAG = "contradiction"  # the key integration sets on a row that is a recorded contradiction, not evidence

Edge = tuple[str, str, str]


class ContradictionError(ValueError):
    """A contradiction row that cannot be recorded; the message names the document and triple."""


class Contradiction(BaseModel):
    """One triple of a paper that contradicts a KG edge (`against`) without entering the KG."""

    model_config = ConfigDict(frozen=True)
    doc_key: str
    triple_id: str
    head_id: str
    relation: str
    tail_id: str
    against: Edge
    p: float = Field(ge=0.0, le=1.0)
    action: str
    evidence: str


def is_contradiction(row: Mapping[str, Any]) -> bool:
    return bool(row.get(ROW_FLAG))


def validate(row: Mapping[str, Any], doc_key: str) -> list[dict[str, Any]]:
    """The rows to record for one contradicting triple (one per KG edge it names), as plain dicts (what the merge
    fingerprints); ContradictionError names what is wrong."""
    tid = row.get("triple_id") or "<no triple_id>"

    def fail(problem: str) -> ContradictionError:
        return ContradictionError(f"doc {doc_key!r}, contradicting triple {kg_names.preview(str(tid))}: {problem}")

    relation = row.get("kg_relation") or row.get("relation")
    contradicts = row.get("contradicts")
    if not isinstance(contradicts, str) or not contradicts.strip():
        raise fail("names no KG edge it contradicts (contradicts is empty)")
    try:
        edges = adj.parse_edges(contradicts)
    except adj.EdgeTextError as exc:
        raise fail(str(exc)) from exc
    source = "evidence_score" if row.get("evidence_score") is not None else "score"
    p = row.get(source)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0 or math.isnan(float(p)):
        raise fail(f"{source} {p!r} is not a number in [0, 1]")
    for field in ("triple_id", "head_id", "tail_id", "evidence"):
        if not isinstance(row.get(field), str) or not row[field].strip():
            raise fail(f"field {field!r} is empty or missing")
    if not isinstance(relation, str) or not relation:
        raise fail("no relation")
    base = {ROW_FLAG: True, "doc_key": doc_key, "triple_id": row["triple_id"], "head_id": row["head_id"],
            "relation": relation, "tail_id": row["tail_id"], "p": min(float(p), reinforcement.PAPER_CEILING),
            "action": str(row.get("action") or "review"), "evidence": kg_names.clean_text(row["evidence"])}
    return [{**base, "against": list(e)} for e in edges]


def split(rows: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Contradiction]]:
    """(evidence rows, contradictions) of a document's prepared rows."""
    kept, contra = [], []
    for r in rows:
        if is_contradiction(r):
            contra.append(Contradiction(**{k: (tuple(v) if k == "against" else v) for k, v in r.items()
                                           if k != ROW_FLAG}))
        else:
            kept.append(r)
    return kept, contra


def overturns(edge_posterior: float, papers: Mapping[str, float]) -> tuple[bool, float]:
    """(the rule holds, C): `papers` maps each contradicting paper to its best p."""
    c = reinforcement.combine(papers[k] for k in sorted(papers))
    if len(papers) < MIN_PAPERS:
        return False, c
    return _logit(c) >= _logit(edge_posterior) + LOGIT_MARGIN, c


def _logit(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))


DELETE_SQL = "DELETE FROM contradictions WHERE namespace = ? AND (date = ? OR doc_key IN (SELECT doc_key FROM _docs))"


def record(con: Any, ns: str, date: dt.date, run_id: str, merged_at: dt.datetime,
           contradicted: Mapping[str, Sequence[Contradiction]]) -> None:
    """Insert the day's contradictions (the merge deleted the documents' and the date's earlier rows)."""
    rows = [(ns, date, c.doc_key, c.triple_id, c.head_id, c.relation, c.tail_id, *c.against, c.p, c.action,
             c.evidence, run_id, merged_at)
            for cs in contradicted.values() for c in {(x.triple_id, x.against): x for x in cs}.values()]
    if rows:
        con.executemany(
            "INSERT INTO contradictions (namespace, date, doc_key, triple_id, head_id, relation, tail_id, "
            "against_head_id, against_relation, against_tail_id, p, action, evidence, run_id, merged_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


_HISTORY_SQL = """
SELECT c.doc_key, c.date, c.p, c.triple_id FROM contradictions c
WHERE c.namespace = ? AND c.against_head_id = ? AND c.against_relation = ? AND c.against_tail_id = ? AND c.date <= ?
  AND c.date > coalesce((SELECT max(a.date) FROM adjudications a WHERE a.namespace = c.namespace
      AND a.action = 'replace' AND a.against_head_id = c.against_head_id AND a.against_relation = c.against_relation
      AND a.against_tail_id = c.against_tail_id AND a.date < ?), CAST('0001-01-01' AS DATE))
"""


def weigh_day(con: Any, ns: str, date: dt.date, contradicted: Mapping[str, Sequence[Contradiction]],
              superseded_today: set[Edge], params: KarmaParams) -> list[tuple[Contradiction, Edge, EdgeFacts, str]]:
    """The edges the day's contradictions overturn: (the tipping contradiction, the edge, its facts as of the day
    before, the reason). Call after record(); an edge a replace of the day already supersedes is left alone."""
    today: dict[Edge, list[Contradiction]] = {}
    for cs in contradicted.values():
        for c in cs:
            today.setdefault(c.against, []).append(c)
    wanted = sorted(set(today) - superseded_today)
    if not wanted:
        return []
    before = date - dt.timedelta(days=1)
    facts = keyed.edge_facts(con, {(h, t) for h, _, t in wanted}, ns, before)
    out = []
    for edge in wanted:
        f = facts.get(edge)
        if f is None:  # not in the KG the day before (superseded, or withdrawn): nothing to overturn
            continue
        papers: dict[str, tuple[float, dt.date]] = {}
        for doc, day, p, _tid in con.execute(_HISTORY_SQL, [ns, *edge, date, date]).fetchall():
            best = papers.get(doc)
            papers[doc] = (max(float(p), best[0]) if best else float(p), day)
        e = adj.discounted_confidence(f, date, params.conflict_half_life_years)
        holds, c = overturns(e, {k: v[0] for k, v in papers.items()})
        if not holds:
            continue
        tipping = max(today[edge], key=lambda x: (x.p, x.doc_key, x.triple_id))
        listed = ", ".join(f"{k} ({v[1]}) {v[0]:.2f}" for k, v in sorted(papers.items(), key=lambda kv: kv[1][1]))
        reason = (f"overturned by {len(papers)} papers contradicting it: P(contradiction) {c:.3f} (logit "
                  f"{_logit(c):.2f}) >= P(edge) {e:.3f} (logit {_logit(e):.2f}) + {LOGIT_MARGIN:g} with >= "
                  f"{MIN_PAPERS} papers; papers: {listed}; the edge is superseded from {date} and kept in history")
        out.append((tipping, edge, f, reason))
    return out
