"""`karma calibrate --backbone NAME --pubtator GOLD`: fit an LLM backbone's evaluator scores to P(right) on a gold
file the user supplies, and store the map for the backbone's current settings (backbones/llm/calibration.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class CalibrateError(ValueError):
    """Bad input: an unknown or local backbone, a missing file (the message names it)."""


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's private subparsers type
    p = sub.add_parser(
        "calibrate", help="fit an LLM backbone's evaluator scores to the probability of being right on a gold file",
        description="Run one LLM backbone's agents over a gold file (PubTator or BioC with relation gold), judge "
                    "each triple as `karma gold-eval` does, and fit the map from the evaluator's score to "
                    "P(right). Stored in the data folder for the backbone's model and evaluator prompts; from then "
                    "on its KG stores calibrated probabilities and admits at `admission_precision`.",
        epilog="exit codes: 0 fitted and stored, 2 bad input (unknown or local backbone, no such file, a gold too "
               "thin to fit: nothing stored), 1 failure")
    p.add_argument("--backbone", required=True, help="an LLM backbone of backbones.yaml")
    p.add_argument("--pubtator", required=True, help="gold file with relations (e.g. BioRED Train.PubTator)")
    p.add_argument("--limit", type=int, help="only the first N documents")
    p.add_argument("--data-dir", default="",
                   help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from karma_dagster.backbones.llm.calibration import CalibrationError, save
    from karma_dagster.metrics import calibrate_run
    from karma_dagster.metrics.gold_run import KGView
    from karma_dagster.runtime import services
    from karma_dagster.runtime.config import read_backbones
    from karma_dagster.runtime.params import KarmaParams
    from karma_dagster.runtime.paths import DataPaths, data_file
    from karma_dagster import stages

    gold = Path(args.pubtator)
    if not gold.is_file():
        print(f"karma calibrate: --pubtator {gold.name}: no such file", file=sys.stderr)
        return 2
    entries = read_backbones().backbones
    if args.backbone not in entries:
        print(f"karma calibrate: --backbone {args.backbone}: not in backbones.yaml; it has: "
              f"{', '.join(sorted(entries))}", file=sys.stderr)
        return 2
    settings = entries[args.backbone].keyed_settings(args.backbone)
    if settings.kind == "litellm" and settings.mode != "multi_agent":
        print(f"karma calibrate: --backbone {args.backbone}: mode {settings.mode!r} has no KARMA evaluator to "
              "calibrate (its chain is the multi_agent one)", file=sys.stderr)
        return 2
    if settings.kind != "litellm":
        print(f"karma calibrate: --backbone {args.backbone}: the local backbone's evaluator is its shipped learned "
              "model, already calibrated (scripts/train_evaluator.py); calibrate fits an LLM backbone", file=sys.stderr)
        return 2
    data = DataPaths(args.data_dir)
    params = KarmaParams()
    if not services.seed_present(data):
        print("importing the seed KG ...", file=sys.stderr)
        services.import_seed_kg(data, data_file("seed_kg", "nodes.tsv"), data_file("seed_kg", "edges.sif.gz"),
                                "hetionet", params.seed_edge_confidence)
    backbone = services.backbone(args.backbone, settings, data,
                                 required_prompts=stages.all_prompts(stages.chain_for(settings)))
    kg = KGView(schema=services.kg_schema(), kind_of=services.kg_kind_lookup(data),
                existing=services.existing_relations_lookup(data, args.backbone))
    try:
        units, n_docs = calibrate_run.judged_units(gold, backbone, services.dictionary(data),
                                                   services.entity_index(data), params, kg, limit=args.limit,
                                                   log=lambda m: print(m, file=sys.stderr),
                                                   identity=services.identity_index(data, args.backbone))
        run = calibrate_run.fit(units, backbone=args.backbone, model=settings.model,
                                fingerprint=backbone.calibration_fingerprint, gold=gold,
                                documents=n_docs, params=params)
    except CalibrationError as exc:
        print(f"karma calibrate: {exc}; nothing stored", file=sys.stderr)
        return 2
    path = save(data.calibration_dir, run.calibration)
    for line in run.lines():
        print(line)
    where = "the shared storage ($KARMA_STORAGE_URL)" if data.shared_url else "the data folder"
    print(f"stored: {path.parent.name}/{path.name} in {where} (used by every later run of {args.backbone})")
    return 0
