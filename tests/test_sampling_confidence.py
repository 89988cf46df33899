"""MedKGent sampling confidence: N samples that differ, the fraction that proposes a triple, the >= 0.6 rule, and
reruns that repeat themselves exactly. Real model, real abstracts (the shipped sample inbox's PubTator file,
with its gold mentions), hand-computed fractions on scripted samples."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stub_backbones import PartialBackbone

from karma_dagster.agents.relation_extraction import extract_relations, sample_agreement
from karma_dagster.backbones.local import LocalBackbone
from karma_dagster.backbones.local.relations import RELATION_TYPES, LocalRelationModel
from karma_dagster.backbones.local.sampling import RelationSampler, logistic_draws
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.schemas.records import EvaluatedRow, MentionRow, MentionSpan, SummaryRow, TripleRow
from karma_dagster.schemas.tables import RelationsTable

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "inbox" / "abstracts.pubtator"


@pytest.fixture(scope="module")
def model(shared_cache: Path) -> LocalRelationModel:
    return LocalRelationModel(shared_cache / "relations")


@pytest.fixture(scope="module")
def docs() -> list[PubTatorDoc]:
    return read_pubtator(SAMPLE)


def _local(model: LocalRelationModel) -> LocalBackbone:
    """A fresh local backbone (its own sampler, nothing memoised); REA needs no NER."""
    return LocalBackbone(ner=None, relations=model)  # type: ignore[arg-type]


def _summary_and_mentions(doc: PubTatorDoc) -> tuple[SummaryRow, list[MentionRow]]:
    summary = SummaryRow(doc_key=f"2003-10-01_pmid{doc.pmid}", summary_id=f"s-{doc.pmid}", segment_id=f"g-{doc.pmid}",
                         section="abstract", text=doc.text, n_sentences_in=10, n_sentences_out=10)
    mentions = [MentionRow(doc_key=summary.doc_key, mention_id=f"m{k}", summary_id=summary.summary_id,
                           segment_id=summary.segment_id, start=m.start, end=m.end, text=m.text, long_form=None,
                           type=m.type, vocab_id=None, entity_id=m.identifier, kg_id=m.identifier, kg_name=None,
                           distance=0.0, status="linked")
                for k, m in enumerate(doc.mentions) if m.identifier not in ("", "-1")]
    return summary, mentions


def _pairs(doc: PubTatorDoc, n: int = 12) -> list[tuple[MentionSpan, MentionSpan]]:
    ms = [m for m in doc.mentions if m.identifier not in ("", "-1")]
    spans = [MentionSpan(start=m.start, end=m.end, text=m.text, type=m.type) for m in ms]
    return [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:] if a.text != b.text][:n]


# ---------------------------------------------------------------- the local backbone's samples
def test_local_samples_differ_and_a_rerun_repeats_them(model, docs):
    doc = docs[0]
    pairs = _pairs(doc)
    local = _local(model)
    samples = [local.sample_relation_probabilities(doc.text, pairs, k, 0.7) for k in range(5)]
    assert all(len(s) == len(pairs) and set(s[0]) == set(RELATION_TYPES) for s in samples)
    for a in range(5):
        for b in range(a + 1, 5):
            assert samples[a] != samples[b], f"samples {a} and {b} are identical"
    base = local.relation_probabilities(doc.text, pairs)
    assert all(s != base for s in samples)  # a sample is a perturbation, never the plain answer
    # a fresh backbone (no memo) in the same process draws exactly the same samples: seeded per (text, pair, k)
    again = _local(model)
    assert [again.sample_relation_probabilities(doc.text, pairs, k, 0.7) for k in range(5)] == samples
    # the draws hang on the pair, not on its position in the request
    reordered = again.sample_relation_probabilities(doc.text, pairs[::-1], 3, 0.7)
    assert reordered[::-1] == samples[3]
    with pytest.raises(ValueError, match="temperature > 0"):
        local.sample_relation_probabilities(doc.text, pairs, 0, 0.0)


def test_noise_is_the_documented_temperature_rule(model, docs):
    """A sample proposes r when sigma(z + T*l) >= theta, l standard logistic: over many samples that happens with
    probability sigma((z - logit theta) / T) (sampling.py's docstring), and a lower T sharpens the decision."""
    doc = docs[0]
    pairs = _pairs(doc, 4)
    base = _local(model).relation_probabilities(doc.text, pairs)
    p = base[0]["Association"]
    z, theta, n = math.log(p / (1 - p)), 0.4, 2000
    for temperature in (0.7, 1.5):
        sampler = RelationSampler(model.probabilities)
        hits = sum(sampler.sample(doc.text, pairs, k, temperature)[0]["Association"] >= theta for k in range(n))
        expected = 1 / (1 + math.exp(-(z - math.log(theta / (1 - theta))) / temperature))
        assert abs(hits / n - expected) < 4 * math.sqrt(expected * (1 - expected) / n) + 1e-3, (temperature, p)
    draws = logistic_draws("d", pairs[0][0], pairs[0][1], 0, 20)
    assert len(set(draws)) == 20 and draws == logistic_draws("d", pairs[0][0], pairs[0][1], 0, 20)


def test_extraction_on_the_local_backbone_is_sampled_and_deterministic(model, docs):
    summary, mentions = _summary_and_mentions(docs[0])
    params = KarmaParams()
    assert params.relation_samples == 5 and params.min_sample_confidence == 0.6  # on by default
    first = extract_relations([summary], mentions, _local(model), params)
    again = extract_relations([summary], mentions, _local(model), params)
    assert first and first == again  # reruns are identical, sample confidences included
    assert all(t.sample_confidence in (0.6, 0.8, 1.0) for t in first)
    assert all(t.probability >= params.theta_for(t.relation) for t in first)  # mean p of the proposing samples
    single = extract_relations([summary], mentions, _local(model), KarmaParams(relation_samples=1))
    assert single and all(t.sample_confidence is None for t in single)
    # sampling is not a copy of the single answer: some triple's agreement is below 1 or the sets differ
    assert {(t.triple_id) for t in first} != {t.triple_id for t in single} or any(
        t.sample_confidence < 1.0 for t in first)


# ---------------------------------------------------------------- the fraction and the >= 0.6 rule, by hand
class _Scripted(PartialBackbone):
    """REA only: sample k answers `script[k]` (one dict per pair)."""

    name = "scripted"

    def __init__(self, script: list[list[dict[str, float]]]) -> None:
        self.script = script

    def sample_relation_probabilities(self, text, pairs, sample, temperature):
        return self.script[sample]

    def relation_probabilities(self, text, pairs):
        return self.script[0]

    def prompt_id(self, agent):
        return "scripted"


TEXT = "Aspirin lowered hypertension in rats."


def _one_pair() -> tuple[SummaryRow, list[MentionRow]]:
    summary = SummaryRow(doc_key="2001-01-01_doc", summary_id="s", segment_id="g", section="results", text=TEXT,
                         n_sentences_in=1, n_sentences_out=1)
    mentions = []
    for word, etype in (("Aspirin", "Chemical"), ("hypertension", "Disease")):
        start = TEXT.index(word)
        mentions.append(MentionRow(doc_key=summary.doc_key, mention_id=word, summary_id="s", segment_id="g",
                                   start=start, end=start + len(word), text=word, long_form=None, type=etype,
                                   vocab_id=None, entity_id=f"E:{word}", kg_id=None, kg_name=word, distance=0.0,
                                   status="linked"))
    return summary, mentions


def test_fraction_and_the_sixty_percent_rule_by_hand():
    # theta 0.5. Negative_Correlation passes in samples 0, 1, 3 (0.9, 0.6, 0.7; 0.45 and 0.2 do not): 3/5 = 0.6,
    # kept (>= 0.6), p = (0.9 + 0.6 + 0.7) / 3. Bind passes in 2/5 = 0.4: dropped. Association in 5/5.
    script = [[{"Negative_Correlation": 0.9, "Bind": 0.8, "Association": 0.5}],
              [{"Negative_Correlation": 0.6, "Bind": 0.1, "Association": 0.6}],
              [{"Negative_Correlation": 0.45, "Bind": 0.7, "Association": 0.7}],
              [{"Negative_Correlation": 0.7, "Bind": 0.3, "Association": 0.8}],
              [{"Negative_Correlation": 0.2, "Bind": 0.2, "Association": 0.9}]]
    params = KarmaParams(theta={"default": 0.5})
    agreed = sample_agreement(script, params)[0]
    assert set(agreed) == {"Negative_Correlation", "Association"}
    assert agreed["Negative_Correlation"].fraction == pytest.approx(0.6)
    assert agreed["Negative_Correlation"].probability == pytest.approx((0.9 + 0.6 + 0.7) / 3)
    assert agreed["Association"] == pytest.approx((1.0, 0.7))

    summary, mentions = _one_pair()
    triples = extract_relations([summary], mentions, _Scripted(script), params)
    got = {t.relation: (t.sample_confidence, t.probability) for t in triples}
    assert got == {"Negative_Correlation": pytest.approx((0.6, 2.2 / 3)), "Association": pytest.approx((1.0, 0.7))}
    # a stricter floor drops the 3-of-5 triple; a looser one lets the 2-of-5 triple in
    strict = extract_relations([summary], mentions, _Scripted(script), params.model_copy(
        update={"min_sample_confidence": 0.61}))
    assert [t.relation for t in strict] == ["Association"]
    loose = extract_relations([summary], mentions, _Scripted(script), params.model_copy(
        update={"min_sample_confidence": 0.4}))
    assert {t.relation: t.sample_confidence for t in loose}["Bind"] == pytest.approx(0.4)
    # N = 1: sample 0 alone, thresholded at theta, no sampling confidence
    single = extract_relations([summary], mentions, _Scripted(script), params, n_samples=1)
    assert {t.relation: (t.sample_confidence, t.probability) for t in single} == {
        "Negative_Correlation": (None, 0.9), "Bind": (None, 0.8), "Association": (None, 0.5)}


def test_sample_confidence_is_stored_and_is_the_evidence_score():
    summary, mentions = _one_pair()
    script = [[{"Association": p}] for p in (0.9, 0.8, 0.3, 0.7, 0.6)]  # 4/5 over theta 0.5
    triples = extract_relations([summary], mentions, _Scripted(script), KarmaParams(theta={"default": 0.5}))
    assert [t.sample_confidence for t in triples] == [0.8]
    unsampled = triples[0].model_copy(update={"sample_confidence": None, "triple_id": "t2"})
    frame = records_to_frame([*triples, unsampled], TripleRow)
    RelationsTable.validate(frame)  # a number, and null when N == 1
    assert frame["sample_confidence"].isna().tolist() == [False, True]
    with pytest.raises(Exception, match="sample_confidence"):
        RelationsTable.validate(frame.assign(sample_confidence=[1.5, None]))
    # downstream (C2): the evidence score the KG's reinforcement aggregates is the sample confidence, not the
    # evaluator's mean; unsampled, it falls back to the score
    evaluated = dict(triples[0].model_dump(), head_kg_type="Compound", tail_kg_type="Disease", kg_relation="treats",
                     metaedge="CtD", alignment_prob=0.9, schema_status="aligned", conflict=False, contradicts=None,
                     verdict="none", action="keep", confidence=0.9, clarity=0.9, relevance=0.9, score=0.9,
                     accepted=True)
    assert EvaluatedRow(**evaluated).evidence_score == pytest.approx(0.8)
    assert EvaluatedRow(**{**evaluated, "sample_confidence": None}).evidence_score == pytest.approx(0.9)
