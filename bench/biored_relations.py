"""Relation P/R/F1 of the local relation model on a BioRED-style PubTator file, with the gold mentions as input.

    python bench/biored_relations.py ../shared/data/biored/Dev.PubTator [--theta 0.5] [--window 0]

Document level (BioRED annotates id pairs per abstract): the pair alone, and the pair with its type; micro
and per type. Gold mentions in, so it measures the relation model alone, not NER or normalization. Abstracts
that are also in the shipped BC5CDR training corpus are scored apart as well (their CID pairs were seen).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from karma_dagster.backbones.local.relations import DEFAULT_CDR, RELATION_TYPES, LocalRelationModel
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.metrics.gold_relations import evaluate, format_table
from karma_dagster.params import KarmaParams


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gold", type=Path, help="PubTator file with gold mentions and relations (e.g. BioRED Dev)")
    ap.add_argument("--theta", type=float, default=None, help="one threshold for all types (default: KarmaParams)")
    ap.add_argument("--window", type=int, default=0, help="0 = same sentence (as the REA agent), 1 = adjacent too")
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/local-backbone"))
    args = ap.parse_args(argv)
    if not args.gold.is_file():
        ap.error(f"{args.gold}: gold PubTator file not found")

    params = KarmaParams()
    theta = (lambda _r: args.theta) if args.theta is not None else params.theta_for
    model = LocalRelationModel(args.cache_dir)
    t0 = time.perf_counter()
    fitted = model.fitted
    how = "loaded from cache" if model.loaded_from_cache else f"trained in {fitted.train_seconds:.1f} s"
    print(f"model {model.version}: {fitted.n_examples} training pairs, {how} ({time.perf_counter() - t0:.1f} s)")

    docs = read_pubtator(args.gold)
    t0 = time.perf_counter()
    label = f"theta {'params' if args.theta is None else args.theta}, window {args.window}"
    scores = evaluate(docs, model.probabilities, theta, RELATION_TYPES, window=args.window)
    print(format_table(scores, f"\n## {args.gold.name}: all abstracts ({label})"))
    print(f"scored in {time.perf_counter() - t0:.1f} s")

    seen = {d.pmid for d in read_pubtator(DEFAULT_CDR)} if DEFAULT_CDR.is_file() else set()
    unseen = [d for d in docs if d.pmid not in seen]
    if len(unseen) < len(docs):
        s2 = evaluate(unseen, model.probabilities, theta, RELATION_TYPES, window=args.window)
        print(format_table(s2, f"\n## {args.gold.name}: without the {len(docs) - len(unseen)} abstracts also in "
                               f"BC5CDR train ({label})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
