"""RDF/Turtle export (rdflib): the schema as OWL classes and properties, nodes as labelled instances, edges as
statements, provenance on reified statements.

Why reification and not RDF-star: rdflib (7.x) neither parses nor writes RDF-star / RDF 1.2 triple terms, so an
RDF-star file could not be read back by the library that wrote it (the round trip this export is tested by), and
many stores and SPARQL 1.1 engines cannot read it either. Standard rdf:Statement reification is plain RDF 1.1:
every edge is asserted once (h p t) and described once by a statement node carrying confidence, first/last seen
and its evidence; a superseded edge gets a statement node too but is not asserted, which is how its history stays
in the file without the graph claiming it.

Why one property per metaedge: a relation name joins several kind pairs (upregulates: Compound/Disease/Anatomy ->
Gene), and rdfs:domain on the shared property would make every subject an instance of all those classes at once.
So `rel:CtD` (Compound treats Disease) has the exact domain and range and is rdfs:subPropertyOf `rel:treats`.

What KG tool callers added (kg_tools; the function-calling paper's instance / class / property writes): an instance
keeps its comment (rdfs:comment) and is rdf:type its tool-created class as well as its node kind; the class is an
owl:Class rdfs:subClassOf its super class. A statement made with a tool-created property is asserted with that
property too (`h rel:created t` beside `h rel:CuG t`; the property is rdfs:subPropertyOf its super property), and
each evidence entity that stated it names it (karma:property).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import quote

from rdflib import RDF, RDFS, XSD, BNode, Graph, Literal, Namespace, URIRef
from rdflib.namespace import DCTERMS, OWL, PROV, SKOS

from karma_dagster.export.snapshot import Snapshot, SnapshotEdge

DEFAULT_BASE = "https://example.org/karma/"  # a placeholder: pass base_iri (karma export --base-iri) for real IRIs
FILE = "kg.ttl"


class Vocab:
    """The IRIs of one export: the base and its namespaces (classes, relations, nodes, statements, documents)."""

    def __init__(self, base: str) -> None:
        if not base.endswith(("/", "#")):
            base += "/"
        self.base = base
        self.karma = Namespace(base + "vocab#")
        self.cls = Namespace(base + "class/")
        self.rel = Namespace(base + "relation/")
        self.node = Namespace(base + "node/")
        self.stmt = Namespace(base + "statement/")
        self.ev = Namespace(base + "evidence/")
        self.doc = Namespace(base + "document/")
        self.agent = Namespace(base + "backbone/")

    @staticmethod
    def local(text: str) -> str:
        return quote(text, safe="")

    def class_iri(self, kind: str) -> URIRef:
        return self.cls[self.local(kind)]

    def relation_iri(self, name: str) -> URIRef:
        return self.rel[self.local(name)]

    def node_iri(self, node_id: str) -> URIRef:
        return self.node[self.local(node_id)]

    def statement_iri(self, namespace: str, h: str, r: str, t: str) -> URIRef:
        return self.stmt[_digest(namespace, h, r, t)]


def _digest(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:20]  # noqa: S324 - an id, not a secret


def build_graph(snap: Snapshot, base_iri: str = DEFAULT_BASE) -> tuple[Graph, dict[str, int]]:
    """The RDF graph of the snapshot and what it holds (classes, properties, instances, statements, ...)."""
    v = Vocab(base_iri)
    g = Graph()
    for prefix, ns in (("karma", v.karma), ("cls", v.cls), ("rel", v.rel), ("node", v.node), ("stmt", v.stmt),
                       ("ev", v.ev), ("doc", v.doc), ("backbone", v.agent), ("prov", PROV), ("skos", SKOS),
                       ("dcterms", DCTERMS), ("owl", OWL)):
        g.bind(prefix, ns)
    onto = URIRef(v.base)
    g.add((onto, RDF.type, OWL.Ontology))
    g.add((onto, RDFS.label, Literal(f"karma-dagster KG, namespace {snap.namespace}, as of "
                                     f"{snap.as_of.isoformat() if snap.as_of else 'all dates'}")))
    if snap.as_of is not None:
        g.add((onto, DCTERMS.date, Literal(snap.as_of, datatype=XSD.date)))
    classes = _schema(g, v, snap)
    _annotation_properties(g, v)
    for n in snap.nodes:
        s = v.node_iri(n.id)
        if v.class_iri(n.kind) not in classes:  # a kind neither schema.yaml nor a KG tool declared
            classes.add(v.class_iri(n.kind))
            g.add((v.class_iri(n.kind), RDF.type, OWL.Class))
            g.add((v.class_iri(n.kind), RDFS.label, Literal(n.kind)))
            g.add((v.class_iri(n.kind), v.karma.source, Literal("undeclared")))
        g.add((s, RDF.type, v.class_iri(n.kind)))
        if n.class_label:  # a KG tool instance of a tool-created class: an instance of that class too
            g.add((s, RDF.type, _created_class(g, v, classes, n.class_label, n.kind)))
        if n.comment:
            g.add((s, RDFS.comment, Literal(n.comment)))
        g.add((s, RDFS.label, Literal(n.name)))
        g.add((s, DCTERMS.identifier, Literal(n.id)))
        if n.vocab_id:
            g.add((s, SKOS.notation, Literal(n.vocab_id)))
        for syn in n.synonyms:
            g.add((s, SKOS.altLabel, Literal(syn)))
        g.add((s, v.karma.source, Literal(n.source)))
        _dates(g, v, s, n.first_seen, n.last_seen)
        if n.created_by_doc:
            g.add((s, PROV.wasDerivedFrom, v.doc[v.local(n.created_by_doc)]))
    seed = v.karma.seedImport
    g.add((seed, RDF.type, PROV.Entity))
    g.add((seed, RDFS.label, Literal("the imported seed KG")))
    n_statements = 0
    for e in snap.edges:
        p = _edge_property(g, v, snap, e)
        h, t = v.node_iri(e.head_id), v.node_iri(e.tail_id)
        g.add((h, p, t))
        n_statements += 1
        for label in snap.created_properties(e):  # stated with a tool-created property: asserted with it as well
            cp = _created_property(g, v, label, e.relation)
            if (h, cp, t) not in g:
                g.add((h, cp, t))
                n_statements += 1
        st = _statement(g, v, snap.namespace, h, p, t, e.head_id, e.relation, e.tail_id)
        g.add((st, v.karma.confidence, Literal(round(e.confidence, 6), datatype=XSD.double)))
        g.add((st, v.karma.nEvidence, Literal(e.n_evidence, datatype=XSD.integer)))
        g.add((st, v.karma.inSeed, Literal(e.in_seed)))
        _dates(g, v, st, e.first_seen, e.last_seen)
        if e.in_seed:
            g.add((st, PROV.wasDerivedFrom, seed))
        for ev in snap.evidence_by_edge.get(e.key, []):
            g.add((st, PROV.wasDerivedFrom, _evidence(g, v, snap.namespace, ev)))
    for sup in snap.supersessions:
        st = _statement(g, v, snap.namespace, v.node_iri(sup.head_id), v.relation_iri(sup.relation),
                        v.node_iri(sup.tail_id), sup.head_id, sup.relation, sup.tail_id)
        g.add((st, PROV.invalidatedAtTime, Literal(sup.date, datatype=XSD.date)))
        g.add((st, v.karma.supersededBy, v.statement_iri(snap.namespace, sup.by_head_id, sup.by_relation,
                                                          sup.by_tail_id)))
        g.add((st, RDFS.comment, Literal(sup.reason)))
    counts = {
        "classes": len(classes), "properties": len(set(g.subjects(RDF.type, OWL.ObjectProperty))),
        "instances": len(snap.nodes),
        "statements": n_statements, "reified_statements": len(set(g.subjects(RDF.type, RDF.Statement))),
        "evidence": len(set(g.subjects(RDF.type, PROV.Entity))) - 1, "supersessions": len(snap.supersessions),
        "triples": len(g),
    }
    return g, counts


def _schema(g: Graph, v: Vocab, snap: Snapshot) -> set[URIRef]:
    """Node kinds as owl:Class; a property per relation name and one per metaedge (domain, range); tool-created
    classes and properties as they were declared."""
    classes: set[URIRef] = set()
    for kind in snap.schema_.node_kinds:
        c = v.class_iri(kind)
        g.add((c, RDF.type, OWL.Class))
        g.add((c, RDFS.label, Literal(kind)))
        classes.add(c)
    for name in snap.schema_.relation_names:
        p = v.relation_iri(name)
        g.add((p, RDF.type, OWL.ObjectProperty))
        g.add((p, RDFS.label, Literal(name)))
    for me in snap.schema_.metaedges:
        p = v.relation_iri(me.abbrev)
        g.add((p, RDF.type, OWL.ObjectProperty))
        g.add((p, RDFS.label, Literal(f"{me.source} {me.relation} {me.target}")))
        g.add((p, RDFS.subPropertyOf, v.relation_iri(me.relation)))
        g.add((p, RDFS.domain, v.class_iri(me.source)))
        g.add((p, RDFS.range, v.class_iri(me.target)))
        g.add((p, SKOS.notation, Literal(me.abbrev)))
    for term in snap.extension:
        if term.what == "class":
            c = v.class_iri(term.label)
            g.add((c, RDF.type, OWL.Class))
            classes.add(c)
            if term.super:
                g.add((c, RDFS.subClassOf, v.class_iri(term.super)))
        else:
            c = v.relation_iri(term.label)
            g.add((c, RDF.type, OWL.ObjectProperty))
            if term.super:
                g.add((c, RDFS.subPropertyOf, v.relation_iri(term.super)))
            if term.domain:
                g.add((c, RDFS.domain, v.class_iri(term.domain)))
            if term.range:
                g.add((c, RDFS.range, v.class_iri(term.range)))
        g.add((c, RDFS.label, Literal(term.label)))
        if term.comment:
            g.add((c, RDFS.comment, Literal(term.comment)))
        g.add((c, v.karma.source, Literal("kg_tools")))
    return classes


def _annotation_properties(g: Graph, v: Vocab) -> None:
    labels = {
        "source": "where a node comes from: seed (imported) or extracted (merged from papers)",
        "firstSeen": "date of the earliest evidence (or merge) by the export date",
        "lastSeen": "date of the latest evidence (or merge) by the export date",
        "confidence": "1 - prod(1 - s) over one factor per paper (the best score of its live evidence; a review "
                      "decision counts as the paper it was read from); a seed statement's confidence is a prior "
                      "worth half a paper of that confidence, capped at 0.95, never lowered by papers",
        "nEvidence": "live evidence rows (accepted triple occurrences) supporting the statement",
        "inSeed": "the statement is in the imported seed KG",
        "score": "the evidence score the merge reinforced the edge with",
        "evidenceText": "the sentence the triple was extracted from",
        "segment": "the document segment the sentence is in",
        "promptVersion": "the prompt version of the chain that extracted it",
        "runId": "the Dagster run that merged it",
        "supersededBy": "the statement that replaced this one (the conflict agent's adjudication)",
        "property": "the tool-created property the triple was stated with (a subproperty of the statement's)",
        "dateSource": "publication | arrival | configured: whether the evidence's date (prov:generatedAtTime) is "
                      "its paper's publication date, the day the paper arrived, or the storage setting `undated`",
    }
    for name, comment in labels.items():
        p = v.karma[name]
        g.add((p, RDF.type, OWL.AnnotationProperty))
        g.add((p, RDFS.comment, Literal(comment)))


def _edge_property(g: Graph, v: Vocab, snap: Snapshot, e: SnapshotEdge) -> URIRef:
    """The metaedge's property; a relation neither schema.yaml nor a KG tool declared is declared here (so every
    statement's predicate is an owl:ObjectProperty of the file), marked as such."""
    me = snap.metaedge_of(e)
    p = v.relation_iri(me.abbrev if me is not None and me.relation == e.relation else e.relation)
    if (p, RDF.type, OWL.ObjectProperty) not in g:
        g.add((p, RDF.type, OWL.ObjectProperty))
        g.add((p, RDFS.label, Literal(e.relation)))
        g.add((p, v.karma.source, Literal("undeclared")))
    return p


