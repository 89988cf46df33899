"""Train the local backbone's learned evaluator (backbones/local/correctness.py) on the shipped training splits.

    python scripts/train_evaluator.py                 # ~25-40 min on 2 cores: the chain over ~760 train abstracts
    python scripts/train_evaluator.py --refit-only    # refit from the examples a previous run kept (seconds)

1. The chain runs (reader, summarizer, EEA, REA, alignment, conflict resolution) over every abstract of BioRED
   train and BC5CDR train (data/corpora: already deduplicated against every dev split), cross-fitted: the abstracts
   fall into K folds by their PMID, and each fold's triples come from a relation model trained on the other
   folds only, so the evaluator learns how right the relation model is on papers it never saw, as at run time.
   (The NER and the lexicon were built from these corpora and are in-sample here: on new papers more ends are new
   entities; the dev figures in docs show what that costs.)
2. Every integrable triple (aligned and kept) is judged against its abstract's gold (metrics/judging.py): right at
   the pair level, wrong, or unjudged (left out). Its features are what the evaluator stage computes at run time.
3. backbones/local/correctness_training.py fits, calibrates and writes data/models/evaluator/model.json with its
   provenance (the corpora's sha256, the folds, the examples, the chosen regularisation, out-of-fold figures).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))  # the chain harness bench/chain_gold.py runs on dev

from karma_dagster.agents.evaluator import kept_and_aligned, triple_contexts  # noqa: E402
from karma_dagster.backbones.local.correctness import MODEL_FILE  # noqa: E402
from karma_dagster.backbones.local.correctness_training import fit_model  # noqa: E402
from karma_dagster.backbones.local.doc_relations import DocRelationModel  # noqa: E402
from karma_dagster.backbones.local.triple_features import features  # noqa: E402
from chain_run import ChainWorkspace, prepare, split_corpus  # noqa: E402
from karma_dagster.metrics.gold_relations import gold_pairs  # noqa: E402
from karma_dagster.metrics.gold_sources import aligned_mentions, gold_document  # noqa: E402
from karma_dagster.metrics.judging import DocumentTriples, annotated_types, judge_row, placed_mentions  # noqa: E402
from karma_dagster.metrics.gold import CDR_LABEL  # noqa: E402
from karma_dagster.runtime.paths import data_file  # noqa: E402
from karma_dagster.schemas.frames import frame_to_records  # noqa: E402
from karma_dagster.schemas.records import MentionRow, ResolvedRow, SegmentRow  # noqa: E402

CORPORA = {"biored": "biored-train.pubtator.gz", "cdr": "bc5cdr-train.pubtator.gz"}
BACKBONE = "local"


def fold_of(pmid: str, folds: int) -> int:
    return int(hashlib.sha256(pmid.encode()).hexdigest(), 16) % folds


def read_blocks(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [b.strip() for b in fh.read().strip().split("\n\n") if b.strip()]


def pmid_of(block: str) -> str:
    return block.split("|", 1)[0].split("\t", 1)[0].strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def training_blocks(limit: int | None) -> dict[str, list[str]]:
    blocks = {name: read_blocks(data_file("corpora", f)) for name, f in CORPORA.items()}
    biored_pmids = {pmid_of(b) for b in blocks["biored"]}
    # an abstract in both corpora is read once, with BioRED's richer gold (every relation type, every entity type)
    blocks["cdr"] = [b for b in blocks["cdr"] if pmid_of(b) not in biored_pmids]
    if limit:
        blocks = {k: v[:limit] for k, v in blocks.items()}
    return blocks


def workspace(work: Path, blocks: dict[str, list[str]], cache_dir: Path) -> tuple[ChainWorkspace, dict[str, str]]:
    """The chain's workspace over `work` (the inbox written when new) and each document key's PMID."""
    inbox = work / "inbox"
    if not inbox.is_dir():
        for name, bs in blocks.items():
            path = work / f"{name}.pubtator"
            path.write_text("\n\n".join(bs) + "\n", encoding="utf-8")
            split_corpus(path, inbox)
    ws = prepare(work, inbox, [BACKBONE], cache_dir)
    catalog = ws.catalog()
    pmid_of_key = {}
    for key in ws.keys or catalog.all_keys():
        gold = gold_document(key, inbox, catalog)
        if gold is not None:
            pmid_of_key[key] = gold.pmid
    return ws, pmid_of_key


def generate(work: Path, folds: int, limit: int | None, cache_dir: Path) -> list[dict]:
    """Run the cross-fitted chain over the training abstracts; the labelled examples (also kept in `work`)."""
    blocks = training_blocks(limit)
    corpus_of = {pmid_of(b): name for name, bs in blocks.items() for b in bs}
    ws, pmid_of_key = workspace(work, blocks, cache_dir)
    print(f"{len(ws.keys)} documents registered, {len(pmid_of_key)} with gold; {folds} folds", flush=True)
    backbone = ws.backbone(BACKBONE)
    for k in range(folds):
        t0 = time.perf_counter()
        fold_dir = work / f"fold{k}"
        fold_dir.mkdir(exist_ok=True)
        paths = {}
        for name, bs in blocks.items():
            paths[name] = fold_dir / f"{name}-train.pubtator"
            paths[name].write_text("\n\n".join(b for b in bs if fold_of(pmid_of(b), folds) != k) + "\n\n",
                                   encoding="utf-8")
        backbone.doc_relations = DocRelationModel(cache_dir, biored_path=paths["biored"], cdr_path=paths["cdr"])
        keys = [key for key, pmid in pmid_of_key.items() if fold_of(pmid, folds) == k]
        ws.run(BACKBONE, keys, backbone=backbone, upto="resolved")
        print(f"fold {k}: {len(keys)} documents in {time.perf_counter() - t0:.0f} s", flush=True)
    return write_examples(work, collect_examples(ws, work / "inbox", pmid_of_key, corpus_of))


def recollect(work: Path, limit: int | None, cache_dir: Path) -> list[dict]:
    """The examples again from the chain's tables a previous run left in `work` (new features, same triples)."""
    blocks = training_blocks(limit)
    corpus_of = {pmid_of(b): name for name, bs in blocks.items() for b in bs}
    ws, pmid_of_key = workspace(work, blocks, cache_dir)
    return write_examples(work, collect_examples(ws, work / "inbox", pmid_of_key, corpus_of))


