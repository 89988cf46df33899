"""The seed names' vectors in memory, partitioned by kind and by IVF list, scored exactly (entity normalization).

Why not a LanceDB ANN index: measured at 1M names on 2 cores (issue 17), IVF_HNSW_SQ built in 1,175 s with a
7.2 GB peak, answered in 116-127 ms per mention with recall@1 0.747 vs exact, and a `kind IN (...)` prefilter
scanned every row; at 100k names (bench below, kind prefilter, nprobes 20) LanceDB's IVF_PQ / IVF_FLAT /
IVF_HNSW_SQ took 12-18 ms per query before any rerank (flat: 237 ms), this layer 3.8 ms end to end, both at a
load average of 4-5. The char n-gram vectors are sparse (~32 of 512 dims non-zero), so this layer keeps them as
a CSR matrix (8 bytes per non-zero: ~256 MB at 1M names, vs 2 GB dense), sorted by (kind, IVF list): a mention
scores exactly the rows of its compatible kinds in the `nprobe` lists nearest to it, one sparse mat-vec per
mention. A kind small enough (`flat_kind_rows`) is scanned whole, and below `ann_rows` rows there are no
lists at all: the search is exact (the sample's 4,000 names).

Measured with `python bench/entity_index.py --sizes 1000000 --configs layer-8 layer-16 layer-32 growth` (2 shared
cores, load average 1.6-5; 1,000 held-out typo/case/order/plural mentions searched among their type's kinds,
documents of 20 mentions; end to end: embedding, candidates, word-distance rerank):

| 1M names, 1,000 lists | recall@1 vs exact | batched ms/mention | single ms (p95) |
|---|---|---|---|
| nprobe 8 | 0.951 | 2.8 | 2.5 (9.7) |
| nprobe 16 (chosen) | 0.970 (0.980 of the linkable mentions) | 1.9 | 1.8 (7.4) |
| nprobe 32 | 0.980 | 2.3 | 2.9 (10.0) |
| every list (exact; load average 5-10) | 1.000 | 24.6 | 32 (82) |
| dense numpy matmul, exact (load 5-10) | 1.000 | 144 | - |

Build 96 s (288 s at load average 8), peak 2.9 GB with the bench's own names; the layer loads from LanceDB in
12 s at the first search and holds ~1 GB. Growth: 50,000 names added in batches of 1,000, each batch
searchable at once (140 ms per `add`), the re-optimization of the 50,000-row tail 7.6 s. At 100k names
nprobe 16 gives 0.962 at 2.6 ms. Most of a mention's time is the word-distance rerank and the embedding, not
the scan; the misses are mostly mentions far from every name (cosine distance > rho), which become new
entities whichever list holds their nearest name. A mention equal to an indexed name (up to case and
punctuation) has that name's vector, so the list holding it is the nearest and always probed: no lexical
first stage is needed for exact synonyms.

LanceDB stays the store of record: the rows, their `vector`, the list each row was assigned at build (`partition`)
and the centroids (table `entities_ivf`); this layer is loaded from them at the first search. Rows added
after a build (`append`) sit in an exactly scanned tail, searchable at once; when the tail passes
`reoptimize_share` of the indexed rows they are assigned to lists (and centroids trained if the index has
grown past `ann_rows`) in a background thread, then swapped in.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, Field


class IVFParams(BaseModel):
    """The layer's settings, chosen with bench/entity_index.py (see the module docstring)."""

    ann_rows: int = Field(100_000, ge=1)  # below: one list, exact search
    rows_per_list: int = Field(1_000, ge=10)  # lists = rows / this (1,000 at 1M names)
    nprobe: int = Field(16, ge=1)  # lists scanned per mention
    flat_kind_rows: int = Field(20_000, ge=0)  # a kind with at most this many rows is scanned whole
    train_sample: int = Field(100_000, ge=1_000)  # k-means on a sample (spherical, `train_iters` rounds)
    train_iters: int = Field(8, ge=1)
    reoptimize_share: float = Field(0.05, gt=0)  # tail / indexed rows that starts a background re-optimization
    reoptimize_min_rows: int = Field(10_000, ge=0)
    seed: int = 0


def sparse_rows(dense: np.ndarray) -> sp.csr_matrix:
    return sp.csr_matrix(np.asarray(dense, dtype=np.float32))


