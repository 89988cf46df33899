"""Import a KGX TSV graph (nodes + edges files, plain or .gz) as the seed KG: `karma import-kg --format kgx`.

Reads what Monarch and RTX-KG2 publish and what `karma export --format kgx` writes (export/kgx.py):
- nodes: `id` (a CURIE) and `category` (Biolink classes, "|"-separated, in any order) are required; `name`,
  `synonym` ("|"), `xref` and every other column are read when present. The KG node keeps the CURIE: as its id
  and as its vocabulary id, so entity resolution (kg/identity.py) links a mention whose vocabulary id is that
  CURIE to it by id; the `xref` column's ids link too, by "xref" (`seed_xrefs`, read by services.identity_index).
  A file of our own (it has `karma_id`) keeps our node ids, and `karma_kind` gives the kind.
- the kind: biolink_map.yaml read backwards along the Biolink hierarchy (export/biolink.py InverseMapping). A node
  no kind fits (biolink:Protein, a bare NamedThing) is refused, with its edges, and counted with examples: the KG
  schema has no generic kind, and an edge needs a metaedge between two kinds.
- edges: `subject`, `predicate` and `object` are required; the metaedge is the predicate (with its
  qualifiers) read backwards through the same map, or our own `karma_metaedge` when present; `negated` edges, edges
  no metaedge says, edges to a refused node and repeats of a (head, relation, tail) are refused and counted.
  A category that is no Biolink class, or a knowledge_level / agent_type outside Biolink's enumeration, is left
  out of a row that is kept, and counted (the export would refuse to write it).
  `has_confidence_score` is the seed confidence (default: the seed_edge_confidence parameter).
- every other cell of a kept row (the KGX id, categories, provided_by, knowledge sources, publications, our
  karma_* provenance...) is stored beside the seed row (seed_node_attrs / seed_edge_attrs, as written in the file)
  and written back by the KGX export: export -> import -> export gives the same files.

Cells of a file of our own are unescaped (export/kgx.py `unescape`); another KGX file has no escapes, its cells are
read as written. Bad input (a missing required column, a malformed CURIE, a duplicate node id, an edge to a node
the node file lacks, a bad number) stops the import naming the file, the line and the problem; everything is read
and checked before the store is opened, and the seed tables are replaced in one transaction (seed_import.write_seed).
"""

from __future__ import annotations

import gzip
import io
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel

from karma_dagster.export.biolink import QUALIFIER_SLOTS, InverseMapping, enum_values, inverse_mapping
from karma_dagster.export.kgx import CURIE, OWN_PREFIX, SWAP, unescape
from karma_dagster.kg import names
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.seed_guard import IfGrown, check_mode
from karma_dagster.kg.seed_import import SeedEdge, SeedImportError, SeedImportStats, stored_seed_nodes, write_seed
from karma_dagster.kg.store import KGStore, NodeIn

NODE_REQUIRED = ("id", "category")
EDGE_REQUIRED = ("subject", "predicate", "object")
# read into the seed tables themselves, so not kept as cells (the export writes them from the KG)
NODE_MODELLED = frozenset({"name", "synonym", "karma_id", "karma_kind"})
EDGE_MODELLED = frozenset({"subject", "object", "karma_metaedge", "has_confidence_score"})
MAX_EXAMPLES = 5
_TRUE = frozenset({"true", "t", "1", "yes", "y"})


class Refusals(BaseModel):
    """What an import left out, per reason: a count and the first few examples ("file:line what")."""

    by_reason: dict[str, dict[str, object]] = {}

    def add(self, reason: str, example: str) -> None:
        entry = self.by_reason.setdefault(reason, {"count": 0, "examples": []})
        entry["count"] = int(entry["count"]) + 1  # type: ignore[call-overload]
        if len(entry["examples"]) < MAX_EXAMPLES:  # type: ignore[arg-type]
            entry["examples"].append(example)  # type: ignore[union-attr]


def _open(path: Path) -> io.TextIOBase:
    if not path.is_file():
        raise SeedImportError(f"{path}: " + ("a folder, not a file" if path.is_dir() else "file not found"))
    raw = gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")
    # KGX TSV has no quoting: a row is one "\n"-ended line (a lone CR inside a cell is data, not a line break)
    return io.TextIOWrapper(raw, encoding="utf-8", newline="\n")