def _created_class(g: Graph, v: Vocab, classes: set[URIRef], label: str, kind: str) -> URIRef:
    """A tool-created class an instance has; declared here (under the instance's kind) when the snapshot's
    extension lacks it (a store without the schema_extension row), so the file still says what it is."""
    c = v.class_iri(label)
    if c not in classes:
        classes.add(c)
        g.add((c, RDF.type, OWL.Class))
        g.add((c, RDFS.label, Literal(label)))
        g.add((c, RDFS.subClassOf, v.class_iri(kind)))
        g.add((c, v.karma.source, Literal("undeclared")))
    return c


def _created_property(g: Graph, v: Vocab, label: str, relation: str) -> URIRef:
    """A tool-created property a statement was made with; declared here (under the edge's relation) when the
    snapshot's extension lacks it."""
    p = v.relation_iri(label)
    if (p, RDF.type, OWL.ObjectProperty) not in g:
        g.add((p, RDF.type, OWL.ObjectProperty))
        g.add((p, RDFS.label, Literal(label)))
        g.add((p, RDFS.subPropertyOf, v.relation_iri(relation)))
        g.add((p, v.karma.source, Literal("undeclared")))
    return p


def _statement(g: Graph, v: Vocab, ns: str, h: URIRef, p: URIRef, t: URIRef, hid: str, rel: str, tid: str) -> URIRef:
    st = v.statement_iri(ns, hid, rel, tid)
    g.add((st, RDF.type, RDF.Statement))
    g.add((st, RDF.subject, h))
    g.add((st, RDF.predicate, p))
    g.add((st, RDF.object, t))
    return st


