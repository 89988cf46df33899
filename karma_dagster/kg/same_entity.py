"""One node per entity: which existing node each new entity of a merge already is (issue 27).

Every writer (the chain, the single-agent and tools modes, MCP, CogMG completions, review decisions) reaches the KG
through `merge.merge_increment`, so the rule is kept there: a new entity whose id, vocabulary id, a cross-reference
of them (kg/identity.py's Crosswalk), or whose exact name or synonym names a node of a compatible kind — a seed node
first, else one the namespace's merges created — is that node: its triples are re-pointed to it and it creates no
node. Two new entities of one merge that share an id become one. Standard SQL only, on the given connection (DuckDB
or Postgres), reading just the candidate rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from karma_dagster.kg.identity import HETIONET_PREFIX, Crosswalk, compatible, curie_key, name_key, one_concept
from karma_dagster.kg.store import NodeIn

_CHUNK = 500
# the inverse of identity.HETIONET_PREFIX: a CURIE prefix -> the Hetionet kinds whose `Kind::local` ids it writes
_KINDS_OF_PREFIX = {p: k for k, p in HETIONET_PREFIX.items()}
_CURIE_KINDS = {"DOID": ("Disease",), "UBERON": ("Anatomy",), "GO": ("Biological Process", "Cellular Component",
                "Molecular Function"), "WP": ("Pathway",)}


def candidate_ids(value: str) -> set[str]:
    """The node ids under which a KG may hold the entity this id names: the id as written and in its one spelling,
    and Hetionet's `Kind::local` forms of it."""
    out = {value}
    key = curie_key(value)
    if key is None:
        return out
    out.add(key)
    prefix, _, local = key.partition(":")
    raw_local = value.split("::", 1)[1] if "::" in value else value.partition(":")[2]
    if kind := _KINDS_OF_PREFIX.get(prefix):
        out |= {f"{kind}::{raw_local}", f"{kind}::{local}"}
    for kind in _CURIE_KINDS.get(prefix, ()):
        out.add(f"{kind}::{key}")
    return out


def existing_nodes(con: Any, namespace: str, nodes: Sequence[NodeIn], crosswalk: Crosswalk) -> dict[str, str]:
    """new entity id -> the existing node it is (only those that are one; seed nodes keep their own id)."""
    pending = list(nodes)
    if not pending:
        return {}
    keys = {n.id: _keys(n, crosswalk) for n in pending}
    wanted_ids = set().union(*(candidate_ids(v) for n in pending for v in (n.id, n.vocab_id) if v))
    wanted_ids |= set().union(*(candidate_ids(k) for ks in keys.values() for k in ks))
    wanted_ids |= {node for ks in keys.values() for k in ks for node in crosswalk.nodes_of(k)}
    names = {name_key(x) for n in pending for x in (n.name, *n.synonyms)} - {""}
    seed, extracted = _read(con, namespace, wanted_ids, {k for ks in keys.values() for k in ks}, names, crosswalk)

    out: dict[str, str] = {}
    for n in pending:
        if n.id in seed:
            continue  # already the seed node itself
        own = keys[n.id]
        for pool in (seed, extracted):
            match = _match(n, own, pool)
            if match is not None and match != n.id:
                out[n.id] = match
                break
            if match == n.id:
                break
    # two new entities of this merge that are one (a shared vocabulary id): the first id (sorted) stands for both
    by_key: dict[str, str] = {}
    for n in sorted(pending, key=lambda n: n.id):
        if n.id in out or n.id in seed:
            continue
        for k in sorted(keys[n.id]):
            first = by_key.setdefault(k, n.id)
            if first != n.id and compatible(_kind(pending, first), n.kind):
                out[n.id] = first
                break
    return out


def _keys(n: NodeIn, crosswalk: Crosswalk) -> set[str]:
    """The ids a new entity goes by: its own and vocabulary id, and the id its name is an entry term of; a gene's
    spoken name or shared alias (identity.Crosswalk.ids_of_name) only when it has no id of its own."""
    own = {k for k in (curie_key(n.id), curie_key(n.vocab_id)) if k}
    return own | set(crosswalk.ids_of_names(n.name, genes=not own))


