"""`karma check`: every KG row that breaks an admission rule, and every row that breaks an invariant
(kg/invariants.py: no edge certain from one paper, no extracted node that is another node); exit 1 when there is any."""

from __future__ import annotations

import argparse
import sys

SHOWN = 50  # rows printed per rule; the counts cover all of them


def cmd_check(args: argparse.Namespace) -> int:
    from karma_dagster.kg import invariants
    from karma_dagster.kg.admission_rules import RULES as ADMISSION
    from karma_dagster.kg.backends import kg_store
    from karma_dagster.runtime.paths import DataPaths

    rules = {**ADMISSION, **invariants.INVARIANTS}
    store = kg_store(DataPaths(args.data_dir or ""))
    if not store.exists():
        print("karma check: no KG in the data folder yet (`karma run` or `karma import-kg` makes one)",
              file=sys.stderr)
        return 2
    report = invariants.check_store(store)
    wanted = [v for v in report.violations if not args.backbone or v.namespace in (None, *args.backbone)]  # + seed
    if not wanted:
        print(f"KG check: {report.n_rows} rows, every one admitted by the rules ({', '.join(rules)})")
        return 0
    counts: dict[str, int] = {}
    for v in wanted:
        counts[v.rule] = counts.get(v.rule, 0) + 1
    print(f"KG check: {len(wanted)} of {report.n_rows} rows break an admission rule or invariant: "
          + ", ".join(f"{rule} {n}" for rule, n in sorted(counts.items())))
    for rule in sorted(counts):
        rows = [v for v in wanted if v.rule == rule]
        print(f"\n{rule} ({rules[rule]}): {len(rows)}")
        for v in rows[:SHOWN]:
            where = f"{v.table}{f' [{v.namespace}]' if v.namespace else ''} {v.key}"
            print(f"- {where}: {v.message}")
        if len(rows) > SHOWN:
            print(f"... and {len(rows) - SHOWN} more")
    return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="report every KG row that breaks an admission rule (self-edge, metaedge, "
                                     "domain/range, id kind, evidence, date), every edge certain (>= 0.99) from fewer "
                                     "than 2 papers and every extracted node that is another node (what "
                                     "`karma dedupe` folds); exit 1 when any does")
    p.add_argument("--data-dir", help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.add_argument("--backbone", action="append", help="only this backbone's rows and the seed's (repeatable)")
    p.set_defaults(func=cmd_check)
