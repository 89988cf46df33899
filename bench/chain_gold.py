"""The whole KARMA chain on the dev splits, scored against their gold, beside its ablations and the baseline.

    python bench/chain_gold.py                          # BioRED dev and BC5CDR dev, the three default backbones
    python bench/chain_gold.py FILE.PubTator --backbone local --backbone local-single --limit 50

`karma gold-eval` scores the entity and relation agents on the whole abstract (reader and summarizer skipped), so
every local backbone scores the same there. This runs each backbone's own chain (`chain_for`: the reader, the
summarizer, the EEA, the REA, alignment, conflict resolution, the evaluator, or the ablation's pass-through, or the
single-agent baseline's steps) over every abstract, as the pipeline's stages do, and scores what the pipeline's
`gold_evaluation` asset scores (metrics/gold_inbox.py): mentions aligned back onto the gold text, REA's triples,
and the accepted (evaluated) triples. What the reader or summarizer drops is missed. Issue 32: on `local` the
full chain must not score below its w/o-summarizer ablation nor the single-agent baseline.

Each abstract is its own inbox file (one PubTator document each), so the gold lookup reads one small file per
document; the agents are called directly (bench/throughput.py's (a)), not through Dagster runs.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from karma_dagster.ingest.catalog import Catalog  # noqa: E402
from karma_dagster.metrics.gold import GoldScores, score_gold  # noqa: E402
from karma_dagster.metrics.gold_inbox import compute_gold, judge_accepted  # noqa: E402
from karma_dagster.metrics.judging import by_document  # noqa: E402
from karma_dagster.metrics.gold_mentions import PRF  # noqa: E402
from chain_run import prepare, split_corpus  # noqa: E402
from karma_dagster.metrics.gold_sources import aligned_mentions, gold_document, predicted_triples  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("KARMA_SHARED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_FILES = (SHARED / "biored" / "Dev.PubTator", SHARED / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt")
DEFAULT_BACKBONES = ("local", "local-no-summarizer", "local-single")


def scored_documents(store, catalog: Catalog, inbox: Path, ns: str) -> list[tuple]:
    """(doc key, gold document, aligned mentions, evaluated table, entities) of each evaluated document with gold:
    read once per backbone for the Theta sweep and the per-document counts."""
    out = []
    for key in store.partitions(ns, "evaluated"):
        gold = gold_document(key, inbox, catalog)
        if gold is None:
            continue
        entities = store.read(ns, "entities", key)
        ms = aligned_mentions(store.read(ns, "summaries", key), entities, gold.text)[0]
        out.append((key, gold, ms, store.read(ns, "evaluated", key), entities))
    return out


def sweep_theta(docs: list[tuple], ns: str, thetas: list[float]) -> None:
    """Accepted pair F1 had the evaluator's Theta been each of `thetas` (the rows' kept score, re-thresholded; the
    other agents' gates unchanged): to choose Theta on a training split, never on the dev one scored."""
    if not docs or all(ev["score"].isna().all() for _k, _g, _m, ev, _e in docs):
        print(f"    {ns}: no evaluator scores (ablated or the baseline): no Theta to sweep")
        return
    golds, mentions = [d[1] for d in docs], [d[2] for d in docs]
    cells = []
    for theta in thetas:
        triples = []
        for _k, _g, _m, ev, entities in docs:
            gate = ev["action"].isin(["keep", "replace"]) & (ev["schema_status"] == "aligned")
            triples.append(predicted_triples(ev[gate & (ev["score"].astype(float) >= theta)], entities))
        s = score_gold(golds, mentions, triples).summary()
        cells.append(f"{theta:.2f}: {s['pair_p']:.3f}/{s['pair_r']:.3f}/{s['pair_f1']:.3f}")
    print(f"    {ns} Theta -> accepted pairs P/R/F1: " + "; ".join(cells), flush=True)


def doc_pair_counts(docs: list[tuple]) -> dict[str, PRF]:
    """Accepted-triple pair counts per document, scored as compute_gold scores the whole corpus."""
    return {key: score_gold([gold], [ms], [predicted_triples(ev[ev["accepted"].astype(bool)], entities)]
                            ).relations.pair for key, gold, ms, ev, entities in docs}


def judged_counts(judgement) -> dict[str, PRF]:
    """Per document: the judged accepted units right (tp) and wrong (fp), for a bootstrap of accepted precision."""
    out: dict[str, PRF] = {}
    for doc, units in by_document(judgement.judged).items():
        tp = sum(bool(u.right) for u in units)
        out[doc] = PRF(tp=tp, fp=len(units) - tp, fn=0)
    return out


def paired_bootstrap(a: dict[str, PRF], b: dict[str, PRF], rounds: int = 2000,
                     seed: int = 0, metric: str = "f1") -> tuple[float, float, float, float]:
    """F1(a) - F1(b) of the accepted pairs, its 95 % interval over documents resampled with replacement (the same
    documents for both sides), and the share of rounds where a is below b: is a gap between two chains more than
    which abstracts the dev split happens to hold?"""
    keys = sorted(set(a) | set(b))
    zero = PRF(tp=0, fp=0, fn=0)
    rng = random.Random(seed)

    def f1(counts: dict[str, PRF], sample: list[str]) -> float:
        prf = PRF(tp=sum(counts.get(k, zero).tp for k in sample), fp=sum(counts.get(k, zero).fp for k in sample),
                  fn=sum(counts.get(k, zero).fn for k in sample))
        return getattr(prf, "precision" if metric == "precision" else "f1")

    def diff(sample: list[str]) -> float:
        return f1(a, sample) - f1(b, sample)

    diffs = sorted(diff([keys[rng.randrange(len(keys))] for _ in keys]) for _ in range(rounds))
    return diff(keys), diffs[int(0.025 * rounds)], diffs[int(0.975 * rounds) - 1], sum(d < 0 for d in diffs) / rounds