def train_centroids(vectors: sp.csr_matrix, n_lists: int, params: IVFParams) -> np.ndarray:
    """Spherical k-means (cosine) on a sample of the rows: unit-norm centroids (n_lists, dim)."""
    rng = np.random.default_rng(params.seed)
    n = vectors.shape[0]
    sample = sp.csr_matrix(vectors[np.sort(rng.choice(n, min(n, params.train_sample), replace=False))])
    cent = sample[rng.choice(sample.shape[0], n_lists, replace=False)].toarray()
    for _ in range(params.train_iters):
        assign = _nearest(sample, cent)
        counts = np.bincount(assign, minlength=n_lists)
        onehot = sp.csr_matrix((np.ones(len(assign), np.float32), (assign, np.arange(len(assign)))),
                               shape=(n_lists, len(assign)))
        sums = (onehot @ sample).toarray()
        sums[counts == 0] = cent[counts == 0]  # an empty list keeps its centroid
        cent = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return cent.astype(np.float32)


def _nearest(rows: sp.csr_matrix, centroids: np.ndarray, chunk: int = 20_000) -> np.ndarray:
    """Nearest centroid per row, in chunks (the (rows, lists) similarities stay ~80 MB at 1,024 lists). Sparse
    rows times the centroids' contiguous transpose: 2 s per 100k rows at 1,024 lists, half of a dense BLAS
    product of the same rows on 2 cores (and one core left free)."""
    ct = np.ascontiguousarray(centroids.T)
    n = rows.shape[0]
    return np.concatenate([np.argmax(np.asarray(rows[i:i + chunk] @ ct), axis=1) for i in range(0, n, chunk)]
                          or [np.zeros(0, dtype=np.int64)])


def assign_lists(vectors: sp.csr_matrix, centroids: np.ndarray | None, chunk: int = 20_000) -> np.ndarray:
    """Each row's nearest centroid (all 0 without centroids)."""
    n = vectors.shape[0]
    if centroids is None or len(centroids) == 0:
        return np.zeros(n, dtype=np.int32)
    out = np.empty(n, dtype=np.int32)
    for i in range(0, n, chunk):
        out[i:i + chunk] = _nearest(vectors[i:i + chunk], centroids)
    return out


@dataclass
class _Body:
    """Rows sorted by (kind code, list): `offsets[k, l]` .. `offsets[k, l + 1]` are kind k's rows of list l."""

    vectors: sp.csr_matrix
    positions: np.ndarray  # row -> position in the layer's row store
    offsets: np.ndarray  # (n_kinds, n_lists + 1)
    centroids: np.ndarray | None


@dataclass(frozen=True)
class Candidate:
    position: int  # the row's position in the layer (NameVectors.entity_ids[position], ...)
    similarity: float  # cosine


