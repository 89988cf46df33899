"""A query plan executed over the KG store's DuckDB tables: fixed SQL, every value a bound parameter.

Model text never reaches SQL: a step's entity id, relation and kinds are parameters of one fixed statement, and
completions not yet in the KG (the benchmark's "after completion") join as a registered table, not as text.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from karma_dagster.cogmg.models import AnswerTriple, Completion, QueryPlan, QueryStep
from karma_dagster.kg.store import KGStore

_STEP_SQL = """
WITH e AS (
    SELECT head_id, relation, tail_id, confidence, in_seed, 'kg' AS origin FROM kg_edges(?)
    WHERE relation = ? AND (CASE WHEN ? = 'out' THEN head_id ELSE tail_id END) = ?
    UNION ALL
    SELECT head_id, relation, tail_id, NULL, false, 'completion' FROM cogmg_overlay_edges
    WHERE relation = ? AND (CASE WHEN ? = 'out' THEN head_id ELSE tail_id END) = ?),
a AS (SELECT *, CASE WHEN ? = 'out' THEN tail_id ELSE head_id END AS answer_id FROM e)
SELECT a.head_id, a.relation, a.tail_id, a.confidence, a.in_seed, a.origin, a.answer_id,
    coalesce(n.name, o.name) AS answer_name, coalesce(n.kind, o.kind) AS answer_kind
FROM a LEFT JOIN kg_nodes(?) n ON n.id = a.answer_id LEFT JOIN cogmg_overlay_nodes o ON o.id = a.answer_id
WHERE coalesce(n.name, o.name) IS NOT NULL
ORDER BY a.origin, a.confidence DESC NULLS LAST, answer_name
"""
_EVIDENCE_SQL = """
SELECT date, doc_key, evidence, backbone, prompt_version, score FROM evidence
WHERE namespace = ? AND head_id = ? AND relation = ? AND tail_id = ? ORDER BY date, doc_key LIMIT 5
"""


def overlay_frames(completions: Sequence[Completion]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Edges and nodes of completions treated as if in the KG (unreviewed, or accepted in review)."""
    edges = pd.DataFrame([(c.head_id, c.relation, c.tail_id) for c in completions],
                         columns=["head_id", "relation", "tail_id"], dtype="string")
    nodes: dict[str, tuple[str, str]] = {}
    for c in completions:
        nodes.setdefault(c.head_id, (c.head_name, c.head_kind))
        nodes.setdefault(c.tail_id, (c.tail_name, c.tail_kind))
    node_frame = pd.DataFrame([(i, n, k) for i, (n, k) in nodes.items()], columns=["id", "name", "kind"],
                              dtype="string")
    return edges, node_frame


def execute(kg: KGStore, namespace: str, plan: QueryPlan,
            overlay: Sequence[Completion] = ()) -> list[AnswerTriple]:
    """The triples answering the plan's steps in the namespace's KG (+ `overlay`), with their provenance."""
    if not plan.steps:
        return []
    edges, nodes = overlay_frames(overlay)
    out: list[AnswerTriple] = []
    seen: set[tuple[str, str, str]] = set()
    with kg.connect(read_only=True) as con:
        con.register("cogmg_overlay_edges", edges)
        con.register("cogmg_overlay_nodes", nodes)
        try:
            for step in plan.steps:
                for triple in _run_step(con, namespace, step):
                    key = (triple.head_id, triple.relation, triple.tail_id)
                    if key not in seen:
                        seen.add(key)
                        out.append(triple)
        finally:
            con.unregister("cogmg_overlay_edges")
            con.unregister("cogmg_overlay_nodes")
    return out


def _run_step(con, namespace: str, step: QueryStep) -> list[AnswerTriple]:
    d, eid, rel = step.direction, step.entity.entity_id, step.relation
    rows = con.execute(_STEP_SQL, [namespace, rel, d, eid, rel, d, eid, d, namespace]).fetchall()
    triples = []
    for head_id, relation, tail_id, confidence, in_seed, origin, _answer_id, answer_name, answer_kind in rows:
        if step.answer_kinds and answer_kind not in step.answer_kinds:
            continue
        head_name, tail_name = ((step.entity.name, answer_name) if d == "out" else (answer_name, step.entity.name))
        if origin == "completion":
            source, provenance = "completion", []
        else:
            evidence = con.execute(_EVIDENCE_SQL, [namespace, head_id, relation, tail_id]).fetchall()
            provenance = [{"date": str(r[0]), "doc_key": r[1], "evidence": r[2], "backbone": r[3],
                           "prompt_version": r[4], "score": r[5]} for r in evidence]
            source = "seed" if in_seed else "extracted"
            if in_seed:
                provenance.insert(0, {"doc_key": "", "evidence": "seed KG (imported)"})
        triples.append(AnswerTriple(head_id=head_id, head_name=head_name, relation=relation, tail_id=tail_id,
                                    tail_name=tail_name, confidence=confidence, source=source,
                                    provenance=provenance))
    return triples