def read_table(path: Path, required: tuple[str, ...]) -> tuple[list[str], Iterator[tuple[int, dict[str, str]]]]:
    """(header, rows as (line number, {column: cell})) of a KGX TSV file; the header is checked here, at once."""
    fh = _open(path)
    try:
        first = fh.readline()
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        fh.close()
        raise SeedImportError(f"{path}:1: unreadable ({exc})") from exc
    header = [h.strip() for h in first.lstrip("\ufeff").rstrip("\n").rstrip("\r").split("\t")]
    if not first.strip():
        fh.close()
        raise SeedImportError(f"{path}:1: empty file, expected a KGX header row")
    missing = [c for c in required if c not in header]
    if missing:
        fh.close()
        raise SeedImportError(f"{path}:1: missing KGX column {', '.join(map(repr, missing))} (header: {header})")
    if len(set(header)) != len(header):
        fh.close()
        dup = sorted(h for h, n in Counter(header).items() if n > 1)
        raise SeedImportError(f"{path}:1: column {', '.join(map(repr, dup))} appears twice")

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        lineno = 1
        with fh:
            try:
                for lineno, line in enumerate(fh, start=2):  # noqa: B007 - read by the except clause
                    line = line.rstrip("\n").rstrip("\r")
                    if not line.strip():
                        continue
                    cells = line.split("\t")
                    if len(cells) != len(header):
                        raise SeedImportError(f"{path}:{lineno}: {len(cells)} fields, the header has {len(header)}")
                    yield lineno, dict(zip(header, cells, strict=True))
            except (UnicodeDecodeError, OSError, EOFError) as exc:
                raise SeedImportError(f"{path}:{lineno + 1}: unreadable ({exc})") from exc

    return header, rows()


def _vocab_id(kgx_id: str, xrefs: list[str]) -> str | None:
    """The vocabulary id a node goes by: its CURIE; for our own KARMA: ids (a node no vocabulary names, or whose
    vocabulary id another node took) the xref our export wrote, if one; where an xref is the CURIE itself spelled
    otherwise (DrugBank:DB00331 for DRUGBANK:DB00331: our export puts prefixes in Biolink's case), that spelling."""
    prefix, local = kgx_id.split(":", 1)
    if prefix.upper() == OWN_PREFIX:
        return xrefs[0] if len(xrefs) == 1 else None
    same = [x for x in xrefs if x.lower() == kgx_id.lower() and x.split(":", 1)[1] == local]
    return same[0] if same else kgx_id


class _Node(BaseModel):
    node: NodeIn | None  # None: refused
    attrs: dict[str, str]


def read_nodes(path: Path, inverse: InverseMapping, schema: KGSchema, refused: Refusals, left_out: Refusals,
               rejected: names.RejectedNames) -> dict[str, _Node]:
    """KGX id -> the node it becomes (or None when refused), checked line by line. `left_out`: categories that
    are no Biolink class, dropped from a node another of its categories placed."""
    header, rows = read_table(path, NODE_REQUIRED)
    own = "karma_id" in header
    cell_text: Callable[[str], str] = unescape if own else (lambda c: c)
    kinds = set(schema.node_kinds)
    out: dict[str, _Node] = {}
    internal_ids: dict[str, int] = {}
    where = path.name
    for lineno, row in rows:
        kgx_id = row["id"].strip()
        if not CURIE.match(kgx_id):
            raise SeedImportError(f"{path}:{lineno}: id {kgx_id!r} is not a CURIE (prefix:local, no spaces or '|')")
        if kgx_id in out:
            raise SeedImportError(f"{path}:{lineno}: duplicate node id {kgx_id!r}")
        categories = [c.strip() for c in row["category"].split("|") if c.strip()]
        attrs = {k: v for k, v in row.items() if k not in NODE_MODELLED and v}
        given_kind = cell_text(row.get("karma_kind", "")).strip()
        if given_kind and given_kind not in kinds:
            raise SeedImportError(f"{path}:{lineno}: karma_kind {given_kind!r} is not a kind of the KG schema")
        kind = given_kind or inverse.kind(categories)
        if kind is None:
            shown = "|".join(categories) or "(none)"
            refused.add(f"no KG kind for category {shown}", f"{where}:{lineno} {kgx_id}")
            out[kgx_id] = _Node(node=None, attrs={})
            continue
        known = [c for c in categories if inverse.is_category(c)]
        if len(known) < len(categories):  # kept: a valid category placed it; the others are left out of the export
            left_out.add("category that is no Biolink class", f"{where}:{lineno} {kgx_id}: "
                         + "|".join(c for c in categories if c not in known))
            if known:
                attrs["category"] = "|".join(known)
            else:  # placed by karma_kind alone: the export writes its kind's category
                attrs.pop("category", None)
        try:
            node_id = names.exact(cell_text(row.get("karma_id", "")).strip() or kgx_id, "node id")
        except names.NameRejected as exc:
            raise SeedImportError(f"{path}:{lineno}: {exc}") from exc
        if node_id in internal_ids:
            raise SeedImportError(f"{path}:{lineno}: node id {node_id!r} repeats line {internal_ids[node_id]}")
        internal_ids[node_id] = lineno
        raw_name = cell_text(row.get("name", "")).strip() or kgx_id
        name = names.clean_name(raw_name)
        if isinstance(name, names.Rejection):
            refused.add(f"name the KG refuses ({name.code})", f"{where}:{lineno} {kgx_id}: {name.reason} in "
                        f"{names.preview(raw_name)}")
            out[kgx_id] = _Node(node=None, attrs={})
            continue
        synonyms: set[str] = set()
        for raw in filter(str.strip, row.get("synonym", "").split("|")):
            clean = names.clean_name(cell_text(raw))
            if isinstance(clean, names.Rejection):
                rejected.add("synonym", cell_text(raw), clean)
            elif clean != name:
                synonyms.add(clean)
        xrefs = [cell_text(x).strip() for x in row.get("xref", "").split("|") if x.strip()]
        node = NodeIn(id=node_id, name=name, kind=kind, vocab_id=_vocab_id(kgx_id, xrefs), synonyms=sorted(synonyms))
        out[kgx_id] = _Node(node=node, attrs=attrs)
    return out


