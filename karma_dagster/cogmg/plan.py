"""A query plan executed over the KG store's DuckDB tables: fixed SQL, every value a bound parameter.

Model text never reaches SQL: a step's entity id, relation and kinds are parameters of one fixed statement, and
completions not yet in the KG (the benchmark's "after completion") join as a registered table, not as text. A
two-hop step runs the same statement per hop: from the entity, then from each of its best first-hop nodes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pandas as pd

from karma_dagster.cogmg.models import AnswerTriple, Completion, Hop, LinkedEntity, QueryPlan, QueryStep
from karma_dagster.kg import same_entity
from karma_dagster.kg.identity import Crosswalk
from karma_dagster.kg.store import KGStore, NodeIn

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


BRIDGES = 25  # a two-hop step follows its second hop from at most this many first-hop nodes (best ranked first)
PATHS_PER_ANSWER = 3  # the paths kept as one two-hop answer's evidence
TWO_HOP_ANSWERS = 25  # the answers a two-hop step returns, ranked by how many bridges reach them


def execute(kg: KGStore, namespace: str, plan: QueryPlan,
            overlay: Sequence[Completion] = ()) -> list[AnswerTriple]:
    """The triples answering the plan's steps in the namespace's KG (+ `overlay`), with their provenance; a
    two-hop step gives each answer's path (first hop, then second hop)."""
    if not plan.steps:
        return []
    out: dict[tuple[str, str, str], AnswerTriple] = {}  # first seen first
    with _connected(kg, overlay) as con:
        for step in plan.steps:
            found = _hop_from(con, namespace, step.entity, step.first_hop()) \
                if step.then is None else _run_chain(con, namespace, step)
            for triple in found:
                key = (triple.head_id, triple.relation, triple.tail_id)
                if key not in out:
                    out[key] = triple
                elif triple.answer and not out[key].answer:  # a triple two steps share names an answer if either does
                    out[key] = out[key].model_copy(update={"answer": triple.answer})
    return list(out.values())


def bridges(kg: KGStore, namespace: str, step: QueryStep, overlay: Sequence[Completion] = ()) -> list[LinkedEntity]:
    """The nodes a two-hop step's first hop reaches (best first, at most BRIDGES): a miss then names the second hop's
    missing triple from them."""
    kinds: dict[str, str] = {}
    with _connected(kg, overlay) as con:
        first = _hop_from(con, namespace, step.entity, step.first_hop(), kinds)
    return _bridge_nodes(step, first, kinds)


@contextmanager
def _connected(kg: KGStore, overlay: Sequence[Completion]) -> Iterator:
    edges, nodes = overlay_frames(overlay)
    with kg.connect(read_only=True) as con:
        con.register("cogmg_overlay_edges", edges)
        con.register("cogmg_overlay_nodes", nodes)
        try:
            yield con
        finally:
            con.unregister("cogmg_overlay_edges")
            con.unregister("cogmg_overlay_nodes")


def _bridge_nodes(step: QueryStep, first: list[AnswerTriple], kinds: dict[str, str]) -> list[LinkedEntity]:
    out: dict[str, LinkedEntity] = {}
    for t in first:
        node_id, name = (t.tail_id, t.tail_name) if step.direction == "out" else (t.head_id, t.head_name)
        if node_id != step.entity.entity_id and node_id not in out and len(out) < BRIDGES:
            out[node_id] = LinkedEntity(mention=name, entity_id=node_id, name=name, kind=kinds.get(node_id, ""),
                                        distance=0.0)
    return list(out.values())


