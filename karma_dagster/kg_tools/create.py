"""The create tools: validate against the schema and the KG, then stage (instances, statements) or store
(classes, properties). Every refusal raises `Refused` before anything is written, with a message that says what
to call next; every write carries who (the caller), the document and the evidence.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math

import duckdb

from karma_dagster.kg import admission_rules as rules
from karma_dagster.kg import names as kg_names
from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.kg_tools import bounds
from karma_dagster.kg_tools.context import ToolContext, caller_tag
from karma_dagster.kg_tools.ontology import ClassInfo, Ontology, PropertyInfo, label_key
from karma_dagster.kg_tools.results import Refused, ToolResult, did_you_mean
from karma_dagster.kg_tools.search import known_instance
from karma_dagster.kg_tools.staging import TOOL_PREFIX, DocumentStage
from karma_dagster.schemas.records import EvaluatedRow, MentionRow

DEFAULT_CONFIDENCE = 0.5  # a statement whose caller states no confidence: neither for nor against (1 - (1-s)...)


def _hash(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:16]


_name = bounds.name
_comment = bounds.comment


def _class(onto: Ontology, label: object, what: str = "class") -> ClassInfo:
    if not isinstance(label, str) or not label.strip():
        raise Refused(f"{what} is empty: name a class (call search_class)")
    bounds.identifier(label, what, kg_names.TYPE_MAX_CHARS)
    cls = onto.cls(label)
    if cls is not None:
        return cls
    synonym = onto.class_for_synonym(label)
    if synonym is not None:
        raise Refused(f"no class {label!r}; in this KG {label!r} means class {synonym.label!r}: use {synonym.label!r}")
    raise Refused(f"no class {label!r}{did_you_mean(onto.close_classes(label), 'call search_class')}")


def _property(onto: Ontology, label: object, ctx: ToolContext) -> PropertyInfo:
    if not isinstance(label, str) or not label.strip():
        raise Refused("predicate is empty: name a property (call search_property)")
    bounds.identifier(label, "predicate", kg_names.LABEL_MAX_CHARS)
    prop = onto.prop(label)
    if prop is not None:
        return prop
    meanings = sorted({rm.relation for rm in ctx.schema.relation_map if label_key(rm.label) == label_key(label)})
    if meanings:
        raise Refused(f"no property {label!r}: it is an extraction label; in this KG it means "
                      f"{' / '.join(repr(m) for m in meanings)} depending on the classes (call search_property)")
    raise Refused(f"no property {label!r}{did_you_mean(onto.close_properties(label), 'call search_property')}")


# ---------------------------------------------------------------- classes and properties
def _store_extension(ctx: ToolContext, what: str, label: str, comment: str, document: str | None, **extra) -> None:
    if document is not None:  # the document it came from: a key of the catalog's form, inside the KG's date range
        document = bounds.document_key(document)
    row = {"namespace": ctx.namespace, "what": what, "label": label, "label_key": label_key(label), "comment": comment,
           "caller": ctx.caller, "doc_key": document, "created_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
           "super": extra.get("super"), "domain": extra.get("domain"), "range": extra.get("range")}
    try:
        ctx.store.add_schema_extension(row)
    except duckdb.ConstraintException as exc:  # created by another caller between our check and the insert
        raise Refused(f"{what} {label!r} exists already: use it") from exc


def create_class(ctx: ToolContext, label: str, comment: str, super_class: str | None = None,
                 document: str | None = None) -> ToolResult:
    label = _name(label, "label", kg_names.TYPE_MAX_CHARS)
    comment = _comment(comment)
    onto = ctx.ontology()
    existing = onto.cls(label)
    if existing is not None:
        raise Refused(f"class {existing.label!r} exists already ({existing.source}): use it")
    synonym = onto.class_for_synonym(label)
    if synonym is not None:
        raise Refused(f"{label!r} already means class {synonym.label!r} in this KG: use {synonym.label!r}, or "
                      "name a narrower class with it as super_class")
    parent = _class(onto, super_class, "super_class") if super_class else None
    _store_extension(ctx, "class", label, comment, document, super=parent.label if parent else None)
    if parent is not None and parent.kind:
        tail = f"under {parent.label!r}: its instances enter the KG as {parent.kind} nodes"
    else:
        tail = ("without a schema node kind among its super classes: it is kept, but its instances cannot enter "
                "the KG until a curator adds it to schema.yaml (give a super_class to use it now)")
    return ToolResult(ok=True, message=f"class {label!r} created {tail}",
                      data={"label": label, "super_class": parent.label if parent else None,
                            "kind": parent.kind if parent else None})


def _allowed(onto: Ontology, prop: PropertyInfo, end: str) -> ClassInfo | None:
    """The class an extension property's own domain or range names (walking up to the first that has one)."""
    seen = set()
    current: PropertyInfo | None = prop
    while current is not None and current.label not in seen:
        seen.add(current.label)
        value = current.domain if end == "domain" else current.range
        if value:
            return onto.cls(value)
        current = onto.prop(current.super_property) if current.super_property else None
    return None


