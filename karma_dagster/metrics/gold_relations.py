"""Document-level relation P/R/F1 against BioRED-style gold, with the gold mentions as input.

Feeding gold mentions isolates the relation model from NER and normalization (BioRED annotates id pairs per
abstract, unordered). Two ways in: a mention-pair model (a pair of gold ids is predicted when any co-occurring
pair of their mentions gets p >= theta_r for some type), or a document-level model asked once per pair of
gold entities (all mentions of an id). Scored twice: the pair alone, and the pair with its type; micro over
all, and per type. A corpus without relation gold (NCBI disease) has no relation score: `annotated` is False
and the tables print n/a instead of a 0.000 made of false positives.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from karma_dagster.dictionary.lexicon import CORPUS_TYPE, corpus_vocab_id
from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.ingest.pubtator import PubTatorDoc
from karma_dagster.metrics.gold_mentions import PRF
from karma_dagster.schemas.records import MentionSpan

ProbabilityFn = Callable[[str, list[tuple[MentionSpan, MentionSpan]]], list[dict[str, float]]]
# (text, entities as lists of mentions, (i, j) pairs) -> p(r) per pair: a document-level model
DocProbabilityFn = Callable[[str, list[list[MentionSpan]], list[tuple[int, int]]], list[dict[str, float]]]
PairKey = frozenset[str]


class RelationScores(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n_docs: int
    n_gold: int
    reachable_gold: int  # gold pairs whose ids co-occur in some candidate window (the recall ceiling)
    pair: PRF
    pair_type: PRF
    per_type: dict[str, PRF]
    annotated: bool = True  # False: the corpus has no relation gold, so the scores above mean nothing (n/a)


def _ids(identifier: str, ner_type: str = "") -> list[str]:
    """Gold ids of a mention; a variant's `p|SUB|V|1764|M` is one id (its `|` is no separator)."""
    seps = r"[,;]" if "variant" in ner_type.lower() else r"[,|;]"
    return [i.strip() for i in re.split(seps, identifier) if i.strip() and i.strip() not in ("-1", "-")]


def _sentence_index(sents: list[tuple[int, int, str]], pos: int) -> int:
    for i, (s, e, _) in enumerate(sents):
        if s <= pos < e:
            return i
    return -1


def gold_pairs(doc: PubTatorDoc) -> dict[PairKey, set[str]]:
    out: dict[PairKey, set[str]] = defaultdict(set)
    for r in doc.relations:
        out[frozenset((r.id1, r.id2))].add(r.relation)
    return dict(out)


def predict_document(
    doc: PubTatorDoc, probabilities: ProbabilityFn, window: int = 0
) -> dict[PairKey, dict[str, float]]:
    """Max p per (id pair, type) over the document's co-occurring gold-mention pairs."""
    text = doc.text
    sents = split_sentences(text)
    ments = [m for m in doc.mentions if _ids(m.identifier, m.type)]
    sid = [_sentence_index(sents, m.start) for m in ments]
    spans = [MentionSpan(start=m.start, end=m.end, text=m.text, type=m.type) for m in ments]
    pairs: list[tuple[MentionSpan, MentionSpan]] = []
    keys: list[list[PairKey]] = []
    for i in range(len(ments)):
        for j in range(i + 1, len(ments)):
            ida, idb = set(_ids(ments[i].identifier, ments[i].type)), set(_ids(ments[j].identifier, ments[j].type))
            if sid[i] < 0 or sid[j] < 0 or abs(sid[i] - sid[j]) > window or ida & idb:
                continue
            pairs.append((spans[i], spans[j]))
            keys.append([frozenset((x, y)) for x in ida for y in idb])
    out: dict[PairKey, dict[str, float]] = defaultdict(dict)
    for ks, probs in zip(keys, probabilities(text, pairs) if pairs else [], strict=True):
        for k in ks:
            for r, p in probs.items():
                if p > out[k].get(r, -1.0):
                    out[k][r] = p
    return dict(out)


