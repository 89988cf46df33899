"""Gold scores of one namespace's inbox documents that carry PubTator gold annotations.

For every document the namespace evaluated, the gold comes from the inbox file the catalog registered for it
(none = the document is skipped); the predictions are the namespace's stage tables: mentions aligned onto the
gold text, REA's candidate triples and the accepted (evaluated) triples. The whole chain is measured: what the
reader dropped is missed.
"""

from __future__ import annotations

from pathlib import Path

from karma_dagster.ingest.catalog import Catalog
from karma_dagster.metrics.gold import GoldScores, score_gold
from karma_dagster.metrics.gold_sources import aligned_mentions, gold_document, predicted_triples
from karma_dagster.metrics.judging import DocumentTriples, Judgement, judge_documents, placed_mentions
from karma_dagster.runtime.stage_store import StageStore


def compute_gold(stages: StageStore, catalog: Catalog, inbox: Path,
                 namespace: str) -> tuple[GoldScores, GoldScores, int] | None:
    """(scores of REA's triples, scores of the accepted triples, unaligned mentions), or None when no document
    of the namespace carries gold."""
    docs, mentions, rea, accepted = [], [], [], []
    unaligned = 0
    for key in stages.partitions(namespace, "evaluated"):
        gold = gold_document(key, inbox, catalog)
        if gold is None:
            continue
        entities = stages.read(namespace, "entities", key)
        summaries = stages.read(namespace, "summaries", key)
        ms, n_bad = aligned_mentions(summaries, entities, gold.text)
        unaligned += n_bad
        ev = stages.read(namespace, "evaluated", key)
        docs.append(gold)
        mentions.append(ms)
        rea.append(predicted_triples(stages.read(namespace, "relations", key), entities))
        accepted.append(predicted_triples(ev[ev["accepted"].astype(bool)], entities))
    if not docs:
        return None
    return score_gold(docs, mentions, rea), score_gold(docs, mentions, accepted), unaligned


def judge_accepted(stages: StageStore, catalog: Catalog, inbox: Path, namespace: str) -> Judgement | None:
    """Every accepted triple of the namespace's gold documents judged (metrics/judging.py), or None when no
    document carries relation gold."""
    docs = []
    for key in stages.partitions(namespace, "evaluated"):
        gold = gold_document(key, inbox, catalog)
        if gold is None or not gold.relations:
            continue
        entities = stages.read(namespace, "entities", key)
        ms, _ = aligned_mentions(stages.read(namespace, "summaries", key), entities, gold.text)
        ev = stages.read(namespace, "evaluated", key)
        docs.append(DocumentTriples(doc_key=key, gold=gold, mentions=placed_mentions(entities, ms),
                                    triples=ev[ev["accepted"].astype(bool)]))
    return judge_documents(docs) if docs else None
