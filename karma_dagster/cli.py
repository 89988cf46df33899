"""`karma`: the main job, the KG import, date-range backfills and the report, from a shell.

Everything runs against the Dagster instance in $DAGSTER_HOME (default: the repo's dagster_home/), so what
the commands do shows in the UI afterwards.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys


def _defs(args: argparse.Namespace):
    from karma_dagster.definitions import backbone_configs_from_file, build_definitions
    from karma_dagster.resources.storage import KarmaStorageResource

    configs = backbone_configs_from_file()
    if getattr(args, "backbone", None):
        missing = [b for b in args.backbone if b not in configs]
        if missing:
            raise SystemExit(f"unknown or disabled backbone(s) {missing}; enabled in backbones.yaml: {sorted(configs)}")
        configs = {b: configs[b] for b in args.backbone}
    storage = KarmaStorageResource(inbox=getattr(args, "inbox", "") or "", data_dir=getattr(args, "data_dir", "") or "")
    return build_definitions(backbones=configs, storage=storage)


def cmd_run(args: argparse.Namespace) -> int:
    from karma_dagster import main_job

    inst = main_job.instance()
    report = main_job.run_main(_defs(args), inst)
    print("\n# karma-dagster run report\n")
    print(report.markdown())
    return 0


def cmd_import_kg(args: argparse.Namespace) -> int:
    from karma_dagster import main_job

    ok = main_job.import_kg(_defs(args), main_job.instance(), args.nodes or "", args.edges or "", args.format)
    print("seed KG imported and indexed" if ok else "seed KG import FAILED (see the import_kg run in the UI)")
    return 0 if ok else 1


def cmd_backfill(args: argparse.Namespace) -> int:
    from karma_dagster import main_job

    defs = _defs(args)
    inst = main_job.instance()
    main_job.setup_pools(inst)
    keys, _ = main_job.register_inbox(defs, inst)
    namespaces = list(defs.resources["backbones"].names())  # type: ignore[index, union-attr]
    if args.here:
        from karma_dagster.partitions import date_of_document_key

        docs = main_job.documents_in_range(defs, args.start, args.end)
        failed = main_job.run_documents(defs, inst, docs)
        dates = sorted({date_of_document_key(k) for k in docs})
        for ns in namespaces:
            main_job.run_increments(defs, inst, ns, dates)
        print(f"{len(docs)} documents, {len(failed)} failed; increments: {', '.join(dates) or 'none'}")
        return 1 if failed else 0
    status = main_job.backfill_dates(defs, inst, args.start, args.end, namespaces, timeout_s=args.timeout)
    print(status)
    return 0 if all(s in ("COMPLETED", "COMPLETED_SUCCESS") for s in status.values()) else 1


def cmd_report(args: argparse.Namespace) -> int:
    from karma_dagster.kg.store import KGStore
    from karma_dagster.report import build_report

    defs = _defs(args)
    storage = defs.resources["storage"]  # type: ignore[index]
    report = build_report(storage.stage_store(), KGStore(storage.kg_path()), defs.resources["backbones"].names())  # type: ignore[index, union-attr]
    print(report.markdown())
    return 0


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="karma", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--inbox", help="folder of papers (default: the repo's data/inbox sample)")
        p.add_argument("--data-dir", help="run-time data folder (default: $DAGSTER_HOME/karma)")
        p.add_argument("--backbone", action="append", help="only this backbone (repeatable; default: all enabled)")

    p = sub.add_parser("run", help="the main job: import the seed KG if needed, ingest the inbox, grow the KG, report")
    common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("import-kg", help="import an existing KG (node + edge tables) and index its entity names")
    common(p)
    p.add_argument("--nodes", help="node table (Hetionet nodes.tsv, or id/name/kind[/synonyms] for --format generic)")
    p.add_argument("--edges", help="edge table (Hetionet .sif[.gz], or source/relation/target for --format generic)")
    p.add_argument("--format", choices=["hetionet", "generic"], default="hetionet")
    p.set_defaults(func=cmd_import_kg)

    p = sub.add_parser("backfill", help="process the documents of a date range, then their KG increments in date order")
    common(p)
    p.add_argument("--start", type=_date, required=True)
    p.add_argument("--end", type=_date, required=True)
    p.add_argument("--here", action="store_true", help="run in this process instead of launching Dagster backfills")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for each backfill")
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser("report", help="print the report of what is in the stores now")
    common(p)
    p.set_defaults(func=cmd_report)

    args = parser.parse_args(argv)
    if getattr(args, "start", None) and args.end < args.start:
        parser.error(f"--end {args.end} is before --start {args.start}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
