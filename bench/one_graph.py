"""One graph: what the KG holds after the main job and one accepted review item of each kind.

Run after the main job (`bash scripts/main.sh`), on a copy of its data folder (the original is left as it is):

    python bench/one_graph.py [--data-dir dagster_home/karma]

It collects the review queue as `karma review` does, accepts the best pending item of each kind (a schema-review
item with the relation a reviewer would be offered first), queues and accepts one CogMG completion that breaks the
schema on purpose (a Gene that "treats" a Disease), merges the accepted decisions as `karma review --merge` does,
then prints:

- KG edges without a metaedge, edges whose end kinds break their metaedge's domain/range, nodes whose vocabulary id
  belongs to another kind, extracted nodes that are a seed node by id, cross-reference or listed synonym (what
  `karma check` reads: kg/invariants.py);
- review items against distinct facts (head, relation, tail) in the queue;
- what became of each accepted item (merged, or refused with its reason).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from karma_dagster.cogmg.models import Completion, Passage
from karma_dagster.kg import invariants
from karma_dagster.kg.backends import kg_store
from karma_dagster.review import accepting
from karma_dagster.review.changes import with_changes
from karma_dagster.review.cli_review import collect
from karma_dagster.review.cogmg_items import items_from_completions
from karma_dagster.review.merge_inputs import chain_docs_from, merge_accepted
from karma_dagster.review.models import SOURCES, DecisionIn
from karma_dagster.review.queue import ReviewError, ReviewQueue
from karma_dagster.runtime import services
from karma_dagster.runtime.paths import DataPaths

REPO = Path(__file__).resolve().parents[1]
# a fact the schema refuses: Gene -treats-> Disease has no metaedge (treats runs Compound -> Disease)
TSHR, GRAVES = "Gene::7253", "Disease::DOID:12361"
BAD_SENTENCE = "TSHR treats Graves disease in this made-up sentence, which the schema must refuse."


def invalid_completion(backbone: str) -> Completion:
    return Completion(
        question_id="one_graph__invalid", question="What treats Graves disease?", backbone=backbone,
        head_id=TSHR, head_name="TSHR", head_kind="Gene", relation="treats", tail_id=GRAVES,
        tail_name="Graves' disease", tail_kind="Disease", method="candidate", supported=True, score=0.9,
        evidence=BAD_SENTENCE, evidence_doc_keys=[],
        passages=[Passage(passage_id="p1", doc_key="one_graph", text=BAD_SENTENCE, score=5.0, entities=[])])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=str(REPO / "dagster_home" / "karma"))
    ap.add_argument("--backbone", default="local", help="the backbone whose KG the CogMG completion is for")
    args = ap.parse_args(argv)
    source = Path(args.data_dir)
    if not (source / "kg.duckdb").is_file():
        print(f"one_graph: {source} holds no kg.duckdb: run `bash scripts/main.sh` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="karma-one-graph-") as tmp:
        data = Path(tmp) / "karma"
        shutil.copytree(source, data, ignore=shutil.ignore_patterns("cache", ".cache", "*.lock"))
        return measure(DataPaths(str(data)), args.backbone)


def measure(paths: DataPaths, backbone: str) -> int:
    queue = ReviewQueue.for_data(paths)
    counts = collect(paths, queue, None, [])
    print(f"collected: {counts}")
    schema = services.kg_schema()
    picked = {}
    for src in SOURCES:
        pending = queue.items(source=src, status="pending", limit=1)
        if pending:
            picked[src] = pending[0][0]
    queue.add_items(with_changes(items_from_completions([invalid_completion(backbone)]), paths.kg))
    bad = queue.items(source="cogmg", status="pending")
    bad_item = next(i for i, _ in bad if i.head_id == TSHR and i.tail_id == GRAVES)
    print(f"queued the invalid CogMG completion: {bad_item.triple_text}; its note: {bad_item.note!r}")
    for src, item in sorted(picked.items()):
        choice = ""  # as it stands, unless the kind asks a reviewer to pick: the first relation offered
        if accepting.needs_choice(item, schema):
            offered = accepting.choices(item, schema)
            choice = offered[0].abbrev if offered else accepting.default_choice(item, schema)
        try:
            queue.decide(item.item_id, DecisionIn(action="accept", reviewer="one-graph bench", choice=choice))
        except ReviewError as exc:
            print(f"accept {src} {item.triple_text}: refused by the queue: {exc}")
            continue
        print(f"accepted {src}: {item.triple_text} [{item.backbone}]{f' as {choice}' if choice else ''}")
    queue.decide(bad_item.item_id, DecisionIn(action="accept", reviewer="one-graph bench"))
    outcomes = merge_accepted(paths.kg, queue, chain_docs=chain_docs_from(paths), run_id="one-graph")
    for o in outcomes:
        print(f"merged {o.namespace} {o.date}: {len(o.items)} item(s), new edges {o.stats.n_new_edges}, "
              f"reinforced {o.stats.n_reinforced}, refused {o.stats.n_refused}")
    for item, d in queue.accepted():
        state = f"merged {d.merged_at:%Y-%m-%d}" if d.merged_at else f"not merged: {d.merge_note}"
        print(f"  {item.source:20} {item.triple_text}: {state}")

    store = kg_store(paths)
    report = invariants.check_store(store)
    rules = Counter(v.rule for v in report.violations)
    seed_dupes = sum(1 for v in report.violations if v.rule == "one_node" and " is seed node " in v.message)
    every = queue.items(status="all")
    facts = {i.fact for i, _ in every}
    print("\n| figure | count |\n|---|---|")
    print(f"| KG rows checked | {report.n_rows} |")
    print(f"| edges without a metaedge | {rules.get('metaedge', 0)} |")
    print(f"| edges whose end kinds break their metaedge's domain/range | {rules.get('domain_range', 0)} |")
    print(f"| nodes whose vocabulary id belongs to another kind | {rules.get('id_kind', 0)} |")
    print(f"| extracted nodes that are a seed node (id, cross-reference, name, synonym) | {seed_dupes} |")
    print(f"| extracted nodes that are another extracted node | {rules.get('one_node', 0) - seed_dupes} |")
    print(f"| other rule or invariant findings | "
          f"{sum(n for r, n in rules.items() if r not in {'metaedge', 'domain_range', 'id_kind', 'one_node'})} |")
    print(f"| review items / distinct facts | {len(every)} / {len(facts)} |")
    print(f"| accepted items merged / refused with a reason | "
          f"{sum(1 for _, d in queue.accepted() if d.merged_at)} / "
          f"{sum(1 for _, d in queue.accepted() if not d.merged_at and d.merge_note)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
