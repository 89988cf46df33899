"""How the learned NER and the dictionary are best combined, chosen where neither was fitted: the tenth of each
training corpus the model held out (scripts/train_ner.py's split, from the model's provenance), with a lexicon built
without those abstracts. Prints mention P/R/F1 (span + type) and per-document id F1 per corpus for the dictionary
alone, the learned NER alone, and their union under each rule (dictionary/ner.py UNIONS).

    python bench/ner_union.py [--model DIR] [--cache DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from karma_dagster.dictionary.learned_ner import read_provenance
from karma_dagster.dictionary.lexicon import CORPORA, Lexicon, LexiconConfig
from karma_dagster.dictionary.ner import UNIONS, DictionaryNER
from karma_dagster.dictionary.ner_training import MODEL_DIR, split_holdout
from karma_dagster.dictionary.normalization import normalize_document
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.metrics.gold_mentions import score_mentions
from karma_dagster.runtime.paths import data_file


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=MODEL_DIR)
    ap.add_argument("--cache", type=Path, default=Path(".cache/lexicon"))
    args = ap.parse_args(argv)
    prov = read_provenance(args.model)
    held = {}
    for name, (fname, _types) in CORPORA.items():
        docs = read_pubtator(data_file("corpora", fname))[: prov.config.limit]
        held[name] = split_holdout(docs, prov.config.holdout, prov.config.seed)[1]
    pmids = tuple(sorted({d.pmid for docs in held.values() for d in docs}))
    lexicon = Lexicon.build(cache_dir=args.cache, config=LexiconConfig(exclude_pmids=pmids))
    print(f"model {prov.version}; {len(pmids)} held-out training abstracts, lexicon without them "
          f"({len(lexicon)} terms)")
    print("| NER | " + " | ".join(f"{n} mentions P / R / F1 | {n} ids F1" for n in held) + " |")
    print("|---|" + "---|---|" * len(held))
    runs = [("dictionary", None, "dictionary_first")] + [("learned", args.model, "dictionary_first")] + [
        (f"both, {u}", args.model, u) for u in UNIONS]
    for label, model, union in runs:
        ner = DictionaryNER(lexicon, learned=model, union=union)
        cells = []
        for docs in held.values():
            texts = [d.text for d in docs]
            if label == "learned":
                preds = ner.learned_spans(texts)
            else:
                preds = [normalize_document(p, lexicon).spans for p in ner.recognize_many(texts)]
            s = score_mentions(docs, preds)
            m, i = s.mentions["micro"], s.ids["micro"]
            cells.append(f"{m.precision:.3f} / {m.recall:.3f} / **{m.f1:.3f}** | {i.f1:.3f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
