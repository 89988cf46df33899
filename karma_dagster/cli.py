"""`karma`: the main job, the KG import, date-range backfills and the report, from a shell.

Everything runs against the Dagster instance in $DAGSTER_HOME (default: the project's dagster_home/, else the
repo's), so what the commands do shows in the UI afterwards. The project is $KARMA_PROJECT, else the current
directory when it holds a karma.yaml (`karma init DIR` writes one), else none: the package's defaults.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import NoReturn


def _defs(args: argparse.Namespace):
    from karma_dagster.runtime.config import not_configured, read_backbones
    from karma_dagster.definitions import build_definitions
    from karma_dagster.runtime.paths import backbones_label
    from karma_dagster.resources.backbones import backbone_configs_from_file
    from karma_dagster.resources.storage import KarmaStorageResource

    from karma_dagster.resources.backbones import config_of

    configs = backbone_configs_from_file()
    if getattr(args, "backbone", None):
        # a backbone named on the command line runs even when backbones.yaml has it disabled (`--backbone smollm2`
        # next to `karma llm-serve`); one whose key variable is unset cannot
        entries = read_backbones().backbones
        unknown = [b for b in args.backbone if b not in entries]
        if unknown:
            raise UsageError(f"--backbone {', '.join(unknown)}: not in backbones.yaml; it has: "
                             f"{', '.join(sorted(entries))}")
        keyless = [not_configured(b, entries[b].api_key_env) for b in args.backbone if entries[b].key_missing()]
        if keyless:
            raise UsageError("; ".join(keyless))
        configs = {b: configs.get(b) or config_of(entries[b]) for b in args.backbone}
    storage = KarmaStorageResource(inbox=getattr(args, "inbox", "") or "", data_dir=getattr(args, "data_dir", "") or "",
                                   undated=getattr(args, "undated", "") or "")
    # every backbone of the file, so backbones_status lists the disabled and NOT CONFIGURED ones too
    return build_definitions(backbones=configs, storage=storage, statuses=read_backbones().statuses(),
                             backbones_source=backbones_label())


def cmd_run(args: argparse.Namespace) -> int:
    from karma_dagster import runner

    inst = runner.instance()
    defs_ = _defs(args)
    outcome = runner.run_main(defs_, inst)
    print("\n# karma-dagster run report\n")
    print(outcome.markdown())
    _print_comparison(defs_, inst)
    _say_if_dedupe_due(args)
    if outcome.failed:  # scripts and schedulers must be able to tell: non-zero, and what failed
        print(f"\nFAILED: {len(outcome.failed)} item(s); `karma run` again retries them:", file=sys.stderr)
        for what, why in sorted(outcome.failed.items()):
            print(f"- {what}: {why}", file=sys.stderr)
        return 1
    return 0


def _say_if_dedupe_due(args: argparse.Namespace) -> None:
    """A KG grown before one-node-per-entity (issue 27) holds extracted nodes that are seed nodes: say so once."""
    from karma_dagster.kg import dedupe
    from karma_dagster.kg.backends import kg_store
    from karma_dagster.runtime.paths import DataPaths

    store = kg_store(DataPaths(getattr(args, "data_dir", "") or ""))
    if not store.exists():
        return
    due = {ns: len(dedupe.find(store, ns)) for ns in dedupe.namespaces(store)}
    if any(due.values()):
        print("\nrepair due: " + ", ".join(f"{ns} {n}" for ns, n in due.items() if n) + " extracted node(s) are nodes "
              "the KG already has (merged before one node per entity); `karma dedupe --dry-run` lists them, "
              "`karma dedupe` folds them into those nodes", file=sys.stderr)


def cmd_status(args: argparse.Namespace) -> int:
    """Per backbone: documents registered, evaluated, merged, unmerged, failed, pending (read-only). Accepted review
    items not in the KG as their date's merge takes them (never merged, or that merge failed) count as unmerged."""
    from karma_dagster import runner

    defs = _defs(args)
    if args.document:
        return _print_document(defs, args.document)
    states = runner.document_states(defs, runner.instance())
    names = ("registered", "evaluated", "merged", "unmerged", "failed", "pending")
    print("| backbone | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for ns, state in states.items():
        counts = state.counts()
        print(f"| {ns} | " + " | ".join(str(counts[n]) for n in names) + " |")
    for ns, state in states.items():
        if state.unmerged:
            keys = [f"{k} (accepted review item, KG date {state.dates[k]})" if k in state.dates else k
                    for k in state.unmerged]
            print(f"\n{ns}: unmerged (the next `karma run` merges them): {', '.join(keys)}")
        if state.reviewed:
            print(f"{ns}: {len(state.reviewed)} accepted review item(s) merged")
        for key, why in sorted(state.failed.items()):
            print(f"{ns}: failed {key}: {why}")
    _print_undated(defs.resources["storage"].catalog_path())  # type: ignore[index, union-attr]
    return 0


RECORD_COLUMNS = ("rows", "seconds", "variant", "prompt_id", "llm_calls", "cache_hits", "tokens_in", "tokens_out",
                  "cost_usd")


def _print_document(defs, key: str) -> int:  # noqa: ANN001 - dg.Definitions, imported lazily by the CLI
    """One document's stages per backbone as each recorded them with its table (StageStore.recorded): with date
    partitions the UI shows a day's totals, this shows the paper's own."""
    from karma_dagster.ingest.catalog import Catalog
    from karma_dagster.stages import STAGE_NAMES

    storage, backbones = defs.resources["storage"], defs.resources["backbones"]
    entry = Catalog(storage.catalog_path()).lookup(key)
    store = storage.stage_store()
    print(f"document {key}" + (f" (dated {entry.date}, {entry.date_source})" if entry else ""))
    print("| backbone | stage | " + " | ".join(RECORD_COLUMNS) + " |")
    print("|---|---|" + "---|" * len(RECORD_COLUMNS))
    found = 0
    for ns in backbones.names():
        for stage in STAGE_NAMES:
            if not store.exists(ns, stage, key):
                continue
            found += 1
            record = store.recorded(ns, stage, key)
            print(f"| {ns} | {stage} | " + " | ".join(str(record.get(c, "")) for c in RECORD_COLUMNS) + " |")
    if not found:
        print(f"no stage table of {key!r} in any backbone: is it registered (`karma status`)?", file=sys.stderr)
        return 1
    return 0


def _print_undated(path: Path) -> None:
    """Which documents have no publication date and why, and what `undated: skip` kept out (ingest/undated.py)."""
    from karma_dagster.ingest.catalog import Catalog
    from karma_dagster.ingest.undated import undated_summary

    if path.exists() and (lines := undated_summary(Catalog(path)).lines()):
        print("\n" + "\n".join(lines))


def _print_comparison(defs, inst) -> bool:  # noqa: ANN001
    from karma_dagster import runner
    from karma_dagster.runtime.config import read_backbones

    ok, table = runner.run_comparison(defs, inst)
    print("\n# backbones side by side (backbone_comparison; CSV and PNG under <data_dir>/metrics/)\n")
    print(table)
    hint = runner.enable_hint(read_backbones().statuses())
    if hint:
        print("\n" + hint)
    return ok


def cmd_compare(args: argparse.Namespace) -> int:
    from karma_dagster import runner

    return 0 if _print_comparison(_defs(args), runner.instance()) else 1


def cmd_gold_eval(args: argparse.Namespace) -> int:

    from karma_dagster.runtime import services
    from karma_dagster.metrics.gold_run import KGView, evaluate_file, summary_table
    from karma_dagster.runtime.params import KarmaParams
    from karma_dagster.runtime.paths import data_file

    files = [Path(f) for f in args.pubtator]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:  # before the seed import and the model: a typo should not cost a minute
        raise UsageError(f"--pubtator {', '.join(missing)}: no such file (or a folder)")
    defs = _defs(args)
    storage = defs.resources["storage"]  # type: ignore[index]
    data = storage.paths()  # type: ignore[union-attr]
    if not services.seed_present(data):
        print("importing the seed KG ...", file=sys.stderr)
        services.import_seed_kg(data, data_file("seed_kg", "nodes.tsv"), data_file("seed_kg", "edges.sif.gz"),
                                "hetionet", KarmaParams().seed_edge_confidence)
    name = args.backbone[0]
    backbone = defs.resources["backbones"].get(name, storage)  # type: ignore[index, union-attr]
    runs = []
    kg = KGView(schema=services.kg_schema(), kind_of=services.kg_kind_lookup(data),
                existing=services.existing_relations_lookup(data, name))
    for path in files:
        scores, seconds, judgement = evaluate_file(
            path, backbone, services.dictionary(data), services.entity_index(data), KarmaParams(),
            limit=args.limit,
            log=lambda m: print(m, file=sys.stderr), kg=kg, identity=services.identity_index(data, name),
        )
        runs.append((path.name, scores))
        print(f"{name} on {path.name}: {scores.one_line()} | {seconds:.1f} s")
        if judgement is not None:
            print(f"{name} on {path.name}: {judgement.one_line()}")
            print(f"{name} on {path.name}: {judgement.scope_line()}")
        if args.table:
            print()
            print(scores.markdown())
            print()
    if len(runs) > 1:
        print()
        print(summary_table(runs))
    return 0


def cmd_import_kg(args: argparse.Namespace) -> int:
    from karma_dagster import runner
    from karma_dagster.assets.seed_kg import import_summary

    for option, given in (("--nodes", args.nodes), ("--edges", args.edges)):
        if given and not Path(given).is_file():  # before a Dagster run is launched for it
            raise UsageError(f"{option} {given}: " + ("a folder, not a file" if Path(given).is_dir() else "no such file"))
    if args.format == "kgx" and not (args.nodes and args.edges):
        raise UsageError("--format kgx: give the graph's files, --nodes NODES.tsv[.gz] --edges EDGES.tsv[.gz]")
    defs = _defs(args)
    if_grown = "replace" if args.replace else "add" if args.add else "refuse"
    if if_grown == "refuse":  # before a run is launched: a grown KG is refused in one line, exit 2 (the asset too)
        from karma_dagster.kg import seed_guard
        from karma_dagster.kg.backends import kg_store

        data = defs.resources["storage"].paths()  # type: ignore[index, union-attr]
        if (grown := seed_guard.grown(kg_store(data))) is not None:
            raise seed_guard.SeedImportRefused(grown.refusal())
    inst = runner.instance()
    ok = runner.import_kg(defs, inst, args.nodes or "", args.edges or "", args.format, reimport=True,
                          on_failure=lambda error: print(f"karma import-kg: {error}", file=sys.stderr),
                          if_grown=if_grown)
    print("seed KG imported and indexed" if ok else "seed KG import FAILED (see the import_kg run in the UI)")
    for line in import_summary(inst) if ok else []:
        print(line)
    return 0 if ok else 1


def cmd_backfill(args: argparse.Namespace) -> int:
    from karma_dagster import runner

    defs = _defs(args)
    inst = runner.instance()
    runner.setup_pools(inst, defs.resources["backbones"])  # type: ignore[index, arg-type]
    keys, _ = runner.register_inbox(defs, inst)
    namespaces = list(defs.resources["backbones"].names())  # type: ignore[index, union-attr]
    if args.here:
        from karma_dagster.ingest.keys import date_of_document_key

        docs = runner.documents_in_range(defs, args.start, args.end)
        failed, merged = runner.run_dates(defs, inst, docs, namespaces)  # date by date: D's chains, then D's merge
        dates = sorted({date_of_document_key(k) for k in docs})
        bad_merges = sorted(f"{ns} {d}" for ns, by_date in merged.items() for d, ok in by_date.items() if not ok)
        print(f"{len(docs)} documents, {len(failed)} failed; increments: {', '.join(dates) or 'none'}"
              + (f"; increments FAILED: {', '.join(bad_merges)}" if bad_merges else ""))
        return 1 if failed or bad_merges else 0
    status = runner.backfill_dates(defs, inst, args.start, args.end, namespaces, timeout_s=args.timeout)
    print(status)
    return 0 if all(s in ("COMPLETED", "COMPLETED_SUCCESS") for s in status.values()) else 1


def cmd_ledger(args: argparse.Namespace) -> int:
    """Totals of the cost ledger; only the data dir is needed (no definitions, no Dagster instance)."""
    from karma_dagster.runtime.ledger import GROUPS, Ledger, format_failed, format_totals, ledger_path
    from karma_dagster.resources.storage import KarmaStorageResource

    by = [c.strip() for c in args.by.split(",") if c.strip()]
    if not by or set(by) - set(GROUPS):
        raise UsageError(f"--by {args.by!r}: group by columns among {', '.join(GROUPS)}")
    path = ledger_path(KarmaStorageResource(data_dir=args.data_dir or "").root())
    if path.parent.exists() and not path.parent.is_dir():
        raise UsageError(f"--data-dir {path.parent}: a file, not a folder")
    if not path.exists():
        print(f"no ledger yet at {path} (it is written when a stage is materialized)")
        return 0
    ledger = Ledger(path)
    print(format_totals(ledger.totals(by, run_id=args.run, backbone=args.backbone)))
    if "status" not in by and (failed := format_failed(ledger.totals(["status"], run_id=args.run,
                                                                     backbone=args.backbone))):
        print(failed)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from karma_dagster.ingest.catalog import Catalog
    from karma_dagster.report import build_report

    defs = _defs(args)
    storage = defs.resources["storage"]  # type: ignore[index]
    catalog = Catalog(storage.catalog_path()) if storage.catalog_path().exists() else None  # type: ignore[union-attr]
    report = build_report(storage.stage_store(), storage.kg_store(), defs.resources["backbones"].names(),  # type: ignore[index, union-attr]
                          catalog=catalog)
    print(report.markdown())
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    """Remove one document: its KG evidence, stage tables (every backbone) and catalog entry; 2 = unknown key."""
    from karma_dagster.runtime.removal import UnknownDocument, plan_removal, remove_document
    from karma_dagster.resources.storage import KarmaStorageResource

    data = KarmaStorageResource(inbox=args.inbox or "", data_dir=args.data_dir or "").paths()
    try:
        plan = plan_removal(args.doc_key, data) if args.dry_run else remove_document(args.doc_key, data)
    except UnknownDocument:
        print(f"karma remove: unknown document key {args.doc_key!r} (not in the catalog, the stage tables or the "
              "KG; `karma status` counts the registered ones)", file=sys.stderr)
        return 2
    except ValueError as exc:  # e.g. a key no document could have (a path, a space): say what, not "unknown"
        print(f"karma remove {args.doc_key!r}: {exc}", file=sys.stderr)
        return 2
    print(("would remove " if args.dry_run else "removed ") + args.doc_key + ":")
    for line in plan.lines():
        print(f"- {line}")
    if args.dry_run:
        return 0
    from karma_dagster import runner
    from karma_dagster.partitioning.definitions import documents_partitions

    inst = runner.instance()
    if inst.has_dynamic_partition(documents_partitions.name, args.doc_key):
        inst.delete_dynamic_partition(documents_partitions.name, args.doc_key)
    if plan.entry is not None and plan.entry.sources:
        print("its files stay in the inbox and are not registered again unless they change: "
              + ", ".join(s.source_path for s in plan.entry.sources))
    return 0


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from exc


def _quiet_known_noise() -> None:
    """Third-party notices that say nothing to a user of this command (they stay visible in the Dagster UI logs)."""
    import os
    import warnings

    os.environ.setdefault("LANCE_LOG", "error")
    warnings.filterwarnings("ignore", message=r".*is currently in (beta|preview).*")


EXIT_FAILURE, EXIT_USAGE, STORE_CORRUPT_EXIT = 1, 2, 3
EXIT_CODES_HELP = ("exit codes: 0 done (for `karma ask`: answered, including 'no fact found' and 'not understood'); "
                   "1 failure; 2 bad input (a path, a name, a date, a question); 3 a corrupt store; 130 interrupted")


class UsageError(Exception):
    """Input a user can fix (a path, a name, a date): one line `karma <command>: <message>`, exit 2."""


# Exceptions that mean "the input is wrong", by qualified name: a raised exception's module is loaded already,
# so the check imports nothing (and `karma` stays fast). Each names its input in its message.
USAGE_ERRORS = frozenset({
    "karma_dagster.runtime.config.ConfigError", "karma_dagster.export.run.ExportError",
    "karma_dagster.kg.location.KGLocationError", "karma_dagster.ingest.errors.IngestError",
    "karma_dagster.runtime.date_range.DateRangeError", "karma_dagster.kg.seed_import.SeedImportError",
    "karma_dagster.kg.seed_guard.SeedImportRefused",
    "karma_dagster.ingest.pubtator.PubTatorError", "karma_dagster.review.queue.ReviewError",
    "karma_dagster.cogmg.questions.QuestionFileError", "karma_dagster.kg.schema.SchemaError",
    "karma_dagster.runtime.prompts.PromptError", "karma_dagster.kg.names.NameRejected",
    "karma_dagster.cogmg.decompose_local.NoLinkableEntity", "karma_dagster.runtime.removal.UnknownDocument",
    "karma_dagster.runtime.shared_storage.StorageURLError", "karma_dagster.project.discover.ProjectError",
    "karma_dagster.project.starter.InitError", "karma_dagster.cli.UsageError", "pydantic_core._pydantic_core.ValidationError",
})
DISK_FULL = ("no space left on device", "database or disk is full", "disk is full", "disk full")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command and the problem (the usage is in --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (`{self.prog} --help` shows the usage)\n")


def _one_line(text: str) -> str:
    return " ".join(str(text).split()) or "(no message)"


def _free_bytes(path: Path) -> int | None:
    import shutil

    for folder in (path, *path.parents):
        if folder.is_dir():
            return shutil.disk_usage(folder).free
    return None


def explain(command: str, exc: BaseException, data_dir: Path | None = None) -> tuple[str, int]:
    """The one line a user sees for `exc` and the exit status: 2 bad input, 1 a failure, 3 a corrupt store.
    `data_dir`: where the command stores; an I/O error of a store there with no space left is a full disk."""
    import errno
    import sqlite3

    names = {f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__}
    prefix = f"karma {command}: " if command else "karma: "
    message = _one_line(str(exc))
    if "karma_dagster.runtime.integrity.StoreCorrupt" in names:
        return prefix + message, STORE_CORRUPT_EXIT
    if isinstance(exc, OSError) and (exc.errno == errno.ENOSPC or message.lower().startswith("[errno 28]")):
        where = exc.filename or "the data folder"
        return f"{prefix}disk full at {where} (free some space, then run it again)", EXIT_FAILURE
    full = any(m in message.lower() for m in DISK_FULL) or (
        "i/o error" in message.lower() and data_dir is not None and (_free_bytes(data_dir) or 0) < 1 << 20)
    if isinstance(exc, (sqlite3.Error, RuntimeError)) and full:  # sqlite's, DuckDB's (RuntimeError subclasses)
        return (f"{prefix}disk full at {data_dir or 'the data folder'} ({message}; free some space, then run it "
                "again)"), EXIT_FAILURE
    if isinstance(exc, OSError) and exc.filename is not None:
        where = f"{exc.filename} -> {exc.filename2}" if exc.filename2 else str(exc.filename)
        problem = _one_line(exc.strerror or message)
        if isinstance(exc, FileExistsError) and not Path(exc.filename).is_dir():
            problem = "is a file where a folder is expected"
        elif isinstance(exc, NotADirectoryError):
            problem = "a file is where a folder is expected on that path"
        if isinstance(exc, PermissionError):
            return f"{prefix}{where}: permission denied ({problem})", EXIT_FAILURE
        bad_path = isinstance(exc, (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError))
        return f"{prefix}{where}: {problem}", EXIT_USAGE if bad_path else EXIT_FAILURE
    if names & USAGE_ERRORS:
        return prefix + message.removeprefix(prefix), EXIT_USAGE
    if isinstance(exc, TimeoutError):  # a lock another process holds (home.py, the KG's lock): it names the lock
        return prefix + message, EXIT_FAILURE
    return (f"{prefix}unexpected error: {type(exc).__name__}: {message} (run `karma --debug {command}` for the "
            "traceback)"), EXIT_FAILURE


def _data_dir(argv: list[str]) -> Path:
    given = next((a.split("=", 1)[1] for a in argv if a.startswith("--data-dir=")), None)
    if given is None and "--data-dir" in argv[:-1]:
        given = argv[argv.index("--data-dir") + 1]
    if given:
        return Path(given)
    from karma_dagster.runtime.paths import default_data_dir

    try:
        return default_data_dir()
    except ValueError:  # a wrong $KARMA_PROJECT: the error being explained says so
        return Path("dagster_home")


def main(argv: list[str] | None = None) -> int:
    """Every error ends in one line on stderr naming the input and the problem (see `explain`); `--debug` prints
    the traceback too."""
    from karma_dagster.kg.location import install_scrubber

    import traceback

    install_scrubber()  # no store URL's credential in any log line or traceback this command prints

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # a global flag, taken wherever it is typed
    argv = [a for a in argv if a != "--debug"]
    command = next((a for a in argv if not a.startswith("-")), "")
    previous = _say_which_backbones_file(command)
    try:
        return _main(argv)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            raise
        if debug:
            traceback.print_exc()
        text = _one_line(str(exc.code))  # a message given to SystemExit: bad input a command refused
        print(text if text.startswith("karma") else f"karma {command}: {text}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print(f"karma {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place exceptions become a message and an exit status
        if debug:
            traceback.print_exc()
        line, code = explain(command, exc, _data_dir(argv))
        print(line, file=sys.stderr)
        return code
    finally:
        from karma_dagster.runtime import config

        config.listen_to_reads(previous)


def _say_which_backbones_file(command: str):  # noqa: ANN202 - the listener it replaced
    """The header line of a command's output the first time it reads a backbones.yaml: which one (the project's
    or the package default), named without an absolute path. On stdout: an error stays the one stderr line."""
    from karma_dagster.runtime import config, paths

    said: set[Path] = set()

    def say(path: Path) -> None:
        if path.resolve() not in said:
            said.add(path.resolve())
            print(f"backbones: {paths.backbones_label(path)}", flush=True)

    return config.listen_to_reads(say)


def _main(argv: list[str]) -> int:
    _quiet_known_noise()
    parser = OneLineParser(prog="karma", description=__doc__, epilog=EXIT_CODES_HELP)
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error, then its one line")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--inbox", help="folder of papers (default: $KARMA_INBOX, else the project's inbox/, else the package's "
                                       "data/inbox sample)")
        p.add_argument("--data-dir", help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
        p.add_argument("--backbone", action="append", help="only this backbone (repeatable; default: all enabled)")
        p.add_argument("--undated", help="a document without a publication date: 'arrival' (default; dated the day "
                                         "it arrived), 'skip', or a date YYYY-MM-DD (storage setting `undated`)")

    p = sub.add_parser("run", help="the main job: import the seed KG if needed, ingest the inbox, grow the KG, report")
    common(p)
    p.set_defaults(func=cmd_run, interruptible=True)

    p = sub.add_parser("import-kg", help="import an existing KG (node + edge tables) and index its entity names")
    common(p)
    p.add_argument("--nodes", help="node table (Hetionet nodes.tsv, or id/name/kind[/synonyms] for --format generic, "
                                   "or a KGX nodes.tsv[.gz] for --format kgx)")
    p.add_argument("--edges", help="edge table (Hetionet .sif[.gz], or source/relation/target for --format generic, "
                                   "or a KGX edges.tsv[.gz] for --format kgx)")
    p.add_argument("--format", choices=["hetionet", "generic", "kgx"], default="hetionet")
    grown = p.add_mutually_exclusive_group()  # a KG that grew is refused without one of them (kg/seed_guard.py)
    grown.add_argument("--replace", action="store_true",
                       help="the KG grew: replace its seed anyway; the KG as it was is kept aside (the command that "
                            "restores it is printed) and its evidence is merged again by the next `karma run`")
    grown.add_argument("--add", action="store_true",
                       help="add the file's nodes and edges to the seed; nothing stored is deleted")
    p.set_defaults(func=cmd_import_kg)

    p = sub.add_parser("backfill", help="process the documents of a date range, then their KG increments in date order")
    common(p)
    p.add_argument("--start", type=_date, required=True)
    p.add_argument("--end", type=_date, required=True)
    p.add_argument("--here", action="store_true", help="run in this process instead of launching Dagster backfills")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for each backfill")
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser("status", help="per backbone: documents registered, evaluated, merged, unmerged, failed, pending")
    common(p)
    p.add_argument("--document", metavar="KEY", help="one document's stages instead: rows, seconds, prompt, tokens "
                   "and cost as each stage recorded them (with date partitions, what the UI shows is the day's)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("ledger", help="calls, cache hits, tokens and cost per backbone and agent (the cost ledger)")
    p.add_argument("--data-dir", help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.add_argument("--backbone", help="only this backbone")
    p.add_argument("--run", help="only this Dagster run id")
    p.add_argument("--by", default="backbone,agent",
                   help="group by these columns, comma-separated: backbone, agent, stage, partition, run_id, status")
    p.set_defaults(func=cmd_ledger)

    p = sub.add_parser("remove", help="remove one document: its KG evidence, stage tables and catalog entry")
    p.add_argument("doc_key", help="the document's key (e.g. 2016-02-12_pmc4745298; see `karma status`)")
    p.add_argument("--inbox", help="folder of papers (default: $KARMA_INBOX, else the project's inbox/, else the repo's data/inbox sample)")
    p.add_argument("--data-dir", help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.add_argument("--dry-run", action="store_true", help="print what would be removed, remove nothing")
    p.set_defaults(func=cmd_remove)

    p = sub.add_parser("report", help="print the report of what is in the stores now")
    common(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="KARMA's metrics and gold scores of every backbone, side by side")
    common(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("gold-eval", help="run one backbone's extraction over a PubTator file and print P/R/F1")
    common(p)
    p.add_argument("--pubtator", required=True, nargs="+",
                   help="PubTator or BioC (XML, JSON) file(s) with gold (e.g. BioRED Dev.PubTator); several: one summary table after")
    p.add_argument("--limit", type=int, help="only the first N documents")
    p.add_argument("--table", action="store_true", help="also print per-type scores")
    p.set_defaults(func=cmd_gold_eval)

    # Commands whose bodies live with what they serve (Dagster-free): questions, review page, MCP server, exports.
    from karma_dagster.backbones.llm.cli_serve import add_parser as add_llm_serve_parser
    from karma_dagster.cogmg.cli_ask import add_parser as add_ask_parser
    from karma_dagster.cogmg.cli_context import add_parser as add_context_parser
    from karma_dagster.export.cli_export import add_parser as add_export_parser
    from karma_dagster.ingest.feed.cli_fetch import add_parser as add_fetch_parser
    from karma_dagster.kg.cli_check import add_parser as add_check_parser
    from karma_dagster.kg.cli_dedupe import add_parser as add_dedupe_parser
    from karma_dagster.metrics.cli_calibrate import add_parser as add_calibrate_parser
    from karma_dagster.mcp_server.cli import add_parser as add_mcp_parser
    from karma_dagster.project.cli_init import add_parser as add_init_parser
    from karma_dagster.review.cli_review import add_parser as add_review_parser

    for add in (add_ask_parser, add_context_parser, add_review_parser, add_mcp_parser, add_export_parser,
                add_dedupe_parser, add_check_parser, add_llm_serve_parser, add_init_parser, add_fetch_parser,
                add_calibrate_parser):
        add(sub)

    args = parser.parse_args(argv)
    if args.command == "gold-eval" and (not args.backbone or len(args.backbone) != 1):
        parser.error("gold-eval needs exactly one --backbone (e.g. --backbone local)")
    if getattr(args, "start", None) and args.end < args.start:
        parser.error(f"--end {args.end} is before --start {args.start}")
    if not (getattr(args, "interruptible", False) or getattr(args, "here", False)):
        return args.func(args)  # the others: Ctrl-C is the plain KeyboardInterrupt
    return _run_interruptible(args)


def _run_interruptible(args: argparse.Namespace) -> int:
    """`karma run` / `karma backfill`: SIGINT or SIGTERM stops the document in progress, starts nothing more,
    says what was stopped and what remains, and exits 128 + the signal (130, 143); a second signal quits at once."""
    from dagster._core.errors import DagsterExecutionInterruptedError

    from karma_dagster.runtime import interrupts
    from karma_dagster.runner import INTERRUPTED_TAG

    with interrupts.watching() as watch:
        try:
            code = args.func(args)
            watch.check()  # a signal during the report or the comparison: still say so and exit 128 + signal
            return code
        except (KeyboardInterrupt, DagsterExecutionInterruptedError) as raw:
            # a run that raises on error (the report) re-raises Dagster's interrupt: the same stop
            if (signum := watch.wait(2.0)) is None:
                raise
            exc = raw if isinstance(raw, interrupts.RunInterrupted) else interrupts.RunInterrupted(signum, "the report")
            stopped = f"stopped {exc.during}" if exc.during else "stopped between two steps"
            if exc.run_id:
                stopped += f" (run {exc.run_id[:8]}, tagged {INTERRUPTED_TAG})"
            print(f"\nINTERRUPTED by {exc.signal_name}: {stopped}; not started: {len(exc.remaining)}"
                  + (f" ({', '.join(exc.remaining[:10])}{', ...' if len(exc.remaining) > 10 else ''})"
                     if exc.remaining else "")
                  + f". `karma {args.command}` again completes them.", file=sys.stderr)
            return exc.exit_code


if __name__ == "__main__":  # `python -m karma_dagster.cli`: the package's module, so its exception classes are one
    from karma_dagster.cli import main as package_main

    sys.exit(package_main())
