"""Scale benchmark: 10,000 then 100,000 documents over 10 years, against a real (temporary) Dagster instance.

    python bench/scale.py [--sizes 10000 100000] [--per-doc 10] [--daemon-docs 4] [--workdir DIR]
                          [--partitions document|date] [--start 2016-01-01 --years 10] [--no-daemon-pass]
                          [--storage sqlite|postgres]

`--partitions date` measures the same with stage assets partitioned by date (partitioning/mode.py): documents
are catalog rows and only their dates are partitions.
Measures, at each size: registering the documents (dynamic partitions in batches of 10,000 + catalog rows),
definitions load, the sensors' ticks (new_papers over the catalog; prompt_versions after a prompt edit with
--materialized partitions of an LLM stage on record), the UI's partition-status query (PartitionHealthQuery,
the GraphQL text the webserver's JS sends, run in-process through dagster_graphql) for a stage asset and for
the KG increment, launching a one-month backfill (the controller's tiers + the documents backfills + the KG
backfill), and the backfill daemon's first pass over it (runs created, queued). Then, on real inbox papers
with the local backbone, the per-document cost of one run per document vs. one run for all of them: in
process (as `karma run` does) and through the daemon's path with Dagster's process-per-step executor (as
`dagster dev` runs a backfill; KARMA_DOCUMENTS_PER_RUN=1 vs 50, each in a child process).
`--storage postgres` puts the Dagster instance's storage (runs, event log, partitions) in a throwaway PostgreSQL
server on 127.0.0.1 (tests/pg_server.py; Debian's postgresql package), as a deployment beyond one machine has it.
Prints a markdown table. The instance and data live in a temporary folder, removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import random
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dagster as dg  # noqa: E402
from dagster_graphql.test.utils import execute_dagster_graphql  # noqa: E402

from karma_dagster import runner  # noqa: E402
from karma_dagster.runtime import services
from karma_dagster.definitions import build_definitions  # noqa: E402
from karma_dagster.jobs import DOCUMENT_JOB  # noqa: E402
from karma_dagster.assets.chain import stage_key  # noqa: E402
from karma_dagster.ingest.catalog import Catalog  # noqa: E402
from karma_dagster.ingest.pubtator import read_pubtator  # noqa: E402
from karma_dagster.partitioning.definitions import documents_partitions, ensure_partitions, kg_dates_partitions  # noqa: E402
from karma_dagster.partitioning.order import positions  # noqa: E402
from karma_dagster.resources.backbones import BackboneConfig  # noqa: E402
from karma_dagster.resources.storage import KarmaStorageResource  # noqa: E402
from karma_dagster.stages import STAGE_NAMES  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the in-process daemon harness lives with the tests
import daemon_harness as daemon  # noqa: E402
BATCH = 10_000
SPAN = {"start": dt.date(2016, 1, 1), "days": 3653}  # ten years; --start/--years change it (MedKGent: 1975, 49)

PARTITION_HEALTH_QUERY = """
query PartitionHealthQuery($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      id
      partitionKeysByDimension { name type partitionKeys }
      assetPartitionStatuses {
        ... on TimePartitionStatuses { ranges { status startTime endTime startKey endKey } }
        ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
        ... on MultiPartitionStatuses {
          primaryDimensionName
          ranges {
            primaryDimStartKey primaryDimEndKey primaryDimStartTime primaryDimEndTime
            secondaryDim {
              ... on TimePartitionStatuses { ranges { status startTime endTime startKey endKey } }
              ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
            }
          }
        }
      }
    }
  }
}
"""

ROWS: list[tuple[str, str, str]] = []


def record(size: str, what: str, seconds: float, note: str = "") -> None:
    ROWS.append((size, what, f"{seconds:.2f}", note))
    print(f"  {size:>8} | {what:<55} | {seconds:8.2f} s | {note}", flush=True)


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def real_titles() -> list[str]:
    docs = read_pubtator(REPO / "data" / "corpora" / "bc5cdr-train.pubtator.gz") if (REPO / "data" / "corpora" / "bc5cdr-train.pubtator.gz").exists() else []
    titles = [d.title for d in docs if getattr(d, "title", None)]
    return titles or ["Congenital hypothyroidism due to a new deletion in the sodium/iodide symporter protein."]


def register(inst: dg.DagsterInstance, catalog: Catalog, start: int, stop: int, titles: list[str],
             mode: str = "document") -> list[str]:
    """Documents start..stop-1 spread over ten years, registered in key (= date) order as the sensor does:
    catalog rows + dynamic partitions (a document's, or with date partitions its date's), in batches of 10,000."""
    rng = random.Random(start)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    rows = []
    for i in range(start, stop):
        date = SPAN["start"] + dt.timedelta(days=(i * 7919) % SPAN["days"])
        rows.append((f"{date.isoformat()}_bench{i:06d}", date.isoformat(), "publication", str(30_000_000 + i), None,
                     None, rng.choice(titles), now))
    rows.sort()
    for lo in range(0, len(rows), BATCH):
        batch = rows[lo:lo + BATCH]
        with sqlite3.connect(catalog.path) as con:
            con.executemany("INSERT OR IGNORE INTO documents (doc_key, date, date_source, pmid, pmcid, doi, title, "
                            "first_registered) VALUES (?,?,?,?,?,?,?,?)", batch)
        if mode == "document":
            inst.add_dynamic_partitions(documents_partitions.name, [b[0] for b in batch])
        # the KG increment's dates, in both modes (as the new_papers sensor registers them): the month's KG backfill
        # targets them, and the daemon fails a backfill whose partitions are unknown
        ensure_partitions(inst, kg_dates_partitions.name, {b[1] for b in batch})
    return [r[0] for r in rows]


def sensor_tick(defs: dg.Definitions, inst: dg.DagsterInstance, name: str, cursor: str | None):
    context = dg.SensorEvaluationContext(instance_ref=inst.get_ref(), cursor=cursor, repository_def=defs.get_repository_def(),
                                         resources=defs.resources, sensor_name=name)
    with context:
        return defs.resolve_sensor_def(name).evaluate_tick(context)


def health_query(ws, key: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    result = execute_dagster_graphql(ws.create_request_context(), PARTITION_HEALTH_QUERY, {"assetKey": {"path": key}})
    seconds = time.perf_counter() - t0
    if result.errors:
        raise RuntimeError(f"PartitionHealthQuery {key}: {result.errors}")
    node = result.data["assetNodeOrError"]
    return seconds, sum(len(d["partitionKeys"]) for d in node["partitionKeysByDimension"])


@contextlib.contextmanager
def bench_instance(workdir: Path, storage: str) -> Iterator[dg.DagsterInstance]:
    """A fresh Dagster instance: SQLite files under the workdir (the embedded default) or a throwaway Postgres."""
    if storage == "sqlite":
        with dg.instance_for_test(temp_dir=str(workdir / "home")) as inst:
            yield inst
        return
    from pg_server import start_postgres

    with start_postgres() as server:
        # psycopg2, as deploy/dagster.postgres.yaml: on psycopg 3 dagster-postgres' NOTIFY of an event fails
        url = server.new_database("dagster_scale").replace("postgresql://", "postgresql+psycopg2://", 1)
        with dg.instance_for_test(temp_dir=str(workdir / "home"),
                                  overrides={"storage": {"postgres": {"postgres_url": url}}}) as inst:
            yield inst


def scale(sizes: list[int], workdir: Path, materialized: int, cache_dir: Path, mode: str = "document",
          daemon_pass: bool = True, storage: str = "sqlite") -> None:
    prompts = workdir / "prompts"
    shutil.copytree(REPO / "prompts", prompts)
    storage_cfg = {"data_dir": str(workdir / "karma"), "inbox": str(workdir / "inbox"), "cache_dir": str(cache_dir),
                   "partitions": mode}
    part = documents_partitions if mode == "document" else kg_dates_partitions
    (workdir / "inbox").mkdir()
    backbones = {"local": BackboneConfig(), "llm": BackboneConfig(kind="litellm", model="openai/bench", api_base="http://127.0.0.1:9/v1")}
    code = daemon.write_code_location(workdir, {"local": {}, "llm": backbones["llm"].model_dump()}, storage_cfg, str(prompts))
    (workdir / "home").mkdir()
    titles = real_titles()
    with bench_instance(workdir, storage) as inst:
        catalog = Catalog(KarmaStorageResource(**storage_cfg).catalog_path())
        registered = 0
        prompt_cursor = None
        for size in sizes:
            label = f"{size:,}" + (" (dates)" if mode == "date" else "") + (" (Postgres)" if storage == "postgres" else "")
            _, s = timed(register, inst, catalog, registered, size, titles, mode)
            record(label, f"register {size - registered:,} documents (batches of {BATCH:,})", s)
            registered = size
            defs, s = timed(lambda: build_definitions(backbones=backbones, storage=KarmaStorageResource(**storage_cfg),
                                                      prompts_dir=str(prompts)))
            _, s2 = timed(lambda: defs.get_repository_def().get_all_jobs())
            record(label, "definitions load (build + repository)", s + s2, "2 backbones, 18 assets")

            result, s = timed(sensor_tick, defs, inst, "new_papers", None)
            record(label, "sensor tick: new_papers (catalog + partitions)", s, result.skip_message or "")
            result, s = timed(sensor_tick, defs, inst, "kg_increments", None)
            record(label, "sensor tick: kg_increments", s, result.skip_message or "")
            if prompt_cursor is None:
                evaluated = dg.AssetKey(["llm", "evaluated"])
                keys = inst.get_dynamic_partitions(part.name)[:materialized]
                _, s = timed(lambda: [inst.report_runless_asset_event(dg.AssetMaterialization(evaluated, partition=k)) for k in keys])
                record(label, f"record {len(keys):,} materializations of llm/evaluated", s)
                prompt_cursor = sensor_tick(defs, inst, "prompt_versions", None).cursor
            path = sorted((prompts / "evaluator_confidence").glob("evaluator_confidence.v*.jinja"))[-1]
            path.write_text(path.read_text() + f"\n(bench edit {size})\n")
            result, s = timed(sensor_tick, defs, inst, "prompt_versions", prompt_cursor)
            prompt_cursor = result.cursor
            n = sum(1 for _ in result.run_requests[0].asset_graph_subset.iterate_asset_partitions()) if result.run_requests else 0
            record(label, "sensor tick: prompt_versions after a prompt edit", s, f"one backfill of {n:,} partitions")

            with daemon.workspace(inst, code) as ws:
                for asset in (["local", "segments"], ["local", "knowledge_graph"]):
                    best = []
                    for _ in range(2):
                        seconds, n_keys = health_query(ws, asset)
                        best.append(seconds)
                    record(label, f"UI PartitionHealthQuery {'/'.join(asset)}", min(best), f"{n_keys:,} keys; first call {best[0]:.2f} s")

                if size == sizes[0]:
                    from karma_dagster.scheduling.plan import _matcher_and_names

                    _, s = timed(_matcher_and_names, KarmaStorageResource(**storage_cfg).paths(), "local")
                    record(label, "controller: load the lexicon (once per process)", s, "cached table under --cache-dir")
                month_start = dt.date(2020, 3, 1)
                month_end = dt.date(2020, 3, 31)
                docs = runner.documents_in_range(defs, month_start, month_end)
                stage_assets = [stage_key("local", s) for s in STAGE_NAMES]
                dates = sorted({k.split("_", 1)[0] for k in docs})
                t0 = time.perf_counter()
                if mode == "date":  # the month's days (runner.backfill_dates)
                    tiers, t_cca = [(dates, {})], 0.0
                else:
                    tiers = runner.backfill_tiers(defs, inst, docs, "local")
                    t_cca = time.perf_counter() - t0
                    wanted = set(docs)
                    _, s_list = timed(lambda: {k: i for i, k in enumerate(inst.get_dynamic_partitions(part.name))
                                               if k in wanted})
                    _, s_pos = timed(positions, inst, part.name, docs)
                    record(label, "the month's places in the partition order", s_pos,
                           f"order.positions; listing every partition as before: {s_list:.2f} s")
                    t0 += s_list + s_pos
                for i, (tier_keys, tags) in enumerate(tiers):
                    runner.launch_backfill(defs, inst, stage_assets, tier_keys, f"bench {size} tier {i}", tags)
                runner.launch_backfill(defs, inst, [dg.AssetKey(["local", "knowledge_graph"])], dates, "bench kg")
                s = time.perf_counter() - t0
                record(label, "launch one-month backfill (documents + KG)" if mode == "date" else
                       "launch one-month backfill (CCA + documents + KG)", s,
                       f"{len(docs):,} docs in {len(tiers)} tiers, {len(dates)} dates; controller {t_cca:.2f} s")
                if daemon_pass:
                    before = len(inst.get_runs())
                    peak0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                    s = daemon.backfill_pass(ws)
                    created = len(inst.get_runs()) - before
                    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                    record(label, "backfill daemon: first pass over it", s,
                           f"{created} runs created (queued); process peak RSS {peak / 1024:,.0f} MB"
                           + (f" (rose {(peak - peak0) / 1024:,.0f} MB in the pass)" if peak > peak0 else ""))


def per_document(workdir: Path, n_docs: int, cache_dir: Path) -> None:
    """Local backbone on real abstracts: one in-process run per document vs one run over all of them."""
    services.clear()
    inbox = workdir / "inbox-docs"
    inbox.mkdir()
    shutil.copy(REPO / "data" / "inbox" / "abstracts.pubtator", inbox / "abstracts.pubtator")
    storage = KarmaStorageResource(data_dir=str(workdir / "karma-docs"), inbox=str(inbox), cache_dir=str(cache_dir))
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=storage)
    (workdir / "home-docs").mkdir()
    with dg.instance_for_test(temp_dir=str(workdir / "home-docs")) as inst:
        assert runner.import_kg(defs, inst), "seed import failed"
        keys, _ = runner.register_inbox(defs, inst)
        keys = sorted(keys)[: n_docs + 1]
        runner.run_documents(defs, inst, keys[:1], log=lambda _: None)  # warm-up: lexicon, models, index
        work = keys[1:]
        failed, s_each = timed(runner.run_documents, defs, inst, work, lambda _: None)
        record(f"{len(work)} docs", "per document: one run per document", s_each / len(work), f"{len(failed)} failed")
        job = defs.resolve_job_def(DOCUMENT_JOB)
        ordered = [k for k in inst.get_dynamic_partitions(documents_partitions.name) if k in set(work)]
        tags = {"dagster/asset_partition_range_start": ordered[0], "dagster/asset_partition_range_end": ordered[-1]}
        result, s_multi = timed(job.execute_in_process, instance=inst, tags=tags, run_config=runner.QUIET, raise_on_error=False)
        record(f"{len(work)} docs", "per document: one run for all (multi-partition)", s_multi / len(work),
               f"success={result.success}; saves {(s_each - s_multi) / len(work):.2f} s/doc in process")


def daemon_variant(workdir: Path, n_docs: int, cache_dir: Path) -> None:
    """One backfill of `n_docs` real abstracts executed the way the daemon does it (synchronous launcher,
    Dagster's default executor: a process per step). Run in a child process with KARMA_DOCUMENTS_PER_RUN set."""
    from karma_dagster.assets.batching import MAX_DOCUMENTS_PER_RUN

    inbox = workdir / "inbox"
    inbox.mkdir(parents=True)
    shutil.copy(REPO / "data" / "inbox" / "abstracts.pubtator", inbox / "abstracts.pubtator")
    cfg = {"data_dir": str(workdir / "karma"), "inbox": str(inbox), "cache_dir": str(cache_dir)}
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=KarmaStorageResource(**cfg))
    code = daemon.write_code_location(workdir, {"local": {}}, cfg, in_process=False)
    (workdir / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(workdir / "home"), synchronous_run_launcher=True,
                              synchronous_run_coordinator=True) as inst:
        assert runner.import_kg(defs, inst), "seed import failed"
        keys = sorted(runner.register_inbox(defs, inst)[0])[:n_docs]
        bid = runner.launch_backfill(defs, inst, [stage_key("local", s) for s in STAGE_NAMES], keys, "per-doc")
        with daemon.workspace(inst, code) as ws:
            status, s = timed(daemon.run_backfill, ws, bid)
        runs = len(inst.get_runs())
        print(f"DAEMON_RESULT|{MAX_DOCUMENTS_PER_RUN}|{len(keys)}|{s:.2f}|{runs}|{status}", flush=True)


