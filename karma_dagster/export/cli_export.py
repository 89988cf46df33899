"""`karma export`: the KG of one backbone as of a date, as Turtle, KGX TSV or Neo4j import CSVs."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from karma_dagster.export import FORMATS


def export_dir(data_root: Path, namespace: str, fmt: str, as_of: dt.date) -> Path:
    """Where an export lands by default (the assets write there too): <data_dir>/exports/<backbone>/<format>/<date>."""
    return data_root / "exports" / namespace / fmt / as_of.isoformat()


def known_namespaces(store) -> list[str]:  # noqa: ANN001 - KGStore
    """Backbones of backbones.yaml (enabled or not) plus every namespace the KG holds rows of."""
    from karma_dagster.runtime.config import read_backbones

    names = set(read_backbones().backbones)
    if store.exists():
        names |= set(store.namespace_names())
    return sorted(names)


def cmd_export(args: argparse.Namespace) -> int:
    from karma_dagster.export.run import ExportError, check_base_iri, check_target, export_kg, parse_as_of
    from karma_dagster.kg.backends import kg_store
    from karma_dagster.runtime.paths import DataPaths, display_path

    try:
        as_of = parse_as_of(args.as_of) if args.as_of else dt.date.today()
        if args.format not in FORMATS:
            raise ExportError(f"--format {args.format!r}: not one of {', '.join(FORMATS)}")
        if args.base_iri:
            check_base_iri(args.base_iri)  # before the KG is read: a typo costs nothing
        data = DataPaths(args.data_dir or "")
        store = kg_store(data)
        if not store.exists():
            raise ExportError("no KG in the data folder yet: `karma import-kg` (or `karma run`) imports the seed KG")
        if args.out:  # before anything is read: a refused folder costs nothing
            check_target(Path(args.out), args.format, data)
        known = known_namespaces(store)
        if args.backbone not in known:
            raise ExportError(f"--backbone {args.backbone!r}: unknown; backbones of backbones.yaml and the KG: "
                              f"{', '.join(known)}")
        out = Path(args.out) if args.out else export_dir(data.root, args.backbone, args.format, as_of)
        result = export_kg(store, args.format, args.backbone, as_of, out, base_iri=args.base_iri, data=data)
    except ExportError as exc:
        print(f"karma export: {exc}", file=sys.stderr)
        return 2
    print(result.summary())
    print(f"files ({result.seconds:g} s): {', '.join(result.files)} in {display_path(out, data.root)}")
    if left_out := result.snapshot.get("dangling_edges_left_out"):  # evidence naming no node: said, not silent
        shown = "; ".join(result.report.get("dangling_edges_left_out", [])[:3])  # type: ignore[index]
        print(f"WARNING {left_out} edges left out: an end is no node of the KG (e.g. {shown}); see "
              "export-report.json", file=sys.stderr)
    for key in ("unmapped_kinds", "unmapped_metaedges", "unmapped_other_relations"):
        for name, info in (result.report.get(key) or {}).items():  # type: ignore[union-attr]
            print(f"unmapped: {name}: {info}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("export", help="write the KG as of a date: RDF/Turtle, KGX TSV (Biolink) or Neo4j import CSVs")
    p.add_argument("--format", required=True, help=f"one of {', '.join(FORMATS)}")
    p.add_argument("--as-of", help="ISO date: the KG as merged up to and including that day (default: today)")
    p.add_argument("--backbone", default="local", help="whose KG (namespace); default: local")
    p.add_argument("--out", help="output folder (default: <data-dir>/exports/<backbone>/<format>/<date>): a new "
                   "folder, or one an earlier export of the same format wrote; anything else is refused")
    p.add_argument("--data-dir", help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.add_argument("--base-iri", help="turtle: the IRI base of classes, relations and nodes (default: a placeholder)")
    p.set_defaults(func=cmd_export)
    return p