def _evidence(g: Graph, v: Vocab, ns: str, ev) -> URIRef:  # noqa: ANN001 - EvidenceRow
    e = v.ev[_digest(ns, ev.doc_key, ev.triple_id)]
    g.add((e, RDF.type, PROV.Entity))
    g.add((e, v.karma.score, Literal(round(ev.score, 6), datatype=XSD.double)))
    g.add((e, v.karma.evidenceText, Literal(ev.evidence)))
    g.add((e, v.karma.segment, Literal(ev.segment_id)))
    g.add((e, v.karma.promptVersion, Literal(ev.prompt_version)))
    g.add((e, v.karma.runId, Literal(ev.run_id)))
    g.add((e, PROV.generatedAtTime, Literal(ev.date, datatype=XSD.date)))
    g.add((e, DCTERMS.source, v.doc[v.local(ev.doc_key)]))
    g.add((e, PROV.wasAttributedTo, v.agent[v.local(ev.backbone)]))
    if ev.property:
        g.add((e, v.karma.property, v.relation_iri(ev.property)))
    if ev.date_source:
        g.add((e, v.karma.dateSource, Literal(ev.date_source)))
    return e


def _dates(g: Graph, v: Vocab, s: URIRef | BNode, first, last) -> None:  # noqa: ANN001 - date | None
    if first is not None:
        g.add((s, v.karma.firstSeen, Literal(first, datatype=XSD.date)))
    if last is not None:
        g.add((s, v.karma.lastSeen, Literal(last, datatype=XSD.date)))


