"""Papers into the inbox -> the KG increments they feed: the UI path end to end (issues 12 and 31).

    python bench/latency.py [--papers 3]              # one paper at a time
    python bench/latency.py --inbox [DIR]             # a whole inbox at once (default: the sample inbox)

A real `dagster-daemon` (as under `dagster dev`, the repo's dagster.yaml) with the `new_papers` and
`kg_increments` sensors on, the local backbone, a fresh instance and data dir, the seed imported and the
models' cache built beforehand. Each paper (an abstract of BioRED dev, one at a time) is written into the inbox;
the time until the KG increment of its date has merged it (the KG's merged_documents) is printed, with what
the sensors and runs took in between (from the instance's run records).

`--inbox` is a real day's inbox as a UI user meets it (issue 31): the inbox (default: the shipped sample inbox,
15 papers over 5 dates) is in place, the seed imported, then both sensors are turned on with backbones.yaml's
enabled backbones (as `dagster dev` loads them). It prints the time from turning the sensors on to the first KG
increment and to the last, the runs per job, how often each (backbone, date) was merged, the queue's peak, and the
warnings the daemon's and runs' console printed more than once (the `dagster dev` terminal). From the instance's
records it checks the KG's day order -- each KG materialization's `merged_dates`, in the order they were written:
every date's last merge comes after every earlier date's last merge -- and counts the sensors' ticks by status
(none may fail). `--load N` runs N busy processes beside it (`yes > /dev/null`), for "at any load".
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dagster as dg  # noqa: E402
from dagster._core.scheduler.instigation import InstigatorType  # noqa: E402 - no public name

from karma_dagster import runner  # noqa: E402
from karma_dagster.definitions import build_definitions  # noqa: E402
from karma_dagster.runtime.document_states import states_in_stores  # noqa: E402
from karma_dagster.jobs import merges  # noqa: E402
from karma_dagster.runtime.paths import data_file  # noqa: E402
from karma_dagster.resources.backbones import backbone_configs_from_file  # noqa: E402
from karma_dagster.resources.storage import KarmaStorageResource  # noqa: E402
from karma_dagster.sensors.kg_increments import DEBOUNCE_S  # noqa: E402
from karma_dagster.kg.store import KGStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402


def abstracts(n: int) -> list[str]:
    """n single-abstract PubTator files' contents (title and abstract lines)."""
    tmp = Path(tempfile.mkdtemp())
    throughput.write_abstracts(tmp / "all.pubtator", n + 1)
    blocks = (tmp / "all.pubtator").read_text().strip().split("\n\n")
    shutil.rmtree(tmp)
    return [b + "\n" for b in blocks]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--papers", type=int, default=3)
    ap.add_argument("--inbox", nargs="?", const=data_file("inbox"), type=Path, default=None,
                    help="drop a whole inbox at once (default: the shipped sample inbox)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds to wait for one paper (default 900), or for the whole inbox (default 2700: "
                         "a loaded machine took 15 min for the sample inbox)")
    ap.add_argument("--cache-dir", type=Path, default=throughput.REPO / ".cache" / "bench-throughput")
    ap.add_argument("--load", type=int, default=0, help="busy processes to run beside it (`yes`), e.g. 4")
    args = ap.parse_args(argv)
    print(f"machine at the start: {throughput.machine()}")
    if args.inbox is not None:
        hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.load)]
        try:
            return whole_inbox(args.inbox, args.cache_dir.resolve(), args.timeout or 2700.0)
        finally:
            for hog in hogs:
                hog.kill()
    args.timeout = args.timeout or 900.0
    work = Path(tempfile.mkdtemp(prefix="karma-latency-"))
    papers = abstracts(args.papers)
    defs, cfg = throughput._setup(work, 0, args.cache_dir.resolve(), "latency")
    inbox = Path(cfg["inbox"])
    for old in inbox.iterdir():
        old.unlink()  # the inbox starts empty: papers arrive one by one
    (inbox / "warm-up.pubtator").write_text(papers[0])
    home, folder = work / "latency" / "home", work / "latency"
    shutil.copy(throughput.REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    code = throughput.daemon.write_code_location(folder, {"local": {}}, cfg, in_process=False)
    (folder / "workspace.yaml").write_text(f"load_from:\n  - python_file:\n      relative_path: {code.name}\n"
                                           "      location_name: karma\n")
    os.environ["DAGSTER_HOME"] = str(home)
    log = (folder / "daemon.log").open("w")
    proc = None
    rows: list[tuple[str, float]] = []
    try:
        with dg.DagsterInstance.get() as inst:
            assert runner.import_kg(defs, inst), "seed import failed"
            proc = subprocess.Popen(
                [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", "workspace.yaml"],
                cwd=folder, env={**os.environ}, stdout=log, stderr=subprocess.STDOUT)
            _start_sensors(folder, home)
            kg = KGStore(Path(cfg["data_dir"]) / "kg.duckdb")
            for i, paper in enumerate(papers):
                name = "warm-up" if i == 0 else f"paper-{i}"
                if i:
                    (inbox / f"{name}.pubtator").write_text(paper)
                t0 = time.perf_counter()
                pmid = paper.split("|", 1)[0]
                while not any(pmid in key for key in kg.merged_documents("local")):
                    if proc.poll() is not None or time.perf_counter() - t0 > args.timeout:
                        raise SystemExit(f"{name}: not merged after {time.perf_counter() - t0:.0f} s; "
                                         f"see {folder / 'daemon.log'}")
                    time.sleep(0.5)
                seconds = time.perf_counter() - t0
                rows.append((name, seconds))
                print(f"{name}: dropped -> merged into the KG in {seconds:.1f} s", flush=True)
            runs = inst.get_runs()
            print(f"{len(runs)} runs: " + ", ".join(sorted({r.job_name for r in runs})))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    print("\n| paper | drop -> KG increment (s) |\n|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.1f} |")
    print(f"\nmachine at the end: {throughput.machine()}")
    return 0


_INBOX_CODE = '''"""Generated by bench/latency.py: backbones.yaml's enabled backbones, as `dagster dev` loads them."""
from karma_dagster.definitions import build_definitions
from karma_dagster.resources.storage import KarmaStorageResource

defs = build_definitions(storage=KarmaStorageResource(**{storage!r}))
'''
_WARNING = re.compile(r"warning", re.IGNORECASE)
_RECYCLED = "No heartbeat received"


def whole_inbox(source: Path, cache_dir: Path, timeout: float) -> int:
    """The inbox at once, sensors on: first and last increment, merges per (backbone, date), queue peak, log."""
    if not source.is_dir():
        raise SystemExit(f"--inbox {source}: not a folder")
    work = Path(tempfile.mkdtemp(prefix="karma-inbox-latency-"))
    folder, home, inbox = work / "location", work / "location" / "home", work / "inbox"
    home.mkdir(parents=True)
    shutil.copytree(source, inbox)
    cfg = {"data_dir": str(work / "karma"), "inbox": str(inbox), "cache_dir": str(cache_dir)}
    backbones = sorted(backbone_configs_from_file())
    defs = build_definitions(storage=KarmaStorageResource(**cfg))
    shutil.copy(throughput.REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    (folder / "karma_location.py").write_text(_INBOX_CODE.format(storage=cfg))
    (folder / "workspace.yaml").write_text("load_from:\n  - python_file:\n      relative_path: karma_location.py\n"
                                           "      location_name: karma\n")
    os.environ["DAGSTER_HOME"] = str(home)
    log_path = folder / "daemon.log"
    proc = None
    try:
        with dg.DagsterInstance.get() as inst, log_path.open("w") as log:
            assert runner.import_kg(defs, inst), "seed import failed"
            proc = subprocess.Popen(
                [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", "workspace.yaml"],
                cwd=folder, env={**os.environ}, stdout=log, stderr=subprocess.STDOUT)
            t0 = time.time()
            _start_sensors(folder, home)
            print(f"{len([p for p in inbox.rglob('*') if p.is_file()])} files, backbones {', '.join(backbones)}: "
                  "sensors on", flush=True)
            peak, idle_since = 0, None
            while True:
                time.sleep(2)
                if proc.poll() is not None:
                    raise SystemExit(f"the daemon exited with {proc.returncode}: see {log_path}")
                queued = inst.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]))
                peak = max(peak, queued)
                busy = inst.get_runs_count(dg.RunsFilter(statuses=throughput.IN_FLIGHT))
                if busy or not inst.get_runs_count():
                    idle_since = None
                    if time.time() - t0 > timeout:
                        raise SystemExit(f"not done after {timeout:.0f} s; see {log_path}")
                    continue
                idle_since = idle_since or time.time()
                states = states_in_stores(defs.resources["storage"].paths(), backbones)
                if not any(s.pending or s.unmerged for s in states.values()) \
                        or time.time() - idle_since > DEBOUNCE_S + 45:  # a failed paper's date: its debounce
                    break
            records = inst.get_run_records()
            order = {ns: _merges_in_order(inst, ns) for ns in backbones}
            ticks = _tick_counts(inst)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    _report_inbox(records, backbones, states, t0, peak, log_path.read_text(errors="replace"))
    _report_order(order, ticks)
    shutil.rmtree(work, ignore_errors=True)
    print(f"\nmachine at the end: {throughput.machine()}")
    return 0


def _report_inbox(records: list, backbones: list[str], states: dict, t0: float, peak: int, log: str) -> None:
    kg_runs = [r for r in records if any(merges(r.dagster_run.job_name, r.dagster_run.asset_selection, ns)
                                         for ns in backbones)]
    per_job = collections.Counter(r.dagster_run.job_name for r in records)
    merged = collections.Counter((ns, r.dagster_run.tags.get("dagster/partition")) for r in kg_runs for ns in backbones
                                 if merges(r.dagster_run.job_name, r.dagster_run.asset_selection, ns))
    ends = sorted(r.end_time for r in kg_runs if r.dagster_run.status == dg.DagsterRunStatus.SUCCESS and r.end_time)
    failed = [r.dagster_run.job_name for r in records if r.dagster_run.status == dg.DagsterRunStatus.FAILURE]
    dates = sorted({d for _, d in merged})
    print(f"\n{len(records)} runs: " + ", ".join(f"{job} {n}" for job, n in sorted(per_job.items()))
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    print(f"queue peak: {peak} runs")
    if ends:
        print(f"sensors on -> first KG increment merged: {ends[0] - t0:.0f} s; -> last: {ends[-1] - t0:.0f} s")
    print(f"KG increment runs: {len(kg_runs)} for {len(dates)} dates, {sum(merged.values())} merges of "
          f"{len(merged)} (backbone, date) pairs; most merges of one pair: {max(merged.values(), default=0)}")
    for r in sorted(kg_runs, key=lambda r: r.create_timestamp):
        run = r.dagster_run
        names = [ns for ns in backbones if merges(run.job_name, run.asset_selection, ns)]
        print(f"  {run.tags.get('dagster/partition')} {run.status.value.lower()}: requested +"
              f"{r.create_timestamp.timestamp() - t0:.0f} s, started +{(r.start_time or t0) - t0:.0f} s, ended +"
              f"{(r.end_time or t0) - t0:.0f} s; {len(names)} backbone(s) ({run.tags.get('karma/trigger')})")
    for ns in backbones:
        s = states[ns]
        print(f"  {ns}: " + ", ".join(f"{d} x{merged[(ns, d)]}" for d in dates)
              + f"; documents merged {len(s.merged)}/{len(s.registered)}, pending {len(s.pending)}")
    lines = [line for line in log.splitlines() if _WARNING.search(line)]
    recycled = [line for line in lines if _RECYCLED in line]  # the bench's daemon, not `dagster dev`: see below
    counts = collections.Counter(re.sub(r"\d+", "#", line.rsplit(" - ", 1)[-1])[:160]  # the message: not its run
                                 for line in lines if _RECYCLED not in line)                # id, job or step
    repeated = {line: n for line, n in counts.items() if n > 1}
    debug = sum(" - DEBUG - " in line for line in log.splitlines())
    print(f"console: {len(log.splitlines())} lines, {debug} DEBUG, {sum(counts.values())} with 'warning', "
          f"{len(repeated)} repeated" + "".join(f"\n  x{n}: {line}" for line, n in repeated.items())
          + (f"\n  (and {len(recycled)} x Dagster's code server '{_RECYCLED}': `dagster-daemon run` recycles its own "
             "code servers; `dagster dev` shares one)" if recycled else ""))


def _merges_in_order(inst: dg.DagsterInstance, ns: str) -> tuple[list[str], list[str]]:
    """(every date the backbone's KG materializations merged, in the order merged; the dates whose last merge came
    before an earlier date's last merge: [] when the KG is the merge of its dates in ascending order)."""
    from karma_dagster.assets.chain import kg_key

    merged: list[str] = []
    for rec in inst.fetch_materializations(kg_key(ns), limit=10_000, ascending=True).records:
        mat = rec.asset_materialization
        dates = mat.metadata.get("merged_dates") if mat else None
        merged += list(dates.value) if dates is not None else [mat.partition] if mat and mat.partition else []
    last = {d: i for i, d in enumerate(merged)}
    late = [d for d in sorted(last) if any(e < d and last[e] > last[d] for e in last)]
    return merged, late


def _tick_counts(inst: dg.DagsterInstance) -> dict[str, dict[str, int]]:
    """sensor -> tick status -> ticks (from the instance's tick records)."""
    out: dict[str, dict[str, int]] = {}
    for state in inst.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        ticks = inst.get_ticks(state.instigator_origin_id, state.selector_id)
        out[state.instigator_name] = dict(collections.Counter(t.status.value for t in ticks))
    return out


def _report_order(order: dict[str, tuple[list[str], list[str]]], ticks: dict[str, dict[str, int]]) -> None:
    for ns, (merged, late) in order.items():
        print(f"  {ns} KG merges in the order written: {', '.join(merged)} -> "
              + ("every date's last merge after every earlier date's: in date order" if not late else
                 f"OUT OF DATE ORDER: {', '.join(late)} last merged before an earlier date"))
    for sensor, counts in sorted(ticks.items()):
        print(f"  sensor {sensor}: {sum(counts.values())} ticks, " + ", ".join(
            f"{status.lower()} {n}" for status, n in sorted(counts.items()))
              + (" (started: the tick in flight when the daemon was stopped)" if counts.get("STARTED") else ""))


def _start_sensors(folder: Path, home: Path) -> None:
    for sensor in ("new_papers", "kg_increments"):
        subprocess.run([str(Path(sys.executable).with_name("dagster")), "sensor", "start", sensor,
                        "-w", "workspace.yaml"], cwd=folder, check=True, capture_output=True,
                       env={**os.environ, "DAGSTER_HOME": str(home)})


if __name__ == "__main__":
    sys.exit(main())
