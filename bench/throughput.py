"""Throughput of the document chain on the same abstracts, three ways, in one run (issue 12's "measure first").

    python bench/throughput.py [--n 200] [--daemon-n N] [--modes direct run daemon] [--partitions document date]
                               [--dates K] [--registered N] [--dagster-yaml FILE] [--cache-dir DIR]

(a) direct: the local backbone's agents called as plain functions (each stage's `run` in chain order, tables
    written to the stage store as the assets write them): no Dagster at all, the limit of this machine;
(b) `karma run`'s path: in-process Dagster runs of up to 50 documents each, by date a day's (runner.run_documents),
    on an instance made as `karma run` makes it (the project's dagster.yaml under DAGSTER_HOME);
(c) the UI's path: a backfill of the eight stage assets run by a real `dagster-daemon` process, as under
    `dagster dev` (the repo's dagster.yaml: queued runs, each launched in its own process).
All three get the same first N abstracts of BioRED dev + BC5CDR dev (../shared/data), a fresh data dir and
Dagster instance each, and a shared, pre-built cache (lexicon, models); the seed import and one warm-up
document are outside the timing. Prints abstracts/min and each ratio to (a), with the machine and its load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dagster as dg  # noqa: E402
from dagster._core.storage.dagster_run import IN_PROGRESS_RUN_STATUSES  # noqa: E402

from karma_dagster import runner  # noqa: E402
from karma_dagster.runtime import services
from karma_dagster.assets.chain import stage_key  # noqa: E402
from karma_dagster.definitions import build_definitions  # noqa: E402
from karma_dagster.ingest.catalog import Catalog  # noqa: E402
from karma_dagster.ingest.inbox import scan_inbox  # noqa: E402
from karma_dagster.ingest.keys import date_of_document_key  # noqa: E402
from karma_dagster.partitioning.definitions import documents_partitions  # noqa: E402
from karma_dagster.runtime.params import KarmaParams  # noqa: E402
from karma_dagster.resources.backbones import BackboneConfig  # noqa: E402
from karma_dagster.resources.storage import KarmaStorageResource  # noqa: E402
from karma_dagster.schemas.frames import records_to_frame  # noqa: E402
from karma_dagster.stages import STAGE_NAMES, StageInputs, chain_for  # noqa: E402

IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, *IN_PROGRESS_RUN_STATUSES]
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the code-location writer lives with the tests' daemon harness
import daemon_harness as daemon  # noqa: E402


write_abstracts = daemon.write_abstracts  # the first n distinct dev abstracts (tests/daemon_harness.py)


SETUP = {"partitions": "document", "dates": 0, "registered": 0,
         "dagster_yaml": str(REPO / "dagster_home" / "dagster.yaml")}  # main() sets them: stage partitions, publication
# dates spread, document partitions an instance already holds


def register_earlier(inst: dg.DagsterInstance) -> None:
    """--registered N: the instance has already seen N papers (their document partitions, registered before the
    bench's own), as a deployment's has after weeks of PubMed days: what a run costs that grows with the catalog."""
    n = int(SETUP["registered"])
    for start in range(0, n, 50_000):
        inst.add_dynamic_partitions(documents_partitions.name,
                                    [f"1999-01-01_pmid-earlier{i:08d}" for i in range(start, min(n, start + 50_000))])


def _setup(work: Path, n: int, cache_dir: Path, name: str) -> tuple[dg.Definitions, dict[str, str]]:
    inbox = work / name / "inbox"
    write_abstracts(inbox / "abstracts.pubtator", n + 1, renumber=True)  # +1: the warm-up document
    if SETUP["dates"] or SETUP["partitions"] == "date":  # by date the warm-up paper needs a day of its own
        daemon.spread_dates(inbox / "abstracts.pubtator", int(SETUP["dates"]) or 1)
    cfg = {"data_dir": str(work / name / "karma"), "inbox": str(inbox), "cache_dir": str(cache_dir),
           "partitions": str(SETUP["partitions"])}
    (work / name / "home").mkdir()
    return build_definitions(backbones={"local": BackboneConfig()}, storage=KarmaStorageResource(**cfg)), cfg


def direct(work: Path, n: int, cache_dir: Path) -> float:
    """(a): seconds for n documents through the agents as functions."""
    defs, _ = _setup(work, n, cache_dir, "direct")
    storage = defs.resources["storage"]
    backbones = defs.resources["backbones"]
    with dg.instance_for_test(temp_dir=str(work / "direct" / "home")) as inst:
        assert runner.import_kg(defs, inst), "seed import failed"
    keys = sorted(scan_inbox(storage.inbox_dir(), Catalog(storage.catalog_path()),
                             arrival_date=dt.date.today()).keys_to_run)
    backbone = backbones.get("local", storage)
    chain = chain_for(backbones.settings("local"))
    params, store, paths = KarmaParams(), storage.stage_store(), storage.paths()

    def one(key: str) -> None:
        for stage in chain:
            rows, _figures = stage.run(StageInputs(stage, "local", key, paths, backbone, params))
            store.write("local", stage.name, key, records_to_frame(rows, stage.row_model))

    one(keys[0])  # warm-up: lexicon, models, index
    t0 = time.perf_counter()
    for key in keys[1:]:
        one(key)
    return time.perf_counter() - t0


def karma_run(work: Path, n: int, cache_dir: Path) -> float:
    """(b): seconds for n documents through `karma run`'s path (in-process runs of up to 50 documents)."""
    services.clear()
    defs, _ = _setup(work, n, cache_dir, "run")
    home = work / "run" / "home"  # `karma run`'s instance: the project's dagster.yaml under DAGSTER_HOME
    shutil.copy(SETUP["dagster_yaml"], home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as inst:
        assert runner.import_kg(defs, inst), "seed import failed"
        register_earlier(inst)
        keys = sorted(runner.register_inbox(defs, inst)[0])
        assert not runner.run_documents(defs, inst, keys[:1], log=lambda _m: None), "warm-up failed"
        t0 = time.perf_counter()
        failed = runner.run_documents(defs, inst, keys[1:], log=lambda _m: None)
        seconds = time.perf_counter() - t0
    if failed:
        raise SystemExit(f"(b) {len(failed)} documents failed: {dict(list(failed.items())[:3])}")
    return seconds


def through_daemon(work: Path, n: int, cache_dir: Path) -> float:
    """(c): seconds for a backfill of the eight stage assets over n documents, run by a real `dagster-daemon`
    (as under `dagster dev`: the backfill daemon creates the runs, the run queue launches each in its own process,
    the repo's dagster.yaml), from the launch until the backfill is done. Seed import and one warm-up document's
    backfill come first, untimed."""
    defs, cfg = _setup(work, n, cache_dir, "daemon")
    home, folder = work / "daemon" / "home", work / "daemon"
    shutil.copy(SETUP["dagster_yaml"], home / "dagster.yaml")
    code = daemon.write_code_location(folder, {"local": {}}, cfg, in_process=False)
    (folder / "workspace.yaml").write_text(f"load_from:\n  - python_file:\n      relative_path: {code.name}\n"
                                           "      location_name: karma\n")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    os.environ["DAGSTER_HOME"] = str(home)
    log = (folder / "daemon.log").open("w")
    proc = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", "workspace.yaml"],
                            cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        with dg.DagsterInstance.get() as inst:
            assert runner.import_kg(defs, inst), "seed import failed"
            register_earlier(inst)
            keys = sorted(runner.register_inbox(defs, inst)[0])
            assets = [stage_key("local", s) for s in STAGE_NAMES]
            if SETUP["partitions"] == "date":  # the days, a run each (the warm-up document has a day of its own)
                days = sorted({date_of_document_key(k) for k in keys})
                warm_parts, parts = days[:1], days[1:]
            else:
                warm_parts, parts = keys[:1], keys[1:]
            warm = runner.launch_backfill(defs, inst, assets, warm_parts, "warm-up")
            _wait(inst, warm, proc, folder)
            bid = runner.launch_backfill(defs, inst, assets, parts, "throughput")
            t0, wall0 = time.perf_counter(), time.time()
            status = _wait(inst, bid, proc, folder)
            seconds = time.perf_counter() - t0
            runs = len(inst.get_runs())
            ended = _timeline(inst, bid, wall0)
            if ended is not None:
                LAST_RUN_ENDED["_last"] = ended  # main() files it under the path's name
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    if not status.startswith("COMPLETED"):
        raise SystemExit(f"(c) backfill ended {status}; see the daemon's log")
    print(f"(c) {runs} runs in all (seed import, warm-up, the backfill's), backfill {status}")
    return seconds


def same_mode_run(name: str) -> str:
    """The (b) row a path is compared with: `karma run` in the same partition mode (a daemon backfill by date against
    `karma run` by date, not by document)."""
    return "run-by-date" if name.endswith("-by-date") else "run"


LAST_RUN_ENDED: dict[str, float] = {}  # (c): seconds from the launch to its last run's end (the data is in)


def _timeline(inst: dg.DagsterInstance, backfill_id: str, wall0: float) -> float | None:
    """Where (c)'s time goes: each run's queueing, process start and steps, seconds from the launch; returns the
    seconds to the last run's end. The backfill daemon passes every `backfills: pass_interval_seconds` of the
    dagster.yaml (5 s shipped; Dagster's own 30 s without it): up to that long before the first run is created and
    after the last one ends before the backfill is marked done."""
    records = sorted(inst.get_run_records(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id})),
                     key=lambda r: r.create_timestamp)
    print("(c) timeline, s from the backfill's launch: run created / its process started / first step / ended")
    for r in records:
        steps = [e.timestamp for e in inst.all_logs(r.dagster_run.run_id, of_type=dg.DagsterEventType.STEP_START)]
        print(f"  {r.dagster_run.run_id[:8]} ({len(r.dagster_run.asset_selection or [])} assets): "
              f"{r.create_timestamp.timestamp() - wall0:.1f} / {(r.start_time or wall0) - wall0:.1f} / "
              f"{(min(steps) if steps else wall0) - wall0:.1f} / {(r.end_time or wall0) - wall0:.1f}")
    if not records or not all(r.end_time for r in records):
        return None
    last = max(r.end_time for r in records)
    print(f"  last run ended -> backfill marked done: {time.time() - last:.1f} s or less")
    return last - wall0


