"""Review items against distinct facts on a data folder's stage tables (what `karma review` collects).

Prints, per item kind and in all: the proposals the collectors find (one queue item each, before items were per
fact), the distinct facts among them, the items a fresh queue holds after adding them, and the items an old-format
queue of the same proposals holds once this version opens (folds) it.

    python bench/review_items.py --data-dir dagster_home/karma
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections import Counter
from pathlib import Path

from karma_dagster.runtime import services
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.cogmg_items import collect_cogmg
from karma_dagster.review.karma_items import collect_karma
from karma_dagster.review.queue import ReviewQueue

_OLD_DDL = """
CREATE TABLE items(item_id TEXT PRIMARY KEY, source TEXT NOT NULL, backbone TEXT NOT NULL, relation TEXT NOT NULL,
    score REAL NOT NULL, origin TEXT NOT NULL, body TEXT NOT NULL, added_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE decisions(item_id TEXT PRIMARY KEY, action TEXT NOT NULL, reviewer TEXT NOT NULL, decided_at TEXT NOT
    NULL, edits TEXT NOT NULL, merged_at TEXT, merge_date TEXT, merge_note TEXT NOT NULL DEFAULT '');
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="a data folder a `karma run` wrote (its stages/)")
    args = ap.parse_args()
    paths = DataPaths(args.data_dir)
    if not paths.stages_dir.exists():
        raise SystemExit(f"--data-dir {args.data_dir}: no stages/ folder: run `karma run` first")
    t0 = time.perf_counter()
    proposals = collect_karma(paths, services.kg_schema()) + collect_cogmg(paths)
    old = {p.item_id: p for p in proposals}  # the queue before: one item per proposal id
    facts = {p.fact for p in old.values()}
    with tempfile.TemporaryDirectory() as tmp:
        queue = ReviewQueue(Path(tmp) / "new.sqlite")
        queue.add_items(old.values())
        new_items = queue.items(status="all")
        con = sqlite3.connect(Path(tmp) / "old.sqlite")
        con.executescript(_OLD_DDL)
        con.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            (p.item_id, p.source, p.backbone, p.relation, p.score, p.origin, p.model_dump_json(exclude={"proposals"}),
             f"2026-01-01T00:00:{k % 60:02d}", "2026-01-01T00:00:00") for k, p in enumerate(old.values())])
        con.commit()
        con.close()
        migrated = ReviewQueue(Path(tmp) / "old.sqlite").items(status="all")
    by_kind = Counter(p.source for p in old.values())
    facts_by_kind = Counter(i.source for i, _ in new_items)
    print(f"backbones: {', '.join(sorted({p.backbone for p in old.values()}))}")
    print("| kind | items before (one per backbone and document) | items now (one per fact) |")
    print("|---|---:|---:|")
    for kind in sorted(by_kind):
        print(f"| {kind} | {by_kind[kind]:,} | {facts_by_kind.get(kind, 0):,} |")
    print(f"| all | {len(old):,} | {len(new_items):,} |")
    print(f"distinct facts: {len(facts):,}; an old queue of the same items folds to {len(migrated):,}; "
          f"most proposals of one fact: {max(len(i.all_proposals()) for i, _ in new_items) if new_items else 0}; "
          f"{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