def run_corpus(path: Path, backbones: list[str], limit: int | None, cache_dir: Path, work: Path,
               thetas: list[float] | None = None) -> dict[str, tuple[GoldScores, GoldScores, float, dict[str, PRF]]]:
    """{backbone: (REA scores, accepted scores, seconds, accepted pair counts per document)} for one corpus."""
    inbox = work / "inbox"
    n = split_corpus(path, inbox, limit)
    ws = prepare(work, inbox, backbones, cache_dir)
    keys, store, storage = ws.keys, ws.store, ws.storage
    print(f"{path.name}: {n} documents, {len(keys)} registered", flush=True)
    out = {}
    for ns in backbones:
        t0 = time.perf_counter()
        ws.run(ns, keys)
        seconds = time.perf_counter() - t0
        result = compute_gold(store, Catalog(storage.catalog_path()), inbox, ns)
        if result is None:
            raise SystemExit(f"{path}: no document carries gold annotations")
        rea, accepted, unaligned = result
        docs = scored_documents(store, Catalog(storage.catalog_path()), inbox, ns)
        judged = judge_accepted(store, Catalog(storage.catalog_path()), inbox, ns)
        out[ns] = (rea, accepted, seconds, doc_pair_counts(docs), judged)
        if judged is not None:
            print(f"  {ns}: {judged.one_line()} | unjudged: {judged.unjudged_reasons()}", flush=True)
        if thetas:
            sweep_theta(docs, ns, thetas)
        s, a = rea.summary(), accepted.summary()
        print(f"  {ns}: mentions {s['mention_f1']:.3f} ids {s['id_f1']:.3f} | REA pairs {s['pair_f1']:.3f} "
              f"pair+type {s['pair_type_f1']:.3f} | accepted pairs P/R/F1 {a['pair_p']:.3f}/{a['pair_r']:.3f}/"
              f"{a['pair_f1']:.3f} pair+type "
              f"{a['pair_type_f1']:.3f} | {unaligned} unaligned mentions | {seconds:.0f} s", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="PubTator files with gold (default: BioRED and BC5CDR dev)")
    ap.add_argument("--backbone", action="append", help=f"repeatable (default: {', '.join(DEFAULT_BACKBONES)})")
    ap.add_argument("--limit", type=int, help="only the first N documents of each file")
    ap.add_argument("--theta", type=float, nargs="+", help="also print accepted pair scores at these Thetas")
    ap.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "bench-throughput")
    ap.add_argument("--keep", type=Path, help="keep each corpus's data folder (stage tables, KG) under this folder, "
                                             "to read what an agent kept or dropped")
    args = ap.parse_args(argv)
    files = args.files or list(DEFAULT_FILES)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        ap.error(f"PubTator file(s) not found: {', '.join(missing)}")
    backbones = args.backbone or list(DEFAULT_BACKBONES)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    table, gaps = [], []
    for path in files:
        with tempfile.TemporaryDirectory(prefix="karma-chain-gold-") as tmp:
            work = Path(tmp) if args.keep is None else args.keep.resolve() / path.stem
            if args.keep is not None and work.exists():
                ap.error(f"--keep {args.keep}: {work} exists already (a kept run is never overwritten)")
            results = run_corpus(path, backbones, args.limit, args.cache_dir.resolve(), work, args.theta)
            for ns, (rea, accepted, seconds, _counts, _judged) in results.items():
                table.append((path.name, ns, rea.summary(), accepted.summary(), rea.n_docs, seconds))
            first, *others = backbones
            for ns in others:
                d, lo, hi, below = paired_bootstrap(results[first][3], results[ns][3])
                cells = f"| {path.name} | {first} - {ns} | {d:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {below:.2f} |"
                if results[first][4] is not None and results[ns][4] is not None:
                    d, lo, hi, below = paired_bootstrap(judged_counts(results[first][4]),
                                                        judged_counts(results[ns][4]), metric="precision")
                    cells += f" {d:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {below:.2f} |"
                gaps.append(cells)
    print("\n| corpus | backbone | docs | mentions F1 | ids F1 | REA pairs F1 | accepted pairs F1 | accepted pair + type F1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, ns, s, a, n, _sec in table:
        print(f"| {name} | {ns} | {n} | {s['mention_f1']:.3f} | {s['id_f1']:.3f} | {s['pair_f1']:.3f} | "
              f"{a['pair_f1']:.3f} | {a['pair_type_f1']:.3f} |")
    if gaps:
        print(f"\nAccepted pair F1 of {backbones[0]} minus each other backbone, with its 95 % interval over the "
              "documents (paired bootstrap, 2,000 rounds, seed 0) and the share of rounds it is below:\n")
        print("| corpus | difference | Δ pair F1 | 95 % interval | share below | Δ accepted precision (judged) | "
              "95 % interval | share below |\n|---|---|---:|---|---:|---:|---|---:|")
        print("\n".join(gaps))
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