def write_turtle(snap: Snapshot, out_dir: Path, base_iri: str = DEFAULT_BASE) -> tuple[list[str], dict[str, int]]:
    """Write kg.ttl into out_dir; the file names written (relative) and the counts."""
    g, counts = build_graph(snap, base_iri)
    g.serialize(destination=out_dir / FILE, format="turtle", encoding="utf-8")
    return [FILE], counts


def read_back(path: Path) -> tuple[Graph, dict[str, int]]:
    """Parse a written Turtle file back; the graph and what build_graph counts in it (the round trip)."""
    g = Graph()
    g.parse(path, format="turtle")
    classes = set(g.subjects(RDF.type, OWL.Class))
    properties = set(g.subjects(RDF.type, OWL.ObjectProperty))
    instances = {s for s, _, c in g.triples((None, RDF.type, None)) if c in classes}
    asserted = sum(1 for _, p, _ in g if p in properties)
    reified = set(g.subjects(RDF.type, RDF.Statement))
    return g, {
        "classes": len(classes), "properties": len(properties), "instances": len(instances), "statements": asserted,
        "reified_statements": len(reified), "evidence": len(set(g.subjects(RDF.type, PROV.Entity))) - 1,
        "supersessions": len(set(g.subjects(PROV.invalidatedAtTime, None))), "triples": len(g),
    }
