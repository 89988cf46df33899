"""`karma gold-eval`: one backbone's entity and relation agents over a PubTator file, scored against its gold.

Each abstract (title + ' ' + abstract, the text the gold offsets index) goes through the same EEA (NER ⊙
dictionary filter, normalization against the KG index) and REA (pairs in a sentence, p >= theta_r) agents as the
chain, as one summary: reader and summarizer are skipped so the scores measure extraction, not what the reader
kept. (The pipeline's own `gold_evaluation` asset scores the whole chain on inbox documents with gold.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from karma_dagster.agents.entity_extraction import extract_entities_counted
from karma_dagster.agents.relation_extraction import extract_relations
from karma_dagster.backbones.base import Backbone
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.metrics.gold import GoldScores, PredictedMention, PredictedTriple, comparable_id, score_gold
from karma_dagster.params import KarmaParams
from karma_dagster.schemas.records import SummaryRow


def predict_document(doc: PubTatorDoc, backbone: Backbone, dictionary, index, params: KarmaParams
                     ) -> tuple[list[PredictedMention], list[PredictedTriple]]:
    key = f"pmid-{doc.pmid}"
    summary = SummaryRow(doc_key=key, summary_id=f"{key}:full", segment_id=f"{key}:full", section="abstract",
                         text=doc.text, n_sentences_in=0, n_sentences_out=0)
    mentions = extract_entities_counted([summary], backbone, dictionary, index, params).rows
    triples = extract_relations([summary], mentions, backbone, params) if mentions else []
    ids = {m.mention_id: comparable_id(m.vocab_id, m.kg_id)[0] for m in mentions}
    pm = [PredictedMention(start=m.start, end=m.end, text=m.text, type=m.type, vocab_id=m.vocab_id, kg_id=m.kg_id)
          for m in mentions]
    pt = [PredictedTriple(head_vocab_id=ids.get(t.head_mention_id), tail_vocab_id=ids.get(t.tail_mention_id),
                          head_type=t.head_type, tail_type=t.tail_type, relation=t.relation, probability=t.probability)
          for t in triples]
    return pm, pt


def evaluate_file(path: Path, backbone: Backbone, dictionary, index, params: KarmaParams, limit: int | None = None,
                  log: Callable[[str], None] = lambda _m: None) -> tuple[GoldScores, float]:
    """Scores and wall seconds; `limit` = the first N documents only."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"gold-eval: no PubTator file at {path}")
    docs = read_pubtator(Path(path))
    if limit:
        docs = docs[:limit]
    if not docs:
        raise ValueError(f"gold-eval: {path} holds no PubTator documents")
    t0 = time.perf_counter()
    mentions, triples = [], []
    for i, d in enumerate(docs, 1):
        m, t = predict_document(d, backbone, dictionary, index, params)
        mentions.append(m)
        triples.append(t)
        if i % 50 == 0:
            log(f"  {i}/{len(docs)} documents")
    return score_gold(docs, mentions, triples), time.perf_counter() - t0
