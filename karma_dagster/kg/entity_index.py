"""The KG's entity names in a LanceDB table, searched by cosine distance (normalization of mentions).

One row per (entity, name or synonym). Brute-force search is exact and fast enough below ~100k rows
(STACK.md: ~72 ms/query at 50k x 384); above `ann_threshold` rows an IVF_HNSW_SQ index is built.
A mention type restricts the search to compatible KG kinds (a Disease mention may be a Symptom or Side Effect).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from karma_dagster.kg.embeddings import Embedder, HashingCharNgramEmbedder, normalize_name

TABLE = "entities"
RERANK_POOL = 10  # vector candidates re-scored with the word distance
# NER type (or KG kind) -> KG kinds a mention of it may link to.
COMPATIBLE_KINDS: dict[str, tuple[str, ...]] = {
    "Disease": ("Disease", "Symptom", "Side Effect"),
    "Chemical": ("Compound", "Pharmacologic Class"),
    "Gene": ("Gene",),
    "Species": ("Species",),
    "CellLine": ("Cell Line",),
    "Variant": ("Variant",),
    "Anatomy": ("Anatomy",),
}
# BioRED's labels (what the LLM prompts ask for) mean the same kinds.
COMPATIBLE_KINDS |= {
    "DiseaseOrPhenotypicFeature": COMPATIBLE_KINDS["Disease"],
    "ChemicalEntity": COMPATIBLE_KINDS["Chemical"],
    "GeneOrGeneProduct": COMPATIBLE_KINDS["Gene"],
    "OrganismTaxon": COMPATIBLE_KINDS["Species"],
    "SequenceVariant": COMPATIBLE_KINDS["Variant"],
}


class KGEntity(BaseModel):
    """An entity as the index and the lexicon take it from the KG."""

    model_config = ConfigDict(extra="ignore")
    id: str
    name: str
    kind: str
    synonyms: list[str] = []


class Hit(BaseModel):
    entity_id: str
    name: str
    kind: str
    distance: float


def compatible_kinds(kind: str | None) -> tuple[str, ...] | None:
    if kind is None:
        return None
    return COMPATIBLE_KINDS.get(kind, (kind,))


def _words_match(a: str, b: str) -> bool:
    """Spelling variants (tumour/tumor, -aemia/-emia) and suffixed forms (hypothyroid/hypothyroidism) match;
    a prefixed word does not (tyrosine vs metyrosine, glycemia vs hyperglycemia): prefixes change meaning."""
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    if long_.startswith(short) and len(short) >= 0.75 * len(long_):
        return True
    return SequenceMatcher(None, a, b).ratio() >= 0.9


def word_distance(mention: str, name: str) -> float:
    """1 - share of the words of both names that find a match in the other (0 = same words).

    Char n-gram vectors see "cancer" inside "liver cancer" (cosine distance 0.20); the words do not: "liver"
    specializes the entity, so the pair is 0.33 apart here and the mention does not link to it."""
    mw, nw = normalize_name(mention).split(), normalize_name(name).split()
    if not mw or not nw:
        return 1.0
    matched = sum(any(_words_match(w, v) for v in nw) for w in mw) + sum(any(_words_match(v, w) for w in mw) for v in nw)
    return 1.0 - matched / (len(mw) + len(nw))


def name_distance(mention: str, row: Mapping[str, Any]) -> float:
    """0 for the same name up to case, spacing and punctuation (SNAP-25 = SNAP25), else max(cosine, words)."""
    if normalize_name(mention).replace(" ", "") == normalize_name(row["name"]).replace(" ", ""):
        return 0.0
    return max(0.0, float(row["_distance"]), word_distance(mention, row["name"]))


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


class EntityIndex:
    def __init__(self, uri: str | Path, embedder: Embedder | None = None, ann_threshold: int = 100_000):
        import lancedb

        self.uri = str(uri)
        self.embedder = embedder or HashingCharNgramEmbedder()
        self.ann_threshold = ann_threshold
        self._db = lancedb.connect(self.uri)
        self._table = self._db.open_table(TABLE) if TABLE in self._db.table_names() else None

    def __len__(self) -> int:
        return 0 if self._table is None else self._table.count_rows()

    def _rows(self, entities: Iterable[KGEntity | Mapping[str, Any]]) -> pa.Table:
        ids, names, kinds = [], [], []
        for e in entities:
            ent = e if isinstance(e, KGEntity) else KGEntity.model_validate(e)
            if not ent.id or not ent.name.strip():
                raise ValueError(f"EntityIndex: entity needs an id and a name: {ent!r}")
            seen = set()
            for name in [ent.name, *ent.synonyms]:
                norm = normalize_name(name)
                if not norm or norm in seen:
                    continue
                seen.add(norm)
                ids.append(ent.id)
                names.append(name)
                kinds.append(ent.kind)
        vecs = self.embedder.embed(names)
        vec_type = pa.list_(pa.float32(), self.embedder.dim)
        return pa.table({
            "entity_id": pa.array(ids, pa.string()),
            "name": pa.array(names, pa.string()),
            "kind": pa.array(kinds, pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), self.embedder.dim)
            if len(names) else pa.array([], vec_type),
        })

    def build(self, entities: Iterable[KGEntity | Mapping[str, Any]], replace: bool = True) -> int:
        """(Re)create the table from the KG's entities; returns the number of name rows."""
        data = self._rows(entities)
        if self._table is not None and not replace:
            self._table.add(data)
        else:
            self._table = self._db.create_table(TABLE, data=data, mode="overwrite")
        self._maybe_index()
        return data.num_rows

    def add(self, entities: Iterable[KGEntity | Mapping[str, Any]]) -> int:
        """Index entities newly merged into the KG (rows for ids already present are replaced)."""
        data = self._rows(entities)
        if data.num_rows == 0:
            return 0
        if self._table is None:
            self._table = self._db.create_table(TABLE, data=data)
        else:
            ids = sorted(set(data.column("entity_id").to_pylist()))
            self._table.delete("entity_id IN (" + ",".join(_sql_str(i) for i in ids) + ")")
            self._table.add(data)
        self._maybe_index()
        return data.num_rows

    def _maybe_index(self) -> None:
        if self._table is None or self._table.count_rows() < self.ann_threshold:
            return
        from lancedb.index import IvfHnswSq

        self._table.create_index("vector", config=IvfHnswSq(distance_type="cosine"), replace=True)

    def search(self, names: list[str], kinds: list[str | None] | None = None, k: int = 1) -> list[list[Hit]]:
        """Nearest KG names for each query name (cosine distance, 0 = same normalized name)."""
        if kinds is not None and len(kinds) != len(names):
            raise ValueError(f"EntityIndex.search: {len(names)} names but {len(kinds)} kinds")
        if self._table is None or not names:
            return [[] for _ in names]
        vecs = self.embedder.embed(names)
        out: list[list[Hit]] = []
        for i, vec in enumerate(vecs):
            # Vector search proposes candidates; the reported distance is max(cosine, word distance), so a name
            # that is close in characters but not in words (a more specific entity, a prefixed word) is far.
            q = self._table.search(vec, vector_column_name="vector").distance_type("cosine").limit(max(k, RERANK_POOL))
            allowed = compatible_kinds(kinds[i]) if kinds is not None else None
            if allowed:
                q = q.where("kind IN (" + ",".join(_sql_str(a) for a in allowed) + ")", prefilter=True)
            rows = q.select(["entity_id", "name", "kind", "_distance"]).to_list()
            hits = [
                Hit(entity_id=r["entity_id"], name=r["name"], kind=r["kind"], distance=name_distance(names[i], r))
                for r in rows
            ]
            rank = {kd: j for j, kd in enumerate(allowed or ())}  # ties: the mention type's own kind first
            hits.sort(key=lambda h: (round(h.distance, 6), rank.get(h.kind, len(rank))))
            out.append(hits[:k])
        return out
