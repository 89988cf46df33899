"""Neo4j `neo4j-admin database import full` CSVs: nodes.csv, relationships.csv and the command that loads them.

Headers carry the import tool's field types (id:ID, :LABEL, :START_ID, :END_ID, :TYPE, confidence:double,
first_seen:date, documents:string[]...). Labels: `Entity`, the kind in CamelCase (`SideEffect`) and `Seed` or
`Extracted`; relationship types are the relation in upper snake case (TREATS), with the metaedge as a property.
Arrays use "|" (the command passes --array-delimiter="|"; a "|" inside an array element becomes "/").
A KG tool instance keeps its `comment` and its tool-created class (`class`, and as one more label); a relationship
stated with a tool-created property lists it in `properties` (its type stays the relation the property leads to).

Cells, as neo4j-admin reads them (5.x defaults plus the flags the command passes): "," separates fields, '"' quotes
one, '""' inside quotes is one '"' (--legacy-style-quoting=false: a backslash is a plain character), and a quoted
field may span lines (--multiline-fields=true), so every character but the array delimiter arrives as written;
Python's csv writer quotes exactly the fields that need it. Formula guard (OWASP's CSV injection advice): a
spreadsheet runs a cell that begins with = + - @ TAB or CR as a formula, so every text cell that begins with one of
those, or with "'", gets one "'" in front (`guard`). neo4j-admin imports that "'" as part of the value: a value
that begins with "'" in Neo4j had one added (the command file says how to take it off; `unguard` does it in
Python). Number, boolean, date, label and type cells never begin with those characters. `check_import_files`
re-reads the files as the import tool would and is run after every export, since no Neo4j is installed here.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
from pathlib import Path

from karma_dagster.export.snapshot import Snapshot

NODES, RELS, COMMAND = "nodes.csv", "relationships.csv", "import-command.txt"
ARRAY = "|"
NODE_HEADER = ("id:ID", "name", "kind", "source", "vocab_id", "synonyms:string[]", "first_seen:date",
               "last_seen:date", "created_by_doc", "comment", "class", ":LABEL")
REL_HEADER = (":START_ID", ":END_ID", ":TYPE", "relation", "metaedge", "confidence:double", "n_evidence:long",
              "n_docs:long", "in_seed:boolean", "first_seen:date", "last_seen:date", "documents:string[]",
              "backbones:string[]", "prompt_versions:string[]", "properties:string[]")
TYPES = {"string", "int", "long", "float", "double", "boolean", "byte", "short", "char", "date", "localtime", "time",
         "localdatetime", "datetime", "duration", "point"}
IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def label(kind: str) -> str:
    """A node kind as a label that needs no backticks in Cypher: 'Side Effect' -> 'SideEffect'."""
    return "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", kind) if w) or "Unknown"


def class_label(name: str) -> str:
    """A tool-created class as a node label: label(), with "Class" in front when it would not start with a letter."""
    out = label(name)
    return out if IDENT.match(out) else "Class" + out


def _labels(n) -> list[str]:  # noqa: ANN001 - SnapshotNode
    out = ["Entity", label(n.kind), "Seed" if n.source == "seed" else "Extracted"]
    if n.class_label and class_label(n.class_label) not in out:
        out.append(class_label(n.class_label))
    return out


def rel_type(relation: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", relation).strip("_").upper() or "RELATED_TO"


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
GUARD = "'"


def guard(cell: str) -> str:
    """A text cell a spreadsheet cannot run as a formula (see the module docstring)."""
    return GUARD + cell if cell.startswith((*FORMULA_START, GUARD)) else cell


def unguard(value: str) -> str:
    """The value `guard` was given (for a text property or an array's first element as Neo4j imported it)."""
    return value[1:] if value.startswith(GUARD) else value


def _text(value: object) -> str:
    return "" if value is None else guard(str(value))


def _array(values: list[str]) -> str:
    return guard(ARRAY.join(str(v).replace(ARRAY, "/") for v in values if v))


def write_neo4j(snap: Snapshot, out_dir: Path) -> tuple[list[str], dict[str, int]]:
    """The import CSVs and the command into out_dir, checked; (file names, counts)."""
    with open(out_dir / NODES, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\r\n")  # "\r\n": a lone CR in a value is quoted too
        w.writerow(NODE_HEADER)
        for n in snap.nodes:
            w.writerow([_text(n.id), _text(n.name), _text(n.kind), n.source, _text(n.vocab_id), _array(n.synonyms),
                        _text(n.first_seen), _text(n.last_seen), _text(n.created_by_doc), _text(n.comment),
                        _text(n.class_label), ARRAY.join(_labels(n))])
    with open(out_dir / RELS, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\r\n")  # "\r\n": a lone CR in a value is quoted too
        w.writerow(REL_HEADER)
        for e in snap.edges:
            ev = snap.evidence_by_edge.get(e.key, [])
            me = snap.metaedge_of(e)
            w.writerow([_text(e.head_id), _text(e.tail_id), rel_type(e.relation), _text(e.relation),
                        _text(me.abbrev if me else ""), f"{e.confidence:.6g}", e.n_evidence, e.n_docs,
                        "true" if e.in_seed else "false", _text(e.first_seen), _text(e.last_seen),
                        _array(sorted({x.doc_key for x in ev})), _array(sorted({x.backbone for x in ev})),
                        _array(sorted({x.prompt_version for x in ev if x.prompt_version})),
                        _array(snap.created_properties(e))])
    (out_dir / COMMAND).write_text(
        "# run from this folder; the target database must be empty (or add --overwrite-destination)\n"
        f'neo4j-admin database import full --nodes={NODES} --relationships={RELS} --array-delimiter="{ARRAY}" '
        "--multiline-fields=true --legacy-style-quoting=false --skip-duplicate-nodes=false "
        "--skip-bad-relationships=false neo4j\n"
        "# a text value (or an array's first element) that begins with ' had one ' added so that no spreadsheet runs\n"
        "# it as a formula (it began with = + - @ tab CR or '); to take it off after the import, e.g.:\n"
        "# MATCH (n:Entity) WHERE n.name STARTS WITH \"'\" SET n.name = substring(n.name, 1)\n", encoding="utf-8")
    problems = check_import_files(out_dir / NODES, out_dir / RELS)
    if problems:
        raise ValueError(f"Neo4j export of {snap.namespace} is inconsistent: {problems[:5]}")
    labels = {x for n in snap.nodes for x in _labels(n)} | {"Entity"}
    return [NODES, RELS, COMMAND], {"nodes": len(snap.nodes), "relationships": len(snap.edges), "labels": len(labels),
                                    "relationship_types": len({rel_type(e.relation) for e in snap.edges})}


def _field_type(header: str) -> tuple[str, str, bool]:
    """'confidence:double' -> ('confidence', 'double', False); 'synonyms:string[]' -> (..., 'string', True)."""
    name, _, typ = header.partition(":")
    if name == "" and typ in {"ID", "LABEL", "START_ID", "END_ID", "TYPE", "IGNORE"}:
        return header, typ, False
    typ = typ or "string"
    is_array = typ.endswith("[]")
    return name, typ.removesuffix("[]"), is_array


def _parse(value: str, typ: str) -> None:
    if typ in {"int", "long", "short", "byte"}:
        int(value)
    elif typ in {"float", "double"}:
        float(value)
    elif typ == "boolean":
        if value not in {"true", "false"}:
            raise ValueError("not true/false")
    elif typ == "date":
        dt.date.fromisoformat(value)


def check_import_files(nodes_path: Path, rels_path: Path, max_problems: int = 50) -> list[str]:
    """What neo4j-admin import would reject or silently skip: header types, node ids (one :ID column, unique,
    non-empty), labels, relationship types, values that do not parse as their column's type, and every
    :START_ID / :END_ID that is no node id. [] when consistent."""
    problems: list[str] = []

    def bad(msg: str) -> bool:
        problems.append(msg)
        return len(problems) >= max_problems

    ids: set[str] = set()
    for path, required in ((nodes_path, (":ID", ":LABEL")), (rels_path, (":START_ID", ":END_ID", ":TYPE"))):
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, [])
            fields = [_field_type(h) for h in header]
            kinds = [typ for _, typ, _ in fields]
            for req in required:
                if kinds.count(req.lstrip(":")) != 1:
                    bad(f"{path.name}: header needs exactly one {req} field (header: {header})")
            for h, (_, typ, _) in zip(header, fields, strict=True):
                if typ not in TYPES and typ not in {"ID", "LABEL", "START_ID", "END_ID", "TYPE", "IGNORE"}:
                    bad(f"{path.name}: header field {h!r} has unknown type {typ!r}")
            if problems:
                return problems
            for line, row in enumerate(reader, start=2):
                if len(row) != len(header):
                    if bad(f"{path.name}:{line}: {len(row)} fields, header has {len(header)}"):
                        return problems
                    continue
                for value, (name, typ, is_array) in zip(row, fields, strict=True):
                    if value.startswith(FORMULA_START):
                        if bad(f"{path.name}:{line}: {name} {value[:20]!r} would be read as a spreadsheet formula"):
                            return problems
                    if typ == "ID":
                        if not value or value in ids:
                            if bad(f"{path.name}:{line}: node id {value!r} empty or duplicate"):
                                return problems
                        ids.add(value)
                    elif typ == "LABEL":
                        if not all(IDENT.match(x) for x in value.split(ARRAY)):
                            if bad(f"{path.name}:{line}: labels {value!r} are not plain identifiers"):
                                return problems
                    elif typ in {"START_ID", "END_ID"}:
                        if value not in ids and bad(f"{path.name}:{line}: {typ[:-3].lower()} {value!r} is no node id"):
                            return problems
                    elif typ == "TYPE":
                        if not IDENT.match(value) and bad(f"{path.name}:{line}: relationship type {value!r}"):
                            return problems
                    elif value:
                        try:
                            for item in value.split(ARRAY) if is_array else [value]:
                                _parse(item, typ)
                        except ValueError:
                            if bad(f"{path.name}:{line}: {name} {value!r} is not a {typ}"):
                                return problems
    return problems