def write_examples(work: Path, examples: list[dict]) -> list[dict]:
    with open(work / "examples.jsonl", "w", encoding="utf-8") as fh:
        for e in examples:
            fh.write(json.dumps(e) + "\n")
    return examples


def collect_examples(ws: ChainWorkspace, inbox: Path, pmid_of_key: dict[str, str],
                     corpus_of: dict[str, str]) -> list[dict]:
    store, catalog = ws.store, ws.catalog()
    docs = {}
    for key in pmid_of_key:
        if not store.exists(BACKBONE, "resolved", key):
            continue
        gold = gold_document(key, inbox, catalog)
        entities = store.read(BACKBONE, "entities", key)
        placed = placed_mentions(entities, aligned_mentions(store.read(BACKBONE, "summaries", key), entities,
                                                            gold.text)[0])
        docs[key] = DocumentTriples(doc_key=key, gold=gold, mentions=placed,
                                    triples=store.read(BACKBONE, "resolved", key))
    out = []
    for corpus in ("biored", "cdr"):
        mine = [d for k, d in docs.items() if corpus_of.get(pmid_of_key[k]) == corpus]
        types = annotated_types(d.gold for d in mine)
        cdr_only = corpus == "cdr"
        for d in mine:
            resolved = frame_to_records(d.triples, ResolvedRow)
            contexts = triple_contexts(resolved, frame_to_records(store.read(BACKBONE, "entities", d.doc_key),
                                                                   MentionRow),
                                       frame_to_records(store.read(BACKBONE, "segments", d.doc_key), SegmentRow))
            gold = gold_pairs(d.gold)
            for row, tup, ctx in zip(resolved, d.triples.itertuples(), contexts, strict=True):
                if not kept_and_aligned(row):
                    continue
                _key, right, _typed, why = judge_row(tup, d, types, cdr_only, gold)
                if right is None:
                    continue
                out.append({"doc": d.doc_key, "corpus": corpus, "right": bool(right), "why": why,
                            "features": features(ctx)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=REPO / ".cache" / "evaluator-training",
                    help="where the chain's tables and the examples are kept (reused by --refit-only)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--limit", type=int, help="only the first N abstracts of each corpus (a quick check)")
    ap.add_argument("--refit-only", action="store_true", help="fit from the examples a previous run kept")
    ap.add_argument("--recollect", action="store_true",
                    help="rebuild the examples (features) from the chain's tables a previous run kept, then fit")
    ap.add_argument("--out", type=Path, default=None, help="model file (default: data/models/evaluator/model.json)")
    ap.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "bench-throughput")
    args = ap.parse_args(argv)
    work = args.work.resolve()
    t0 = time.perf_counter()
    if args.refit_only:
        path = work / "examples.jsonl"
        if not path.is_file():
            ap.error(f"--refit-only: no examples at {path} (run without --refit-only first)")
        examples = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif args.recollect:
        if not (work / "inbox").is_dir():
            ap.error(f"--recollect: no previous run in {work} (run without --recollect first)")
        examples = recollect(work, args.limit, args.cache_dir.resolve())
    else:
        if work.exists() and any(work.iterdir()):
            ap.error(f"--work {work}: not empty (a run is never overwritten; remove it or use --refit-only)")
        work.mkdir(parents=True, exist_ok=True)
        examples = generate(work, args.folds, args.limit, args.cache_dir.resolve())
    n_right = sum(e["right"] for e in examples)
    print(f"{len(examples)} judged integrable triples, {n_right} right ({n_right / max(1, len(examples)):.3f})")
    for corpus in ("biored", "cdr"):
        sub = [e for e in examples if e["corpus"] == corpus]
        print(f"  {corpus}: {len(sub)} triples, {sum(e['right'] for e in sub)} right")
    provenance = {
        "corpora": {f: sha256(data_file("corpora", f)) for f in CORPORA.values()},
        "folds": args.folds, "limit": args.limit, "backbone": BACKBONE, "cdr_label": CDR_LABEL,
        "trained_on": "the chain's aligned and kept triples over BioRED train + BC5CDR train, cross-fitted REA",
    }
    model = fit_model([e["features"] for e in examples], [e["right"] for e in examples],
                      [e["doc"] for e in examples], folds=args.folds, provenance=provenance)
    out = args.out or data_file("models", "evaluator", MODEL_FILE)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(model.model_dump(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"wrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}: {model.version}, "
          f"{len(model.coefficients)} features, C={model.provenance['C']}, out-of-fold Brier "
          f"{model.provenance['oof_brier']} ({time.perf_counter() - t0:.0f} s)")
    for precision in (0.6, 0.7, 0.75, 0.8, 0.85, 0.9):
        t = model.threshold_for(precision)
        point = model.point_at(t)
        print(f"  admission precision {precision:.2f}: threshold {t:.2f}" + (
            f", out-of-fold precision {point.precision:.3f} (low {point.precision_low:.3f}), recall of right "
            f"triples {point.recall:.3f}, {point.admitted} admitted" if point else ", nothing admitted"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
