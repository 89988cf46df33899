"""The browser's search box: every KG node by its id, cross-references, name and synonyms.

Why its own index rather than the LanceDB entity index: that one answers "which node does this mention resemble"
(vectors, nearest first); a person typing ESR1, NR3A1 or NCBIGene:2099 wants the nodes that *are* named so, exact
matches first, then names starting with it, then names containing it. The rows are the entity index's (the seed's
names and synonyms from `lexicon_rows`, each namespace's merged entities from `extracted_entities`) plus what the
shipped vocabularies know of the seed's nodes: HGNC symbols, names and aliases of genes, MeSH entry terms of nodes
with a MeSH cross-reference, and every cross-reference id (kg/identity.py's Crosswalk). Built once per seed (~1 s
on the sample seed), a namespace's entities re-read only when their fingerprint changes; a search scans ~50k names
in memory (milliseconds).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel

from karma_dagster.dictionary.lexicon import read_tsv_gz
from karma_dagster.kg.identity import Crosswalk, curie_key
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.paths import data_file

MAX_HITS = 25
Match = Literal["id", "xref", "name", "synonym"]
_RANK = {"id": 0, "xref": 1, "name": 2, "synonym": 3}  # within one closeness (exact, prefix, contains)


class SearchHit(BaseModel):
    id: str
    name: str
    kind: str
    source: str  # seed | extracted
    matched: str  # the id, name or synonym the query met
    by: Match
    exact: bool


@dataclass
class _Entry:
    id: str
    name: str
    kind: str
    source: str
    first_seen: dt.date | None = None
    synonyms: set[str] = field(default_factory=set)
    ids: set[str] = field(default_factory=set)  # curie keys: own id, vocab id, cross-references


@lru_cache(maxsize=2)
def vocabulary_synonyms() -> dict[str, frozenset[str]]:
    """curie key -> names the shipped vocabularies give it: HGNC (NCBIGENE:<entrez>) and MeSH (MESH:<id>)."""
    out: dict[str, set[str]] = defaultdict(set)
    for entrez, symbol, name, aliases, previous in read_tsv_gz(data_file("vocab") / "hgnc-genes.tsv.gz", 5):
        out[f"NCBIGENE:{entrez}"].update(x for x in (symbol, name, *aliases.split("|"), *previous.split("|")) if x)
    for mesh_id, name, entry_terms, _trees in read_tsv_gz(data_file("vocab") / "mesh-current.tsv.gz", 4):
        out[f"MESH:{mesh_id.upper()}"].update(t for t in (name, *entry_terms.split("|")) if t and len(t) <= 80)
    return {k: frozenset(v) for k, v in out.items()}


class SearchIndex:
    """The seed's nodes (shared) plus, per namespace, the entities its merges added (synced by fingerprint)."""

    def __init__(self, store: KGStore) -> None:
        crosswalk, vocab = Crosswalk.load(), vocabulary_synonyms()
        self._seed: dict[str, _Entry] = {}
        for row in store.lexicon_rows(namespace=None):
            e = _Entry(row.id, row.name, row.kind, "seed", synonyms=set(row.synonyms))
            e.ids = set(crosswalk.node_ids(row.id))
            for key in list(e.ids):
                e.synonyms |= vocab.get(key, frozenset())
            e.synonyms.discard(row.name)
            self._seed[row.id] = e
        with store.connect(read_only=True) as con:  # the seed's own vocabulary ids (a KGX import's, a TSV column)
            for node_id, vocab_id in con.execute("SELECT id, vocab_id FROM seed_nodes WHERE vocab_id IS NOT NULL"
                                                 ).fetchall():
                if node_id in self._seed and (key := curie_key(vocab_id)):
                    self._seed[node_id].ids.add(key)
        self._extracted: dict[str, tuple[str, dict[str, _Entry], tuple | None]] = {}
        self._lock = threading.Lock()
        self._cache: dict = {}  # the seed's flattened terms and ids (made on first search)

    def _namespace(self, store: KGStore, namespace: str) -> dict[str, _Entry]:
        """The namespace's merged entities: re-read when their fingerprint changed, not asked while the DuckDB
        file is unchanged (the fingerprint hashes every extracted row: ~50 ms at 1M edges)."""
        state = file_state(store)
        with self._lock:
            known = self._extracted.get(namespace)
        if known is not None and state is not None and known[2] == state:
            return known[1]
        fingerprint, entities = store.extracted_entities(namespace, known=known[0] if known else None)
        if entities is None and known is not None:
            rows = known[1]
        else:
            rows = {e["id"]: _Entry(e["id"], e["name"], e["kind"], "extracted", e["first_seen"],
                                    set(e["synonyms"]), {k for k in (curie_key(e["id"]),) if k})
                    for e in entities or []}
        with self._lock:
            self._extracted[namespace] = (fingerprint, rows, state)
        return rows

    def get(self, store: KGStore, node_id: str, namespace: str) -> _Entry | None:
        return self._seed.get(node_id) or self._namespace(store, namespace).get(node_id)

    def synonyms(self, store: KGStore, node_id: str, namespace: str) -> list[str]:
        e = self.get(store, node_id, namespace)
        return sorted(e.synonyms, key=str.lower) if e else []

    def ids(self, store: KGStore, node_id: str, namespace: str) -> list[str]:
        e = self.get(store, node_id, namespace)
        return sorted(e.ids) if e else []

    def search(self, store: KGStore, query: str, namespace: str, as_of: dt.date | None = None,
               limit: int = MAX_HITS) -> list[SearchHit]:
        """Nodes whose id, cross-reference, name or synonym is the query, starts with it, or contains it (in that
        order; ids before names within each); a namespace's entities only when first merged on or before as_of."""
        q = " ".join(query.split()).lower()
        if not q:
            return []
        best: dict[str, tuple[tuple, str, Match]] = {}  # entry id -> (rank, matched text, by)
        own = self._namespace(store, namespace)
        extracted = {i: e for i, e in own.items() if as_of is None or e.first_seen is None or e.first_seen <= as_of}
        for lower, text, by, entry in [*self._terms("", self._seed), *self._terms(namespace, own)]:
            if q not in lower or (entry.source != "seed" and entry.id not in extracted):  # `in` first: most stop
                continue
            closeness = 0 if lower == q else 1 if lower.startswith(q) else 2
            rank = (closeness, _RANK[by], len(text), text)
            if entry.id not in best or rank < best[entry.id][0]:
                best[entry.id] = (rank, text, by)
        if key := curie_key(query.strip()):  # an id in any spelling: NCBIGene:2099, ncbigene:2099, Gene::2099
            for entry in [*(self._by_key(self._seed).get(key, [])), *(e for e in extracted.values() if key in e.ids)]:
                by: Match = "id" if key == curie_key(entry.id) else "xref"
                rank = (0, _RANK[by], 0, key)
                if entry.id not in best or rank < best[entry.id][0]:
                    best[entry.id] = (rank, key, by)
        entries = {**self._seed, **extracted}
        ranked = sorted(best.items(), key=lambda kv: (kv[1][0], entries[kv[0]].source != "seed", kv[0]))[:limit]
        return [SearchHit(id=i, name=entries[i].name, kind=entries[i].kind, source=entries[i].source, matched=text,
                          by=by, exact=rank[0] == 0) for i, (rank, text, by) in ranked]

    def _terms(self, namespace: str, entries: dict[str, _Entry]) -> list[tuple[str, str, Match, _Entry]]:
        """(lower-cased text, text, by, entry) of every id, name and synonym; made once per entries dict (the
        seed's, or a namespace's until its entities change)."""
        cached = self._cache.get(("terms", namespace))
        if cached is not None and cached[0] is entries:
            return cached[1]
        terms = [(t.lower(), t, by, e) for e in entries.values()
                 for t, by in [(e.id, "id"), (e.name, "name"), *((s, "synonym") for s in e.synonyms)]]
        self._cache[("terms", namespace)] = (entries, terms)
        return terms

    def _by_key(self, entries: dict[str, _Entry]) -> dict[str, list[_Entry]]:
        if "by_key" not in self._cache:
            keyed: dict[str, list[_Entry]] = defaultdict(list)
            for e in entries.values():
                for k in e.ids:
                    keyed[k].append(e)
            self._cache["by_key"] = dict(keyed)
        return self._cache["by_key"]