def _kind(nodes: Iterable[NodeIn], node_id: str) -> str | None:
    return next((n.kind for n in nodes if n.id == node_id), None)


def _match(n: NodeIn, own: set[str], pool: dict[str, tuple[str, set[str], set[str]]]) -> str | None:
    """The one node of `pool` (id -> (kind, id keys, name keys)) this new entity is: by id first, then by name;
    same kind before a compatible one, then by identity.CONCEPT_ORDER (a Disease mention whose MeSH id is a seed
    Side Effect's and a Disease's is the Disease); None when there is none or two of one kind compete."""
    names = {name_key(x) for x in (n.name, *n.synonyms)} - {""}
    for test in (lambda ids, _ns: bool(own & ids), lambda _ids, ns: bool(names & ns)):
        hits = {node_id: kind for node_id, (kind, ids, ns) in pool.items()
                if compatible(kind, n.kind) and test(ids, ns)}
        if hits:
            return one_concept(hits, [n.kind] if n.kind else None)
    return None


def _read(con: Any, namespace: str, ids: set[str], keys: set[str], names: set[str], crosswalk: Crosswalk
          ) -> tuple[dict[str, tuple[str, set[str], set[str]]], dict[str, tuple[str, set[str], set[str]]]]:
    """The seed and the namespace's extracted nodes that any of these ids, vocabulary ids or names may be:
    id -> (kind, every id key it goes by, its name keys)."""
    seed: dict[str, tuple[str, set[str], set[str]]] = {}
    extracted: dict[str, tuple[str, set[str], set[str]]] = {}

    def note(pool: dict, node_id: str, kind: str, vocab_id: str | None, name: str | None) -> None:
        entry = pool.setdefault(node_id, (kind, set(crosswalk.node_ids(node_id)), set()))
        if key := curie_key(vocab_id):
            entry[1].add(key)
        if name:
            entry[2].add(name_key(name))

    upper_keys = sorted(keys)
    lowered = sorted({x.lower() for x in names})
    for chunk in _chunks(sorted(ids)):
        marks = ", ".join(["CAST(? AS VARCHAR)"] * len(chunk))
        for node_id, kind, vocab_id, name in con.execute(
                f"SELECT id, kind, vocab_id, name FROM seed_nodes WHERE id IN ({marks})", chunk).fetchall():
            note(seed, node_id, kind, vocab_id, name)
        for node_id, kind, vocab_id, name in con.execute(
                f"SELECT id, kind, vocab_id, name FROM extracted_nodes WHERE namespace = ? AND id IN ({marks})",
                [namespace, *chunk]).fetchall():
            note(extracted, node_id, kind, vocab_id, name)
    for chunk in _chunks(upper_keys):
        marks = ", ".join(["CAST(? AS VARCHAR)"] * len(chunk))
        for node_id, kind, vocab_id, name in con.execute(
                f"SELECT id, kind, vocab_id, name FROM seed_nodes WHERE upper(vocab_id) IN ({marks})", chunk).fetchall():
            note(seed, node_id, kind, vocab_id, name)
        for node_id, kind, vocab_id, name in con.execute(
                f"SELECT id, kind, vocab_id, name FROM extracted_nodes WHERE namespace = ? AND upper(vocab_id) IN "
                f"({marks})", [namespace, *chunk]).fetchall():
            note(extracted, node_id, kind, vocab_id, name)
    for chunk in _chunks(lowered):
        marks = ", ".join(["CAST(? AS VARCHAR)"] * len(chunk))
        for node_id, kind, vocab_id, name in con.execute(
                f"SELECT id, kind, vocab_id, name FROM seed_nodes WHERE lower(name) IN ({marks}) UNION ALL "
                f"SELECT s.id, s.kind, s.vocab_id, y.synonym FROM node_synonyms y JOIN seed_nodes s ON s.id = y.id "
                f"WHERE lower(y.synonym) IN ({marks})", [*chunk, *chunk]).fetchall():
            note(seed, node_id, kind, vocab_id, name)
    return seed, extracted


def _chunks(items: list[str], size: int = _CHUNK) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
