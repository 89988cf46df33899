"""Does this code grow the same KG as another checkout? `karma run` over the same abstracts under each, then
every KG table and every stage table compared row for row.

    python bench/same_kg.py --baseline PATH_TO_OTHER_CHECKOUT [--n 30] [--dates 3] [--cache-dir DIR]

Why: a speed-up of the chain's plumbing (store connections, table building, NER batching) must not change what
the chain reads into the KG. Each side runs in its own process with PYTHONPATH set to its checkout (this script
is the same file for both; only `karma_dagster` differs), over a fresh data dir and a Dagster instance made from
that checkout's dagster_home/dagster.yaml (as `karma run` makes it), the first
N abstracts of the shipped dev corpora spread over `--dates` publication days (so later days link against what
earlier days merged), and a shared cache (lexicon, models). Columns that name a run or a clock (run_id,
merged_at, kg_sizes.state) are left out; everything else must be equal. Exit 0 when both KGs and all stage tables are equal.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
VOLATILE = {"run_id", "merged_at"}  # which run merged a row and when: differ between any two runs
VOLATILE_IN = {"kg_sizes": {"state"}}  # the state a count was taken in names the last merge's merged_at


def produce(out: Path, n: int, dates: int, cache_dir: Path) -> None:
    """One side: `karma run` (runner.run_main) over the abstracts, then its KG and stage tables dumped to `out`."""
    import dagster as dg
    import duckdb

    import karma_dagster
    from karma_dagster import runner
    from karma_dagster.definitions import build_definitions
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource

    sys.path.insert(0, str(REPO / "tests"))
    import daemon_harness as daemon

    inbox = out / "work" / "inbox"
    daemon.write_abstracts(inbox / "abstracts.pubtator", n)
    if dates:
        daemon.spread_dates(inbox / "abstracts.pubtator", dates)
    storage = KarmaStorageResource(data_dir=str(out / "work" / "karma"), inbox=str(inbox), cache_dir=str(cache_dir))
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=storage)
    home = out / "work" / "home"  # `karma run`'s instance: this checkout's dagster.yaml under DAGSTER_HOME
    home.mkdir(parents=True)
    shutil.copy(Path(karma_dagster.__file__).resolve().parents[1] / "dagster_home" / "dagster.yaml", home)
    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as inst:
        outcome = runner.run_main(defs, inst, log=lambda _m: None)
    if outcome.increments_failed:
        raise SystemExit(f"{karma_dagster.__file__}: increments failed: {outcome.increments_failed}")
    data = storage.paths()
    con = duckdb.connect(str(data.kg), read_only=True)
    tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT internal "
                                        "ORDER BY 1").fetchall()]
    kg = out / "kg"
    kg.mkdir()
    for table in tables:
        frame = con.execute(f'SELECT * FROM "{table}"').df()
        frame = frame.drop(columns=[c for c in frame.columns if c in VOLATILE])
        frame.to_pickle(kg / f"{table}.pkl")
    con.close()
    stages = sorted(p.relative_to(data.stages_dir) for p in Path(data.stages_dir).glob("*/*/*.parquet"))
    (out / "meta.json").write_text(json.dumps({"code": karma_dagster.__file__, "kg_tables": tables,
                                               "stage_root": str(data.stages_dir),
                                               "stage_files": [str(p) for p in stages]}))


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in a canonical order (the KG's tables have no row order of their own)."""
    if frame.empty:
        return frame.reset_index(drop=True)
    keys = frame.astype(str)
    return frame.iloc[keys.sort_values(list(keys.columns)).index].reset_index(drop=True)


def compare(old: Path, new: Path) -> list[str]:
    """What differs between two produced sides ([] when they agree everywhere)."""
    a, b = (json.loads((side / "meta.json").read_text()) for side in (old, new))
    problems: list[str] = []
    if a["kg_tables"] != b["kg_tables"]:
        problems.append(f"KG tables differ: {a['kg_tables']} vs {b['kg_tables']}")
    for table in sorted(set(a["kg_tables"]) & set(b["kg_tables"])):
        fa, fb = (_sorted(pd.read_pickle(side / "kg" / f"{table}.pkl").drop(columns=list(VOLATILE_IN.get(table, ()))))
                  for side in (old, new))
        if not fa.equals(fb):
            problems.append(f"KG table {table}: {len(fa)} vs {len(fb)} rows, not equal")
    if a["stage_files"] != b["stage_files"]:
        problems.append(f"stage files differ: {len(a['stage_files'])} vs {len(b['stage_files'])}")
    for rel in sorted(set(a["stage_files"]) & set(b["stage_files"])):
        fa, fb = (pd.read_parquet(Path(meta["stage_root"]) / rel) for meta in (a, b))
        if not fa.equals(fb):
            problems.append(f"stage table {rel}: not equal")
    return problems


def summary(side: Path) -> str:
    meta = json.loads((side / "meta.json").read_text())
    sizes = {t: len(pd.read_pickle(side / "kg" / f"{t}.pkl")) for t in ("extracted_nodes", "evidence", "increments")
             if t in meta["kg_tables"]}
    return f"{meta['code']}: {len(meta['stage_files'])} stage tables, KG rows {sizes}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="the other checkout (its karma_dagster/ is imported)")
    ap.add_argument("--n", type=int, default=30, help="abstracts")
    ap.add_argument("--dates", type=int, default=3, help="publication days the abstracts are spread over")
    ap.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "bench-throughput")
    ap.add_argument("--produce", type=Path, help=argparse.SUPPRESS)  # one side, in its own process
    args = ap.parse_args(argv)
    if args.produce:
        produce(args.produce, args.n, args.dates, args.cache_dir.resolve())
        return 0
    if args.baseline is None or not (args.baseline / "karma_dagster").is_dir():
        raise SystemExit(f"--baseline {args.baseline}: not a checkout of this project (no karma_dagster/ in it)")
    work = Path(tempfile.mkdtemp(prefix="karma-same-kg-"))
    sides = {"baseline": (args.baseline.resolve(), work / "baseline"), "this": (REPO, work / "this")}
    for name, (tree, out) in sides.items():
        env = {**os.environ, "PYTHONPATH": str(tree), "DAGSTER_HOME": str(work / f"{name}-home")}
        out.mkdir()
        subprocess.run([sys.executable, __file__, "--produce", str(out), "--n", str(args.n), "--dates",
                        str(args.dates), "--cache-dir", str(args.cache_dir.resolve())], env=env, check=True)
        print(summary(out), flush=True)
    problems = compare(sides["baseline"][1], sides["this"][1])
    print("\n".join(problems) if problems else "the same KG and stage tables from the same papers")
    print(f"(both sides kept under {work})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
