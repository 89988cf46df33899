"""Registering a MEDLINE-layout file of 30,000 citations: time (citations/s) and peak memory, plain and gzip.

The file is built from the shipped corpora (data/corpora/*.pubtator.gz: BioRED, BC5CDR, NCBI disease), their
abstracts repeated under new PMIDs (tests/literature_files.py; the dates and metadata are test data). Each
variant is registered by `scan_inbox` into a fresh catalog in a child process of its own (spawned: its peak RSS,
`ru_maxrss`, is its own and not the parent's), which is what `karma run` and the `new_papers` sensor do with a
new file: stream it once to check every citation, then register it 500 citations per transaction with their
byte spans. Printed beside the machine's load average, since the figures move with it.

Usage: python bench/pubmed_register.py [--n 30000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def _register(inbox: str, catalog_path: str, out: mp.Queue) -> None:
    """In the child: import, note the RSS, scan the inbox, report the figures."""
    from karma_dagster.ingest.catalog import Catalog
    from karma_dagster.ingest.inbox import scan_inbox

    catalog = Catalog(Path(catalog_path))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    result = scan_inbox(Path(inbox), catalog, dt.date(2026, 1, 2))
    seconds = time.perf_counter() - t0
    out.put({"seconds": seconds, "keys": len(result.new_keys), "failed": [f.error for f in result.failed],
             "rss_before_kb": before, "rss_peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})


def _parse_only(path: str, out: mp.Queue) -> None:
    from karma_dagster.ingest.pubmed import parse_pubmed

    t0 = time.perf_counter()
    n = sum(1 for _ in parse_pubmed(Path(path), Path(path).name))
    out.put({"seconds": time.perf_counter() - t0, "n": n,
             "rss_peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})


def _child(target, *args) -> dict:  # noqa: ANN001
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, out))
    proc.start()
    figures = out.get(timeout=3600)
    proc.join(timeout=60)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=30_000, help="citations in the file")
    ap.add_argument("--keep", type=Path, help="build the files here and keep them (default: a temporary folder)")
    args = ap.parse_args()
    from literature_files import write_generated

    root = args.keep or Path(tempfile.mkdtemp(prefix="pubmed-bench-"))
    load0 = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} (1/5/15 min) "
          "at start")
    rows = []
    for name in ("pubmed26n0001.xml", "pubmed26n0001.xml.gz"):
        inbox = root / name.replace(".", "_")
        inbox.mkdir(parents=True, exist_ok=True)
        path = inbox / name
        if not path.exists():
            write_generated(path, args.n)
        parse = _child(_parse_only, str(path))
        reg = _child(_register, str(inbox), str(root / f"{name}.catalog.sqlite"))
        if reg["failed"] or reg["keys"] != args.n:
            raise SystemExit(f"{name}: registered {reg['keys']} of {args.n}; failed: {reg['failed']}")
        rows.append((name, path.stat().st_size, parse, reg, os.getloadavg()[0]))
    print(f"\n{args.n:,} citations (MEDLINE layout, the shipped corpora repeated under new PMIDs)\n")
    print("| file | size | parse only | registration (scan_inbox) | citations/s | peak RSS (before scan) | load |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, size, parse, reg, load in rows:
        print(f"| {name} | {size / 1e6:.1f} MB | {parse['seconds']:.1f} s | {reg['seconds']:.1f} s "
              f"| {args.n / reg['seconds']:,.0f} | {reg['rss_peak_kb'] / 1024:.0f} MB "
              f"({reg['rss_before_kb'] / 1024:.0f} MB) | {load:.2f} |")
    load1 = os.getloadavg()
    print(f"\nload average {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} at the end; files in {root}"
          + ("" if args.keep else " (temporary)"))


if __name__ == "__main__":
    main()
