"""KGX TSV export (nodes.tsv, edges.tsv) with Biolink categories and predicates, and a validator for it.

Why our own validator: the `kgx` package cannot be installed beside this project's pins (kgx 2.7 needs
click<8.2 and duckdb<2, spaCy 3.8 needs click>=8.2.1 and we run duckdb 2; kgx 2.4-2.6 need pyarrow<16, lancedb
needs >=17; older ones pull tox, Sphinx and mypy in as run-time dependencies), and kgx fetches the Biolink Model
and its JSON-LD context from GitHub when imported. `validate_kgx` checks what KGX's validator checks on TSV, with
the same source of truth (bmt over the Biolink Model): required columns (id and category for nodes; subject,
predicate, object and Biolink 4's required association slots knowledge_level and agent_type for edges), CURIE
ids, unique node ids, every edge end a node, categories that are Biolink classes, predicates that are Biolink
predicates, enum values (knowledge level, agent type, qualifiers), number-typed columns. One difference: an id
prefix Biolink does not know is an error for KGX and a warning here (see KARMA below). The files are also read
back with kgx's own TSV source (kgx 2.6, in a venv of its own: scripts/kgx_venv.sh) by the reliability tests.

Cells: KGX TSV has no quoting (kgx reads it with pandas, QUOTE_NONE, "\n" lines) and splits every value that holds a
"|" into a list, so a tab, a line break or a "|" inside a value would shift columns, cut rows or turn a name into
a list. Each value is escaped instead (`escape`, undone exactly by `unescape`): "\\" -> "\\\\", tab -> "\\t", LF ->
"\\n", CR -> "\\r", "|" -> "\\u007c", other control and line-separator characters -> "\\uXXXX"; quotes, other
Unicode (bidi marks included) stay as they are. A reader that ignores the escapes still gets every row and column
right and only sees the escape text.

Ids: a node's vocabulary CURIE (DOID:9352, NCBIGene:1000, DRUGBANK:DB00331: prefixes put in Biolink's case) when
Biolink knows the prefix and no other node has it (seed nodes first); else KARMA:<the KG id>, this export's own
prefix (Hetionet's Pathway Commons ids have no registered prefix; a new entity may have no vocabulary id).

A seed imported from KGX (export/kgx_import.py) is written back as it was read: its node and edge ids, categories,
provenance and other columns (kept beside the seed rows), merged with what the KG added since (see `_merged`), so
export -> import -> export gives the same files. karma_kind carries the node kind for that import.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from pydantic import BaseModel

from karma_dagster.export import biolink
from karma_dagster.export.biolink import NAMED_THING, QUALIFIER_SLOTS, RELATED_TO, BiolinkMapping
from karma_dagster.export.snapshot import Snapshot

NODES, EDGES = "nodes.tsv", "edges.tsv"
OWN_PREFIX = "KARMA"
SEED_SOURCE = "infores:hetionet"  # the shipped seed KG (a Hetionet subset); export_kgx(seed_source=...) for another
EXTRACTED_SOURCE = "infores:karma-dagster"
# description: Biolink's node slot, a KG tool instance's comment; karma_class: its tool-created class (category is
# the Biolink class of its node kind). karma_property: the tool-created properties the edge was stated with
# (original_predicate stays the KG relation, which such a property is a subproperty of).
# karma_kind: the KG node kind (category is its Biolink class; two kinds may share one, a kind may have none), so an
# import of this file (export/kgx_import.py) gets every node's kind back.
NODE_COLUMNS = ("id", "category", "name", "synonym", "xref", "provided_by", "karma_id", "karma_source",
                "karma_first_seen", "karma_last_seen", "description", "karma_class", "karma_kind")
EDGE_COLUMNS = ("id", "subject", "predicate", "object", *QUALIFIER_SLOTS, "knowledge_level", "agent_type",
                "primary_knowledge_source", "has_confidence_score", "original_predicate", "karma_metaedge",
                "karma_n_evidence", "karma_documents", "karma_first_seen", "karma_last_seen", "karma_property")
REQUIRED_NODE = ("id", "category")
SWAP = "_swap"  # a KGX-imported edge's attribute: the file's subject was the KG edge's tail
CURIE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*:[^\s|]+$")


class KGXValidation(BaseModel):
    errors: list[str]  # a "must" of KGX / Biolink broken (first 50 shown by callers)
    warnings: list[str]  # a "should": unknown id prefix, category outside the predicate's domain...
    n_nodes: int
    n_edges: int

    @property
    def ok(self) -> bool:
        return not self.errors


_SHORT = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
# what KGX or a line-based reader would take as structure: controls (C0, DEL, C1), "|", Unicode line separators
_RESERVED = re.compile(r"[\\\x00-\x1f\x7f-\x9f|\u2028\u2029]")
_ESCAPED = re.compile(r"\\(\\|t|n|r|u[0-9a-f]{4})")


def escape(value: object) -> str:
    """A value as one KGX TSV cell (see the module docstring); None -> ""."""
    if value is None:
        return ""
    return _RESERVED.sub(lambda m: _SHORT.get(m.group(), f"\\u{ord(m.group()):04x}"), str(value))


def unescape(cell: str) -> str:
    """The value `escape` wrote, exactly."""
    back = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
    return _ESCAPED.sub(lambda m: back.get(m.group(1)) or chr(int(m.group(1)[1:], 16)), cell)


_cell = escape


def _multi(values: list[str]) -> str:
    """A list-valued KGX cell: the escaped values joined by "|" (KGX's list separator, never inside a value)."""
    return "|".join(escape(v) for v in values if v)


class _TSVWriter:
    """KGX TSV rows: cells joined by tabs, no quoting (KGX has none; every text cell is escaped already)."""

    def __init__(self, fh) -> None:  # noqa: ANN001 - a text file
        self.fh = fh

    def writerow(self, cells: Iterable[object]) -> None:
        self.fh.write("\t".join(c if isinstance(c, str) else escape(c) for c in cells) + "\n")


def node_ids(snap: Snapshot, mapping: BiolinkMapping) -> dict[str, str]:
    """KG id -> KGX id (see the module docstring)."""
    known = {p.lower(): p for p in biolink.known_prefixes()}
    for prefixes in mapping.id_prefixes.values():  # the category's own spelling first
        known.update({p.lower(): p for p in prefixes})
    out: dict[str, str] = {}
    taken: set[str] = set()
    for n in snap.nodes:  # a node a KGX import read keeps that file's id (attrs: export/kgx_import.py)
        kept = (n.attrs or {}).get("id")
        if kept and CURIE.match(kept) and kept not in taken:
            out[n.id] = kept
            taken.add(kept)
    for n in sorted(snap.nodes, key=lambda n: n.source != "seed"):  # a seed node keeps its CURIE over a newcomer
        if n.id in out:
            continue
        curie = None
        if n.vocab_id and CURIE.match(n.vocab_id):
            prefix, local = n.vocab_id.split(":", 1)
            if prefix.lower() in known and prefix.upper() != OWN_PREFIX:
                curie = f"{known[prefix.lower()]}:{local}"
        if curie is None or curie in taken:
            curie = f"{OWN_PREFIX}:{quote(n.id, safe='')}"
        taken.add(curie)
        out[n.id] = curie
    return out


def write_kgx(snap: Snapshot, out_dir: Path, seed_source: str = SEED_SOURCE) -> tuple[list[str], dict[str, int],
                                                                                       dict[str, object]]:
    """nodes.tsv and edges.tsv into out_dir, validated; (file names, counts, report of what is unmapped)."""
    mapping = biolink.load_mapping(snap.schema_)
    ids = node_ids(snap, mapping)
    unmapped_nodes: dict[str, int] = {}
    node_columns = (*NODE_COLUMNS, *_extra_columns((n.attrs for n in snap.nodes), NODE_COLUMNS))
    with open(out_dir / NODES, "w", encoding="utf-8", newline="") as fh:
        w = _TSVWriter(fh)
        w.writerow(node_columns)
        for n in snap.nodes:
            category = mapping.category(n.kind)
            if category == NAMED_THING:
                unmapped_nodes[n.kind] = unmapped_nodes.get(n.kind, 0) + 1
            xref = [n.vocab_id] if n.vocab_id and n.vocab_id != ids[n.id] else []
            cells = dict(zip(NODE_COLUMNS, [
                _cell(ids[n.id]), category, _cell(n.name), _multi(n.synonyms), _multi(xref),
                seed_source if n.source == "seed" else EXTRACTED_SOURCE, _cell(n.id), n.source,
                _cell(n.first_seen), _cell(n.last_seen), _cell(n.comment), _cell(n.class_label), _cell(n.kind)],
                strict=True))
            if n.attrs is not None:
                cells = _imported_node(cells, n.attrs)
            w.writerow([cells.get(c, "") for c in node_columns])
    unmapped_edges: dict[str, int] = {}
    edge_columns = (*EDGE_COLUMNS, *_extra_columns((e.attrs for e in snap.edges), EDGE_COLUMNS))
    with open(out_dir / EDGES, "w", encoding="utf-8", newline="") as fh:
        w = _TSVWriter(fh)
        w.writerow(edge_columns)
        for e in snap.edges:
            me = snap.metaedge_of(e)
            pm = mapping.predicates.get(me.abbrev) if me is not None and me.relation == e.relation else None
            subject, obj = ids[e.head_id], ids[e.tail_id]
            if pm is None:
                label = f"{me.abbrev} ({me.source} {me.relation} {me.target})" if me else f"{e.relation} (no metaedge)"
                unmapped_edges[label] = unmapped_edges.get(label, 0) + 1
                predicate, qualifiers = RELATED_TO, {}
            else:
                predicate, qualifiers = pm.predicate, pm.qualifiers
                if pm.invert:
                    subject, obj = obj, subject
            docs = sorted({ev.doc_key for ev in snap.evidence_by_edge.get(e.key, [])})
            digest = hashlib.sha1(f"{snap.namespace}\x1f{e.head_id}\x1f{e.relation}\x1f{e.tail_id}".encode())
            cells = dict(zip(EDGE_COLUMNS, [
                f"{OWN_PREFIX}:edge-{digest.hexdigest()[:20]}", subject, predicate, obj,
                *(qualifiers.get(q, "") for q in QUALIFIER_SLOTS), "knowledge_assertion",
                "not_provided" if e.in_seed else "text_mining_agent",
                seed_source if e.in_seed else EXTRACTED_SOURCE, f"{e.confidence:.6g}",
                f"{OWN_PREFIX}:{quote(e.relation, safe='')}", me.abbrev if me else "", str(e.n_evidence), _multi(docs),
                _cell(e.first_seen), _cell(e.last_seen), _multi(snap.created_properties(e)),
            ], strict=True))
            if e.attrs is not None:
                cells = _imported_edge(cells, e.attrs, ids[e.head_id], ids[e.tail_id])
            w.writerow([cells.get(c, "") for c in edge_columns])
    check = validate_kgx(out_dir / NODES, out_dir / EDGES)
    if not check.ok:
        raise ValueError(f"KGX export of {snap.namespace} failed its own validation: {check.errors[:5]}")
    report: dict[str, object] = {
        "biolink_version": mapping.biolink_version,
        "unmapped_kinds": {k: {"why": why, "nodes": unmapped_nodes.get(k, 0)}
                           for k, why in mapping.unmapped_kinds.items()},
        "unmapped_metaedges": {k: {"why": why, "edges": unmapped_edges.get(k, 0)}
                               for k, why in mapping.unmapped_metaedges.items()},
        "unmapped_other_relations": {k: v for k, v in unmapped_edges.items() if k not in mapping.unmapped_metaedges},
        "lossy_metaedges": mapping.lossy,
        # KGX's own validator calls an id prefix outside Biolink's JSON-LD context an error; these are the nodes
        # with no vocabulary CURIE (or one a seed node already has) that got this export's KARMA: prefix
        "ids_with_own_prefix": sum(i.startswith(OWN_PREFIX + ":") for i in ids.values()),
        "validation_warnings": len(check.warnings),
        "cell_escapes": "backslash, tab, LF, CR, '|' and other control characters escaped as \\\\, \\t, \\n, \\r, "
                        "\\uXXXX (karma_dagster.export.kgx.unescape reverses them)",
    }
    counts = {"nodes": check.n_nodes, "edges": check.n_edges,
              "nodes_named_thing": sum(unmapped_nodes.values()), "edges_related_to": sum(unmapped_edges.values())}
    return [NODES, EDGES], counts, report


# ---------------------------------------------------------------- rows a KGX import read (export/kgx_import.py)
# What the import kept of a row (its attrs: the file's cells, as written) is written back, so export -> import ->
# export gives the same files; what the KG computes is merged with it: names and synonyms, kind and metaedge,
# confidence (the seed confidence the file gave, combined with the evidence merged since) are the KG's; evidence
# counts, documents and tool properties add up; first/last seen widen; a comment or class the KG now has wins.
# provided_by and primary_knowledge_source are the file's, empty if it gave none (never this export's default).
_FROM_FILE_ONLY = ("provided_by", "primary_knowledge_source", *QUALIFIER_SLOTS)


def _extra_columns(all_attrs: Iterable[dict[str, str] | None], columns: tuple[str, ...]) -> list[str]:
    """The imported file's columns this export has none of (publications, in_taxon...), sorted."""
    extra = {k for attrs in all_attrs if attrs for k in attrs}
    return sorted(k for k in extra if k not in columns and not k.startswith("_"))


def _dates(a: str, b: str, pick) -> str:  # noqa: ANN001 - min or max
    both = [d for d in (a, b) if d]
    return pick(both) if both else ""


def _union(a: str, b: str) -> str:
    values = {unescape(v) for cell in (a, b) for v in cell.split("|") if v}
    return _multi(sorted(values))


def _merged(cells: dict[str, str], attrs: dict[str, str]) -> dict[str, str]:
    out = dict(cells)
    for col, value in attrs.items():
        if col.startswith("_") or col in ("karma_first_seen", "karma_last_seen", "description", "karma_class",
                                          "karma_n_evidence", "karma_documents", "karma_property"):
            continue
        out[col] = value
    for col in _FROM_FILE_ONLY:
        if col in cells:
            out[col] = attrs.get(col, "")
    out["karma_first_seen"] = _dates(cells.get("karma_first_seen", ""), attrs.get("karma_first_seen", ""), min)
    out["karma_last_seen"] = _dates(cells.get("karma_last_seen", ""), attrs.get("karma_last_seen", ""), max)
    return out


def _imported_node(cells: dict[str, str], attrs: dict[str, str]) -> dict[str, str]:
    out = _merged(cells, attrs)
    for col in ("id", "name", "synonym", "karma_id", "karma_kind"):  # the KG's (id: node_ids chose the file's)
        out[col] = cells[col]
    for col in ("description", "karma_class"):
        out[col] = cells[col] or attrs.get(col, "")
    return out


def _imported_edge(cells: dict[str, str], attrs: dict[str, str], head: str, tail: str) -> dict[str, str]:
    out = _merged(cells, attrs)
    out["subject"], out["object"] = (tail, head) if attrs.get(SWAP) else (head, tail)
    for col in ("has_confidence_score", "karma_metaedge"):
        out[col] = cells[col]
    try:
        earlier = int(attrs.get("karma_n_evidence") or 0)
    except ValueError:
        earlier = 0
    out["karma_n_evidence"] = str(earlier + int(cells["karma_n_evidence"]))
    for col in ("karma_documents", "karma_property"):
        out[col] = _union(cells[col], attrs.get(col, ""))
    return out


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows:
        return [], []
    return rows[0], rows[1:]


def validate_kgx(nodes_path: Path, edges_path: Path, max_messages: int = 200) -> KGXValidation:
    """Check a KGX TSV pair against the KGX format and the Biolink Model (see the module docstring)."""
    tk = biolink.toolkit()
    errors: list[str] = []
    warnings: list[str] = []

    def err(msg: str) -> None:
        if len(errors) < max_messages:
            errors.append(msg)

    header, rows = _rows(nodes_path)
    for col in REQUIRED_NODE:
        if col not in header:
            err(f"{nodes_path.name}: required column {col!r} missing")
    if errors:
        return KGXValidation(errors=errors, warnings=warnings, n_nodes=len(rows), n_edges=0)
    i_id, i_cat = header.index("id"), header.index("category")
    ids: set[str] = set()
    known_prefixes = {p.lower() for p in biolink.known_prefixes()}
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            err(f"{nodes_path.name}:{line}: {len(row)} fields, header has {len(header)}")
            continue
        nid, cats = row[i_id], [c for c in row[i_cat].split("|") if c]
        if not CURIE.match(nid):
            err(f"{nodes_path.name}:{line}: id {nid!r} is not a CURIE")
        elif nid.split(":", 1)[0].lower() not in known_prefixes and len(warnings) < max_messages:
            warnings.append(f"{nodes_path.name}:{line}: id prefix of {nid!r} is not in the Biolink prefix map")
        if nid in ids:
            err(f"{nodes_path.name}:{line}: duplicate id {nid!r}")
        ids.add(nid)
        if not cats:
            err(f"{nodes_path.name}:{line}: node {nid!r} has no category")
        for c in cats:
            if not c.startswith("biolink:") or not tk.is_category(c.split(":", 1)[1]):
                err(f"{nodes_path.name}:{line}: category {c!r} is not a Biolink class")
    n_nodes = len(rows)

    header, rows = _rows(edges_path)
    required_edge = ("subject", "predicate", "object", *_required_association_slots(tk))
    for col in required_edge:
        if col not in header:
            err(f"{edges_path.name}: required column {col!r} missing")
    if any("required column" in e and edges_path.name in e for e in errors):
        return KGXValidation(errors=errors, warnings=warnings, n_nodes=n_nodes, n_edges=len(rows))
    col = {name: header.index(name) for name in header}
    enum_cols = [c for c in ("knowledge_level", "agent_type", *QUALIFIER_SLOTS[1:]) if c in col]
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            err(f"{edges_path.name}:{line}: {len(row)} fields, header has {len(header)}")
            continue
        for end in ("subject", "object"):
            value = row[col[end]]
            if value not in ids:
                err(f"{edges_path.name}:{line}: {end} {value!r} is no node of {nodes_path.name}")
        for name in ("predicate", "qualified_predicate"):
            value = row[col[name]] if name in col else ""
            if (value or name == "predicate") and (not value.startswith("biolink:")
                                                   or not tk.is_predicate(value.split(":", 1)[1])):
                err(f"{edges_path.name}:{line}: {name} {value!r} is not a Biolink predicate")
        for name in enum_cols:
            value = row[col[name]]
            if (value or name in required_edge) and value not in biolink.enum_values(name):
                err(f"{edges_path.name}:{line}: {name} {value!r} is not a permissible value")
        if "has_confidence_score" in col and row[col["has_confidence_score"]]:
            try:
                float(row[col["has_confidence_score"]])
            except ValueError:
                err(f"{edges_path.name}:{line}: has_confidence_score {row[col['has_confidence_score']]!r} is no number")
    return KGXValidation(errors=errors, warnings=warnings, n_nodes=n_nodes, n_edges=len(rows))


def _required_association_slots(tk) -> list[str]:  # noqa: ANN001 - bmt.Toolkit
    """Biolink's required association slots beyond subject/predicate/object (4.x: knowledge_level, agent_type)."""
    out = []
    for name in tk.get_descendants("association slot", formatted=False):
        element = tk.get_element(name)
        if getattr(element, "required", False) and name not in ("subject", "predicate", "object"):
            out.append(name.replace(" ", "_"))
    return sorted(out)
