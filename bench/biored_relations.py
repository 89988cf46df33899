"""Relation P/R/F1 of the local relation models on PubTator files, with the gold mentions as input.

    python bench/biored_relations.py FILE [FILE ...] [--level document|mention] [--theta 0.4] [--window 0]
                                     [--drop GROUP ...]

FILE: any PubTator file with gold mentions and relations (plain or .gz): BioRED dev, BC5CDR dev (its CID pairs
are scored against the model's chemical-disease Positive_Correlation, as BioRED annotates CID), ...
Document level (BioRED annotates id pairs per abstract): the pair alone, and the pair with its type; micro and
per type. `--level document` (the default, what the local backbone's REA uses) asks the document-level model
once per pair of gold entities; `--level mention` the mention-pair model over co-occurring mentions (`--window`
sentences apart). Gold mentions in, so it measures the relation model alone, not NER or normalization.
`--drop kg` (document level): the model without that feature group (doc_features.FEATURE_GROUPS), trained
and cached beside the full one, for a before/after in one run; the model's out-of-fold F1 on train (what it is
chosen by) is printed with it, and how many of the file's gold pairs the seed KG knows (the `kg` group's
coverage). A file without relation gold prints n/a. The training corpora hold no abstract of a shipped dev split
(data/training_exclusions.tsv); any overlap between a FILE and them is reported.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from karma_dagster.backbones.local.doc_features import FEATURE_GROUPS
from karma_dagster.backbones.local.doc_relations import DocRelationModel, gold_entities
from karma_dagster.backbones.local.relations import (
    DEFAULT_BIORED,
    DEFAULT_CDR,
    RELATION_TYPES,
    LocalRelationModel,
    coarse_type,
)
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.metrics.gold_relations import evaluate, evaluate_entities, format_table
from karma_dagster.runtime.params import KarmaParams

CID = "CID"


def _as_cid(answers: list[dict[str, float]], kinds: list[set[str]]) -> list[dict[str, float]]:
    """BC5CDR's one type: a chemical-disease pair's Positive_Correlation is its CID."""
    return [{CID: (p["Positive_Correlation"] if k == {"Chemical", "Disease"} else 0.0)} for p, k in zip(answers, kinds)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gold", type=Path, nargs="+", help="PubTator files with gold mentions and relations")
    ap.add_argument("--level", choices=["document", "mention"], default="document")
    ap.add_argument("--theta", type=float, default=None, help="one threshold for all types (default: KarmaParams)")
    ap.add_argument("--window", type=int, default=0, help="mention level: 0 = same sentence, 1 = adjacent too")
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/local-backbone"))
    ap.add_argument("--drop", nargs="*", default=[], choices=[g for g in FEATURE_GROUPS if g != "type"],
                    help="document level: feature groups the model is trained without")
    args = ap.parse_args(argv)
    if args.drop and args.level != "document":
        ap.error("--drop applies to the document-level model only")
    for path in args.gold:
        if not path.is_file():
            ap.error(f"{path}: gold PubTator file not found")

    params = KarmaParams()
    theta = (lambda _r: args.theta) if args.theta is not None else params.theta_for
    groups = [g for g in FEATURE_GROUPS if g not in args.drop]
    model = (DocRelationModel(args.cache_dir, groups=groups) if args.level == "document"
             else LocalRelationModel(args.cache_dir))
    t0 = time.perf_counter()
    fitted = model.fitted
    how = "loaded from cache" if model.loaded_from_cache else f"trained in {fitted.train_seconds:.1f} s"
    print(f"model {model.version}: {fitted.n_examples} training pairs, {how} ({time.perf_counter() - t0:.1f} s)")
    if args.level == "document":
        dropped = f"without {', '.join(args.drop)}" if args.drop else "all feature groups"
        cv = ", ".join(f"{k} {v:.3f}" for k, v in fitted.cv_f1.items() if v)
        print(f"{dropped}; out-of-fold F1 on train (5 document folds): {cv}")
    trained_on = {d.pmid for p in (DEFAULT_BIORED, DEFAULT_CDR) if p.is_file() for d in read_pubtator(p)}

    for path in args.gold:
        docs = read_pubtator(path)
        if not docs:
            ap.error(f"{path}: no PubTator documents in it")
        cdr = {r.relation for d in docs for r in d.relations} == {CID}
        types = [CID] if cdr else list(RELATION_TYPES)
        t0 = time.perf_counter()
        if args.level == "document":
            def doc_fn(text, entities, pairs, _m=model):
                answers = _m.probabilities(text, entities, pairs)
                if not cdr:
                    return answers
                kinds = [{coarse_type(entities[i][0].type), coarse_type(entities[j][0].type)} for i, j in pairs]
                return _as_cid(answers, kinds)
            scores = evaluate_entities(docs, doc_fn, (lambda _r: theta("Positive_Correlation")) if cdr else theta,
                                       types)
        else:
            def pair_fn(text, pairs, _m=model):
                answers = _m.probabilities(text, pairs)
                if not cdr:
                    return answers
                return _as_cid(answers, [{coarse_type(h.type), coarse_type(t.type)} for h, t in pairs])
            scores = evaluate(docs, pair_fn, (lambda _r: theta("Positive_Correlation")) if cdr else theta, types,
                              window=args.window)
        label = f"{args.level} level, theta {'params' if args.theta is None else args.theta}"
        print(format_table(scores, f"\n## {path.name}: {len(docs)} abstracts ({label})"))
        seen = sum(1 for d in docs if d.pmid in trained_on)
        print(f"scored in {time.perf_counter() - t0:.1f} s; abstracts also in the training corpora: {seen}")
        if args.level == "document" and fitted.kg is not None:
            print(kg_coverage(docs, fitted.kg))
    return 0


def kg_coverage(docs, kg) -> str:
    """How many gold relation pairs (and how many other candidate pairs of the same type pairs) the seed KG
    knows: both entities KG nodes, a direct edge, a 2-hop path (a shared neighbour)."""
    counts: dict[str, list[int]] = {"related": [0, 0, 0, 0], "other": [0, 0, 0, 0]}
    tps = set()
    for d in docs:
        ents = gold_entities(d)
        type_of = {i: e.type for e in ents for i in e.ids}
        tps |= {"|".join(sorted((type_of[r.id1], type_of[r.id2]))) for r in d.relations
                if r.id1 in type_of and r.id2 in type_of}
    for d in docs:
        ents = gold_entities(d)
        related = {frozenset((r.id1, r.id2)) for r in d.relations}
        for i in range(len(ents)):
            for j in range(i + 1, len(ents)):
                a, b = ents[i], ents[j]
                if "|".join(sorted((a.type, b.type))) not in tps:
                    continue
                c = counts["related" if frozenset(a.ids | b.ids) in related else "other"]
                na, nb = kg.nodes(a.type, a.ids), kg.nodes(b.type, b.ids)
                c[0] += 1
                if na and nb:
                    c[1] += 1
                    c[2] += any(y in kg.adjacency.get(x, {}) for x in na for y in nb)
                    c[3] += bool(kg.neighbours(na) & kg.neighbours(nb))
    return "seed KG: " + "; ".join(
        f"{k} pairs {n}: both in KG {both} ({both / max(n, 1):.1%}), direct edge {edge} ({edge / max(n, 1):.1%}), "
        f"2-hop path {path} ({path / max(n, 1):.1%})" for k, (n, both, edge, path) in counts.items())


if __name__ == "__main__":
    sys.exit(main())