def create_property(ctx: ToolContext, label: str, comment: str, domain: str | None = None, range: str | None = None,
                    super_property: str | None = None, document: str | None = None) -> ToolResult:
    label = _name(label, "label", kg_names.LABEL_MAX_CHARS)
    comment = _comment(comment)
    onto = ctx.ontology()
    existing = onto.prop(label)
    if existing is not None:
        raise Refused(f"property {existing.label!r} exists already ({existing.source}): use it")
    dom = _class(onto, domain, "domain") if domain else None
    rng = _class(onto, range, "range") if range else None
    parent = _property(onto, super_property, ctx) if super_property else None
    if parent is not None:
        for end, cls in (("domain", dom), ("range", rng)):
            inherited = _allowed(onto, parent, end)
            if cls is not None and inherited is not None and not onto.is_subclass(cls.label, inherited.label):
                raise Refused(f"{end} {cls.label!r} does not fit super_property {parent.label!r}, whose {end} is "
                              f"{inherited.label!r}: use {inherited.label!r} or a subclass of it")
        if parent.relation is not None:
            pairs = parent.pairs
            for end, cls, pos in (("domain", dom, 0), ("range", rng, 1)):
                if cls is not None and (cls.kind is None or all(p[pos] != cls.kind for p in pairs)):
                    raise Refused(f"{end} {cls.label!r} does not fit super_property {parent.label!r}, which joins "
                                  + ", ".join(f"{s} -> {t}" for s, t, _ in pairs))
            if dom is not None and rng is not None and (dom.kind, rng.kind) not in {(s, t) for s, t, _ in pairs}:
                raise Refused(f"{parent.label!r} joins " + ", ".join(f"{s} -> {t}" for s, t, _ in pairs)
                              + f", not {dom.kind} -> {rng.kind}: choose another domain, range or super_property")
    _store_extension(ctx, "property", label, comment, document, super=parent.label if parent else None,
                     domain=dom.label if dom else None, range=rng.label if rng else None)
    if parent is not None and parent.relation:
        tail = f"under {parent.label!r}: its statements enter the KG as {parent.relation!r} edges"
    else:
        tail = ("without a schema relation among its super properties: it is kept, but its statements cannot "
                "enter the KG until a curator adds it to schema.yaml (give a super_property to use it now)")
    return ToolResult(ok=True, message=f"property {label!r} created {tail}",
                      data={"label": label, "domain": dom.label if dom else None, "range": rng.label if rng else None,
                            "super_property": parent.label if parent else None,
                            "relation": parent.relation if parent else None})


