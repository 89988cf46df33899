"""Import a seed KG (Hetionet's TSV/SIF, or a generic node/edge table) into the store's seed tables.

Everything is read and checked before the store is opened, so bad input writes nothing; the write replaces the
seed rows in one transaction (re-import is idempotent). A KG that grew (evidence, extracted nodes) is not replaced
unless asked: `if_grown` refuses (default), replaces it with the old KG kept aside, or adds the file (seed_guard.py).
"""

from __future__ import annotations

import csv
import gzip
import io
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from karma_dagster.kg import admission_rules as rules
from karma_dagster.kg import names, seed_guard
from karma_dagster.kg.seed_guard import IfGrown, SeedImportRefused
from karma_dagster.kg.store import SEED_DDL, KGStore, NodeIn, load_schema, metaedge_by_abbrev, metaedge_for

NodeFilter = Callable[[NodeIn], bool] | Collection[str] | None

# Hetionet ids are "<kind>::<identifier>"; the vocabulary CURIE the rest of the pipeline uses.
_VOCAB_PREFIX = {
    "Gene": "NCBIGene:", "Compound": "DrugBank:", "Side Effect": "UMLS:", "Symptom": "MESH:",
    "Pharmacologic Class": "NDFRT:",
}


class SeedImportError(ValueError):
    """Bad seed input; the message names the file, the line and the problem."""


class SeedImportStats(BaseModel):
    n_nodes: int
    n_edges: int
    n_synonyms: int
    n_edges_filtered: int  # edges dropped because node_filter removed an endpoint
    synonyms_rejected: dict[str, object] = {}  # names.RejectedNames.figures(): left out, counted per reason
    nodes_by_kind: dict[str, int]
    edges_by_metaedge: dict[str, int]
    seconds: float
    # a KGX import: what it left out and why ({"nodes"|"edges": {reason: {"count", "examples"}}}, export/kgx_import.py)
    refused: dict[str, dict[str, dict[str, object]]] = {}
    if_grown: str = "refuse"  # what the import was told to do to a grown KG (seed_guard.py)
    n_nodes_added: int | None = None  # if_grown "add": the file's nodes and edges the seed did not hold yet
    n_edges_added: int | None = None
    kept_aside: str = ""  # if_grown "replace": where the KG as it was is kept, and how to put it back
    restore: str = ""
    dangling: str = ""  # set by the caller after the import: evidence naming no node (seed_guard.dangling_evidence)


class SeedWritten(BaseModel):
    """What write_seed did: synonyms written; for "add" what was new; for "replace" where the old KG is kept."""

    n_synonyms: int
    n_nodes_added: int | None = None
    n_edges_added: int | None = None
    kept_aside: str = ""
    restore: str = ""

    def stats(self) -> dict[str, object]:
        """The SeedImportStats fields it fills."""
        return self.model_dump()


def hetionet_vocab_id(node_id: str, kind: str) -> str | None:
    ident = node_id.split("::", 1)[1] if "::" in node_id else node_id
    return _VOCAB_PREFIX.get(kind, "") + ident if ident else None


