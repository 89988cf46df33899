"""Import a seed KG (Hetionet's TSV/SIF, or a generic node/edge table) into the store's seed tables.

Everything is read and checked before the store is opened, so bad input writes nothing; the write replaces the
seed rows in one transaction and never touches evidence or extracted nodes (re-import is idempotent).
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

from karma_dagster.kg import names
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
        if row.get("metaedge"):
            me = by_abbrev.get(row["metaedge"])
            if me is None:
                raise SeedImportError(f"{path}:{lineno}: unknown metaedge {row['metaedge']!r}")
        else:
            rel = row.get("relation", "")
            me = metaedge_for(all_nodes[src].kind, rel, all_nodes[dst].kind)
            if me is None:
                raise SeedImportError(
                    f"{path}:{lineno}: no schema metaedge {all_nodes[src].kind} -{rel}-> {all_nodes[dst].kind}"
                )
        if (all_nodes[src].kind, all_nodes[dst].kind) != (me.source, me.target):
            raise SeedImportError(
                f"{path}:{lineno}: metaedge {me.abbrev} joins {me.source} -> {me.target}, "
                f"got {all_nodes[src].kind} -> {all_nodes[dst].kind}"
            )
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


def _import(
    store: KGStore, nodes_path: str | Path, edges_path: str | Path, seed_confidence: float,
    node_filter: NodeFilter, hetionet: bool,
) -> SeedImportStats:
    t0 = time.perf_counter()
    if not 0.0 <= seed_confidence <= 1.0:
        raise SeedImportError(f"seed_confidence {seed_confidence} is outside [0, 1]")
    nodes_path, edges_path = Path(nodes_path), Path(edges_path)
    all_nodes, rejected = read_nodes(nodes_path, hetionet)
    keep = _keep(node_filter)
    nodes = [n for n in all_nodes.values() if keep(n)]
    kept = {n.id for n in nodes}
    edges, filtered = read_edges(edges_path, all_nodes, kept, seed_confidence)

    n_synonyms = write_seed(store, nodes, edges)
    return SeedImportStats(
        n_nodes=len(nodes), n_edges=len(edges), n_synonyms=n_synonyms, n_edges_filtered=filtered,
        synonyms_rejected=rejected.figures(),
        nodes_by_kind=dict(sorted(Counter(n.kind for n in nodes).items())),
        edges_by_metaedge=dict(sorted(Counter(e[3] for e in edges).items())),
        seconds=round(time.perf_counter() - t0, 3),
    )


SeedEdge = tuple[str, str, str, str, float]  # head_id, relation, tail_id, metaedge abbreviation, confidence


def write_seed(store: KGStore, nodes: list[NodeIn], edges: list[SeedEdge], node_attrs: dict[str, str] | None = None,
               edge_attrs: dict[tuple[str, str, str], str] | None = None) -> int:
    """Replace the seed tables with these rows in one transaction (all or nothing; evidence and extracted nodes are
    never touched); `*_attrs`: a KGX import's other cells per node id / (head, relation, tail), as JSON. Returns the
    number of synonyms written."""
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
        con.execute("BEGIN TRANSACTION")
        try:
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
            try:
                con.execute("ROLLBACK")
            except Exception:  # noqa: BLE001
                pass
            raise
    return len(syn_df)


def import_hetionet(
    store: KGStore, nodes_tsv: str | Path, edges_sif: str | Path, seed_confidence: float = 0.9,
    node_filter: NodeFilter = None,
) -> SeedImportStats:
    """Hetionet's nodes.tsv (id, name, kind) and edges .sif[.gz] (source, metaedge abbreviation, target).

    node_filter keeps a subset (a predicate on NodeIn or a collection of ids); edges losing an endpoint are dropped.
    """
    return _import(store, nodes_tsv, edges_sif, seed_confidence, node_filter, hetionet=True)


def import_generic(
    store: KGStore, nodes_path: str | Path, edges_path: str | Path, seed_confidence: float = 0.9,
    node_filter: NodeFilter = None,
) -> SeedImportStats:
    """Your own KG: nodes (id, name, kind[, synonyms '|'-joined][, vocab_id]) and edges
    (source, relation or metaedge, target[, confidence]); TSV, or CSV by extension; .gz allowed."""
    return _import(store, nodes_path, edges_path, seed_confidence, node_filter, hetionet=False)