# ---------------------------------------------------------------- instances
def create_instance(ctx: ToolContext, label: str, comment: str, type: str, document: str | None = None) -> ToolResult:
    label = _name(label, "label")
    comment = _comment(comment)
    onto = ctx.ontology()
    cls = _class(onto, type, "type")
    if cls.kind is None:
        raise Refused(f"class {cls.label!r} has no schema node kind among its super classes, so the KG cannot store "
                      "its instances; use a class under one of: " + ", ".join(ctx.schema.node_kinds))
    # one node per entity (issue 27): a name, synonym or entry term of an existing instance is that instance
    known = known_instance(ctx, label, [cls.kind])  # the lookup search_instance answers with
    if known is not None:
        how = "is its name" if known.by == "name" else "names it (a synonym or entry term of the same vocabulary id)"
        raise Refused(f"{label!r} {how}: instance {known.node.id} ({known.node.name}, {known.node.kind}) exists; "
                      "use that id in create_statement")
    (hits,) = ctx.index().search([label], [cls.kind], k=5)
    same = [h for h in hits if h.distance == 0.0 and h.kind == cls.kind]
    if same:
        raise Refused(f"an instance named {label!r} of class {cls.kind!r} exists: {same[0].entity_id} "
                      f"({same[0].name}); use that id in create_statement")
    with ctx.document(document) as stage:
        mentions = stage.mentions()
        for m in mentions:
            if m.status == "new" and m.kind == cls.kind and label_key(m.text) == label_key(label):
                raise Refused(f"an instance named {label!r} of class {cls.kind!r} is already staged in document "
                              f"{stage.doc_key}: {m.entity_id}; use that id")
        entity_id = kg_names.checked(f"NEW:{cls.label}:{normalize_name(label)}", "id", kg_names.ID_MAX_CHARS)
        segment = f"{stage.doc_key}:tools"
        mentions.append(MentionRow(
            doc_key=stage.doc_key, mention_id=f"{TOOL_PREFIX}m:{_hash(entity_id)}", summary_id=segment,
            segment_id=segment, start=0, end=len(label), text=label, long_form=None, type=cls.label, vocab_id=None,
            entity_id=entity_id, kg_id=None, kg_name=None, distance=round(hits[0].distance, 4) if hits else 1.0,
            status="new", kind=cls.kind, in_dictionary=False, linked_to=None, comment=comment,
            # kept on the KG node: the comment, and the class when it is a created one (kind: its schema ancestor)
            class_label=cls.label if cls.source == "extension" else None))
        stage.write(stage.triples(), mentions)
    near = f"; nearest existing: {hits[0].entity_id} ({hits[0].name}, distance {hits[0].distance:.2f})" if hits else ""
    return ToolResult(ok=True, data={"id": entity_id, "label": label, "type": cls.label, "kind": cls.kind},
                      message=f"instance {entity_id} staged in document {stage.doc_key}{near}; it enters the KG with "
                              "the first statement that uses it, at the merge of the document's date")


# ---------------------------------------------------------------- statements
def _resolve(ctx: ToolContext, onto: Ontology, stage: DocumentStage, mentions: list[MentionRow], entity: object,
             role: str) -> dict:
    """A subject or object: an instance staged in this document, or a node of the namespace's KG."""
    if not isinstance(entity, str) or not entity.strip():
        raise Refused(f"{role} is empty: give an instance id (call search_instance)")
    bounds.identifier(entity, role)
    for m in mentions:
        if m.status == "new" and m.entity_id == entity:
            return {"id": entity, "name": m.text, "class": m.type, "kind": m.kind, "source": "staged"}
    node = ctx.store.nodes_by_id([entity], ctx.namespace).get(entity)
    if node is not None:
        return {"id": entity, "name": node["name"], "class": node["kind"], "kind": node["kind"],
                "source": node["source"], "vocab_id": node.get("vocab_id")}
    (hits,) = ctx.index().search([entity], None, k=3)
    close = [f"{h.entity_id} ({h.name}, {h.kind})" for h in hits if h.distance <= 0.5]
    staged = [f"{m.entity_id} ({m.text})" for m in mentions if m.status == "new" and label_key(m.text) == label_key(entity)]
    hint = did_you_mean(staged + close, "ids from search_instance")
    raise Refused(f"{role} {entity!r} is no instance of the KG nor staged in document {stage.doc_key}{hint}; "
                  "call search_instance, or create_instance first")


def _segment(segment: object) -> str:
    try:
        return kg_names.exact(str(segment), "segment", kg_names.ID_MAX_CHARS)
    except kg_names.NameRejected as exc:
        raise Refused(f"{exc}: a segment id names where the evidence is (e.g. 2016-02-12_pmc1:s003)") from exc