def _open_text(path: Path) -> io.TextIOBase:
    if not path.exists():
        raise SeedImportError(f"{path}: file not found")
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _read_rows(path: Path, required: list[list[str]]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a delimited file; `required` lists alternatives for each needed column."""
    delimiter = "," if ".csv" in path.suffixes else "\t"
    with _open_text(path) as fh:
        reader = csv.reader(fh, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise SeedImportError(f"{path}:1: empty file, expected a header row") from None
        except (csv.Error, UnicodeDecodeError, OSError) as exc:
            raise SeedImportError(f"{path}:1: unreadable ({exc})") from exc
        for alternatives in required:
            if not any(a in header for a in alternatives):
                raise SeedImportError(
                    f"{path}:1: missing column {' or '.join(map(repr, alternatives))} (header: {header})"
                )
        try:
            for row in reader:
                lineno = reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != len(header):
                    raise SeedImportError(f"{path}:{lineno}: {len(row)} fields, header has {len(header)}")
                yield lineno, {h: v.strip() for h, v in zip(header, row, strict=True)}
        except (csv.Error, UnicodeDecodeError, OSError) as exc:
            raise SeedImportError(f"{path}:{reader.line_num}: unreadable ({exc})") from exc


def _keep(node_filter: NodeFilter) -> Callable[[NodeIn], bool]:
    if node_filter is None:
        return lambda n: True
    if callable(node_filter):
        return node_filter
    ids = set(node_filter)
    return lambda n: n.id in ids


def read_nodes(path: Path, hetionet: bool) -> tuple[dict[str, NodeIn], names.RejectedNames]:
    """The nodes, names cleaned (kg/names.py: NFC, one line). A node whose id, name or kind cannot enter the KG
    stops the import naming the file and line; a synonym that cannot is left out and counted."""
    kinds = set(load_schema()[0])
    nodes: dict[str, NodeIn] = {}
    rejected = names.RejectedNames()
    for lineno, row in _read_rows(path, [["id"], ["name"], ["kind"]]):
        nid, name, kind = row["id"], row["name"], row["kind"]
        if not nid or not name or not kind:
            raise SeedImportError(f"{path}:{lineno}: empty id, name or kind")
        try:
            nid, name = names.exact(nid, "node id"), names.checked(name, "node name")
        except names.NameRejected as exc:
            raise SeedImportError(f"{path}:{lineno}: {exc}") from exc
        if kind not in kinds:
            raise SeedImportError(f"{path}:{lineno}: node kind {kind!r} is not in the KG schema")
        if nid in nodes:
            raise SeedImportError(f"{path}:{lineno}: duplicate node id {nid!r}")
        synonyms: set[str] = set()
        for raw in filter(str.strip, row.get("synonyms", "").split("|")):
            clean = names.clean_name(raw)
            if isinstance(clean, names.Rejection):
                rejected.add("synonym", raw, clean)
            elif clean != name:
                synonyms.add(clean)
        vocab_id = row.get("vocab_id") or (hetionet_vocab_id(nid, kind) if hetionet else None)
        nodes[nid] = NodeIn(id=nid, name=name, kind=kind, vocab_id=vocab_id, synonyms=sorted(synonyms))
    return nodes, rejected


def read_edges(
    path: Path, all_nodes: dict[str, NodeIn], kept: set[str], seed_confidence: float
) -> tuple[list[tuple[str, str, str, str, float]], int]:
    by_abbrev = metaedge_by_abbrev()
    edges: dict[tuple[str, str, str], tuple[str, str, str, str, float]] = {}
    filtered = 0
    for lineno, row in _read_rows(path, [["source"], ["metaedge", "relation"], ["target"]]):
        src, dst = row["source"], row["target"]
        for end, nid in (("source", src), ("target", dst)):
            if nid not in all_nodes:
                raise SeedImportError(f"{path}:{lineno}: {end} {nid!r} is not in the node file")
        h, t = all_nodes[src], all_nodes[dst]
        found = rules.check(rules.Fact(  # the admission rules (kg/admission_rules.py) every KG write obeys
            head_id=src, relation=row.get("relation") or None, tail_id=dst, metaedge=row.get("metaedge") or None,
            head_kind=h.kind, tail_kind=t.kind, head_name=h.name, tail_name=t.name, head_vocab_id=h.vocab_id,
            tail_vocab_id=t.vocab_id), seed=True)
        if isinstance(found, rules.Refusal):
            raise SeedImportError(f"{path}:{lineno}: {found.reason} (admission rule {found.rule}: {found.fact})")
        me = by_abbrev[found.metaedge]
        conf = seed_confidence
        if row.get("confidence"):
            try:
                conf = float(row["confidence"])
            except ValueError:
                raise SeedImportError(f"{path}:{lineno}: confidence {row['confidence']!r} is not a number") from None
        if not 0.0 <= conf <= 1.0:
            raise SeedImportError(f"{path}:{lineno}: confidence {conf} is outside [0, 1]")
        if src not in kept or dst not in kept:
            filtered += 1
            continue
        edges[(src, me.relation, dst)] = (src, me.relation, dst, me.abbrev, conf)
    return list(edges.values()), filtered


def stored_seed_nodes(store: KGStore, nodes_path: Path, nodes: dict[str, NodeIn]) -> dict[str, NodeIn]:
    """For an "add": the seed's nodes (edges of the file may join them), after checking that no node of the file
    is stored with another kind (its edges were checked against one kind; the seed holds the other)."""
    if not store.exists():
        return {}
    with store.connect(read_only=True) as con:
        rows = con.execute("SELECT id, name, kind FROM seed_nodes").fetchall()
    stored = {i: NodeIn(id=i, name=name, kind=kind) for i, name, kind in rows}
    clash = sorted(i for i, n in nodes.items() if i in stored and stored[i].kind != n.kind)
    if clash:
        shown = "; ".join(f"{i!r} is {nodes[i].kind} in the file, {stored[i].kind} in the seed" for i in clash[:3])
        raise SeedImportError(f"{nodes_path}: {len(clash)} node(s) of another kind than the seed's: {shown}")
    return stored


def _import(
    store: KGStore, nodes_path: str | Path, edges_path: str | Path, seed_confidence: float,
    node_filter: NodeFilter, hetionet: bool, if_grown: IfGrown,
) -> SeedImportStats:
    t0 = time.perf_counter()
    seed_guard.check_mode(if_grown)
    if not 0.0 <= seed_confidence <= 1.0:
        raise SeedImportError(f"seed_confidence {seed_confidence} is outside [0, 1]")
    nodes_path, edges_path = Path(nodes_path), Path(edges_path)
    all_nodes, rejected = read_nodes(nodes_path, hetionet)
    keep = _keep(node_filter)
    nodes = [n for n in all_nodes.values() if keep(n)]
    kept = {n.id for n in nodes}
    # an "add" may join the file's nodes to the seed's: an edge's end is a node of the file or of the seed
    stored = stored_seed_nodes(store, nodes_path, all_nodes) if if_grown == "add" else {}
    edges, filtered = read_edges(edges_path, {**stored, **all_nodes}, kept | set(stored), seed_confidence)

    written = write_seed(store, nodes, edges, if_grown=if_grown)
    return SeedImportStats(
        n_nodes=len(nodes), n_edges=len(edges), n_edges_filtered=filtered,
        synonyms_rejected=rejected.figures(),
        nodes_by_kind=dict(sorted(Counter(n.kind for n in nodes).items())),
        edges_by_metaedge=dict(sorted(Counter(e[3] for e in edges).items())),
        seconds=round(time.perf_counter() - t0, 3), if_grown=if_grown, **written.stats(),
    )


SeedEdge = tuple[str, str, str, str, float]  # head_id, relation, tail_id, metaedge abbreviation, confidence


def write_seed(store: KGStore, nodes: list[NodeIn], edges: list[SeedEdge], node_attrs: dict[str, str] | None = None,
               edge_attrs: dict[tuple[str, str, str], str] | None = None, *,
               if_grown: IfGrown = "refuse") -> SeedWritten:
    """Write these rows as the seed in one transaction (all or nothing); `*_attrs`: a KGX import's other cells per
    node id / (head, relation, tail), as JSON.

    Whether the KG grew is read under the writer lock the write holds, so a merge finishing meanwhile is seen:
    "refuse" raises SeedImportRefused (nothing written) when it did, else the seed tables are replaced; "replace"
    keeps a grown KG aside, then replaces the seed and empties the grown rows; "add" inserts what the seed lacks."""
    seed_guard.check_mode(if_grown)
    node_df = pd.DataFrame(
        {"id": [n.id for n in nodes], "name": [n.name for n in nodes], "kind": [n.kind for n in nodes],
         "vocab_id": [n.vocab_id for n in nodes]}
    )
    syn_df = pd.DataFrame([(n.id, s) for n in nodes for s in n.synonyms], columns=["id", "synonym"])
    edge_df = pd.DataFrame(edges, columns=["head_id", "relation", "tail_id", "metaedge", "confidence"])
    node_attr_df = pd.DataFrame(list((node_attrs or {}).items()), columns=["id", "attrs"])
    edge_attr_df = pd.DataFrame([(*k, v) for k, v in (edge_attrs or {}).items()],
                                columns=["head_id", "relation", "tail_id", "attrs"])
    with store.connect() as con:
        grown = seed_guard.grown_in(con, store)
        if grown is not None and if_grown == "refuse":
            raise SeedImportRefused(grown.refusal())
        if if_grown == "add":
            _admit_added(con, nodes, edges)
            return _add_seed(con, node_df, syn_df, edge_df, node_attr_df, edge_attr_df)
        aside = seed_guard.keep_aside(store, con) if grown is not None else None  # if_grown "replace"
        con.execute("BEGIN TRANSACTION")
        try:
            if aside is not None:
                seed_guard.clear_grown(con)
            # Drop and recreate rather than DELETE: re-inserting the same keys makes DuckDB's commit ~25x slower.
            con.execute(
                "DROP TABLE IF EXISTS seed_edges; DROP TABLE IF EXISTS node_synonyms; DROP TABLE IF EXISTS seed_nodes; "
                "DROP TABLE IF EXISTS seed_node_attrs; DROP TABLE IF EXISTS seed_edge_attrs"
            )
            con.execute(SEED_DDL)
            con.register("_n", node_df)
            con.register("_s", syn_df)
            con.register("_e", edge_df)
            con.execute("INSERT INTO seed_nodes SELECT id, name, kind, vocab_id::VARCHAR FROM _n")
            con.execute("INSERT INTO node_synonyms SELECT id::VARCHAR, synonym::VARCHAR FROM _s")
            con.execute(
                "INSERT INTO seed_edges SELECT head_id::VARCHAR, relation::VARCHAR, tail_id::VARCHAR, "
                "metaedge::VARCHAR, confidence::DOUBLE FROM _e"
            )
            if len(node_attr_df):
                con.register("_na", node_attr_df)
                con.execute("INSERT INTO seed_node_attrs SELECT id::VARCHAR, attrs::VARCHAR FROM _na")
            if len(edge_attr_df):
                con.register("_ea", edge_attr_df)
                con.execute("INSERT INTO seed_edge_attrs SELECT head_id::VARCHAR, relation::VARCHAR, "
                            "tail_id::VARCHAR, attrs::VARCHAR FROM _ea")
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise
    return SeedWritten(n_synonyms=len(syn_df), kept_aside=aside.where if aside else "",
                       restore=aside.restore if aside else "")


def _admit_added(con, nodes: list[NodeIn], edges: list[SeedEdge]) -> None:  # noqa: ANN001 - either engine's
    """An import into a KG that grew asks the admission rules (kg/admission_rules.py) of every node and edge the seed
    does not hold yet, as any other write into the KG does (no evidence: a seed edge is the user's KG). One
    refusal refuses the import, nothing written, naming the rows."""
    stored = {i: (name, kind, vocab) for i, name, kind, vocab in con.execute(
        "SELECT id, name, kind, vocab_id FROM seed_nodes").fetchall()}
    held = set(map(tuple, con.execute("SELECT head_id, relation, tail_id FROM seed_edges").fetchall()))
    known = {**stored, **{n.id: (n.name, n.kind, n.vocab_id) for n in nodes}}
    refusals = [r for n in nodes if n.id not in stored and (r := rules.check_node(n.id, n.kind, n.vocab_id))]
    for head, relation, tail, metaedge, _conf in edges:
        if (head, relation, tail) in held:
            continue
        h, t = known.get(head, (None, None, None)), known.get(tail, (None, None, None))
        result = rules.check(rules.Fact(
            head_id=head, relation=relation, tail_id=tail, metaedge=metaedge, head_name=h[0], head_kind=h[1],
            head_vocab_id=h[2], tail_name=t[0], tail_kind=t[1], tail_vocab_id=t[2]), seed=True)
        if isinstance(result, rules.Refusal):
            refusals.append(result)
    if refusals:
        raise SeedImportError(f"{len(refusals)} row(s) of the file refused, nothing added: "
                              + "; ".join(r.message() for r in refusals[:3]) + (" ..." if len(refusals) > 3 else ""))


def _rollback(con) -> None:  # noqa: ANN001 - either engine's connection
    try:
        con.execute("ROLLBACK")
    except Exception:  # noqa: BLE001 - the transaction may be gone with the error that ended it
        pass


def _add_seed(con, node_df: pd.DataFrame, syn_df: pd.DataFrame, edge_df: pd.DataFrame,  # noqa: ANN001
              node_attr_df: pd.DataFrame, edge_attr_df: pd.DataFrame) -> SeedWritten:
    """The rows the seed lacks, inserted in one transaction; nothing stored is deleted or changed."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(SEED_DDL)  # a store made before the attrs tables gets them; the kept edge counts are stale now
        for name, frame in (("_n", node_df), ("_s", syn_df), ("_e", edge_df), ("_na", node_attr_df),
                            ("_ea", edge_attr_df)):
            con.register(name, frame)
        clash = con.execute("SELECT n.id, s.kind, n.kind FROM _n n JOIN seed_nodes s ON s.id = n.id "
                            "WHERE s.kind <> n.kind ORDER BY n.id LIMIT 3").fetchall()
        if clash:
            raise SeedImportError("nodes of another kind than the seed's: " + "; ".join(
                f"{i!r} is {new} in the file, {old} in the seed" for i, old, new in clash))
        new_nodes = "FROM _n n WHERE NOT EXISTS (SELECT 1 FROM seed_nodes s WHERE s.id = n.id)"
        same_edge = "x.head_id = e.head_id AND x.relation = e.relation AND x.tail_id = e.tail_id"
        new_edges = f"FROM _e e WHERE NOT EXISTS (SELECT 1 FROM seed_edges x WHERE {same_edge})"
        n_nodes = int(con.execute(f"SELECT count(*) {new_nodes}").fetchall()[0][0])  # noqa: S608 - fixed SQL
        n_edges = int(con.execute(f"SELECT count(*) {new_edges}").fetchall()[0][0])  # noqa: S608
        n_syn = int(con.execute("SELECT count(*) FROM (SELECT DISTINCT id, synonym FROM _s) s WHERE NOT EXISTS "
                                "(SELECT 1 FROM node_synonyms y WHERE y.id = s.id AND y.synonym = s.synonym)"
                                ).fetchall()[0][0]) if len(syn_df) else 0
        con.execute(f"INSERT INTO seed_nodes SELECT id, name, kind, vocab_id::VARCHAR {new_nodes}")  # noqa: S608
        if len(syn_df):
            con.execute("INSERT INTO node_synonyms SELECT DISTINCT id::VARCHAR, synonym::VARCHAR FROM _s s WHERE NOT "
                        "EXISTS (SELECT 1 FROM node_synonyms y WHERE y.id = s.id AND y.synonym = s.synonym)")
        con.execute("INSERT INTO seed_edges SELECT head_id::VARCHAR, relation::VARCHAR, tail_id::VARCHAR, "
                    f"metaedge::VARCHAR, confidence::DOUBLE {new_edges}")  # noqa: S608 - fixed SQL
        if len(node_attr_df):
            con.execute("INSERT INTO seed_node_attrs SELECT id::VARCHAR, attrs::VARCHAR FROM _na a "
                        "WHERE NOT EXISTS (SELECT 1 FROM seed_node_attrs x WHERE x.id = a.id)")
        if len(edge_attr_df):
            con.execute("INSERT INTO seed_edge_attrs SELECT head_id::VARCHAR, relation::VARCHAR, tail_id::VARCHAR, "
                        "attrs::VARCHAR FROM _ea e WHERE NOT EXISTS "
                        f"(SELECT 1 FROM seed_edge_attrs x WHERE {same_edge})")  # noqa: S608 - fixed SQL
        con.execute("COMMIT")
    except BaseException:
        _rollback(con)
        raise
    return SeedWritten(n_synonyms=n_syn, n_nodes_added=n_nodes, n_edges_added=n_edges)


def import_hetionet(
    store: KGStore, nodes_tsv: str | Path, edges_sif: str | Path, seed_confidence: float = 0.9,
    node_filter: NodeFilter = None, *, if_grown: IfGrown = "refuse",
) -> SeedImportStats:
    """Hetionet's nodes.tsv (id, name, kind) and edges .sif[.gz] (source, metaedge abbreviation, target).

    node_filter keeps a subset (a predicate on NodeIn or a collection of ids); edges losing an endpoint are dropped.
    if_grown: what to do to a KG that grew (seed_guard.py): refuse, replace (old KG kept aside) or add.
    """
    return _import(store, nodes_tsv, edges_sif, seed_confidence, node_filter, hetionet=True, if_grown=if_grown)


def import_generic(
    store: KGStore, nodes_path: str | Path, edges_path: str | Path, seed_confidence: float = 0.9,
    node_filter: NodeFilter = None, *, if_grown: IfGrown = "refuse",
) -> SeedImportStats:
    """Your own KG: nodes (id, name, kind[, synonyms '|'-joined][, vocab_id]) and edges
    (source, relation or metaedge, target[, confidence]); TSV, or CSV by extension; .gz allowed."""
    return _import(store, nodes_path, edges_path, seed_confidence, node_filter, hetionet=False, if_grown=if_grown)