def _wait(inst: dg.DagsterInstance, backfill_id: str, proc: subprocess.Popen, folder: Path) -> str:
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"dagster-daemon exited: {(folder / 'daemon.log').read_text()[-3000:]}")
        backfill = inst.get_backfill(backfill_id)
        status = backfill.status.value if backfill else "MISSING"
        if status.startswith(("COMPLETED", "FAILED", "CANCELED")):
            in_flight = inst.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id},
                                                            statuses=IN_FLIGHT))
            if not in_flight:
                return status
        time.sleep(1.0)


def machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # (a) and (b) run in this process
    return f"{os.cpu_count()} CPUs, load average {load} (1/5/15 min); this process's peak RSS so far {peak_mb:,.0f} MB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="abstracts for (a) and (b); past the dev corpora's 594 distinct "
                    "abstracts they are copied again under new PMIDs, e.g. --n 4000 --dates 1 for a day of PubMed")
    ap.add_argument("--daemon-n", type=int, default=0, help="abstracts for (c) (default: --n)")
    ap.add_argument("--modes", nargs="+", default=["direct", "run", "daemon"], choices=["direct", "run", "daemon"])
    ap.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "bench-throughput")
    ap.add_argument("--partitions", nargs="+", default=["document"], choices=["document", "date"],
                    help="stage partitions for (b) and (c) (partitioning/mode.py); both: each path once per mode")
    ap.add_argument("--dates", type=int, default=0, help="spread the abstracts over this many publication days "
                    "(a dates file); 0: all on one day (by date, the warm-up paper on the day before)")
    ap.add_argument("--dagster-yaml", type=Path, default=Path(SETUP["dagster_yaml"]),
                    help="the instance config of (b) and (c) (default: the project's dagster_home/dagster.yaml)")
    ap.add_argument("--registered", type=int, default=0, help="document partitions the Dagster instance already "
                    "holds before (b) and (c) (papers of earlier days): what per-paper costs grow with the catalog")
    args = ap.parse_args(argv)
    SETUP["dates"], SETUP["registered"], SETUP["dagster_yaml"] = args.dates, args.registered, str(args.dagster_yaml)
    cache_dir = args.cache_dir.resolve()
    print(f"machine at the start: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="karma-throughput-"))
    results: dict[str, tuple[int, float]] = {}
    try:
        modes = {"direct": direct, "run": karma_run, "daemon": through_daemon}
        for mode in args.modes:
            for parts in (args.partitions if mode != "direct" else ["document"]):
                SETUP["partitions"] = parts
                name = mode if parts == "document" else f"{mode}-by-date"
                n = args.daemon_n or args.n if mode == "daemon" else args.n
                seconds = modes[mode](work / name, n, cache_dir)
                results[name] = (n, seconds)
                if "_last" in LAST_RUN_ENDED:
                    LAST_RUN_ENDED[name] = LAST_RUN_ENDED.pop("_last")
                print(f"{name}: {n} abstracts in {seconds:.1f} s = {60 * n / seconds:.1f} abstracts/min", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rate = {m: 60 * n / s for m, (n, s) in results.items()}
    labels = {"direct": "(a) agents called directly", "run": "(b) `karma run` (in-process runs, 50 documents each)",
              "daemon": "(c) UI backfill through the daemon",
              "run-by-date": "(b) `karma run` (in-process runs, a day's papers each), date partitions"}
    print("\n| path | abstracts | seconds | abstracts/min | ÷ (a) | ÷ (b) of its partition mode |\n"
          "|---|---|---|---|---|---|")
    for m, (n, s) in results.items():
        ra = f"{rate[m] / rate['direct']:.2f}" if "direct" in rate else "-"
        rb = f"{rate[m] / rate[base]:.2f}" if (base := same_mode_run(m)) in rate else "-"
        label = labels.get(m) or labels[m.removesuffix("-by-date")] + ", date partitions"
        print(f"| {label} | {n} | {s:.1f} | {rate[m]:.1f} | {ra} | {rb} |")
    for name, s in LAST_RUN_ENDED.items():  # the same backfill, to its last run's end (without the daemon's last wake-up)
        n = results[name][0]
        r = 60 * n / s
        ra = f"{r / rate['direct']:.2f}" if "direct" in rate else "-"
        rb = f"{r / rate[base]:.2f}" if (base := same_mode_run(name)) in rate else "-"
        print(f"| (c) to its last run's end{', date partitions' if name.endswith('-by-date') else ''} | {n} | {s:.1f} "
              f"| {r:.1f} | {ra} | {rb} |")
    print(f"\nmachine at the end: {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
