"""Scores of a backbone's mentions, identifiers and relations against PubTator gold (BioRED, BC5CDR).

Reuses gold_mentions.py (span + type, document-level id sets; micro and per type) and
gold_relations.py (document-level id pairs: the pair, and the pair with its type).

The identifier mapping is explicit, because gold and KG speak different namespaces:

    gold id (PubTator)   D003409 (Disease)      6528 (Gene)        9606 (Species)
    vocab id (lexicon)   MESH:D003409           NCBIGene:6528      NCBITaxon:9606
    KG id (Hetionet)     Symptom::D003409 /     Gene::6528         -
                         Disease::DOID:... (no MeSH xref shipped: not comparable)

A predicted mention's comparable id is its lexicon `vocab_id`; without one, its KG id when the KG id carries a
gold namespace (Gene::N -> NCBIGene:N, Symptom::D... -> MESH:D...); else it has none (reported, never guessed).
Variant ids compare as written (rs6275, or tmVar's `p|SUB|R|215|W`, one id: its `|` is no list separator).
Relation pairs compare on the raw gold ids (MESH:D003409 -> D003409). BC5CDR annotates one type, CID
(chemical-induced disease): a predicted Positive_Correlation between a chemical and a disease is its CID.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from karma_dagster.dictionary.lexicon import CORPUS_TYPE, corpus_vocab_id
from karma_dagster.dictionary.variants import split_identifier
from karma_dagster.ingest.pubtator import PubTatorDoc
from karma_dagster.metrics.gold_mentions import MentionScores, score_mentions
from karma_dagster.metrics.gold_relations import PairKey, RelationScores, score_documents
from karma_dagster.schemas.records import MentionSpan

KG_TO_VOCAB = {"Gene": "NCBIGene:", "Symptom": "MESH:"}  # Hetionet kinds whose ids are a gold namespace
CDR_LABEL = "CID"


def ner_type(t: str) -> str:
    """Our NER types (Gene, Chemical, ...) whatever the backbone said (GeneOrGeneProduct, ChemicalEntity, ...)."""
    return CORPUS_TYPE.get(t, t)


def kg_to_vocab(kg_id: str | None) -> str | None:
    if not kg_id or "::" not in kg_id:
        return None
    kind, _, local = kg_id.partition("::")
    prefix = KG_TO_VOCAB.get(kind)
    return f"{prefix}{local}" if prefix else None


def comparable_id(vocab_id: str | None, kg_id: str | None) -> tuple[str | None, str]:
    """(vocab id used for scoring, how it was obtained)."""
    if vocab_id:
        return vocab_id, "lexicon vocab_id"
    mapped = kg_to_vocab(kg_id)
    if mapped:
        return mapped, f"KG id {kg_id}"
    return None, ("KG id without a gold namespace" if kg_id else "new entity without vocab id")


def raw_id(vocab_id: str | None) -> str | None:
    """MESH:D003409 -> D003409 (PubTator relation lines use the bare ids)."""
    if not vocab_id:
        return None
    for prefix in ("MESH:", "NCBIGene:", "NCBITaxon:", "Cellosaurus:"):
        if vocab_id.startswith(prefix):
            return vocab_id[len(prefix):]
    return vocab_id


class PredictedMention(BaseModel):
    """A mention with offsets into the gold text (title + ' ' + abstract)."""

    model_config = ConfigDict(extra="forbid")
    start: int
    end: int
    text: str
    type: str
    vocab_id: str | None = None
    kg_id: str | None = None


class PredictedTriple(BaseModel):
    model_config = ConfigDict(extra="forbid")
    head_vocab_id: str | None
    tail_vocab_id: str | None
    head_type: str
    tail_type: str
    relation: str
    probability: float


class IdMapping(BaseModel):
    gold_id: str
    type: str
    vocab_id: str | None
    kg_ids: list[str]
    predicted: bool


class GoldScores(BaseModel):
    n_docs: int
    mentions: MentionScores
    relations: RelationScores
    mapping: list[IdMapping]
    id_sources: dict[str, int]  # how predicted ids were obtained -> count

    def summary(self) -> dict[str, float]:
        m, i = self.mentions.mentions["micro"], self.mentions.ids["micro"]
        r = self.relations
        return {
            "mention_p": m.precision, "mention_r": m.recall, "mention_f1": m.f1,
            "id_p": i.precision, "id_r": i.recall, "id_f1": i.f1,
            "pair_p": r.pair.precision, "pair_r": r.pair.recall, "pair_f1": r.pair.f1,
            "pair_type_p": r.pair_type.precision, "pair_type_r": r.pair_type.recall, "pair_type_f1": r.pair_type.f1,
        }

    def one_line(self) -> str:
        s = self.summary()
        return (f"docs {self.n_docs} | mentions P/R/F1 {s['mention_p']:.3f}/{s['mention_r']:.3f}/{s['mention_f1']:.3f}"
                f" | ids {s['id_p']:.3f}/{s['id_r']:.3f}/{s['id_f1']:.3f}"
                f" | pairs {s['pair_p']:.3f}/{s['pair_r']:.3f}/{s['pair_f1']:.3f}"
                f" | pair+type {s['pair_type_p']:.3f}/{s['pair_type_r']:.3f}/{s['pair_type_f1']:.3f}")

    def markdown(self) -> str:
        lines = ["| level | type | P | R | F1 | tp | fp | fn |", "|---|---|---|---|---|---|---|---|"]
        for level, table in (("mention (span+type)", self.mentions.mentions), ("normalized id", self.mentions.ids)):
            for name in ["micro"] + sorted(k for k in table if k != "micro"):
                s = table[name]
                lines.append(f"| {level} | {name} | {s.precision:.3f} | {s.recall:.3f} | {s.f1:.3f} | {s.tp} | {s.fp} | {s.fn} |")
        r = self.relations
        for name, s in [("pair", r.pair), ("pair+type (micro)", r.pair_type), *r.per_type.items()]:
            lines.append(f"| relation | {name} | {s.precision:.3f} | {s.recall:.3f} | {s.f1:.3f} | {s.tp} | {s.fp} | {s.fn} |")
        return "\n".join(lines)


def _gold_relation_types(docs: Sequence[PubTatorDoc]) -> list[str]:
    return sorted({r.relation for d in docs for r in d.relations})


def relation_predictions(triples: Iterable[PredictedTriple], cdr_only: bool) -> dict[PairKey, dict[str, float]]:
    out: dict[PairKey, dict[str, float]] = {}
    for t in triples:
        h, tl = raw_id(t.head_vocab_id), raw_id(t.tail_vocab_id)
        if not h or not tl or h == tl:
            continue
        label = t.relation
        if cdr_only:
            kinds = {ner_type(t.head_type), ner_type(t.tail_type)}
            if label != "Positive_Correlation" or kinds != {"Chemical", "Disease"}:
                continue
            label = CDR_LABEL
        slot = out.setdefault(frozenset((h, tl)), {})
        slot[label] = max(slot.get(label, 0.0), t.probability)
    return out


def score_gold(
    docs: Sequence[PubTatorDoc],
    mentions: Sequence[Sequence[PredictedMention]],
    triples: Sequence[Sequence[PredictedTriple]],
) -> GoldScores:
    """P/R/F1 of one backbone's predictions for `docs` (one list of mentions and triples per document)."""
    if not (len(docs) == len(mentions) == len(triples)):
        raise ValueError(f"score_gold: {len(docs)} documents, {len(mentions)} mention lists, {len(triples)} triple lists")
    spans: list[list[MentionSpan]] = []
    sources: Counter[str] = Counter()
    kg_of_vocab: dict[str, set[str]] = {}
    predicted_ids: set[str] = set()
    for ms in mentions:
        doc_spans = []
        for m in ms:
            vid, how = comparable_id(m.vocab_id, m.kg_id)
            sources[how] += 1
            if vid:
                predicted_ids.add(vid)
                if m.kg_id:
                    kg_of_vocab.setdefault(vid, set()).add(m.kg_id)
            doc_spans.append(MentionSpan(start=m.start, end=m.end, text=m.text, type=ner_type(m.type), vocab_id=vid))
        spans.append(doc_spans)
    mention_scores = score_mentions(docs, spans)
    types = _gold_relation_types(docs)
    cdr_only = bool(types) and set(types) == {CDR_LABEL}
    preds = [relation_predictions(ts, cdr_only) for ts in triples]
    relation_scores = score_documents(docs, preds, theta=lambda _r: 0.0, types=types)
    mapping: dict[tuple[str, str], IdMapping] = {}
    for d in docs:
        for g in d.mentions:
            t = CORPUS_TYPE.get(g.type)
            for part in split_identifier(t, g.identifier):
                vid = corpus_vocab_id(t, part) if t else None
                if not vid or (part, t) in mapping:
                    continue
                kg = sorted(kg_of_vocab.get(vid, set()))
                if not kg and vid.startswith("NCBIGene:"):
                    kg = [f"Gene::{vid.split(':', 1)[1]}"]
                elif not kg and vid.startswith("MESH:") and t == "Disease":
                    kg = [f"Symptom::{vid.split(':', 1)[1]}"]
                mapping[(part, t)] = IdMapping(gold_id=part.strip(), type=t or g.type, vocab_id=vid, kg_ids=kg,
                                               predicted=vid in predicted_ids)
    return GoldScores(n_docs=len(docs), mentions=mention_scores, relations=relation_scores,
                      mapping=sorted(mapping.values(), key=lambda m: (m.type, m.gold_id)), id_sources=dict(sources))
