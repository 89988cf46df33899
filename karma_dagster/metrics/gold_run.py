"""`karma gold-eval`: one backbone's agents over a PubTator or BioC file, scored against its gold.

Each abstract (title + ' ' + abstract, the text the gold offsets index) goes through the same EEA (NER ⊙
dictionary filter, identity by id, cross-reference or exact name, then the KG's vector index) and REA (entity pairs of the abstract on a backbone with a
document-level model, mention pairs in a sentence otherwise; p >= theta_r) agents as the chain, as one summary:
reader and summarizer are skipped so the scores measure extraction, not what the reader kept. Then alignment,
conflict resolution (against the seed KG) and the evaluator decide what would be admitted, and every admitted
triple is judged (metrics/judging.py: ends without an id by their spans; what no gold can judge is counted).
(The pipeline's own `gold_evaluation` asset scores the whole chain on inbox documents with gold.) A corpus without
relation gold (NCBI disease) prints its relation scores as n/a: every predicted pair would count as a false positive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from karma_dagster.agents.conflict_resolution import ExistingEdges, resolve_conflicts
from karma_dagster.agents.entity_extraction import extract_entities_counted
from karma_dagster.agents.evaluator import evaluate_triples, triple_contexts
from karma_dagster.agents.relation_extraction import extract_relations
from karma_dagster.agents.schema_alignment import align_triples
from karma_dagster.backbones.base import Backbone
from karma_dagster.kg.identity import IdentityIndex
from karma_dagster.kg.schema import KGSchema
from karma_dagster.metrics.judging import DocumentTriples, Judgement, judge_documents
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.schemas.records import EvaluatedRow, MentionRow, SegmentRow
from karma_dagster.ingest.bioc import read_bioc_gold
from karma_dagster.ingest.parse import source_format_of
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.metrics.gold import GoldScores, PredictedMention, PredictedTriple, comparable_id, score_gold
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import SummaryRow


class GoldEvalScores(GoldScores):
    """The scores `karma gold-eval` prints: n/a for relations when the corpus annotates none."""

    def summary(self) -> dict[str, float]:
        s = super().summary()
        return s if self.relations.annotated else {k: v for k, v in s.items() if not k.startswith("pair")}

    def one_line(self) -> str:
        if self.relations.annotated:
            return super().one_line()
        s = self.summary()
        return (f"docs {self.n_docs} | mentions P/R/F1 {s['mention_p']:.3f}/{s['mention_r']:.3f}/{s['mention_f1']:.3f}"
                f" | ids {s['id_p']:.3f}/{s['id_r']:.3f}/{s['id_f1']:.3f}"
                " | pairs n/a | pair+type n/a (no relation gold in this corpus)")

    def markdown(self) -> str:
        if self.relations.annotated:
            return super().markdown()
        lines = [line for line in super().markdown().splitlines() if not line.startswith("| relation |")]
        lines.append("| relation | pair, pair+type | n/a | n/a | n/a | n/a | n/a | n/a |")
        return "\n".join(lines)


def summary_table(runs: Sequence[tuple[str, GoldEvalScores]]) -> str:
    """One row per corpus: the F1 figures issue 15 tracks (mentions, ids, relation pairs, pair + type), so several
    corpora read side by side; n/a where a corpus annotates no relation. On BC5CDR pair + type is CID."""
    lines = ["| corpus | docs | mentions F1 | ids F1 | relation pairs F1 | pair + type F1 |", "|---|---:|---:|---:|---:|---:|"]
    for name, scores in runs:
        s = scores.summary()
        rel = (f"{s['pair_f1']:.3f} | {s['pair_type_f1']:.3f}" if scores.relations.annotated else "n/a | n/a")
        lines.append(f"| {name} | {scores.n_docs} | {s['mention_f1']:.3f} | {s['id_f1']:.3f} | {rel} |")
    return "\n".join(lines)


@dataclass
class KGView:
    """What the later agents read of the KG: node kinds, the schema, the edges a triple may clash with."""

    schema: KGSchema
    kind_of: Callable[[str], str | None]
    existing: ExistingEdges


def admitted_triples(summary: SummaryRow, mentions: list[MentionRow], triples: list, backbone: Backbone,
                     params: KarmaParams, kg: KGView, integrable: bool = False) -> pd.DataFrame:
    """REA's triples through alignment, conflict resolution and the evaluator: the admitted rows, as a table.
    `integrable`: every row the earlier agents let through (aligned, kept), admitted or not (`karma calibrate`)."""
    if not triples:
        return pd.DataFrame(columns=["accepted"])
    aligned = align_triples(triples, mentions, backbone, kg.schema, params, kg.kind_of)
    resolved = resolve_conflicts(aligned, kg.existing, backbone, kg.schema, params)
    segment = SegmentRow(doc_key=summary.doc_key, segment_id=summary.segment_id, order=0, section="abstract",
                         heading="", text=summary.text, relevance=1.0, kept=True)
    contexts = triple_contexts(resolved, mentions, [segment])
    linked = {m.entity_id for m in mentions if m.status == "linked"}
    evaluated = evaluate_triples(resolved, {summary.segment_id: 1.0}, backbone, params, is_linked=linked,
                                 contexts=contexts)
    table = records_to_frame(evaluated, EvaluatedRow)
    if integrable:
        return table[table["action"].isin(["keep", "replace"]) & (table["schema_status"] == "aligned")]
    return table[table["accepted"].astype(bool)]


def predict_document(doc: PubTatorDoc, backbone: Backbone, dictionary, index, params: KarmaParams,
                     kg: KGView | None = None, integrable: bool = False, identity: IdentityIndex | None = None
                     ) -> tuple[list[PredictedMention], list[PredictedTriple], DocumentTriples | None]:
    """`identity`: who a mention is by id, cross-reference or exact KG name before the vector index, as the chain's
    entities stage asks (services.identity_index); None scores the dictionary and the index alone."""
    key = f"pmid-{doc.pmid}"
    summary = SummaryRow(doc_key=key, summary_id=f"{key}:full", segment_id=f"{key}:full", section="abstract",
                         text=doc.text, n_sentences_in=0, n_sentences_out=0)
    mentions = extract_entities_counted([summary], backbone, dictionary, index, params, identity=identity).rows
    triples = extract_relations([summary], mentions, backbone, params) if mentions else []
    judged = None
    if kg is not None:
        entities = records_to_frame(mentions, MentionRow)
        entities["gold_start"] = [m.start for m in mentions]  # the summary is the gold text: offsets are its own
        entities["gold_end"] = [m.end for m in mentions]
        judged = DocumentTriples(doc_key=key, gold=doc, mentions=entities,
                                 triples=admitted_triples(summary, mentions, triples, backbone, params, kg, integrable))
    ids = {m.mention_id: comparable_id(m.vocab_id, m.kg_id)[0] for m in mentions}
    pm = [PredictedMention(start=m.start, end=m.end, text=m.text, type=m.type, vocab_id=m.vocab_id, kg_id=m.kg_id)
          for m in mentions]
    pt = [PredictedTriple(head_vocab_id=ids.get(t.head_mention_id), tail_vocab_id=ids.get(t.tail_mention_id),
                          head_type=t.head_type, tail_type=t.tail_type, relation=t.relation, probability=t.probability)
          for t in triples]
    return pm, pt, judged


def read_gold(path: Path) -> list[PubTatorDoc]:
    """The gold documents of a PubTator file, or of a BioC XML/JSON file (its offsets carried into PubTator's
    convention: the same corpus scores the same from either)."""
    return read_bioc_gold(path) if source_format_of(path) == "bioc" else read_pubtator(path)


def evaluate_file(path: Path, backbone: Backbone, dictionary, index, params: KarmaParams, limit: int | None = None,
                  log: Callable[[str], None] = lambda _m: None, kg: KGView | None = None,
                  identity: IdentityIndex | None = None) -> tuple[GoldEvalScores, float, Judgement | None]:
    """Scores, wall seconds and (with `kg`) the judgement of the admitted triples; `limit` = the first N documents."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"gold-eval: no PubTator file at {path}")
    docs = read_gold(Path(path))
    if limit:
        docs = docs[:limit]
    if not docs:
        raise ValueError(f"gold-eval: {path} holds no PubTator documents")
    t0 = time.perf_counter()
    mentions, triples, judged = [], [], []
    for i, d in enumerate(docs, 1):
        m, t, j = predict_document(d, backbone, dictionary, index, params, kg, identity=identity)
        mentions.append(m)
        triples.append(t)
        if j is not None:
            judged.append(j)
        if i % 50 == 0:
            log(f"  {i}/{len(docs)} documents")
    scores = GoldEvalScores.model_validate(score_gold(docs, mentions, triples).model_dump())
    judgement = judge_documents(judged) if kg is not None and scores.relations.annotated else None
    return scores, time.perf_counter() - t0, judgement
