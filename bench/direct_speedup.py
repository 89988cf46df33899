"""The direct path (agents called as functions) of this checkout against another's, side by side in one run.

    python bench/direct_speedup.py --baseline PATH_TO_OTHER_CHECKOUT [--n 30] [--rounds 2] [--cache-dir DIR]

Each round runs `bench/throughput.py --modes direct` of the baseline, then of this checkout, each in its own
process with PYTHONPATH set to its checkout, on the same abstracts and the same shared cache; alternating
rounds spread any drift of the machine's load over both. Prints each run's abstracts/min, the median of each side,
their ratio and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RATE = re.compile(r"^direct: (\d+) abstracts in ([\d.]+) s = ([\d.]+) abstracts/min", re.M)


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def one(tree: Path, n: int, cache_dir: Path) -> float:
    """abstracts/min of `tree`'s direct path, from its own bench/throughput.py."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(tree / "bench" / "throughput.py"), "--n", str(n), "--modes", "direct",
                          "--cache-dir", str(cache_dir)], env=env, capture_output=True, text=True)
    found = RATE.search(out.stdout)
    if out.returncode or not found:
        raise SystemExit(f"{tree}: bench/throughput.py failed (exit {out.returncode}):\n{out.stdout[-2000:]}"
                         f"\n{out.stderr[-3000:]}")
    return float(found.group(3))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="the other checkout (its karma_dagster/ is imported)")
    ap.add_argument("--n", type=int, default=30, help="abstracts per run")
    ap.add_argument("--rounds", type=int, default=2, help="baseline-then-this rounds")
    ap.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "bench-throughput")
    args = ap.parse_args(argv)
    if not (args.baseline / "bench" / "throughput.py").is_file():
        raise SystemExit(f"--baseline {args.baseline}: no bench/throughput.py in it")
    cache = args.cache_dir.resolve()
    sides = {"baseline": args.baseline.resolve(), "this": REPO}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    print(f"{os.cpu_count()} CPUs, load average at the start {load()} (1/5/15 min)", flush=True)
    for i in range(args.rounds):
        for name, tree in sides.items():
            rates[name].append(one(tree, args.n, cache))
            print(f"round {i + 1} {name} ({tree}): {rates[name][-1]:.1f} abstracts/min, load {load()}", flush=True)
    old, new = (statistics.median(rates[name]) for name in sides)
    print(f"\nmedian over {args.rounds} rounds of {args.n} abstracts: baseline {old:.1f}, this {new:.1f} "
          f"abstracts/min; ratio {new / old:.2f}")
    print(f"load average at the end {load()} (1/5/15 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
