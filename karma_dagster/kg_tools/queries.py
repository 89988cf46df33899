"""Read-only KG queries for tool callers: an entity's neighbours, the edges between two entities, the
provenance of an edge. Named queries only: no tool takes SQL, so nothing reaches the KG around the validation.
(The KG context of a question is cogmg/kg_context.py's, served beside these by `karma mcp`.)
"""

from __future__ import annotations

from karma_dagster.kg import names as kg_names
from karma_dagster.kg_tools import bounds
from karma_dagster.kg_tools.context import ToolContext
from karma_dagster.kg_tools.results import Refused, ToolResult, did_you_mean
from karma_dagster.kg_tools.staging import TOOL_PREFIX, DocumentStage


def _node(ctx: ToolContext, entity: object, role: str = "entity") -> dict:
    if not isinstance(entity, str) or not entity.strip():
        raise Refused(f"{role} is empty: give an instance id (call search_instance)")
    bounds.identifier(entity, role)
    node = ctx.store.nodes_by_id([entity], ctx.namespace).get(entity)
    if node is None:
        (hits,) = ctx.index().search([entity], None, k=3)
        close = [f"{h.entity_id} ({h.name})" for h in hits if h.distance <= 0.5]
        raise Refused(f"{role} {entity!r} is not in the KG{did_you_mean(close, 'ids from search_instance')}; "
                      "staged instances enter the KG when their document's date is merged")
    return node


def neighbours(ctx: ToolContext, entity: str, limit: int = 25) -> ToolResult:
    limit = bounds.count(limit, "limit", bounds.NEIGHBOURS_LIMIT_MAX)
    node = _node(ctx, entity)
    rows = ctx.store.neighbours(node["id"], ctx.namespace, limit)
    edges = [{"subject": r["head_id"], "predicate": r["relation"], "object": r["tail_id"], "direction": r["direction"],
              "other": {"id": r["other_id"], "label": r["other_name"], "type": r["other_kind"]},
              "confidence": round(float(r["confidence"]), 4), "n_evidence": int(r["n_evidence"]),
              "in_seed": bool(r["in_seed"])} for r in rows]
    return ToolResult(ok=True, data={"entity": node, "edges": edges},
                      message=f"{len(edges)} edge(s) of {node['id']} ({node['name']}, {node['kind']}), strongest first")


def edges_between(ctx: ToolContext, a: str, b: str) -> ToolResult:
    na, nb = _node(ctx, a, "a"), _node(ctx, b, "b")
    found = ctx.store.edges_between([(na["id"], nb["id"]), (nb["id"], na["id"])], ctx.namespace)
    edges = [{"subject": e.head_id, "predicate": e.relation, "object": e.tail_id, "confidence": round(e.confidence, 4),
              "first_seen": str(e.first_seen) if e.first_seen else None,
              "last_seen": str(e.last_seen) if e.last_seen else None, "n_evidence": e.n_evidence, "in_seed": e.in_seed}
             for pair in found.values() for e in pair]
    return ToolResult(ok=True, data={"edges": edges},
                      message=f"{len(edges)} edge(s) between {na['id']} ({na['name']}) and {nb['id']} ({nb['name']})")


def edge_provenance(ctx: ToolContext, subject: str, predicate: str, object: str) -> ToolResult:
    s, o = _node(ctx, subject, "subject"), _node(ctx, object, "object")
    bounds.identifier(predicate, "predicate", kg_names.LABEL_MAX_CHARS)
    found = ctx.store.edges_between([(s["id"], o["id"])], ctx.namespace)[(s["id"], o["id"])]
    edge = next((e for e in found if e.relation == predicate), None)
    if edge is None:
        held = ", ".join(e.relation for e in found) or "none"
        raise Refused(f"no edge {s['id']} -{predicate}-> {o['id']} in the KG (relations held from subject to "
                      f"object: {held}); call edges_between")
    rows = []
    for r in ctx.store.edge_evidence(s["id"], predicate, o["id"], ctx.namespace):
        caller = None
        if r["triple_id"].startswith(TOOL_PREFIX):  # who: the transcript's caller, its tag in the id otherwise
            caller = r["triple_id"].split(":")[1]
            try:
                stage = DocumentStage(ctx.stages, ctx.namespace, r["doc_key"])
                caller = next((t.caller for t in stage.transcript() if t.wrote == r["triple_id"]), caller)
            except Exception:  # noqa: BLE001 - the transcript is a convenience; the id still names the caller
                pass
        rows.append({**{k: (str(v) if k == "date" else v) for k, v in r.items() if k != "run_id"},
                     "tool_caller": caller})
    history = [{**h, "date": str(h["date"]) if h["date"] else None} for h in
               ctx.store.edge_history(s["id"], predicate, o["id"], ctx.namespace)]
    return ToolResult(
        ok=True, data={"edge": {"subject": s["id"], "predicate": predicate, "object": o["id"],
                                "confidence": round(edge.confidence, 4), "in_seed": edge.in_seed},
                       "evidence": rows, "history": history},
        message=f"{s['id']} -{predicate}-> {o['id']}: confidence {edge.confidence:.2f}, "
                f"{'seed edge, ' if edge.in_seed else ''}{len(rows)} evidence row(s)")
