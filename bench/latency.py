"""Drop a paper into the inbox, wait for its KG increment: the UI path end to end (issue 12's third target).

    python bench/latency.py [--papers 3]

A real `dagster-daemon` (as under `dagster dev`, the repo's dagster.yaml) with the `new_papers` and
`kg_increments` sensors on, the local backbone, a fresh instance and data dir, the seed imported and the
models' cache built beforehand. Each paper (an abstract of BioRED dev, one at a time) is written into the inbox;
the time until the KG increment of its date has merged it (the KG's merged_documents) is printed, with what
the sensors and runs took in between (from the instance's run records).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dagster as dg  # noqa: E402

from karma_dagster import runner  # noqa: E402
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
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for one paper")
    ap.add_argument("--cache-dir", type=Path, default=throughput.REPO / ".cache" / "bench-throughput")
    args = ap.parse_args(argv)
    print(f"machine at the start: {throughput.machine()}")
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


def _start_sensors(folder: Path, home: Path) -> None:
    for sensor in ("new_papers", "kg_increments"):
        subprocess.run([str(Path(sys.executable).with_name("dagster")), "sensor", "start", sensor,
                        "-w", "workspace.yaml"], cwd=folder, check=True, capture_output=True,
                       env={**os.environ, "DAGSTER_HOME": str(home)})


if __name__ == "__main__":
    sys.exit(main())