def _run_chain(con, namespace: str, step: QueryStep) -> list[AnswerTriple]:  # noqa: ANN001
    """entity -r1-> bridge -r2-> answer: the second hop from each of the first hop's best BRIDGES nodes (a fixed
    statement per bridge, values bound); answers ranked by the number of bridges reaching them, then confidence."""
    assert step.then is not None
    kinds: dict[str, str] = {}
    first = _hop_from(con, namespace, step.entity, step.first_hop(), kinds)
    first_of: dict[str, AnswerTriple] = {}
    for t in first:
        first_of.setdefault(t.tail_id if step.direction == "out" else t.head_id, t)
    paths: dict[str, list[tuple[AnswerTriple, AnswerTriple]]] = {}
    for bridge in _bridge_nodes(step, first, kinds):
        for t in _run_hop(con, namespace, bridge.entity_id, bridge.name, step.then):
            answer_id = t.tail_id if step.then.direction == "out" else t.head_id
            if answer_id == step.entity.entity_id:  # back to where the chain started: not an answer
                continue
            paths.setdefault(answer_id, []).append((first_of[bridge.entity_id].model_copy(update={"answer": ""}),
                                                    t.model_copy(update={"hop": 2})))

    def rank(item: tuple[str, list[tuple[AnswerTriple, AnswerTriple]]]) -> tuple:
        _id, ps = item
        best = max((min(a.confidence if a.confidence is not None else 0.0,
                        b.confidence if b.confidence is not None else 0.0) for a, b in ps), default=0.0)
        return (-len(ps), -best, ps[0][1].answer)

    out: list[AnswerTriple] = []
    for _answer_id, ps in sorted(paths.items(), key=rank)[:TWO_HOP_ANSWERS]:
        for a, b in ps[:PATHS_PER_ANSWER]:
            out += [a, b]
    return out


def _hop_from(con, namespace: str, entity: LinkedEntity, hop: Hop,  # noqa: ANN001
              kinds: dict[str, str] | None = None) -> list[AnswerTriple]:
    """One hop from the entity as the question named it and from the KG node that entity is (kg/same_entity.py):
    the merge stores a paper's "cardiac arrhythmia" (a MeSH Disease) on the seed's Side Effect node it is one
    concept with, so a plan that asks the Disease id must find what was merged onto that node."""
    found = _run_hop(con, namespace, entity.entity_id, entity.name, hop, kinds)
    node = _kg_node_of(con, namespace, entity)
    if node is not None:
        seen = {(t.head_id, t.relation, t.tail_id) for t in found}
        found += [t for t in _run_hop(con, namespace, node, entity.name, hop, kinds)
                  if (t.head_id, t.relation, t.tail_id) not in seen]
    return found


def _kg_node_of(con, namespace: str, entity: LinkedEntity) -> str | None:  # noqa: ANN001
    """The other KG node the entity is, when its own id is not a node of the KG (None when it is, or none is)."""
    if not entity.kind or con.execute("SELECT 1 FROM kg_nodes(?) WHERE id = ? LIMIT 1",
                                      [namespace, entity.entity_id]).fetchall():
        return None
    node = NodeIn(id=entity.entity_id, name=entity.name or entity.entity_id, kind=entity.kind)
    return same_entity.existing_nodes(con, namespace, [node], Crosswalk.load()).get(entity.entity_id)


def _run_hop(con, namespace: str, entity_id: str, entity_name: str, hop: Hop,  # noqa: ANN001
             kinds: dict[str, str] | None = None) -> list[AnswerTriple]:
    """One hop's triples from the entity (`kinds` collects each answer node's kind)."""
    d, eid, rel = hop.direction, entity_id, hop.relation
    rows = con.execute(_STEP_SQL, [namespace, rel, d, eid, rel, d, eid, d, namespace]).fetchall()
    triples = []
    for head_id, relation, tail_id, confidence, in_seed, origin, answer_id, answer_name, answer_kind in rows:
        if hop.answer_kinds and answer_kind not in hop.answer_kinds:
            continue
        if kinds is not None:
            kinds.setdefault(answer_id, answer_kind or "")
        head_name, tail_name = ((entity_name, answer_name) if d == "out" else (answer_name, entity_name))
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
                                    provenance=provenance, answer=answer_name))
    return triples