def daemon_per_document(workdir: Path, n_docs: int, cache_dir: Path) -> None:
    import subprocess

    for per_run in (1, 50):
        env = {**os.environ, "KARMA_DOCUMENTS_PER_RUN": str(per_run)}
        out = subprocess.run([sys.executable, __file__, "--daemon-variant", str(n_docs), "--cache-dir", str(cache_dir),
                              "--workdir", str(workdir / f"daemon-{per_run}")], env=env, capture_output=True, text=True)
        line = next((l for l in out.stdout.splitlines() if l.startswith("DAEMON_RESULT|")), None)
        if line is None:
            raise RuntimeError(f"daemon variant {per_run} failed: {out.stderr[-2000:]}")
        _, per, n, seconds, runs, status = line.split("|")
        record(f"{n} docs", f"per document via the daemon: {'one run per document' if per == '1' else 'many per run'}",
               float(seconds) / int(n), f"{runs} runs incl. the seed import, {status}, a process per step")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--per-doc", type=int, default=10, help="documents for the per-document overhead part (0 = skip)")
    ap.add_argument("--materialized", type=int, default=2_000, help="llm/evaluated partitions on record for prompt_versions")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/local-backbone"))
    ap.add_argument("--daemon-docs", type=int, default=4, help="documents for the daemon-path comparison (0 = skip)")
    ap.add_argument("--daemon-variant", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=dt.date.fromisoformat, default=dt.date(2016, 1, 1),
                    help="first publication date of the synthetic documents (the month backfilled is 2020-03)")
    ap.add_argument("--years", type=int, default=10, help="years the documents are spread over")
    ap.add_argument("--partitions", choices=["document", "date"], default="document",
                    help="stage assets partitioned per document (default) or per date (partitioning/mode.py)")
    ap.add_argument("--storage", choices=["sqlite", "postgres"], default="sqlite",
                    help="the Dagster instance's storage: SQLite files (default) or a throwaway local PostgreSQL")
    ap.add_argument("--no-daemon-pass", action="store_true", help="skip the backfill daemon's pass (24 min at 1M "
                    "documents with document partitions)")
    args = ap.parse_args(argv)
    if args.daemon_variant:
        daemon_variant(args.workdir, args.daemon_variant, args.cache_dir.resolve())
        return 0
    SPAN.update(start=args.start, days=(dt.date(args.start.year + args.years, 1, 1) - args.start).days)
    if sorted(args.sizes) != args.sizes:
        ap.error("--sizes must be increasing (documents are added to the same instance)")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="karma-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        print(f"workdir {workdir}", flush=True)
        scale(args.sizes, workdir, args.materialized, args.cache_dir.resolve(), args.partitions,
              not args.no_daemon_pass, args.storage)
        if args.per_doc:
            per_document(workdir, args.per_doc, args.cache_dir.resolve())
        if args.daemon_docs:
            daemon_per_document(workdir, args.daemon_docs, args.cache_dir.resolve())
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n| documents | measurement | seconds | notes |\n|---|---|---|---|")
    for size, what, seconds, note in ROWS:
        print(f"| {size} | {what} | {seconds} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