_INDEXES: dict[tuple, SearchIndex] = {}
_INDEX_LOCK = threading.Lock()


_FINGERPRINT: dict[tuple, str] = {}


def file_state(store: KGStore) -> tuple | None:
    """What changes whenever a DuckDB KG file is written (its and its WAL's inode, mtime, size); None for
    PostgreSQL (no file to watch: ask the database)."""
    if type(store) is not KGStore:
        return None
    out: list[object] = [str(store.path)]
    for path in (store.path, store.path.with_name(store.path.name + ".wal")):
        try:
            st = path.stat()
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def _seed_fingerprint(store: KGStore) -> str:
    """store.seed_fingerprint(), for a DuckDB file asked again only when the file changed: the question opens the
    file (~20 ms), and every page asks."""
    key = file_state(store)
    if key is None:  # PostgreSQL: one query, no file to open
        return store.seed_fingerprint()
    if key not in _FINGERPRINT:
        _FINGERPRINT.clear()
        _FINGERPRINT[key] = store.seed_fingerprint()
    return _FINGERPRINT[key]


def search_index(store: KGStore) -> SearchIndex:
    """The process's index of this KG's seed (rebuilt when the seed is re-imported)."""
    key = (repr(store), _seed_fingerprint(store))
    with _INDEX_LOCK:
        if key not in _INDEXES:
            _INDEXES.clear()  # one KG per server: an index of an older seed is dropped
            _INDEXES[key] = SearchIndex(store)
        return _INDEXES[key]