def predict_document_entities(doc: PubTatorDoc, probabilities: DocProbabilityFn
                              ) -> dict[PairKey, dict[str, float]]:
    """p(r) per pair of gold ids from a document-level model asked once per pair of gold entities (one entity
    per id; a composite mention belongs to each of its ids). Each mention carries its gold id as its vocab id,
    as the chain's mentions carry theirs (the model's KG prior reads them)."""
    by_id: dict[str, list[MentionSpan]] = defaultdict(list)
    for m in doc.mentions:
        for i in _ids(m.identifier, m.type):
            by_id[i].append(MentionSpan(start=m.start, end=m.end, text=m.text, type=m.type,
                                        vocab_id=corpus_vocab_id(CORPUS_TYPE.get(m.type, m.type), i)))
    ids = sorted(by_id)
    pairs = [(a, b) for a in range(len(ids)) for b in range(a + 1, len(ids))]
    if not pairs:
        return {}
    answers = probabilities(doc.text, [by_id[i] for i in ids], pairs)
    return {frozenset((ids[a], ids[b])): probs for (a, b), probs in zip(pairs, answers, strict=True)}


def score_documents(
    docs: Sequence[PubTatorDoc],
    predictions: Sequence[dict[PairKey, dict[str, float]]],
    theta: Callable[[str], float],
    types: Iterable[str],
) -> RelationScores:
    types = list(types)
    pair = PRF(tp=0, fp=0, fn=0)
    pt = PRF(tp=0, fp=0, fn=0)
    per = {t: PRF(tp=0, fp=0, fn=0) for t in types}
    n_gold = reachable = 0

    def bump(prf: PRF, field: str) -> None:
        setattr(prf, field, getattr(prf, field) + 1)

    for doc, pred in zip(docs, predictions, strict=True):
        gold = gold_pairs(doc)
        n_gold += len(gold)
        reachable += sum(1 for k in gold if k in pred)
        predicted = {k: {r for r, p in probs.items() if p >= theta(r)} for k, probs in pred.items()}
        predicted = {k: v for k, v in predicted.items() if v}
        for k in set(gold) | set(predicted):
            g, p = gold.get(k, set()), predicted.get(k, set())
            if g and p:
                bump(pair, "tp")
            elif p:
                bump(pair, "fp")
            else:
                bump(pair, "fn")
            for t in g | p:
                field = "tp" if (t in g and t in p) else ("fp" if t in p else "fn")
                bump(pt, field)
                if t in per:
                    bump(per[t], field)
    return RelationScores(n_docs=len(docs), n_gold=n_gold, reachable_gold=reachable, pair=pair, pair_type=pt,
                          per_type=per, annotated=any(d.relations for d in docs))


def evaluate(docs: Sequence[PubTatorDoc], probabilities: ProbabilityFn, theta: Callable[[str], float],
             types: Iterable[str], window: int = 0) -> RelationScores:
    preds = [predict_document(d, probabilities, window) for d in docs]
    return score_documents(docs, preds, theta, types)


def evaluate_entities(docs: Sequence[PubTatorDoc], probabilities: DocProbabilityFn, theta: Callable[[str], float],
                      types: Iterable[str]) -> RelationScores:
    """Scores of a document-level model over gold entities."""
    preds = [predict_document_entities(d, probabilities) for d in docs]
    return score_documents(docs, preds, theta, types)


def format_table(scores: RelationScores, title: str = "") -> str:
    def row(name: str, prf: PRF) -> str:
        return (f"| {name:<22} | {prf.tp:>5} | {prf.fp:>5} | {prf.fn:>5} | {prf.precision:6.3f} | "
                f"{prf.recall:6.3f} | {prf.f1:6.3f} |")

    lines = [title] if title else []
    if not scores.annotated:
        lines.append(f"docs {scores.n_docs}: no relation gold in this corpus, relation scores n/a")
        return "\n".join(lines)
    lines.append(f"docs {scores.n_docs}, gold pairs {scores.n_gold}, reachable (co-occurring) "
                 f"{scores.reachable_gold} ({scores.reachable_gold / max(1, scores.n_gold):.1%})")
    lines.append("| level                  |    tp |    fp |    fn |      P |      R |     F1 |")
    lines.append("|------------------------|------:|------:|------:|-------:|-------:|-------:|")
    lines.append(row("pair", scores.pair))
    lines.append(row("pair+type (micro)", scores.pair_type))
    for t, prf in scores.per_type.items():
        lines.append(row(f"  {t}", prf))
    return "\n".join(lines)
