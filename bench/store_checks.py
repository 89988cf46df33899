"""What the stores' open checks cost (issue 26): the entity index's check per open, and the KG read-through.

    python bench/store_checks.py [--sizes 4000 100000] [--repeat 5]

Index: names of bench/entity_index_names.py (the shipped vocabularies grown with variants), built once per size
with a build record. Per open: `EntityIndex(uri)` (the open check that existed: manifest, columns, one id column
read) and `check(full=False)` (build record + row count: O(metadata)); the full check is `check(full=True)`, which
loads the search layer (what the first search loads anyway) and checks every vector: its own cost is the time
over a plain layer load. KG: `KGStore.check_integrity` on the sample seed KG (every column of every table once).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import entity_index_names as names_mod  # noqa: E402

from karma_dagster.kg.entity_index import EntityIndex, KGEntity  # noqa: E402


def _ms(fn, repeat: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def index_row(size: int, repeat: int, tmp: Path) -> str:
    uri = tmp / f"index-{size}"
    t = time.perf_counter()
    EntityIndex(uri).build((KGEntity(id=n.id, name=n.name, kind=n.kind) for n in names_mod.names(size)),
                           fingerprint="bench")
    build_s = time.perf_counter() - t
    open_ms = _ms(lambda: EntityIndex(uri), repeat)
    index = EntityIndex(uri)
    meta_ms = _ms(lambda: index.check("bench", full=False), repeat)
    load_ms = _ms(lambda: EntityIndex(uri).seed_vectors(), max(1, repeat // 2))
    full_ms = _ms(lambda: EntityIndex(uri).check("bench", full=True), max(1, repeat // 2))
    return (f"| {size:,} | {build_s:.1f} s | {open_ms:.1f} | {meta_ms:.2f} | {load_ms:.0f} | {full_ms:.0f} "
            f"| {full_ms - load_ms - open_ms:+.0f} |")


def kg_row(repeat: int, tmp: Path) -> str:
    from karma_dagster.runtime import services
    from karma_dagster.kg.store import KGStore
    from karma_dagster.runtime.paths import DataPaths, data_file

    data = DataPaths(tmp / "kg", cache_dir=tmp / "cache")
    services.import_seed_kg(data, data_file("seed_kg", "nodes.tsv"), data_file("seed_kg", "edges.sif.gz"),
                            "hetionet", 0.9)
    store = KGStore(data.kg)
    return (f"KG read-through (check_integrity) on the sample seed KG ({data.kg.stat().st_size / 2**20:.1f} MB): "
            f"{_ms(store.check_integrity, repeat):.1f} ms; seed_counts (the open it precedes): "
            f"{_ms(store.seed_counts, repeat):.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4000, 100_000])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(kg_row(args.repeat, Path(tmp)))
        print("\n| names | build | open ms | check (metadata) ms | layer load ms | check (full) ms | full - load - open |")
        print("|---|---|---|---|---|---|---|")
        for size in args.sizes:
            print(index_row(size, args.repeat, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
