"""The KG as of a date, as every export format reads it.

"As of D" is the KG store's own notion (kg_edges / kg_nodes): the seed plus what the namespace merged with dates
<= D; an edge a later paper superseded on day S keeps only support dated after S, so as of a date >= S it is
gone unless asserted again, and as of a date < S it is there with its old support. Reading it once, in one
connection (KGStore.export_snapshot), keeps nodes, edges and evidence consistent with each other.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

from pydantic import BaseModel, ConfigDict

from karma_dagster.kg.schema import KGSchema, Metaedge
from karma_dagster.kg.store import KGStore


class SnapshotNode(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    name: str
    kind: str
    source: str  # seed | extracted
    vocab_id: str | None
    first_seen: dt.date | None  # first evidence or merge by the date (None: seed node nothing mentions yet)
    last_seen: dt.date | None
    created_by_doc: str | None
    synonyms: list[str]
    comment: str | None = None  # a KG tool instance's comment (create_instance)
    class_label: str | None = None  # its tool-created class (kind: the schema kind that class leads to)
    attrs: dict[str, str] | None = None  # a seed node a KGX import read: the file's other cells (seed_node_attrs)


class SnapshotEdge(BaseModel):
    model_config = ConfigDict(frozen=True)
    head_id: str
    relation: str
    tail_id: str
    metaedge: str | None
    confidence: float
    first_seen: dt.date | None
    last_seen: dt.date | None
    n_evidence: int
    n_docs: int
    in_seed: bool
    sources: list[str]
    attrs: dict[str, str] | None = None  # a seed edge a KGX import read: the file's other cells (seed_edge_attrs)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.head_id, self.relation, self.tail_id


class EvidenceRow(BaseModel):
    """One accepted triple occurrence supporting an edge: the provenance every format carries."""

    model_config = ConfigDict(frozen=True)
    head_id: str
    relation: str
    tail_id: str
    date: dt.date
    doc_key: str
    triple_id: str
    score: float
    segment_id: str
    evidence: str
    backbone: str
    prompt_version: str
    run_id: str
    property: str | None = None  # the tool-created property the triple was stated with (relation: its ancestor's)
    # publication | arrival | configured: whether `date` is the paper's publication date (ingest/dates.py);
    # None: a review decision or tool statement, or merged before it was recorded
    date_source: str | None = None


class Supersession(BaseModel):
    """An edge a newer triple replaced on `date` (the conflict agent's "replace"), with why."""

    model_config = ConfigDict(frozen=True)
    head_id: str
    relation: str
    tail_id: str
    date: dt.date
    by_head_id: str
    by_relation: str
    by_tail_id: str
    doc_key: str
    reason: str


class SchemaTerm(BaseModel):
    """A class or property a KG tool caller added beside schema.yaml (kg_tools' schema_extension)."""

    model_config = ConfigDict(frozen=True)
    what: str  # class | property
    label: str
    comment: str
    super: str | None = None
    domain: str | None = None
    range: str | None = None


@dataclass
class Snapshot:
    """What read_snapshot read (a dataclass, not a pydantic model: its lookups are cached on the instance, and
    dataclasses.replace builds a new instance without them)."""

    namespace: str
    as_of: dt.date | None
    schema_: KGSchema
    nodes: list[SnapshotNode]
    edges: list[SnapshotEdge]
    evidence: list[EvidenceRow]
    supersessions: list[Supersession]
    extension: list[SchemaTerm] = field(default_factory=list)
    dangling_edges: list[SnapshotEdge] = field(default_factory=list)  # an end is no node by then: in no format

    @cached_property
    def node_by_id(self) -> dict[str, SnapshotNode]:
        return {n.id: n for n in self.nodes}

    @cached_property
    def evidence_by_edge(self) -> dict[tuple[str, str, str], list[EvidenceRow]]:
        out: dict[tuple[str, str, str], list[EvidenceRow]] = defaultdict(list)
        for e in self.evidence:
            out[(e.head_id, e.relation, e.tail_id)].append(e)
        return dict(out)

    def created_properties(self, edge: SnapshotEdge) -> list[str]:
        """The tool-created properties the edge's live evidence was stated with (sorted; [] for most edges)."""
        return sorted({e.property for e in self.evidence_by_edge.get(edge.key, []) if e.property})

    @cached_property
    def superseded_keys(self) -> set[tuple[str, str, str]]:
        return {(s.head_id, s.relation, s.tail_id) for s in self.supersessions}

    def metaedge_of(self, edge: SnapshotEdge) -> Metaedge | None:
        """The schema metaedge of an edge: its stored abbreviation, else the one its end kinds and relation fit."""
        by_abbrev = {m.abbrev: m for m in self.schema_.metaedges}
        if edge.metaedge in by_abbrev:
            return by_abbrev[edge.metaedge]
        head, tail = self.node_by_id.get(edge.head_id), self.node_by_id.get(edge.tail_id)
        if head is None or tail is None:
            return None
        return next((m for m in self.schema_.metaedges
                     if (m.source, m.relation, m.target) == (head.kind, edge.relation, tail.kind)), None)

    def counts(self) -> dict[str, int]:
        return {
            "nodes": len(self.nodes), "seed_nodes": sum(n.source == "seed" for n in self.nodes),
            "extracted_nodes": sum(n.source == "extracted" for n in self.nodes), "edges": len(self.edges),
            "edges_with_evidence": sum(e.n_evidence > 0 for e in self.edges), "evidence": len(self.evidence),
            "supersessions": len(self.supersessions), "dangling_edges_left_out": len(self.dangling_edges),
        }


def read_snapshot(store: KGStore, namespace: str, as_of: dt.date | None, schema: KGSchema | None = None) -> Snapshot:
    """The namespace's graph as of `as_of` (None = everything); edges with an end that is no node then are
    set apart (dangling_edges) so no format writes an edge to nowhere."""
    raw = store.export_snapshot(namespace, as_of)
    node_attrs = {r["id"]: json.loads(r["attrs"]) for r in raw.get("node_attrs", [])}
    edge_attrs = {(r["head_id"], r["relation"], r["tail_id"]): json.loads(r["attrs"])
                  for r in raw.get("edge_attrs", [])}
    nodes = [SnapshotNode(**r, attrs=node_attrs.get(r["id"]) if r["source"] == "seed" else None) for r in raw["nodes"]]
    ids = {n.id for n in nodes}
    edges, dangling = [], []
    for r in raw["edges"]:
        attrs = edge_attrs.get((r["head_id"], r["relation"], r["tail_id"])) if r["in_seed"] else None
        e = SnapshotEdge(**{**r, "confidence": float(r["confidence"]), "sources": list(r["sources"] or []),
                            "attrs": attrs})
        (edges if e.head_id in ids and e.tail_id in ids else dangling).append(e)
    kept = {e.key for e in edges}
    evidence = [EvidenceRow(**r) for r in raw["evidence"] if (r["head_id"], r["relation"], r["tail_id"]) in kept]
    used = {("class", n.class_label) for n in nodes if n.class_label}
    used |= {("property", e.property) for e in evidence if e.property}
    return Snapshot(
        namespace=namespace, as_of=as_of, schema_=schema or KGSchema.load(), nodes=nodes, edges=edges,
        evidence=evidence, supersessions=[Supersession(**r) for r in raw["supersessions"]],
        extension=_extension(store, namespace, as_of, used), dangling_edges=dangling,
    )


def _extension(store: KGStore, namespace: str, as_of: dt.date | None,
               used: set[tuple[str, str]] | None = None) -> list[SchemaTerm]:
    """Classes and properties KG tool callers created by the date (none when the store has no such table), and
    those the snapshot's nodes and evidence use (("class" | "property", label) in `used`) with the terms they name
    (super term, domain, range), whenever created: a paper's date can be older than the tool call that stated it."""
    rows = store.schema_extension(namespace) if hasattr(store, "schema_extension") else []
    by_label = {(r["what"], r["label"]): r for r in rows}
    needed: set[tuple[str, str]] = set()
    todo = [key for key in used or () if key in by_label]
    while todo:
        key = todo.pop()
        if key in needed:
            continue
        needed.add(key)
        r = by_label[key]
        named = [(key[0], r.get("super")), ("class", r.get("domain")), ("class", r.get("range"))]
        todo += [k for k in named if k in by_label]
    out = []
    for r in rows:
        created = r.get("created_at")
        if (as_of is not None and isinstance(created, dt.datetime) and created.date() > as_of
                and (r["what"], r["label"]) not in needed):
            continue
        out.append(SchemaTerm(what=r["what"], label=r["label"], comment=r.get("comment") or "", super=r.get("super"),
                              domain=r.get("domain"), range=r.get("range")))
    return out