class NameVectors:
    """Name rows (entity id, name, kind) and their vectors; `search` returns each query's top rows by cosine."""

    def __init__(self, dim: int, params: IVFParams | None = None):
        self.dim = dim
        self.params = params or IVFParams()
        self.entity_ids: list[str] = []
        self.names: list[str] = []
        self.kinds: list[str] = []
        self._kind_codes: dict[str, int] = {}
        self._codes = np.zeros(0, dtype=np.int32)
        self._alive = np.zeros(0, dtype=bool)
        self._body = self._empty_body(None)
        self._tail: list[tuple[sp.csr_matrix, np.ndarray]] = []  # (vectors, positions) appended since the body
        self._tail_cache: tuple[sp.csr_matrix, np.ndarray] | None = None
        self._lock = threading.Lock()
        self._reoptimizing: threading.Thread | None = None

    # ------------------------------------------------------------------ contents
    def __len__(self) -> int:
        return int(self._alive.sum())

    @property
    def centroids(self) -> np.ndarray | None:
        return self._body.centroids

    @property
    def tail_rows(self) -> int:
        return sum(v.shape[0] for v, _ in self._tail)

    def _code(self, kind: str) -> int:
        return self._kind_codes.setdefault(kind, len(self._kind_codes))

    def _store(self, ids: Sequence[str], names: Sequence[str], kinds: Sequence[str]) -> np.ndarray:
        start = len(self.entity_ids)
        self.entity_ids.extend(ids)
        self.names.extend(names)
        self.kinds.extend(kinds)
        self._codes = np.r_[self._codes, np.array([self._code(k) for k in kinds], dtype=np.int32)]
        self._alive = np.r_[self._alive, np.ones(len(ids), dtype=bool)]
        return np.arange(start, start + len(ids))

    def _empty_body(self, centroids: np.ndarray | None) -> _Body:
        n_lists = 1 if centroids is None else len(centroids)
        return _Body(sp.csr_matrix((0, self.dim), dtype=np.float32), np.zeros(0, dtype=np.int64),
                     np.zeros((max(len(self._kind_codes), 1), n_lists + 1), dtype=np.int64), centroids)

    def load(self, ids: Sequence[str], names: Sequence[str], kinds: Sequence[str], vectors: sp.csr_matrix,
             lists: np.ndarray | None, centroids: np.ndarray | None) -> None:
        """Rows as a build wrote them: with their list (`lists`, -1 = not assigned) they go to the body, else to the
        tail (re-optimized when large)."""
        positions = self._store(ids, names, kinds)
        if centroids is None:  # small: one exact list; large without trusted lists: the tail, trained in background
            assigned = np.full(len(positions), len(positions) < self.params.ann_rows)
            lists = np.zeros(len(positions), dtype=np.int32)
        elif lists is None:
            assigned = np.zeros(len(positions), dtype=bool)
            lists = np.zeros(len(positions), dtype=np.int32)
        else:
            assigned = lists >= 0
        with self._lock:
            self._body = self._make_body(vectors[assigned], positions[assigned], lists[assigned], centroids)
            if (~assigned).any():
                self._add_tail(vectors[~assigned], positions[~assigned])
        self._maybe_reoptimize()

    def build(self, ids: Sequence[str], names: Sequence[str], kinds: Sequence[str], vectors: sp.csr_matrix
              ) -> tuple[np.ndarray, np.ndarray | None]:
        """All rows indexed at once: centroids trained when there are `ann_rows` rows or more.
        Returns each row's list and the centroids (to store beside the rows)."""
        centroids = self._train(vectors)
        lists = assign_lists(vectors, centroids)
        positions = self._store(ids, names, kinds)
        with self._lock:
            self._body = self._make_body(vectors, positions, lists, centroids)
        return lists, centroids

    def _train(self, vectors: sp.csr_matrix) -> np.ndarray | None:
        n = vectors.shape[0]
        if n < self.params.ann_rows:
            return None
        return train_centroids(vectors, max(2, n // self.params.rows_per_list), self.params)

    def _make_body(self, vectors: sp.csr_matrix, positions: np.ndarray, lists: np.ndarray,
                   centroids: np.ndarray | None) -> _Body:
        n_lists = 1 if centroids is None else len(centroids)
        codes = self._codes[positions]
        order = np.lexsort((lists, codes))
        n_kinds = max(len(self._kind_codes), 1)
        counts = np.bincount(codes.astype(np.int64) * n_lists + lists, minlength=n_kinds * n_lists)
        flat = np.r_[0, np.cumsum(counts)]
        offsets = np.empty((n_kinds, n_lists + 1), dtype=np.int64)
        for k in range(n_kinds):
            offsets[k] = flat[k * n_lists:(k + 1) * n_lists + 1]
        return _Body(sp.csr_matrix(vectors[order]), np.asarray(positions)[order], offsets, centroids)

    def _add_tail(self, vectors: sp.csr_matrix, positions: np.ndarray) -> None:
        if vectors.shape[0]:
            self._tail.append((sp.csr_matrix(vectors), np.asarray(positions)))
            self._tail_cache = None

    def append(self, ids: Sequence[str], names: Sequence[str], kinds: Sequence[str], vectors: sp.csr_matrix) -> None:
        """New rows, searchable at once (scanned exactly until a re-optimization puts them in lists)."""
        with self._lock:
            positions = self._store(ids, names, kinds)
            self._add_tail(vectors, positions)
        self._maybe_reoptimize()

    def delete(self, entity_ids: set[str]) -> int:
        """Rows of these entities are no longer found (dropped from the arrays at the next re-optimization)."""
        with self._lock:
            dead = np.fromiter((i in entity_ids for i in self.entity_ids), dtype=bool, count=len(self.entity_ids))
            dead &= self._alive
            self._alive[dead] = False
        return int(dead.sum())

    # ------------------------------------------------------------------ re-optimization
    def needs_reoptimize(self) -> bool:
        tail = self.tail_rows
        indexed = self._body.vectors.shape[0]
        return tail > max(self.params.reoptimize_min_rows, self.params.reoptimize_share * indexed)

    def _maybe_reoptimize(self) -> None:
        if self.needs_reoptimize() and (self._reoptimizing is None or not self._reoptimizing.is_alive()):
            self._reoptimizing = threading.Thread(target=self.reoptimize, name="name-vectors-reoptimize",
                                                  daemon=True)
            self._reoptimizing.start()

    def wait(self, timeout: float | None = None) -> None:
        """Until a running background re-optimization has swapped its result in."""
        if self._reoptimizing is not None:
            self._reoptimizing.join(timeout)

    def reoptimize(self) -> None:
        """Fold the tail into the lists (training centroids first when the rows passed `ann_rows` and there are
        none yet). Searches go on meanwhile against the old body + tail; rows appended meanwhile stay in the tail."""
        with self._lock:
            body, tail = self._body, list(self._tail)
        if not tail:
            return
        vectors = sp.vstack([body.vectors, *(v for v, _ in tail)], format="csr")
        positions = np.concatenate([body.positions, *(p for _, p in tail)])
        keep = self._alive[positions]
        vectors, positions = vectors[keep], positions[keep]
        centroids = body.centroids
        if centroids is None and vectors.shape[0] >= self.params.ann_rows:
            centroids = self._train(vectors)
        lists = assign_lists(vectors, centroids)
        new_body = self._make_body(vectors, positions, lists, centroids)
        with self._lock:
            self._body = new_body
            self._tail = self._tail[len(tail):]
            self._tail_cache = None

    # ------------------------------------------------------------------ search
    def search(self, queries: np.ndarray, allowed: Sequence[Sequence[str] | None], pool: int) -> list[list[Candidate]]:
        """Each query's `pool` most similar live rows among its allowed kinds (None = any kind)."""
        with self._lock:
            body, tail = self._body, self._tail_matrix()
        probes = None
        if body.centroids is not None and len(queries):
            sims = queries @ body.centroids.T
            nprobe = min(self.params.nprobe, sims.shape[1])
            probes = np.argpartition(-sims, nprobe - 1, axis=1)[:, :nprobe]
        out = []
        for i, q in enumerate(queries):
            codes = (list(self._kind_codes.values()) if allowed[i] is None
                     else [self._kind_codes[k] for k in allowed[i] if k in self._kind_codes])
            rows = self._body_rows(body, codes, None if probes is None else probes[i])
            scores = [np.asarray(body.vectors[rows] @ q).ravel()] if len(rows) else []
            positions = [body.positions[rows]] if len(rows) else []
            if tail is not None:
                tv, tp = tail
                mask = np.isin(self._codes[tp], codes)
                if mask.any():
                    scores.append(np.asarray(tv[mask] @ q).ravel())
                    positions.append(tp[mask])
            out.append(self._top(scores, positions, pool))
        return out

    def _body_rows(self, body: _Body, codes: list[int], probes: np.ndarray | None) -> np.ndarray:
        ranges = []
        for k in codes:
            if k >= len(body.offsets):
                continue
            off = body.offsets[k]
            if probes is None or off[-1] - off[0] <= self.params.flat_kind_rows:
                ranges.append((off[0], off[-1]))
            else:
                ranges.extend((off[p], off[p + 1]) for p in probes)
        ranges = [(a, b) for a, b in ranges if b > a]
        if not ranges:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(a, b) for a, b in ranges])

    def _tail_matrix(self) -> tuple[sp.csr_matrix, np.ndarray] | None:
        if not self._tail:
            return None
        if self._tail_cache is None:
            self._tail_cache = (sp.vstack([v for v, _ in self._tail], format="csr"),
                                np.concatenate([p for _, p in self._tail]))
        return self._tail_cache

    def _top(self, scores: list[np.ndarray], positions: list[np.ndarray], pool: int) -> list[Candidate]:
        if not scores:
            return []
        s, p = np.concatenate(scores), np.concatenate(positions)
        live = self._alive[p]
        s, p = s[live], p[live]
        if len(s) > pool:
            keep = np.argpartition(-s, pool - 1)[:pool]
            s, p = s[keep], p[keep]
        order = np.argsort(-s, kind="stable")
        return [Candidate(int(p[j]), float(s[j])) for j in order]