def _fit(onto: Ontology, prop: PropertyInfo, end: str, inst: dict, role: str) -> None:
    wanted = _allowed(onto, prop, end)
    if wanted is not None and not onto.is_subclass(inst["class"], wanted.label):
        raise Refused(f"refused by admission rule domain_range: {end} violation: property {prop.label!r} needs a "
                      f"{wanted.label!r} as {role}, but "
                      f"{inst['id']} ({inst['name']}) is a {inst['class']!r}")


def _fact(prop: PropertyInfo, s: dict, o: dict, evidence: str | None = None, stage: DocumentStage | None = None
          ) -> rules.Fact:
    return rules.Fact(head_id=s["id"], relation=prop.relation, tail_id=o["id"], head_kind=s["kind"],
                      tail_kind=o["kind"], head_name=s["name"], tail_name=o["name"], head_vocab_id=s.get("vocab_id"),
                      tail_vocab_id=o.get("vocab_id"), evidence=evidence, date=stage.date if stage else None)


def _refused(refusal: rules.Refusal, hint: str = "") -> Refused:
    return Refused(refusal.message() + (f"; {hint}" if hint else ""))


def _self_edge(prop: PropertyInfo, s: dict, o: dict) -> None:
    """The admission rule self_edge (kg/admission_rules.py), asked first: one instance, or two of one identity."""
    why = rules.same_identity(_fact(prop, s, o))
    if why:
        raise _refused(rules.Refusal(rule="self_edge", fact=_fact(prop, s, o).text(), reason=why),
                       "a statement joins two instances")


def _metaedge(prop: PropertyInfo, s: dict, o: dict) -> str:
    """The metaedge the admission rules resolve for the statement (metaedge, domain_range), with what to call next."""
    found = rules.resolve_metaedge(_fact(prop, s, o), rules.default_schema())
    if isinstance(found, rules.Refusal):
        hint = ("call again with subject and object swapped" if found.reason.startswith("direction")
                else f"subject {s['id']} ({s['name']}) is a {s['kind']} and object {o['id']} ({o['name']}) a "
                     f"{o['kind']}; call search_property for a property between {s['kind']} and {o['kind']}")
        raise _refused(found, hint)
    return found.abbrev


def _admit(prop: PropertyInfo, s: dict, o: dict, metaedge: str, evidence: str, stage: DocumentStage) -> None:
    """Every admission rule on the statement as it would be merged (the same check the merge makes)."""
    fact = _fact(prop, s, o, evidence, stage).model_copy(update={"metaedge": metaedge})
    result = rules.check(fact)
    if isinstance(result, rules.Refusal):
        raise _refused(result)


def _contradiction(ctx: ToolContext, relation: str, s: dict, o: dict, staged: list[EvaluatedRow]) -> None:
    """A statement the KG (or this document) contradicts is refused: adjudicating is the conflict agent's job."""
    edges = ctx.store.edges_between([(s["id"], o["id"]), (o["id"], s["id"])], ctx.namespace)
    held = [(e.head_id, e.relation, e.tail_id, f"confidence {e.confidence:.2f}") for pair in edges.values() for e in pair]
    held += [(t.head_id, t.kg_relation or t.relation, t.tail_id, "staged in this document") for t in staged
             if {t.head_id, t.tail_id} == {s["id"], o["id"]}]
    kinds = {s["id"]: s["kind"], o["id"]: o["kind"]}
    for head, rel, tail, support in held:
        if ctx.schema.incompatible(relation, rel, kinds[head], kinds[tail]):
            why = ctx.schema.why_incompatible(relation, rel, kinds[head], kinds[tail]) or "the schema says so"
            raise Refused(f"contradiction: {head} -{rel}-> {tail} ({support}) cannot hold "
                          f"together with {relation!r} ({why}); not staged")


