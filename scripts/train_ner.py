"""Train the learned NER the local backbone unions with its dictionary, and write it with its provenance.

    python scripts/train_ner.py                 # the shipped model: data/models/ner (its time: docs/benchmarks.md)
    python scripts/train_ner.py --out /tmp/ner --limit 20 --max-epochs 2   # a quick run

Same corpora, seed and versions give the same model: the corpora's sha256 and every setting are written to
<out>/provenance.json. CPU only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from karma_dagster.dictionary.ner_training import MODEL_DIR, NerTrainingConfig, train_ner


def dictionary_hits(cache: Path):
    """The dictionary's hits (start, end, type): which tokens a corpus leaves unannotated because it does not
    annotate their type."""
    from karma_dagster.dictionary.lexicon import Lexicon
    from karma_dagster.dictionary.ner import DictionaryNER

    ner = DictionaryNER(Lexicon.build(cache_dir=cache), learned=None)
    return lambda text: [(s.start, s.end, s.type) for s in ner.recognize(text)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=MODEL_DIR, help="model folder (replaced when training ends)")
    ap.add_argument("--corpora", type=Path, default=None, help="folder of the training corpora (default: data/corpora)")
    ap.add_argument("--cache", type=Path, default=Path(".cache/lexicon"), help="the lexicon's cache folder")
    for name, field in NerTrainingConfig.model_fields.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(field.default) if field.default is not None else int,
                        default=field.default, help=field.description)
    args = ap.parse_args(argv)
    cfg = NerTrainingConfig(**{k: getattr(args, k) for k in NerTrainingConfig.model_fields})
    prov = train_ner(args.out, cfg, args.corpora, dictionary_hits(args.cache),
                     log=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"{prov.version}: best epoch {prov.best_epoch} of {prov.epochs_run}, held-out F1 {prov.holdout_f1:.4f} "
          f"{prov.holdout_per_type}, {prov.seconds:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
