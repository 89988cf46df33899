"""`karma dedupe [--dry-run]`: fold a KG's extracted nodes that are existing nodes into them (kg/dedupe.py)."""

from __future__ import annotations

import argparse
import sys


def cmd_dedupe(args: argparse.Namespace) -> int:
    from karma_dagster.kg import dedupe
    from karma_dagster.kg.backends import kg_store
    from karma_dagster.runtime.paths import DataPaths

    store = kg_store(DataPaths(args.data_dir or ""))
    if not store.exists():
        print("karma dedupe: no KG in the data folder yet (`karma run` or `karma import-kg` makes one)",
              file=sys.stderr)
        return 2
    known = dedupe.namespaces(store)
    wanted = args.backbone or known
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        print(f"karma dedupe: --backbone {', '.join(unknown)}: no extracted nodes in the KG; backbones with some: "
              f"{', '.join(known) or 'none'}", file=sys.stderr)
        return 2
    total = 0
    for ns in wanted:
        folds = dedupe.find(store, ns) if args.dry_run else dedupe.repair(store, ns)
        total += len(folds)
        verb = "would fold" if args.dry_run else "folded"
        print(f"{ns}: {verb} {len(folds)} extracted node(s) into the node each already is "
              f"({sum(f.target == 'seed' for f in folds)} seed, {sum(f.target == 'extracted' for f in folds)} "
              f"extracted; {sum(f.n_evidence for f in folds)} evidence rows re-pointed)")
        for f in folds:
            print(f"- {f.old_id} ({f.name!r}, {f.kind}) -> {f.new_id} [{f.target}], {f.n_evidence} evidence rows")
            for reason in f.refused:  # rows the fold would make inadmissible: they go to review instead
                print(f"  {'would keep out' if args.dry_run else 'kept out'}: {reason}")
    if args.dry_run and total:
        print("nothing changed (--dry-run); `karma dedupe` folds them, recorded in the KG's dedupe_log table")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dedupe", help="fold extracted nodes that are existing KG nodes (same id, cross-reference or "
                                      "exact name) into them, re-pointing their evidence")
    p.add_argument("--data-dir", help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.add_argument("--backbone", action="append", help="only this backbone (repeatable; default: every one)")
    p.add_argument("--dry-run", action="store_true", help="print what would be folded, change nothing")
    p.set_defaults(func=cmd_dedupe)
