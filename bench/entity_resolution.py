"""One graph (issue 27), measured: do extracted entities land on the KG nodes they are?

Two parts, printed as tables:
1. A grown KG (`--kg`, default the main job's $DAGSTER_HOME/karma/kg.duckdb), per backbone: nodes the merges created,
   how many of them are nodes the KG already had (kg/dedupe.py's test: same id, cross-reference or exact name), the
   share of extracted evidence whose head and tail are seed nodes, and where "paracetamol" landed.
2. Dev splits (PubTator gold; default BioRED, BC5CDR, NCBI disease dev), the local EEA over each abstract twice in one
   run, without and with identity before similarity: of the gold mentions whose gold id names a seed node (through the
   id or its cross-references), how many the EEA linked to that node, linked elsewhere, or made a new node of; new
   nodes created that share an id with a seed node; and ids F1 (identity changes kg ids, never vocabulary ids).

Usage: python bench/entity_resolution.py [--kg PATH] [--data-dir DIR] [--limit N] [FILE ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from karma_dagster.runtime import services
from karma_dagster.agents.entity_extraction import extract_entities_counted
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.dictionary.lexicon import CORPUS_TYPE, corpus_vocab_id
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.kg import dedupe
from karma_dagster.kg.backends import open_kg_store
from karma_dagster.kg.entity_index import compatible_kinds
from karma_dagster.metrics.gold import PredictedMention, score_gold
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths, data_file
from karma_dagster.schemas.records import SummaryRow

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
ACETAMINOPHEN = "Compound::DB00316"  # the seed's node of paracetamol (a MeSH entry term of D000082)
DEFAULT_FILES = (SHARED / "biored" / "Dev.PubTator", SHARED / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt",
                 SHARED / "ncbi_disease" / "NCBIdevelopset_corpus.txt")


def audit_kg(path: Path) -> None:
    store = open_kg_store(str(path))
    print(f"\n## A grown KG: {path.name}\n")
    print("| backbone | nodes created | of them nodes the KG had (seed / extracted) | evidence | both ends seed "
          "| one end seed | paracetamol |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for ns in dedupe.namespaces(store):
        folds = dedupe.find(store, ns)
        with store.connect(read_only=True) as con:
            created = con.execute("SELECT count(DISTINCT id) FROM extracted_nodes WHERE namespace = ? AND id NOT IN "
                                  "(SELECT id FROM seed_nodes)", [ns]).fetchone()[0]
            n_ev, both, one = con.execute(
                "SELECT count(*), count(*) FILTER (WHERE h.id IS NOT NULL AND t.id IS NOT NULL), "
                "count(*) FILTER (WHERE h.id IS NOT NULL OR t.id IS NOT NULL) FROM evidence e "
                "LEFT JOIN seed_nodes h ON h.id = e.head_id LEFT JOIN seed_nodes t ON t.id = e.tail_id "
                "WHERE e.namespace = ?", [ns]).fetchone()
            para = con.execute(
                "SELECT DISTINCT id FROM extracted_nodes WHERE namespace = ? AND lower(name) = 'paracetamol'",
                [ns]).fetchall()
            acetaminophen = con.execute("SELECT count(*) FROM evidence WHERE namespace = ? AND ? IN (head_id, tail_id)",
                                        [ns, ACETAMINOPHEN]).fetchone()[0]
        landing = (f"own node {', '.join(r[0] for r in para)}" if para else "no node of its own") + (
            f"; {acetaminophen} evidence on Acetaminophen")
        share = (lambda n: f"{n / n_ev:.1%}" if n_ev else "–")
        print(f"| {ns} | {created} | {len(folds)} ({sum(f.target == 'seed' for f in folds)} / "
              f"{sum(f.target == 'extracted' for f in folds)}) | {n_ev} | {share(both)} | {share(one)} | {landing} |")


def dev_splits(files: list[Path], data: DataPaths, limit: int | None) -> None:
    params = KarmaParams()
    backbone = services.backbone("local", BackboneSettings(kind="local"), data)
    dictionary, index = services.dictionary(data), services.entity_index(data)
    identity = services.identity_index(data)
    print("\n## Dev splits: gold mentions whose gold id names a seed node (exact span), the local EEA\n")
    print("| corpus | identity | should link | linked right | linked elsewhere | made new | missed span "
          "| new nodes sharing an id with a seed node | ids F1 | s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in files:
        docs = read_pubtator(path)[:limit] if limit else read_pubtator(path)
        for use in (False, True):
            t0 = time.perf_counter()
            counts: Counter[str] = Counter()
            predicted = []
            for d in docs:
                key = f"pmid-{d.pmid}"
                summary = SummaryRow(doc_key=key, summary_id=f"{key}:full", segment_id=f"{key}:full",
                                     section="abstract", text=d.text, n_sentences_in=0, n_sentences_out=0)
                rows = extract_entities_counted([summary], backbone, dictionary, index, params,
                                                identity=identity if use else None).rows
                predicted.append([PredictedMention(start=m.start, end=m.end, text=m.text, type=m.type,
                                                   vocab_id=m.vocab_id, kg_id=m.kg_id) for m in rows])
                at = {(m.start, m.end): m for m in rows}
                for g in d.mentions:
                    ner_type = CORPUS_TYPE.get(g.type)
                    gold = identity.by_id(corpus_vocab_id(ner_type, g.identifier) if ner_type else None,
                                          compatible_kinds(ner_type))
                    if gold is None:
                        continue
                    counts["should"] += 1
                    m = at.get((g.start, g.end))
                    if m is None:
                        counts["missed"] += 1
                    elif m.status == "new":
                        counts["new"] += 1
                    elif m.kg_id == gold.node.id:
                        counts["right"] += 1
                    else:
                        counts["elsewhere"] += 1
                counts["dup_new"] += len({m.entity_id for m in rows if m.status == "new" and identity.by_id(
                    m.vocab_id, compatible_kinds(m.type)) is not None})
            ids_f1 = score_gold(docs, predicted, [[] for _ in docs]).summary()["id_f1"]
            print(f"| {path.name} ({len(docs)}) | {'on' if use else 'off'} | {counts['should']} | {counts['right']} | "
                  f"{counts['elsewhere']} | {counts['new']} | {counts['missed']} | {counts['dup_new']} | "
                  f"{ids_f1:.3f} | {time.perf_counter() - t0:.0f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="PubTator files with gold (default: the three dev splits)")
    home = Path(os.environ.get("DAGSTER_HOME", Path(__file__).resolve().parents[1] / "dagster_home"))
    ap.add_argument("--kg", type=Path, default=home / "karma" / "kg.duckdb", help="a grown KG to audit")
    ap.add_argument("--data-dir", type=Path, help="a seeded data dir to reuse (default: a fresh temporary one)")
    ap.add_argument("--limit", type=int, help="only the first N documents of each file")
    args = ap.parse_args(argv)
    files = args.files or list(DEFAULT_FILES)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        ap.error(f"PubTator file(s) not found: {', '.join(missing)}")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    if args.kg.exists():
        audit_kg(args.kg)
    else:
        print(f"(no KG at {args.kg}: `karma run` grows one; skipping the KG audit)", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        data = DataPaths(str(args.data_dir or Path(tmp) / "karma"))
        if not services.seed_present(data):
            services.import_seed_kg(data, data_file("seed_kg", "nodes.tsv"), data_file("seed_kg", "edges.sif.gz"),
                                    "hetionet", KarmaParams().seed_edge_confidence)
        dev_splits(files, data, args.limit)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
