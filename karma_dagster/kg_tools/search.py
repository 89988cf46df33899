"""The search tools: instances through the LanceDB entity index, classes and properties through the ontology.

Each answer lists the top k with ids, labels, types and a short comment, and says what to do when nothing is
close (search again under another name, or create it), so a model can go on without a human.
"""

from __future__ import annotations

import json

from karma_dagster.kg.entity_index import compatible_kinds
from karma_dagster.kg.identity import Identified
from karma_dagster.kg import names as kg_names
from karma_dagster.kg_tools import bounds
from karma_dagster.kg_tools.context import ToolContext
from karma_dagster.kg_tools.ontology import similarity
from karma_dagster.kg_tools.results import Refused, ToolResult, did_you_mean
from karma_dagster.kg_tools.staging import DocumentStage

CLOSE = 0.35  # index distance (max of cosine and word distance) under which a hit counts as a likely match


def _text(text: str, what: str = "text") -> str:
    if not isinstance(text, str) or not text.strip():
        raise Refused(f"{what} is empty: give the name (or a few words) to search for")
    return bounds.name(text, what, bounds.SEARCH_TEXT_MAX_CHARS)


def staged_instances(stage: DocumentStage) -> list[dict]:
    """The instances this document staged (not merged yet), with the comment their create call gave (the staged
    row's; the transcript's for rows staged before the row kept it)."""
    comments = {r.wrote: json.loads(r.arguments).get("comment", "") for r in stage.transcript()
                if r.ok and r.tool == "create_instance" and r.wrote}
    return [{"id": m.entity_id, "label": m.text, "type": m.type, "kind": m.kind, "source": "staged",
             "comment": m.comment or comments.get(m.entity_id, "")}
            for m in stage.mentions() if m.status == "new"]


def known_instance(ctx: ToolContext, text: str, kinds: list[str] | None) -> Identified | None:
    """The instance a name already is (kg/identity.py: its name, a synonym, an entry term or cross-reference of
    the same vocabulary id, a gene's spoken name): the one lookup search_instance answers with and
    create_instance refuses by, so a model is never told nothing is near a name it may not create."""
    return ctx.identity().by_name(text, kinds)


def search_instance(ctx: ToolContext, text: str, type: str | None = None, document: str | None = None,
                    k: int = 5) -> ToolResult:
    text = _text(text)
    k = bounds.count(k, "k", bounds.SEARCH_K_MAX)
    kinds = None
    if type is not None:
        type = bounds.name(type, "type", kg_names.TYPE_MAX_CHARS)
    if type:
        onto = ctx.ontology()
        cls = onto.cls(type) or onto.class_for_synonym(type)
        if cls is None:
            raise Refused(f"no class {type!r}{did_you_mean(onto.close_classes(type), 'call search_class')}; "
                          "or search without a type")
        kinds = [cls.kind] if cls.kind else None
    known = known_instance(ctx, text, kinds)
    (hits,) = ctx.index().search([text], kinds, k=k)
    info = ctx.store.nodes_by_id([h.entity_id for h in hits] + ([known.node.id] if known else []), ctx.namespace)

    def where(node: dict) -> str:
        return (f"added by document {node['created_by_doc']}" if node.get("source") == "extracted"
                else "seed KG" + (f", {node['vocab_id']}" if node.get("vocab_id") else ""))

    results = []
    if known is not None:  # who the name is comes first, at distance 0, whatever the index thinks of it
        n = known.node
        how = "its name" if known.by == "name" else "a synonym or entry term of its vocabulary id"
        results.append({"id": n.id, "label": n.name, "type": n.kind, "matched_name": text, "distance": 0.0,
                        "source": n.source, "comment": f"{n.kind}; {where(info.get(n.id, {}))}; {text!r} is {how}"})
        hits = [h for h in hits if h.entity_id != n.id]
    for h in hits:
        node = info.get(h.entity_id, {})
        results.append({"id": h.entity_id, "label": node.get("name", h.name), "type": h.kind,
                        "matched_name": h.name, "distance": round(h.distance, 3), "source": h.source,
                        "comment": f"{h.kind}; {where(node)}"})
    if document:
        wanted = set(compatible_kinds(kinds[0]) or ()) if kinds else None
        merged = {r["id"] for r in results}
        for inst in staged_instances(ctx.document(document)):
            score = similarity(text, inst["label"])
            if inst["id"] not in merged and score >= 0.5 and (wanted is None or inst["kind"] in wanted):
                results.append({**inst, "distance": round(1 - score, 3), "matched_name": inst["label"]})
    results.sort(key=lambda r: r["distance"])
    results = results[:k]
    close = [r for r in results if r["distance"] <= CLOSE]
    if not results:
        msg = f"no instance near {text!r}: search under another name (a synonym, the full name), or create_instance"
    elif not close:
        msg = (f"nothing close to {text!r} (nearest: {results[0]['label']!r}, distance {results[0]['distance']}); "
               "search under another name (a synonym, the full name) before create_instance")
    else:
        msg = f"{len(close)} likely match(es) for {text!r}: " + "; ".join(
            f"{r['id']} ({r['label']}, {r['type']})" for r in close[:3]) + ". Use the id in create_statement"
    return ToolResult(ok=True, message=msg, data={"results": results})


def search_class(ctx: ToolContext, text: str, k: int = 5) -> ToolResult:
    text = _text(text)
    k = bounds.count(k, "k", bounds.SEARCH_K_MAX)
    onto = ctx.ontology()
    found = onto.search_classes(text, k)
    synonym = onto.class_for_synonym(text)
    results = [{"label": c.label, "comment": c.comment, "super_class": c.super_class, "kind": c.kind,
                "source": c.source, "score": s} for s, c in found]
    if synonym is not None and all(r["label"] != synonym.label for r in results):
        results.insert(0, {"label": synonym.label, "comment": synonym.comment, "super_class": None,
                           "kind": synonym.kind, "source": synonym.source, "score": 1.0})
    if not results:
        return ToolResult(ok=True, message=f"no class near {text!r}; the classes are: "
                          + ", ".join(c.label for c in onto.classes.values())
                          + " (or create_class under one of them)", data={"results": []})
    head = results[0]
    note = (f" ({text!r} means class {synonym.label!r} in this KG)" if synonym is not None else "")
    return ToolResult(ok=True, data={"results": results},
                      message=f"best: {head['label']!r} ({head['comment']}){note}")


def search_property(ctx: ToolContext, text: str, k: int = 5) -> ToolResult:
    text = _text(text)
    k = bounds.count(k, "k", bounds.SEARCH_K_MAX)
    onto = ctx.ontology()
    found = onto.search_properties(text, k)
    results = [{"label": p.label, "comment": p.comment, "domain": p.domain, "range": p.range,
                "super_property": p.super_property, "relation": p.relation, "source": p.source,
                "allowed": [f"{s} -> {t}" for s, t, _ in p.pairs], "score": s} for s, p in found]
    if not results:
        return ToolResult(ok=True, message=f"no property near {text!r}; the properties are: "
                          + ", ".join(p.label for p in onto.properties.values()), data={"results": []})
    head = results[0]
    return ToolResult(ok=True, data={"results": results},
                      message=f"best: {head['label']!r} ({head['comment']})")
