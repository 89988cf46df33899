"""Mention and identifier P/R/F1 of the local NER on PubTator files (measurement only, never tuning).

Ids are scored as the EEA decides them: the NER's spans, then the document-level normalization
(dictionary/normalization.py: species, abbreviations, one id per name); `--raw-ids` scores the NER's ids alone.

`--ner` picks what finds the spans: `dictionary` alone, the `learned` NER alone (scripts/train_ner.py), or `both`
(the local backbone's: their union, settled by `--union`); `--model` another trained model folder.

Usage: python bench/biored_mentions.py [FILE ...] [--data DIR] [--cache DIR] [--raw-ids] [--ner both] [--union U]
FILE: any PubTator file with gold mentions (plain or .gz); none = BioRED dev and BC5CDR dev under DIR (the shared
read-only corpora: biored/Dev.PubTator, bc5cdr/CDR_DevelopmentSet.PubTator.txt).
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from karma_dagster.dictionary.lexicon import Lexicon
from karma_dagster.dictionary.ner import UNIONS, DictionaryNER
from karma_dagster.dictionary.ner_training import MODEL_DIR
from karma_dagster.dictionary.normalization import normalize_document
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.metrics.gold_mentions import format_table, score_mentions

DEFAULT_FILES = (("BioRED dev", Path("biored") / "Dev.PubTator"),
                 ("BC5CDR dev", Path("bc5cdr") / "CDR_DevelopmentSet.PubTator.txt"),
                 ("NCBI disease dev", Path("ncbi_disease") / "NCBIdevelopset_corpus.txt"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="PubTator files with gold mentions (default: the dev splits)")
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=Path(".cache/lexicon"))
    ap.add_argument("--raw-ids", action="store_true", help="score the NER's ids without the document-level step")
    ap.add_argument("--ner", choices=("dictionary", "learned", "both"), default="both")
    ap.add_argument("--union", choices=UNIONS, default="longest")
    ap.add_argument("--model", type=Path, default=MODEL_DIR, help="the learned NER's folder")
    args = ap.parse_args(argv)
    files = [(f.name, f) for f in args.files] or [(title, args.data / rel) for title, rel in DEFAULT_FILES]
    for _title, path in files:
        if not path.is_file():
            ap.error(f"{path}: PubTator file not found")
    t0 = time.perf_counter()
    lexicon = Lexicon.build(cache_dir=args.cache)
    t1 = time.perf_counter()
    ner = DictionaryNER(lexicon, learned=None if args.ner == "dictionary" else args.model, union=args.union)
    t2 = time.perf_counter()
    print(f"lexicon {len(lexicon)} terms in {t1 - t0:.1f}s; NER build {t2 - t1:.1f}s; "
          f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    for title, path in files:
        docs = read_pubtator(path)
        if not docs:
            ap.error(f"{path}: no PubTator documents in it")
        t = time.perf_counter()
        texts = [d.text for d in docs]
        preds = ner.learned_spans(texts) if args.ner == "learned" else ner.recognize_many(texts)
        if not args.raw_ids:
            preds = [normalize_document(p, lexicon).spans for p in preds]
        dt = time.perf_counter() - t
        print()
        print(format_table(f"{title} ({len(docs)} abstracts, {dt:.1f}s, NER {args.ner}, {args.union})",
                           score_mentions(docs, preds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
