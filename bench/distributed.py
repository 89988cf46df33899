"""Distributed throughput: SQLite vs Postgres instance storage, 1 vs 2 Celery workers, on 127.0.0.1.

    python bench/distributed.py [--n 200] [--storage sqlite postgres] [--workers 1 2] [--cache-dir DIR]
    python bench/distributed.py --storage postgres --workers 2 --kg-postgres   # + the KG on Postgres, compared
    KARMA_PARTITIONS=date python bench/distributed.py --n 400 --dates 8         # date partitions: a run per day

Each configuration is a fresh stack (tests/distributed_harness.py): Redis broker, moto's S3 server for the
stage tables and the entity index, the instance storage, `--workers` Celery workers (separate processes, one
task at a time each) and a real `dagster-daemon`. The first n distinct BioRED/BC5CDR dev abstracts (local
backbone) are backfilled as `karma backfill` does (documents, then their dates' KG increments); one warm-up
document goes first, untimed (each worker loads its models once). Printed per configuration:
- documents per minute, launch of the documents backfill until the KG increment is merged;
- run bookkeeping per document: the backfill's runs' wall time minus the time their steps executed (launch,
  planning, event writes, dispatch through the broker), summed, divided by n;
- the daemon's bookkeeping per document: its backfill passes that turn a backfill of n documents into queued
  runs (a planned event per document and stage), timed in process against the same instance storage.
With --kg-postgres the KG store is Postgres too (KARMA_KG_URL: the whole multi-machine stack) and, after the
runs, `karma run`'s KG of the same abstracts on the embedded default is compared with each distributed KG (rows,
edges with confidences, merged documents): "KG equal" is printed per configuration.
The machine's load average is printed beside the figures. Everything lives in a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import daemon_harness  # noqa: E402
import distributed_harness as h  # noqa: E402
from kg_backends import kg_dump_any  # noqa: E402

from karma_dagster.kg.location import KG_URL_ENV  # noqa: E402


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def throughput(work: Path, inbox: Path, cache: Path, storage: str, workers: int,
               kg_postgres: bool = False) -> dict[str, object]:
    stack = h.start_stack(work, postgres=storage == "postgres", s3=True, celery=True)
    kg = None
    try:
        if kg_postgres:
            stack.env[KG_URL_ENV] = stack.postgres.new_database("karma_kg")
        before = load()
        out = h.distributed_backfill(stack, inbox, cache, workers=workers, warmup=1)
        after = load()
        kg = kg_dump_any(stack.env[KG_URL_ENV]) if kg_postgres else kg_dump_any(out.kg_path)
    finally:
        stack.stop()
    bad = {k: v for k, v in out.statuses.items() if v != "COMPLETED_SUCCESS"}
    if bad:
        raise SystemExit(f"{storage}/{workers} workers: backfill ended {bad}; logs in {work}")
    return {"docs_per_min": out.documents / out.seconds * 60, "run_overhead_s": out.run_overhead_s / out.documents,
            "runs": out.runs, "seconds": out.seconds, "load": f"{before} -> {after}", "kg": kg}


def daemon_pass(work: Path, inbox: Path, cache: Path, storage: str) -> tuple[float, int, int]:
    """Seconds per document of the backfill daemon's passes creating the runs (queued, not executed), after one
    warm-up backfill of the first document (the code location loaded once, as in a running daemon)."""
    import dagster as dg

    from karma_dagster import runner
    from karma_dagster.runtime import services
    from karma_dagster.definitions import build_definitions
    from karma_dagster.jobs import chain_keys
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource

    stack = h.start_stack(work, postgres=storage == "postgres", s3=False, celery=False)
    try:
        cfg = h.storage_config(work, inbox, cache)
        code = daemon_harness.write_code_location(work, {"local": {}}, cfg, in_process=True)
        with h.environ(stack.env):
            services.clear()
            defs = build_definitions(backbones={"local": BackboneConfig()}, storage=KarmaStorageResource(**cfg))
            with dg.DagsterInstance.get() as inst:
                keys, _ = runner.register_inbox(defs, inst)
                with daemon_harness.workspace(inst, code) as ws:
                    seconds, passes, runs = 0.0, 0, 0
                    by_date = defs.resources["storage"].partition_mode() == "date"  # a day is a partition
                    for batch, timed in ((keys[:1], False), (keys[1:], True)):  # a warm-up pass loads the location
                        parts = h.days_of(batch) if by_date else batch
                        runner.launch_backfill(defs, inst, chain_keys(["local"]), parts, "daemon bookkeeping")
                        for _ in range(50):
                            created = len(inst.get_runs())
                            s = daemon_harness.backfill_pass(ws)
                            if timed:
                                seconds, passes = seconds + s, passes + 1
                            if len(inst.get_runs()) == created:
                                break
                    runs = len(inst.get_runs()) - 1
                keys = keys[1:]
    finally:
        stack.stop()
    return seconds / len(keys), runs, passes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200, help="abstracts to backfill (default 200)")
    ap.add_argument("--storage", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    ap.add_argument("--workers", nargs="*", type=int, default=[1, 2],
                    help="worker counts to measure throughput with (none: the daemon's bookkeeping only)")
    ap.add_argument("--cache-dir", default="", help="derived caches (lexicon, relation model) to reuse")
    ap.add_argument("--dates", type=int, default=0,
                    help="spread the abstracts over this many publication days (a dates file; the warm-up gets a day "
                         "of its own); with KARMA_PARTITIONS=date a day is a run, so workers share the days")
    ap.add_argument("--kg-postgres", action="store_true",
                    help="the KG store on Postgres too (postgres storage only), compared with `karma run`'s KG")
    args = ap.parse_args(argv)
    if args.kg_postgres and args.storage != ["postgres"]:
        ap.error("--kg-postgres needs --storage postgres")
    root = Path(tempfile.mkdtemp(prefix="karma-distributed-"))
    cache = Path(args.cache_dir) if args.cache_dir else root / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    inbox = root / "inbox"
    h.write_abstracts(inbox / "abstracts.pubtator", args.n + 1, renumber=True)  # +1: the warm-up document
    if args.dates:
        daemon_harness.spread_dates(inbox / "abstracts.pubtator", args.dates)
    print(f"{args.n} abstracts, local backbone; {os.cpu_count()} CPUs, load average {load()} (1/5/15 min) at start")
    rows = []
    try:
        for storage in args.storage:
            t0 = time.perf_counter()
            per_doc, runs, passes = daemon_pass(root / f"daemon-{storage}", inbox, cache, storage)
            print(f"  daemon bookkeeping, {storage}: {per_doc * 1000:.0f} ms/document ({runs} runs queued in {passes} "
                  f"passes; {time.perf_counter() - t0:.0f} s with setup; load {load()})", flush=True)
            for workers in args.workers:
                r = throughput(root / f"{storage}-{workers}", inbox, cache, storage, workers, args.kg_postgres)
                print(f"  {storage}, {workers} worker(s): {r['docs_per_min']:.1f} documents/min ({r['seconds']:.0f} s, "
                      f"{r['runs']} runs), run bookkeeping {r['run_overhead_s']:.2f} s/document, load {r['load']}",
                      flush=True)
                rows.append((storage, workers, r, per_doc))
        if args.kg_postgres and rows:
            reference = kg_dump_any(h.reference_run(root / "one", inbox, cache).kg_path)
            for storage, workers, r, _ in rows:
                diff = [part for part in reference if r["kg"][part] != reference[part]]
                print(f"  KG equal to `karma run`'s ({storage} instance, {workers} worker(s), KG on Postgres, "
                      f"{len(reference['evidence'])} evidence rows): {'yes' if not diff else 'NO: ' + ', '.join(diff)}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not rows:
        return 0
    print("\n| instance storage | workers | documents/min | run bookkeeping s/doc | daemon bookkeeping ms/doc | load (1 min) |")
    print("|---|---|---|---|---|---|")
    for storage, workers, r, per_doc in rows:
        print(f"| {storage} | {workers} | {r['docs_per_min']:.1f} | {r['run_overhead_s']:.2f} | {per_doc * 1000:.0f} "
              f"| {r['load']} |")
    print(f"load average at the end: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
