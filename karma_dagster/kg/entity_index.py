"""The KG's entity names in LanceDB tables, searched by cosine distance (normalization of mentions).

One row per (entity, name or synonym). The seed table is searched through an in-memory layer over its stored
vectors (kg/name_vectors.py): exact below `ann_threshold` rows, above it IVF lists per kind scored exactly, all
mentions of a call (a document) at once; the measurement that chose it is in that module and bench/entity_index.py.
A mention type restricts the search to compatible KG kinds (a Disease mention may be a Symptom or Side Effect).

Two tables. `entities` holds the seed KG's names, shared by every namespace. `extracted_entities` holds the
entities each namespace's merges added to the KG (KGStore.extracted_entities), with the namespace and the date
the entity was first merged: a document of that namespace dated D links to those first merged before D (the
documents of D are merged together, after their chains ran), and another namespace never sees them.
That table is state-driven: `sync_namespace` makes a namespace's rows equal to the KG's extracted nodes, so a
merge in another process, a re-merge that removed an entity, or a crash between a merge and the index update
is repaired by the next sync; the KG is the truth, the table its vector view.

The seed table carries, in the same commit as its rows, what it was built from (`SEED_BUILD_KEY`: the KG's seed
fingerprint and the number of name rows written). `check` compares that record, the row count and (when the
search layer loads) every vector with what they must be, so a build that a kill or a full disk stopped, an index
of another seed, or damaged data is seen before it is searched; services.entity_index rebuilds it from the KG.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict

from karma_dagster.runtime.integrity import StoreCorrupt, lance_is_corruption
from karma_dagster.runtime.shared_storage import lance_storage_options, shared_lock, storage_root
from karma_dagster.kg.embeddings import Embedder, HashingCharNgramEmbedder, normalize_name
from karma_dagster.kg.name_vectors import IVFParams, NameVectors, sparse_rows

TABLE = "entities"
IVF_TABLE = "entities_ivf"  # the seed table's IVF centroids (kg/name_vectors.py); rows carry their `partition`
IVF_BUILD_KEY = b"karma_ivf_build"  # the build token both tables carry: a crash between their writes is seen
SEED_BUILD_KEY = b"karma_seed_build"  # JSON {"fingerprint", "rows"}: the KG seed the table was built from
NORM_TOLERANCE = 1e-3  # stored vectors are L2-normalized (or zero): anything else is damaged data
BUILD_CHUNK = 50_000  # entities embedded and written per batch: a 1M-name build holds ~1.7 GB, not 2 GB per copy
EXTRACTED_TABLE = "extracted_entities"
INDEX_KIND = "entity index"
INDEX_REMEDY = ("move it away and run `karma import-kg`: the index is rebuilt from the KG's seed names, and each "
                "backbone's own entities are synced again from the KG by the next run")
REQUIRED_COLUMNS = {TABLE: ("entity_id", "name", "kind", "vector"),
                    EXTRACTED_TABLE: ("entity_id", "name", "kind", "namespace", "first_seen", "vector")}
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


class IndexCorrupt(StoreCorrupt):
    """A damaged table of the entity index; `table` says which (the index is derived: it can be rebuilt)."""

    def __init__(self, uri: str, table: str, detail: str, base: Path | None = None) -> None:
        self.table = table
        super().__init__(INDEX_KIND, uri, detail, INDEX_REMEDY, base)


class SeedBuild(BaseModel):
    """What a seed table was built from, stored in its schema (one commit with its rows)."""

    fingerprint: str
    rows: int


class KGEntity(BaseModel):
    """An entity as the index and the lexicon take it from the KG."""

    model_config = ConfigDict(extra="ignore")
    id: str
    name: str
    kind: str
    synonyms: list[str] = []


class ExtractedEntity(KGEntity):
    """An entity a namespace's merges added to the KG; linkable by that namespace's documents dated after
    `first_seen` (the date of the first increment that merged it)."""

    first_seen: dt.date


class Hit(BaseModel):
    entity_id: str
    name: str
    kind: str
    distance: float
    source: Literal["seed", "extracted"] = "seed"  # the shared seed KG, or an entity the namespace's merges added


class SyncResult(BaseModel):
    """What one `sync_namespace` changed in the index (entities, not name rows)."""

    namespace: str
    entities: int  # the namespace's extracted entities now indexed
    added: int
    removed: int


def compatible_kinds(kind: str | None) -> tuple[str, ...] | None:
    if kind is None:
        return None
    return COMPATIBLE_KINDS.get(kind, (kind,))


@lru_cache(maxsize=1 << 16)
def _words_match(a: str, b: str) -> bool:
    """Spelling variants (tumour/tumor, -aemia/-emia) and suffixed forms (hypothyroid/hypothyroidism) match;
    a prefixed word does not (tyrosine vs metyrosine, glycemia vs hyperglycemia): prefixes change meaning.

    Cached, and the ratio's upper bounds first: the word rerank was ~10 ms of a mention's search at 1M names."""
    if a == b:
        return True
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    if long_.startswith(short) and len(short) >= 0.75 * len(long_):
        return True
    if 2 * len(short) < 0.9 * (len(a) + len(b)):  # the bound of ratio() by the lengths alone
        return False
    matcher = SequenceMatcher(None, a, b)
    return matcher.quick_ratio() >= 0.9 and matcher.ratio() >= 0.9


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
    def __init__(self, uri: str | Path, embedder: Embedder | None = None, ann_threshold: int = 100_000,
                 ivf: IVFParams | None = None):
        # lancedb's Rust logger warns "No existing dataset at <absolute path>" on every first write: routine, and
        # a machine path in every run's log. Errors still show; LANCEDB_LOG=warn (or debug) brings it back.
        os.environ.setdefault("LANCEDB_LOG", "error")
        import lancedb

        self.uri = str(uri)
        self.embedder = embedder or HashingCharNgramEmbedder()
        self.ann_threshold = ann_threshold
        self.ivf = ivf or IVFParams(ann_rows=ann_threshold)
        self._vectors: NameVectors | None = None  # the seed names' search layer, loaded at the first search
        self._vectors_lock = threading.Lock()
        self._db = lancedb.connect(self.uri, storage_options=lance_storage_options(self.uri))  # s3:// or a folder
        self._table = self._open(TABLE)
        self._extracted = self._open(EXTRACTED_TABLE)
        # namespace -> fingerprint of the KG state last synced in this process (see `sync_namespace`)
        self._synced: dict[str, str] = {}
        self._memo_lock = threading.Lock()
        # across processes (and machines); index_health.sync_lock is the same lock (its checks wait for writers)
        self._sync_lock = shared_lock(self.uri.rstrip("/") + ".sync.lock")

    def _open(self, name: str) -> Any:
        """The table, checked (manifest readable, the columns and vector size this index writes, every data file's
        footer readable via one small column); None when it does not exist yet (not built, or nothing merged)."""
        if not self._table_dir(name).exists():
            return None
        with self._corruption(name):
            try:
                table = self._db.open_table(name)
            except ValueError as exc:  # a folder without a version: a first create that never finished
                if "was not found" in str(exc):
                    return None
                raise
            schema = table.schema
            missing = [c for c in REQUIRED_COLUMNS[name] if c not in schema.names]
            if missing:
                raise IndexCorrupt(self.uri, name, f"table {name} lacks the column(s) {missing}", self._base)
            vector = schema.field("vector").type
            if getattr(vector, "list_size", None) != self.embedder.dim:
                raise IndexCorrupt(self.uri, name,
                                   f"table {name} has {vector} vectors, this index embeds {self.embedder.dim} floats",
                                   self._base)
            table.search().select(["entity_id"]).limit(None).to_arrow()
        return table

    def _table_dir(self, name: str) -> Path:
        return storage_root(self.uri) / f"{name}.lance"  # a UPath under an s3:// URI

    @property
    def _base(self) -> Path:
        """The data dir the index lives in: messages name the index relative to it."""
        return storage_root(self.uri).parent

    @contextmanager
    def _corruption(self, name: str) -> Iterator[None]:
        """Lance's errors on a damaged table (bad manifest, data file, a panic of its reader) -> StoreCorrupt."""
        try:
            yield
        except StoreCorrupt:
            raise
        except Exception as exc:  # Lance raises ValueError, RuntimeError or a Rust panic (an Exception)
            if lance_is_corruption(exc):
                raise IndexCorrupt(self.uri, name, f"table {name}: {exc}", self._base) from exc
            raise

    def __len__(self) -> int:
        """Name rows of the seed table (the namespaces' own entities: `count_extracted`)."""
        if self._table is None:
            return 0
        with self._corruption(TABLE):
            return self._table.count_rows()

    def _rows(self, entities: Iterable[KGEntity | Mapping[str, Any]], namespace: str | None = None) -> pa.Table:
        """Name rows of the seed table, or (with `namespace`) of the extracted table: + namespace, first_seen."""
        ids, names, kinds, firsts = [], [], [], []
        model = KGEntity if namespace is None else ExtractedEntity
        for e in entities:
            ent = e if isinstance(e, model) else model.model_validate(e)
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
                if isinstance(ent, ExtractedEntity):
                    firsts.append(ent.first_seen.isoformat())
        vecs = self.embedder.embed(names)
        vec_type = pa.list_(pa.float32(), self.embedder.dim)
        columns = {
            "entity_id": pa.array(ids, pa.string()),
            "name": pa.array(names, pa.string()),
            "kind": pa.array(kinds, pa.string()),
        }
        if namespace is not None:  # ISO dates compare as strings in Lance filters
            columns |= {"namespace": pa.array([namespace] * len(ids), pa.string()),
                        "first_seen": pa.array(firsts, pa.string())}
        columns["vector"] = (
            pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), self.embedder.dim)
            if len(names) else pa.array([], vec_type))
        return pa.table(columns)

    def build(self, entities: Iterable[KGEntity | Mapping[str, Any]], replace: bool = True,
              fingerprint: str | None = None) -> int:
        """(Re)create the table from the KG's entities; returns the number of name rows.

        Embeds in chunks of BUILD_CHUNK entities keeping only the sparse vectors, trains the IVF lists on them
        (kg/name_vectors.py), then writes the rows with their list in one commit: 1M names in 3-5 minutes
        under 3 GB on 2 shared cores (bench/entity_index.py). `fingerprint` (the KG's seed fingerprint) is
        recorded with the rows, in that commit (`SeedBuild`): a build cut short leaves the previous version or
        no table, never rows that claim to be this seed's."""
        if self._table is not None and not replace:
            return self.add(entities, replace_ids=False)
        ids: list[str] = []
        names: list[str] = []
        kinds: list[str] = []
        chunks = []
        for batch in _batched(entities, BUILD_CHUNK):
            data = self._rows(batch)
            ids += data.column("entity_id").to_pylist()
            names += data.column("name").to_pylist()
            kinds += data.column("kind").to_pylist()
            chunks.append(sparse_rows(_vectors(data, self.embedder.dim)))
        vectors = sparse_rows(np.zeros((0, self.embedder.dim))) if not chunks else sp.vstack(chunks, format="csr")
        layer = NameVectors(self.embedder.dim, self.ivf)
        lists, centroids = layer.build(ids, names, kinds, vectors)
        token = uuid.uuid4().hex
        if centroids is not None:  # first the centroids, then the rows: rows of another build are never trusted
            self._db.create_table(IVF_TABLE, data=self._centroid_rows(centroids, token), mode="overwrite")
        record = SeedBuild(fingerprint=fingerprint, rows=len(ids)) if fingerprint is not None else None
        schema = self._seed_schema(token, record)

        def batches() -> Iterator[pa.RecordBatch]:
            for i in range(0, len(ids), BUILD_CHUNK):
                j = min(i + BUILD_CHUNK, len(ids))
                yield pa.record_batch([
                    pa.array(ids[i:j], pa.string()), pa.array(names[i:j], pa.string()),
                    pa.array(kinds[i:j], pa.string()), pa.array(lists[i:j], pa.int32()),
                    _vector_array(vectors[i:j].toarray(), self.embedder.dim)], schema=schema)

        reader = pa.RecordBatchReader.from_batches(schema, batches())
        self._table = self._db.create_table(TABLE, data=reader, mode="overwrite")
        if centroids is None and IVF_TABLE in self._db.table_names():
            self._db.drop_table(IVF_TABLE)
        with self._vectors_lock:
            self._vectors = layer
        return len(ids)

    def _seed_schema(self, token: str, record: SeedBuild | None = None) -> pa.Schema:
        metadata = {IVF_BUILD_KEY: token.encode()}
        if record is not None:
            metadata[SEED_BUILD_KEY] = record.model_dump_json().encode()
        return pa.schema([("entity_id", pa.string()), ("name", pa.string()), ("kind", pa.string()),
                          ("partition", pa.int32()), ("vector", pa.list_(pa.float32(), self.embedder.dim))],
                         metadata=metadata)

    def seed_build(self) -> SeedBuild | None:
        """What the seed table was built from (None: no table, or one built without a record)."""
        if self._table is None:
            return None
        with self._corruption(TABLE):
            raw = (self._table.schema.metadata or {}).get(SEED_BUILD_KEY)
        if raw is None:
            return None
        try:
            return SeedBuild.model_validate(json.loads(raw))
        except ValueError as exc:
            raise IndexCorrupt(self.uri, TABLE, f"table {TABLE}: unreadable build record ({exc})", self._base) from exc

    def check(self, fingerprint: str, full: bool = True) -> str | None:
        """Why this is not the index the KG's seed `fingerprint` builds (None: it is).

        Per open, O(metadata): the seed table exists, its build record names this seed, its row count is the
        build's. `full` also loads the search layer (what the first search loads anyway), which checks every
        stored vector, and reads the extracted table's vectors: damage raises IndexCorrupt naming the table."""
        if self._table is None:
            return "it has no seed table (never built, or its build did not finish)"
        record = self.seed_build()
        if record is None:
            return "its seed table carries no record of the KG seed it was built from"
        if record.fingerprint != fingerprint:
            return f"it was built from another seed (fingerprint {record.fingerprint}; the KG's is {fingerprint})"
        with self._corruption(TABLE):
            rows = self._table.count_rows()
        if rows != record.rows:
            return f"its seed table holds {rows} name rows, its build wrote {record.rows}"
        if full:
            self.seed_vectors()
            self._check_extracted()
        return None

    def _check_extracted(self) -> None:
        """Every vector of the namespaces' table is finite and unit length (IndexCorrupt otherwise)."""
        table = self._latest_extracted()
        if table is None:
            return
        with self._corruption(EXTRACTED_TABLE):
            for batch in table.search().select(["entity_id", "vector"]).limit(None).to_batches(BUILD_CHUNK):
                self._check_vectors(EXTRACTED_TABLE, batch.column("entity_id").to_pylist(),
                                    sparse_rows(_vectors(batch, self.embedder.dim)))

    def _check_vectors(self, table: str, ids: list[str], vectors: sp.csr_matrix) -> None:
        """Stored vectors are the embedder's: finite and L2-normalized (or zero). Random bytes in a data file decode
        to NaN or to other lengths; searching them would link nothing to the damaged names."""
        finite = np.isfinite(vectors.data)
        norms = np.sqrt(np.asarray(vectors.multiply(vectors).sum(axis=1)).ravel()) if finite.all() else None
        bad = (np.unique(np.repeat(np.arange(vectors.shape[0]), np.diff(vectors.indptr))[~finite])
               if norms is None else np.flatnonzero((np.abs(norms - 1.0) > NORM_TOLERANCE) & (norms != 0)))
        if len(bad):
            what = "not finite" if norms is None else "not of unit length"
            raise IndexCorrupt(self.uri, table, f"table {table}: {len(bad)} vector(s) {what} (first: entity "
                               f"{ids[bad[0]]!r})", self._base)

    def _centroid_rows(self, centroids: np.ndarray, token: str) -> pa.Table:
        table = pa.table({"partition": pa.array(np.arange(len(centroids), dtype=np.int32)),
                          "vector": _vector_array(centroids, self.embedder.dim)})
        return table.replace_schema_metadata({IVF_BUILD_KEY: token.encode()})

    def add(self, entities: Iterable[KGEntity | Mapping[str, Any]], replace_ids: bool = True) -> int:
        """Add names to the shared seed table, visible to every namespace (rows for ids already present are
        replaced). A namespace's merged entities go through `sync_namespace` instead, visible to it alone.

        Searchable at once without rebuilding: the rows join the search layer's exactly scanned tail, which is
        folded into the IVF lists in the background once it passes `IVFParams.reoptimize_share`."""
        data = self._rows(entities)
        if data.num_rows == 0:
            return 0
        if self._table is None:
            self._table = self._db.create_table(TABLE, data=_with_partition(data).cast(self._seed_schema("")))
            return data.num_rows
        ids = sorted(set(data.column("entity_id").to_pylist()))
        if replace_ids:
            self._table.delete("entity_id IN (" + ",".join(_sql_str(i) for i in ids) + ")")
        # not in a list yet (-1): the layer's tail; a table written before the lists has no such column
        self._table.add(_with_partition(data) if "partition" in self._table.schema.names else data)
        with self._vectors_lock:
            layer = self._vectors
        if layer is not None:
            if replace_ids:
                layer.delete(set(ids))
            layer.append(data.column("entity_id").to_pylist(), data.column("name").to_pylist(),
                         data.column("kind").to_pylist(), sparse_rows(_vectors(data, self.embedder.dim)))
        return data.num_rows

    def seed_vectors(self) -> NameVectors | None:
        """The seed names' search layer (kg/name_vectors.py), loaded from the table at first use."""
        with self._vectors_lock:
            if self._vectors is None and self._table is not None:
                self._vectors = self._load_vectors()
            return self._vectors

    def _load_vectors(self) -> NameVectors:
        """The layer from the stored rows: their `partition` is trusted when the centroids table carries the same
        build token as the rows (else the rows go to the tail and are re-assigned in the background)."""
        layer = NameVectors(self.embedder.dim, self.ivf)
        with self._corruption(TABLE):
            schema = self._table.schema
            token = (schema.metadata or {}).get(IVF_BUILD_KEY)
            centroids = None
            if token is not None and IVF_TABLE in self._db.table_names():
                with self._corruption(IVF_TABLE):
                    ivf = self._db.open_table(IVF_TABLE)
                    if (ivf.schema.metadata or {}).get(IVF_BUILD_KEY) == token:
                        rows = ivf.to_arrow().sort_by("partition")
                        centroids = _vectors(rows, self.embedder.dim)
                        self._check_vectors(IVF_TABLE, [str(i) for i in rows.column("partition").to_pylist()],
                                            sparse_rows(centroids))
            columns = ["entity_id", "name", "kind", "vector"] + (["partition"] if centroids is not None else [])
            ids: list[str] = []
            names: list[str] = []
            kinds: list[str] = []
            chunks, lists = [], []
            for batch in self._table.search().select(columns).limit(None).to_batches(BUILD_CHUNK):
                ids += batch.column("entity_id").to_pylist()
                names += batch.column("name").to_pylist()
                kinds += batch.column("kind").to_pylist()
                chunks.append(sparse_rows(_vectors(batch, self.embedder.dim)))
                if centroids is not None:
                    lists.append(batch.column("partition").to_numpy(zero_copy_only=False))
        vectors = sp.vstack(chunks, format="csr") if chunks else sparse_rows(np.zeros((0, self.embedder.dim)))
        self._check_vectors(TABLE, ids, vectors)
        layer.load(ids, names, kinds, vectors, np.concatenate(lists).astype(np.int32) if lists else None, centroids)
        return layer

    def _maybe_index(self, table: Any = None, rebuild: bool = True) -> None:
        """A LanceDB ANN index once the extracted table passes `ann_threshold` rows (the seed table is searched
        through kg/name_vectors.py instead); rows added later are searched exactly beside it, so the often-synced
        extracted table builds it once (rebuild=False) instead of at every sync."""
        table = table if table is not None else self._table
        if table is None or table.count_rows() < self.ann_threshold:
            return
        if not rebuild and table.list_indices():
            return
        from lancedb.index import IvfHnswSq

        table.create_index("vector", config=IvfHnswSq(distance_type="cosine"), replace=True)

    def search(
        self, names: list[str], kinds: list[str | None] | None = None, k: int = 1, *,
        namespace: str | None = None, before: dt.date | None = None,
    ) -> list[list[Hit]]:
        """Nearest KG names for each query name (cosine distance, 0 = same normalized name).

        Without `namespace` only the seed's names are searched; with it, also the entities that namespace's
        merges added, first merged before `before` (None = all of them)."""
        if kinds is not None and len(kinds) != len(names):
            raise ValueError(f"EntityIndex.search: {len(names)} names but {len(kinds)} kinds")
        if not names:
            return []
        extracted_filter = None
        if namespace is not None and self._extracted is not None:
            extracted_filter = f"namespace = {_sql_str(namespace)}"
            if before is not None:
                extracted_filter += f" AND first_seen < {_sql_str(before.isoformat())}"
        if self._table is None and extracted_filter is None:
            return [[] for _ in names]
        vecs = self.embedder.embed(names)
        allowed_all = [compatible_kinds(kd) for kd in kinds] if kinds is not None else [None] * len(names)
        layer = self.seed_vectors()  # all mentions of the call (a document's) at once, kinds pushed into the lists
        seed = layer.search(vecs, allowed_all, max(k, RERANK_POOL)) if layer is not None else [[] for _ in names]
        out: list[list[Hit]] = []
        for i, vec in enumerate(vecs):
            allowed = allowed_all[i]
            kind_filter = "kind IN (" + ",".join(_sql_str(a) for a in allowed) + ")" if allowed else None
            hits = [Hit(entity_id=layer.entity_ids[c.position], name=layer.names[c.position],
                        kind=layer.kinds[c.position], source="seed",
                        distance=name_distance(names[i], {"name": layer.names[c.position],
                                                          "_distance": 1.0 - c.similarity}))
                    for c in seed[i]] if layer is not None else []
            if extracted_filter is not None:
                where = extracted_filter + (f" AND {kind_filter}" if kind_filter else "")
                hits += self._query(self._extracted, vec, names[i], max(k, RERANK_POOL), where, "extracted")
            rank = {kd: j for j, kd in enumerate(allowed or ())}  # ties: the mention type's own kind first, then seed
            hits.sort(key=lambda h: (round(h.distance, 6), rank.get(h.kind, len(rank)), h.source != "seed"))
            out.append(hits[:k])
        return out

    def _query(self, table: Any, vec: Any, name: str, limit: int, where: str | None,
               source: Literal["seed", "extracted"]) -> list[Hit]:
        # Vector search proposes candidates; the reported distance is max(cosine, word distance), so a name
        # that is close in characters but not in words (a more specific entity, a prefixed word) is far.
        q = table.search(vec, vector_column_name="vector").distance_type("cosine").limit(limit)
        if where:
            q = q.where(where, prefilter=True)
        with self._corruption(TABLE if source == "seed" else EXTRACTED_TABLE):
            rows = q.select(["entity_id", "name", "kind", "_distance"]).to_list()
        return [Hit(entity_id=r["entity_id"], name=r["name"], kind=r["kind"], distance=name_distance(name, r),
                    source=source) for r in rows]

    def view(self, namespace: str, before: dt.date | None = None) -> "IndexView":
        """What a document of `namespace` dated `before` links against (seed + the namespace's earlier entities)."""
        return IndexView(self, namespace, before)

    # ------------------------------------------------------------ the namespaces' own entities
    def synced_fingerprint(self, namespace: str) -> str | None:
        """The KG fingerprint this process last synced `namespace` at (None: never); callers skip an unchanged KG."""
        with self._memo_lock:
            return self._synced.get(namespace)

    def sync_namespace(
        self, namespace: str, entities: Iterable[ExtractedEntity | Mapping[str, Any]], fingerprint: str | None = None
    ) -> SyncResult:
        """Make the namespace's indexed entities equal `entities` (the KG's extracted nodes of that namespace).

        Compares per entity (its names, kind and first date) with what the table holds, removes what the KG no
        longer has or has changed, adds what is missing. Under a file lock and on the table's latest version, so
        processes syncing at once neither duplicate nor lose rows; idempotent, so it also repairs a crash between
        a merge and an earlier sync. `fingerprint` (the KG state the entities were read at) is remembered."""
        if not namespace:
            raise ValueError("EntityIndex.sync_namespace: namespace must be non-empty")
        wanted = self._rows(entities, namespace=namespace)
        want = _entity_states(wanted)
        with self._sync_lock:
            table = self._latest_extracted()
            have: dict[str, frozenset] = {}
            if table is not None:
                with self._corruption(EXTRACTED_TABLE):
                    rows = (table.search().where(f"namespace = {_sql_str(namespace)}")
                            .select(["entity_id", "name", "kind", "first_seen"]).limit(None).to_arrow())
                have = _entity_states(rows)
            stale = sorted(i for i in have if have[i] != want.get(i))
            missing = sorted(i for i in want if have.get(i) != want[i])
            if stale and table is not None:
                table.delete(f"namespace = {_sql_str(namespace)} AND entity_id IN ("
                             + ",".join(_sql_str(i) for i in stale) + ")")
            if missing:
                add = wanted.filter(pc.is_in(wanted.column("entity_id"), pa.array(missing, pa.string())))
                if table is None:
                    self._extracted = self._db.create_table(EXTRACTED_TABLE, data=add)
                else:
                    table.add(add)
                self._maybe_index(self._extracted, rebuild=False)
        if fingerprint is not None:
            with self._memo_lock:
                self._synced[namespace] = fingerprint
        removed = sum(1 for i in stale if i not in want)
        return SyncResult(namespace=namespace, entities=len(want), added=len(missing), removed=removed)

    def _latest_extracted(self) -> Any:
        """The extracted table at its newest version (another process may have created or changed it)."""
        if self._extracted is None:
            self._extracted = self._open(EXTRACTED_TABLE)
        if self._extracted is not None:
            with self._corruption(EXTRACTED_TABLE):
                self._extracted.checkout_latest()
        return self._extracted

    def count_extracted(self, namespace: str, before: dt.date | None = None) -> int:
        """The namespace's own entities a document dated `before` can link to (name rows are not counted twice)."""
        if self._extracted is None:
            return 0
        where = f"namespace = {_sql_str(namespace)}"
        if before is not None:
            where += f" AND first_seen < {_sql_str(before.isoformat())}"
        with self._corruption(EXTRACTED_TABLE):
            rows = self._extracted.search().where(where).select(["entity_id"]).limit(None).to_arrow()
        return len(set(rows.column("entity_id").to_pylist()))


