"""Entity index at 100k and 1M names: build time, peak memory, per-mention latency and recall vs exact search.

    python bench/entity_index.py [--sizes 100000 1000000] [--configs layer-16 lance-ivf-pq ...] [--queries 1000]
                                 [--doc-size 20] [--quick]

Names: the shipped vocabularies (Hetionet, MeSH, the dictionary lexicon; ~80k distinct) grown with variants to the
size (bench/entity_index_names.py). Queries: held-out mention strings of random indexed names (typos, case, word
order, plurals, dropped words), each with its NER type, searched among the type's compatible kinds (as the EEA
does). Exact reference: numpy brute force (cosine) over the same stored vectors, same kind filter. recall@1: the
top hit is as similar as the exact top hit; recall@10: share of the top 10 at least as similar as the exact 10th
(ties count, variants hold identical vectors); "linkable": recall@1 over the queries whose exact top hit is within
rho (cosine distance <= 0.3), the only ones a mention links to (the others become new entities either way).

Build is measured in a child process (wall time, peak RSS of that process, names included). Latency is
EntityIndex.search's wall time per mention, end to end (embedding, candidates, word-distance rerank): "single" =
one mention per call (median, p95), "batched" = one call per document of --doc-size mentions.

Configs: layer-N = the chosen path (kg/name_vectors.py: sparse vectors, IVF lists per kind, exact scoring,
nprobe N); layer-exact = the same layer scanning every list (exact); numpy-exact = dense float32 matmul over
all vectors (the reference's own cost, batched per document); lance-flat / lance-ivf-pq / lance-ivf-flat /
lance-ivf-hnsw-sq = LanceDB's search on the same table (prefilter on kind, index built after the table;
refine_factor 5 on PQ/SQ); growth = 5% new names appended with EntityIndex.add in batches of 1,000 (its row:
recall@1 = share of the new names found exactly after the background re-optimization, batched = add ms per name).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import entity_index_names as names_mod  # noqa: E402

from karma_dagster.kg.entity_index import EntityIndex, KGEntity, compatible_kinds  # noqa: E402
from karma_dagster.runtime.params import KarmaParams  # noqa: E402

LAYER_CONFIGS = ("layer-4", "layer-8", "layer-16", "layer-32", "layer-exact", "numpy-exact")
LANCE_CONFIGS = ("lance-flat", "lance-ivf-pq", "lance-ivf-flat", "lance-ivf-hnsw-sq")
GROWTH = ("growth",)  # last: appends 5% new names in batches of 1,000, then times the background re-optimization
EPS = 1e-5


def _build_child(uri: str, size: int, out: mp.Queue) -> None:
    names = names_mod.names(size)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()  # entities streamed as `karma import-kg` does (services.import_seed_kg)
    n = EntityIndex(uri).build(KGEntity(id=n.id, name=n.name, kind=n.kind) for n in names)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out.put({"rows": n, "seconds": time.perf_counter() - t, "peak_mb": peak / 1024,
             "names_mb": rss0 / 1024})


def build(uri: str, size: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_build_child, args=(uri, size, q))
    p.start()
    res = q.get()
    p.join()
    return res


def exact_reference(index: EntityIndex, qvecs: np.ndarray, allowed: list[tuple[str, ...] | None]) -> np.ndarray:
    """The exact top-10 similarities per query (numpy over the stored vectors, kind-filtered)."""
    top = np.full((len(qvecs), 10), -np.inf, dtype=np.float32)
    kinds_of = [set(a) if a else None for a in allowed]
    for batch in index._table.search().select(["kind", "vector"]).limit(None).to_batches(100_000):
        vec = batch.column("vector").flatten().to_numpy().reshape(-1, qvecs.shape[1])
        kind = np.array(batch.column("kind").to_pylist(), dtype=object)
        sims = vec @ qvecs.T  # (rows, queries)
        for j, ks in enumerate(kinds_of):
            s = sims[:, j] if ks is None else sims[np.isin(kind, list(ks)), j]
            if len(s):
                best = s[np.argpartition(-s, 10)[:10]] if len(s) > 10 else s
                merged = np.concatenate([top[j], best])
                top[j] = np.sort(merged)[::-1][:10]  # -inf pads kinds with < 10 rows
    return top


def recalls(found: list[list[float]], exact: np.ndarray) -> dict:
    """recall@1, recall@10, and recall@1 over the linkable queries (exact top hit within rho, cosine)."""
    r1 = r10 = 0.0
    rho = KarmaParams().rho
    link = [bool(f) and f[0] >= ex[0] - EPS for f, ex in zip(found, exact) if ex[0] >= 1 - rho]
    for sims, ex in zip(found, exact):
        if not np.isfinite(ex[0]):
            r1 += 1
            r10 += 1
            continue
        r1 += bool(sims) and sims[0] >= ex[0] - EPS
        n = int(np.isfinite(ex).sum())
        r10 += min(n, sum(s >= ex[min(n, 10) - 1] - EPS for s in sims[:10])) / min(n, 10)
    return {"recall@1": r1 / len(exact), "recall@10": r10 / len(exact),
            "recall@1_linkable": sum(link) / max(len(link), 1)}


def latency(search, mentions: list[str], types: list[str], doc_size: int) -> dict:
    single = []
    for m, t in zip(mentions, types):
        t0 = time.perf_counter()
        search([m], [t])
        single.append((time.perf_counter() - t0) * 1000)
    batched = []
    for i in range(0, len(mentions), doc_size):
        t0 = time.perf_counter()
        search(mentions[i:i + doc_size], types[i:i + doc_size])
        batched.append((time.perf_counter() - t0) * 1000 / len(mentions[i:i + doc_size]))
    single.sort()
    return {"single_ms": statistics.median(single), "single_p95_ms": single[int(0.95 * (len(single) - 1))],
            "batched_ms": statistics.median(batched)}


def run_layer(index: EntityIndex, config: str, qvecs, allowed, mentions, types, exact, doc_size) -> dict:
    layer = index.seed_vectors()
    nprobe = 10**9 if config == "layer-exact" else int(config.split("-")[1])
    layer.params = layer.params.model_copy(update={"nprobe": nprobe})
    cands = layer.search(qvecs, allowed, 10)
    return {**recalls([[c.similarity for c in cs] for cs in cands], exact),
            **latency(lambda n, t: index.search(n, t), mentions, types, doc_size)}


def run_numpy_exact(index: EntityIndex, qvecs, doc_size: int) -> dict:
    """Dense float32 matmul over every stored vector, one product per document (no kind filter: its floor)."""
    dense = np.empty((index._table.count_rows(), qvecs.shape[1]), dtype=np.float32)  # 2 GB at 1M, filled in place
    i = 0
    for b in index._table.search().select(["vector"]).limit(None).to_batches(100_000):
        dense[i:i + b.num_rows] = b.column("vector").flatten().to_numpy().reshape(-1, qvecs.shape[1])
        i += b.num_rows
    times = []
    for i in range(0, min(len(qvecs), 10 * doc_size), doc_size):
        t0 = time.perf_counter()
        sims = dense @ qvecs[i:i + doc_size].T
        np.argpartition(-sims, 10, axis=0)[:10]
        times.append((time.perf_counter() - t0) * 1000 / doc_size)
    return {"recall@1": 1.0, "recall@10": 1.0, "recall@1_linkable": 1.0, "batched_ms": statistics.median(times)}


def run_growth(index: EntityIndex, size: int, batch: int = 1_000) -> dict:
    """New entities appended without rebuild: each batch searchable at once (its own names found exactly), then
    the background re-optimization folds the tail into the lists; the search stays exact for them after it."""
    layer = index.seed_vectors()
    new = [n for n in names_mod.names(size + size // 20, seed=0)[size:]]
    add_ms, found = [], 0
    for i in range(0, len(new), batch):
        chunk = new[i:i + batch]
        t0 = time.perf_counter()
        index.add([KGEntity(id=f"GROW:{n.id}", name=n.name, kind=n.kind) for n in chunk])
        add_ms.append((time.perf_counter() - t0) * 1000)
        hits = index.search([chunk[0].name], [names_mod.KIND_TO_NER.get(chunk[0].kind, chunk[0].kind)])
        found += bool(hits[0]) and hits[0][0].distance < 1e-4
    tail = layer.tail_rows
    t0 = time.perf_counter()
    layer.wait()
    if layer.needs_reoptimize() or layer.tail_rows:
        layer.reoptimize()
    reopt_s = time.perf_counter() - t0
    probe = new[:: max(1, len(new) // 200)]
    hits = index.search([n.name for n in probe], [names_mod.KIND_TO_NER.get(n.kind, n.kind) for n in probe])
    after = sum(bool(h) and h[0].distance < 1e-4 for h in hits) / len(probe)
    print(f"  growth: {len(new):,} names in batches of {batch}: add {statistics.median(add_ms):.0f} ms per batch "
          f"(median), found at once {found}/{len(add_ms)}, tail at the end {tail:,} rows, re-optimization waited "
          f"{reopt_s:.1f} s, found after it {after:.3f}", file=sys.stderr, flush=True)
    return {"recall@1": after, "recall@10": float("nan"), "recall@1_linkable": after,
            "batched_ms": statistics.median(add_ms) / batch}


def run_lance(index: EntityIndex, config: str, qvecs, allowed, mentions, types, exact, n_lat: int) -> dict:
    from lancedb.index import IvfFlat, IvfHnswSq, IvfPq

    table = index._table
    t0 = time.perf_counter()
    kind = config.removeprefix("lance-")
    if kind != "flat":
        cfg = {"ivf-pq": IvfPq(distance_type="cosine"), "ivf-flat": IvfFlat(distance_type="cosine"),
               "ivf-hnsw-sq": IvfHnswSq(distance_type="cosine")}[kind]
        table.create_index("vector", config=cfg, replace=True)
    build_s = time.perf_counter() - t0
    found, times = [], []
    for j, (vec, al) in enumerate(zip(qvecs[:n_lat], allowed[:n_lat])):
        q = table.search(vec, vector_column_name="vector").distance_type("cosine").limit(10)
        if kind != "flat":
            q = q.nprobes(20)
        if kind in ("ivf-pq", "ivf-hnsw-sq"):
            q = q.refine_factor(5)
        if al:
            q = q.where("kind IN (" + ",".join(f"'{a}'" for a in al) + ")", prefilter=True)
        t = time.perf_counter()
        rows = q.select(["_distance"]).to_list()
        times.append((time.perf_counter() - t) * 1000)
        found.append([1.0 - r["_distance"] for r in rows])
    if kind != "flat":
        for ix in table.list_indices():
            table.drop_index(ix.name)
    times.sort()
    return {**recalls(found, exact[:n_lat]), "index_build_s": build_s, "single_ms": statistics.median(times),
            "single_p95_ms": times[int(0.95 * (len(times) - 1))]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, default=[100_000, 1_000_000])
    ap.add_argument("--configs", nargs="+", default=list(LAYER_CONFIGS), choices=LAYER_CONFIGS + LANCE_CONFIGS + GROWTH)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--lance-queries", type=int, default=200, help="queries timed per LanceDB config (slow ones)")
    ap.add_argument("--doc-size", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="smoke: 20,000 names, 200 queries, two configs")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.queries, args.configs = [20_000], 200, ["layer-16", "layer-exact"]
    work = Path(tempfile.mkdtemp(prefix="entity-index-bench-", dir=args.workdir))
    rows = []
    try:
        for size in args.sizes:
            uri = str(work / f"index-{size}")
            b = build(uri, size)
            print(f"{size:,} names: build {b['seconds']:.1f} s, peak RSS {b['peak_mb']:.0f} MB "
                  f"(names alone {b['names_mb']:.0f} MB), {b['rows']:,} rows", file=sys.stderr, flush=True)
            index = EntityIndex(uri)
            t0 = time.perf_counter()
            layer = index.seed_vectors()
            load_s = time.perf_counter() - t0
            indexed = [names_mod.Name(i, n, k) for i, n, k in zip(layer.entity_ids, layer.names, layer.kinds)]
            qs = names_mod.queries(indexed, args.queries)
            mentions = [q[0] for q in qs]
            types = [q[1] for q in qs]
            allowed = [compatible_kinds(t) for t in types]
            qvecs = index.embedder.embed(mentions)
            exact = exact_reference(index, qvecs, allowed)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"  layer load {load_s:.1f} s; exact reference done; bench process peak RSS {rss:.0f} MB",
                  file=sys.stderr, flush=True)
            for config in args.configs:
                t0 = time.perf_counter()
                if config.startswith("layer"):
                    r = run_layer(index, config, qvecs, allowed, mentions, types, exact, args.doc_size)
                elif config == "growth":
                    r = run_growth(index, size)
                elif config == "numpy-exact":
                    r = run_numpy_exact(index, qvecs, args.doc_size)
                else:
                    r = run_lance(index, config, qvecs, allowed, mentions, types, exact, args.lance_queries)
                rows.append({"size": size, "config": config, "build_s": b["seconds"], "peak_mb": b["peak_mb"],
                             "load_s": load_s, **r})
                print(f"  {config}: {r} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {args.queries} queries, "
          f"documents of {args.doc_size} mentions\n")
    print("| names | config | build s | build peak MB | layer load s | recall@1 | recall@1 linkable | recall@10 "
          "| single ms (p95) | batched ms/mention | Lance index build s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        single = f"{r['single_ms']:.2f} ({r['single_p95_ms']:.2f})" if "single_ms" in r else "-"
        batched = f"{r['batched_ms']:.2f}" if "batched_ms" in r else "-"
        lance = f"{r['index_build_s']:.0f}" if "index_build_s" in r else "-"
        print(f"| {r['size']:,} | {r['config']} | {r['build_s']:.0f} | {r['peak_mb']:.0f} | {r['load_s']:.1f} "
              f"| {r['recall@1']:.3f} | {r['recall@1_linkable']:.3f} | {r['recall@10']:.3f} | {single} | {batched} "
              f"| {lance} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