def read_edges(path: Path, nodes: dict[str, _Node], nodes_path: Path, inverse: InverseMapping, schema: KGSchema,
               seed_confidence: float, refused: Refusals,
               left_out: Refusals) -> tuple[list[SeedEdge], dict[tuple[str, str, str], str]]:
    """The seed edges and their kept cells (JSON) by (head, relation, tail), checked line by line. `left_out`: a
    knowledge_level or agent_type outside its Biolink enumeration, dropped (the export writes its default)."""
    header, rows = read_table(path, EDGE_REQUIRED)
    own = "karma_metaedge" in header
    cell_text: Callable[[str], str] = unescape if own else (lambda c: c)
    by_abbrev = {m.abbrev: m for m in schema.metaedges}
    edges: dict[tuple[str, str, str], SeedEdge] = {}
    attrs_of: dict[tuple[str, str, str], str] = {}
    where = path.name
    for lineno, row in rows:
        s, p, o = row["subject"].strip(), row["predicate"].strip(), row["object"].strip()
        for end, value in (("subject", s), ("object", o)):
            if not CURIE.match(value):
                raise SeedImportError(f"{path}:{lineno}: {end} {value!r} is not a CURIE")
            if value not in nodes:
                raise SeedImportError(f"{path}:{lineno}: {end} {value!r} is no node of {nodes_path.name}")
        if not p:
            raise SeedImportError(f"{path}:{lineno}: empty predicate")
        example = f"{where}:{lineno} {s} {p} {o}"
        sn, on = nodes[s].node, nodes[o].node
        if sn is None or on is None:
            refused.add("an end is a refused node", example)
            continue
        if row.get("negated", "").strip().lower() in _TRUE:
            refused.add("negated (the KG states no negations)", example)
            continue
        abbrev = cell_text(row.get("karma_metaedge", "")).strip()
        if abbrev:
            me = by_abbrev.get(abbrev)
            if me is None:
                raise SeedImportError(f"{path}:{lineno}: karma_metaedge {abbrev!r} is not a metaedge of the KG schema")
            pm = inverse.mapping.predicates.get(abbrev)
            head_is_subject = not (pm is not None and pm.invert and pm.predicate == p)
            head, tail = (sn, on) if head_is_subject else (on, sn)
            if (head.kind, tail.kind) != (me.source, me.target):
                raise SeedImportError(f"{path}:{lineno}: karma_metaedge {abbrev} joins {me.source} -> {me.target}, "
                                      f"got {head.kind} -> {tail.kind}")
        else:
            qualifiers = {q: row[q].strip() for q in QUALIFIER_SLOTS if row.get(q, "").strip()}
            found = inverse.metaedge(p, qualifiers, sn.kind, on.kind)
            if found is None:
                shown = "".join(f" {k}={v}" for k, v in sorted(qualifiers.items()))
                why = "is no Biolink predicate" if not inverse.is_predicate(p) else "has no metaedge in the KG schema"
                refused.add(f"{p}{shown} {sn.kind} -> {on.kind} {why}", example)
                continue
            me, head_is_subject = found
            head, tail = (sn, on) if head_is_subject else (on, sn)
        confidence = seed_confidence
        if (score := row.get("has_confidence_score", "").strip()):
            try:
                confidence = float(score)
            except ValueError:
                raise SeedImportError(f"{path}:{lineno}: has_confidence_score {score!r} is not a number") from None
            if not 0.0 <= confidence <= 1.0:
                raise SeedImportError(f"{path}:{lineno}: has_confidence_score {confidence} is outside [0, 1]")
        key = (head.id, me.relation, tail.id)
        if key in edges:
            refused.add(f"repeats an earlier edge {me.abbrev} (the first is kept)", example)
            continue
        edges[key] = (head.id, me.relation, tail.id, me.abbrev, confidence)
        attrs = {k: v for k, v in row.items() if k not in EDGE_MODELLED and v}
        for col in ("knowledge_level", "agent_type"):
            if col in attrs and attrs[col] not in enum_values(col):
                left_out.add(f"{col} that is no permissible value", f"{where}:{lineno} {attrs.pop(col)!r}")
        if not head_is_subject:
            attrs[SWAP] = "1"
        attrs_of[key] = json.dumps(attrs, ensure_ascii=False, sort_keys=True)
    return list(edges.values()), attrs_of