def create_statement(ctx: ToolContext, subject: str, predicate: str, object: str, evidence: str,
                     document: str | None = None, confidence: float | None = None,
                     segment: str | None = None) -> ToolResult:
    evidence = bounds.evidence(evidence)
    score = DEFAULT_CONFIDENCE if confidence is None else confidence
    if isinstance(score, bool) or not isinstance(score, int | float) or math.isnan(score) or not 0.0 <= score <= 1.0:
        raise Refused(f"confidence {confidence!r} is not a number in [0, 1]")
    onto = ctx.ontology()
    prop = _property(onto, predicate, ctx)
    if prop.relation is None:
        raise Refused(f"property {prop.label!r} has no schema relation among its super properties, so the KG cannot "
                      "store its statements; use a schema property (call search_property)")
    with ctx.document(document) as stage:
        mentions, triples = stage.mentions(), stage.triples()
        s = _resolve(ctx, onto, stage, mentions, subject, "subject")
        o = _resolve(ctx, onto, stage, mentions, object, "object")
        _self_edge(prop, s, o)
        _fit(onto, prop, "domain", s, "subject")
        _fit(onto, prop, "range", o, "object")
        metaedge = _metaedge(prop, s, o)
        _admit(prop, s, o, metaedge, evidence, stage)
        for t in triples:
            if (t.head_id, t.kg_relation, t.tail_id) == (s["id"], prop.relation, o["id"]):
                raise Refused(f"already staged in document {stage.doc_key} as {t.triple_id}: "
                              f"{s['id']} -{prop.relation}-> {o['id']}")
        _contradiction(ctx, prop.relation, s, o, triples)
        seg = _segment(segment) if segment else f"{stage.doc_key}:tools"
        for inst in (s, o):  # a node an earlier merge added travels with the triple, as in the chain
            if inst["source"] == "extracted" and not any(m.entity_id == inst["id"] for m in mentions):
                mentions.append(MentionRow(
                    doc_key=stage.doc_key, mention_id=f"{TOOL_PREFIX}m:{_hash(inst['id'])}", summary_id=seg,
                    segment_id=seg, start=0, end=len(inst["name"]), text=inst["name"], long_form=None,
                    type=inst["kind"], vocab_id=None, entity_id=inst["id"], kg_id=inst["id"], kg_name=inst["name"],
                    distance=0.0, status="linked", kind=inst["kind"], in_dictionary=False, linked_to="extracted"))
        triple_id = f"{TOOL_PREFIX}{caller_tag(ctx.caller)}:{_hash(stage.doc_key, s['id'], prop.relation, o['id'])}"
        mention_of = {m.entity_id: m.mention_id for m in mentions}
        triples.append(EvaluatedRow(
            doc_key=stage.doc_key, triple_id=triple_id, summary_id=seg, segment_id=seg,
            head_mention_id=mention_of.get(s["id"], f"{TOOL_PREFIX}m:{_hash(s['id'])}"), head_id=s["id"],
            head_name=s["name"], head_type=s["class"], relation=prop.label,
            tail_mention_id=mention_of.get(o["id"], f"{TOOL_PREFIX}m:{_hash(o['id'])}"), tail_id=o["id"],
            tail_name=o["name"], tail_type=o["class"], probability=float(score), evidence=evidence,
            sample_confidence=None, head_kg_type=s["kind"], tail_kg_type=o["kind"], kg_relation=prop.relation,
            metaedge=metaedge, alignment_prob=1.0, schema_status="aligned", conflict=False, contradicts=None,
            verdict="none", action="keep", against="none",
            adjudication=f"stated through the KG tools by {ctx.caller}; no contradiction in the KG when staged",
            confidence=None, clarity=None, relevance=None, score=None, evidence_score=float(score), accepted=True,
            # a created property is kept on the evidence row (the edge is its schema ancestor's relation)
            property=prop.label if prop.source == "extension" else None))
        stage.write(triples, mentions)
    known = ctx.store.edges_between([(s["id"], o["id"])], ctx.namespace)[(s["id"], o["id"])]
    reinforces = any(e.relation == prop.relation for e in known)
    return ToolResult(
        ok=True, data={"triple_id": triple_id, "subject": s["id"], "relation": prop.relation, "object": o["id"],
                       "metaedge": metaedge, "document": stage.doc_key, "confidence": float(score)},
        message=(f"staged {s['id']} ({s['name']}) -{prop.relation}-> {o['id']} ({o['name']}) [{metaedge}] in "
                 f"document {stage.doc_key}; {'reinforces an existing edge' if reinforces else 'a new edge'} once "
                 "the document's date is merged"))
