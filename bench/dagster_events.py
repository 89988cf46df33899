"""What one event costs in the local Dagster instance: Dagster's own SQLite storage against the project's.

    python bench/dagster_events.py [--events 300] [--rounds 3]

Each round writes the same asset materializations (one per document partition, as a stage step logs them) to a
fresh home made with Dagster's default storage and to one made with the project's dagster_home/dagster.yaml
(KarmaInstance: the same files, each database's connection pool kept), one after the other, and prints ms an
event for each, their ratio, and the machine's load before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import dagster as dg

REPO = Path(__file__).resolve().parents[1]
STOCK = "telemetry:\n  enabled: false\n"


def ms_an_event(home: Path, yaml: str | None, events: int) -> float:
    home.mkdir()
    if yaml is None:
        shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    else:
        (home / "dagster.yaml").write_text(yaml)
    key = dg.AssetKey(["local", "entities"])
    with dg.DagsterInstance.from_config(str(home)) as inst:
        inst.report_runless_asset_event(dg.AssetMaterialization(key, partition="warm-up"))
        t0 = time.perf_counter()
        for i in range(events):
            inst.report_runless_asset_event(dg.AssetMaterialization(key, partition=f"doc-{i}", metadata={"rows": i}))
        return (time.perf_counter() - t0) / events * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, load average before: {os.getloadavg()[0]:.2f}")
    stock, kept = [], []
    with tempfile.TemporaryDirectory(prefix="karma-events-") as tmp:
        for r in range(args.rounds):
            stock.append(ms_an_event(Path(tmp) / f"stock-{r}", STOCK, args.events))
            kept.append(ms_an_event(Path(tmp) / f"kept-{r}", None, args.events))
            print(f"round {r + 1}: Dagster's storage {stock[-1]:.2f} ms an event, the project's {kept[-1]:.2f} ms "
                  f"({stock[-1] / kept[-1]:.2f}x)", flush=True)
    s, k = statistics.median(stock), statistics.median(kept)
    print(f"median: {s:.2f} ms vs {k:.2f} ms an event: {s / k:.2f}x ({args.events} materializations a round)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