def set_aside(uri: str | Path, table: str) -> str:
    """Moves a damaged table out of the index, so it is rebuilt: beside it as `<table>.lance.corrupt` (kept for
    inspection, never read; an older one is replaced) or, under a URL, deleted. The seed table and its IVF
    centroids go together (one build). Returns what was done, for the warning."""
    tables = (TABLE, IVF_TABLE) if table in (TABLE, IVF_TABLE) else (table,)
    root = storage_root(str(uri))
    done = []
    for name in tables:
        path = root / f"{name}.lance"
        if not path.exists():
            continue
        if isinstance(path, Path):
            aside = path.with_name(path.name + ".corrupt")
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(path, aside)
            done.append(f"{name}.lance moved to {aside.name}")
        else:
            path.fs.rm(path.path, recursive=True)
            done.append(f"{name}.lance deleted")
    return ", ".join(done) or "nothing to move"


def _batched(items: Iterable[Any], n: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def _vectors(rows: pa.Table | pa.RecordBatch, dim: int) -> np.ndarray:
    """The `vector` column as a float32 (rows, dim) array."""
    col = rows.column("vector")
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if len(col) == 0:
        return np.zeros((0, dim), dtype=np.float32)
    return col.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, dim)


def _vector_array(vectors: np.ndarray, dim: int) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(vectors, np.float32).reshape(-1)), dim)


def _with_partition(data: pa.Table) -> pa.Table:
    """Seed rows not assigned to an IVF list yet (partition -1)."""
    return data.add_column(3, "partition", pa.array(np.full(data.num_rows, -1, np.int32)))


def _entity_states(rows: pa.Table) -> dict[str, frozenset]:
    """entity_id -> its (name, kind, first_seen) rows: what decides whether an indexed entity is up to date."""
    out: dict[str, set] = {}
    for eid, name, kind, first in zip(*(rows.column(c).to_pylist() for c in ("entity_id", "name", "kind", "first_seen"))):
        out.setdefault(eid, set()).add((name, kind, first))
    return {k: frozenset(v) for k, v in out.items()}


@dataclass(frozen=True)
class IndexView:
    """The index as one namespace's document dated `before` sees it: what the EEA links against."""

    index: EntityIndex
    namespace: str
    before: dt.date | None = None

    def search(self, names: list[str], kinds: list[str | None] | None = None, k: int = 1) -> list[list[Hit]]:
        return self.index.search(names, kinds, k, namespace=self.namespace, before=self.before)

    def count_extracted(self) -> int:
        return self.index.count_extracted(self.namespace, self.before)
