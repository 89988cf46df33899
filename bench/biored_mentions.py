"""Mention and identifier P/R/F1 of the local NER on BioRED dev and BC5CDR dev (measurement only, never tuning).

Usage: python bench/biored_mentions.py [--data DIR] [--cache DIR]
DIR defaults to the shared read-only corpora (biored/Dev.PubTator, bc5cdr/CDR_DevelopmentSet.PubTator.txt).
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from karma_dagster.dictionary.lexicon import Lexicon
from karma_dagster.dictionary.ner import DictionaryNER
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.metrics.gold_mentions import format_table, score_mentions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=Path(".cache/lexicon"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    lexicon = Lexicon.build(cache_dir=args.cache)
    t1 = time.perf_counter()
    ner = DictionaryNER(lexicon)
    t2 = time.perf_counter()
    print(f"lexicon {len(lexicon)} terms in {t1 - t0:.1f}s; NER build {t2 - t1:.1f}s; "
          f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    for title, path in (("BioRED dev", args.data / "biored" / "Dev.PubTator"),
                        ("BC5CDR dev", args.data / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt")):
        docs = read_pubtator(path)
        t = time.perf_counter()
        preds = ner.recognize_many([d.text for d in docs])
        dt = time.perf_counter() - t
        print()
        print(format_table(f"{title} ({len(docs)} abstracts, {dt:.1f}s)", score_mentions(docs, preds)))


if __name__ == "__main__":
    main()