def import_kgx(store: KGStore, nodes_path: str | Path, edges_path: str | Path, seed_confidence: float = 0.9,
               schema: KGSchema | None = None, *, if_grown: IfGrown = "refuse") -> SeedImportStats:
    """A KGX TSV node and edge file (plain or .gz) as the seed KG (see the module docstring); if_grown: what to do
    to a KG that grew (kg/seed_guard.py). An "add" checks the file's nodes against the seed's kinds."""
    t0 = time.perf_counter()
    check_mode(if_grown)
    if not 0.0 <= seed_confidence <= 1.0:
        raise SeedImportError(f"seed_confidence {seed_confidence} is outside [0, 1]")
    schema = schema or KGSchema.load()
    inverse = inverse_mapping(schema)
    nodes_path, edges_path = Path(nodes_path), Path(edges_path)
    node_refusals, edge_refusals, cells, rejected = Refusals(), Refusals(), Refusals(), names.RejectedNames()
    by_kgx_id = read_nodes(nodes_path, inverse, schema, node_refusals, cells, rejected)
    edges, edge_attrs = read_edges(edges_path, by_kgx_id, nodes_path, inverse, schema, seed_confidence,
                                   edge_refusals, cells)
    kept = [n for n in by_kgx_id.values() if n.node is not None]
    nodes = [n.node for n in kept if n.node is not None]
    node_attrs = {n.node.id: json.dumps(n.attrs, ensure_ascii=False, sort_keys=True) for n in kept if n.node}
    if if_grown == "add":
        stored_seed_nodes(store, nodes_path, {n.id: n for n in nodes})
    written = write_seed(store, nodes, edges, node_attrs, edge_attrs, if_grown=if_grown)
    return SeedImportStats(
        n_nodes=len(nodes), n_edges=len(edges), n_edges_filtered=0, if_grown=if_grown, **written.stats(),
        synonyms_rejected=rejected.figures(),
        nodes_by_kind=dict(sorted(Counter(n.kind for n in nodes).items())),
        edges_by_metaedge=dict(sorted(Counter(e[3] for e in edges).items())),
        seconds=round(time.perf_counter() - t0, 3),
        refused={"nodes": node_refusals.by_reason, "edges": edge_refusals.by_reason,
                 "cells_left_out": cells.by_reason},
    )


def refusal_lines(stats: SeedImportStats) -> list[str]:
    """The import summary's lines on what was left out (none when nothing was)."""
    out = []
    for what in ("nodes", "edges", "cells_left_out"):
        reasons = stats.refused.get(what) or {}
        total = sum(int(v["count"]) for v in reasons.values())  # type: ignore[call-overload]
        if not total:
            continue
        out.append(f"{what} not imported: {total}" if what != "cells_left_out" else
                   f"values left out of rows that were imported: {total}")
        for reason, v in sorted(reasons.items(), key=lambda kv: -int(kv[1]["count"])):  # type: ignore[call-overload]
            out.append(f"  {v['count']} {reason}; e.g. {'; '.join(v['examples'][:2])}")  # type: ignore[index]
    return out


def seed_xrefs(store: KGStore) -> dict[str, list[str]]:
    """Seed node id -> the xref column a KGX import read for it: who else the node is, for entity resolution
    (kg/identity.py links a mention whose vocabulary id is one of them to the node, by "xref")."""
    out = {}
    for node_id, attrs in store.seed_node_attrs().items():
        cell = json.loads(attrs).get("xref", "")
        if ids := [unescape(x).strip() for x in cell.split("|") if x.strip()]:
            out[node_id] = ids
    return out
