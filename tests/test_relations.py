"""The local relation classifier and the REA agent, on real abstracts of the shipped BioRED training corpus.

The model is trained once per module on 4/5 of BioRED train (+ BC5CDR train); the other fifth is held out, so
the quality floor and the sentence checks are on abstracts the model never saw.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from stub_backbones import PartialBackbone

from karma_dagster.backbones.local.relations import (
    DEFAULT_BIORED, DEFAULT_CDR, RELATION_TYPES, LocalRelationModel, RelationTrainingError,
)
from karma_dagster.agents.relation_extraction import RelationInputError, extract_relations
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.metrics.gold_relations import evaluate
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import MentionRow, MentionSpan, SummaryRow

# Pair+type micro F1 measured on this held-out fifth at theta 0.4 when the test was written: 0.413
# (pair alone 0.537). The floor leaves a margin for retraining noise, not for a broken model.
HELD_OUT_PAIR_TYPE_F1_FLOOR = 0.41 - 0.06
HELD_OUT_PAIR_F1_FLOOR = 0.53 - 0.06


def _held_out(pmid: str) -> bool:
    return int(hashlib.md5(pmid.encode()).hexdigest(), 16) % 5 == 0


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> tuple[Path, list[PubTatorDoc]]:
    """Write the training 4/5 of BioRED train as a PubTator file; return it and the held-out documents."""
    blocks = gzip.open(DEFAULT_BIORED, "rt", encoding="utf-8").read().strip().split("\n\n")
    train = [b for b in blocks if not _held_out(b.split("|", 1)[0])]
    path = tmp_path_factory.mktemp("corpus") / "biored-train-4of5.pubtator"
    path.write_text("\n\n".join(train) + "\n\n", encoding="utf-8")
    held = [d for d in read_pubtator(DEFAULT_BIORED) if _held_out(d.pmid)]
    assert 60 < len(held) < 100 and len(train) + len(held) == len(blocks) == 355  # 400 minus the dev abstracts
    return path, held


@pytest.fixture(scope="module")
def model(split, tmp_path_factory) -> LocalRelationModel:
    m = LocalRelationModel(tmp_path_factory.mktemp("cache"), biored_path=split[0], cdr_path=DEFAULT_CDR)
    assert m.fitted.n_examples > 10_000
    assert m.loaded_from_cache is False
    assert m.fitted.train_seconds < 60, f"training took {m.fitted.train_seconds:.1f} s"
    return m


_BC5CDR_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt"


def _held_doc(held: list[PubTatorDoc], pmid: str) -> PubTatorDoc:
    """A held-out abstract; 20510337 left BioRED train with the dev abstracts (it is in BC5CDR dev), so it is
    read from there (never trained on either way)."""
    found = next((d for d in held if d.pmid == pmid), None)
    if found is None:
        if not _BC5CDR_DEV.is_file():
            pytest.skip("the shared BC5CDR dev split is not here")
        found = next(d for d in read_pubtator(_BC5CDR_DEV) if d.pmid == pmid)
    return found


def _span(text: str, surface: str, ner_type: str, occurrence: int = 0) -> MentionSpan:
    start = -1
    for _ in range(occurrence + 1):
        start = text.index(surface, start + 1)
    return MentionSpan(start=start, end=start + len(surface), text=surface, type=ner_type)


def test_cache_is_reused_and_keyed_by_the_corpus(model, split):
    again = LocalRelationModel(model.cache_dir, biored_path=split[0], cdr_path=DEFAULT_CDR)
    assert again.version == model.version
    assert again.fitted.n_examples == model.fitted.n_examples and again.loaded_from_cache is True
    full = LocalRelationModel(model.cache_dir)  # the whole shipped corpus is another training set
    assert full.version != model.version
    with pytest.raises(RelationTrainingError, match="not found"):
        LocalRelationModel(model.cache_dir, biored_path=split[0].with_name("missing.pubtator")).version


def test_treatment_sentence_scores_negative_correlation_above_unrelated_pairs(model, split):
    """Held-out PMID 20510337: 'Coenzyme Q10 treatment ameliorates acute cisplatin nephrotoxicity in mice.'"""
    doc = _held_doc(split[1], "20510337")
    text = doc.text
    assert text.startswith("Coenzyme Q10 treatment ameliorates acute cisplatin nephrotoxicity in mice.")
    coq10, cisplatin = _span(text, "Coenzyme Q10", "ChemicalEntity"), _span(text, "cisplatin", "ChemicalEntity")
    nephro, mice = _span(text, "nephrotoxicity", "DiseaseOrPhenotypicFeature"), _span(text, "mice", "OrganismTaxon")
    treats, induces, species = model.probabilities(text, [(coq10, nephro), (cisplatin, nephro), (coq10, mice)])
    assert treats["Negative_Correlation"] > 0.5
    assert treats["Negative_Correlation"] > induces["Negative_Correlation"] + 0.3
    # the drug that causes the injury reads as Positive_Correlation, the one that relieves it as Negative
    assert induces["Positive_Correlation"] > max(0.5, induces["Negative_Correlation"], treats["Positive_Correlation"])
    assert treats["Negative_Correlation"] > 10 * species["Negative_Correlation"]
    assert max(species.values()) < 0.2  # BioRED never relates species
    assert set(treats) == set(RELATION_TYPES)


def test_bad_spans_are_named(model):
    text = "Nimodipine prevents memory impairment."
    with pytest.raises(ValueError, match="outside the text"):
        model.probabilities(text, [(_span(text, "Nimodipine", "Chemical"),
                                    MentionSpan(start=30, end=90, text="x", type="Disease"))])


def test_held_out_relation_f1_above_floor(model, split):
    scores = evaluate(split[1], model.probabilities, lambda _r: 0.4, RELATION_TYPES)
    assert scores.pair.f1 >= HELD_OUT_PAIR_F1_FLOOR, scores.pair
    assert scores.pair_type.f1 >= HELD_OUT_PAIR_TYPE_F1_FLOOR, scores.pair_type
    assert scores.per_type["Association"].f1 > 0.3


# ---------------------------------------------------------------- the REA agent
class _RelationBackbone(PartialBackbone):
    """Only the REA question, answered by the local model under test."""

    name = "local-test"

    def __init__(self, model: LocalRelationModel) -> None:
        self.model = model
        self.calls: list[int] = []

    def relation_probabilities(self, text, pairs):
        self.calls.append(len(pairs))
        return self.model.probabilities(text, pairs)

    def prompt_id(self, agent):
        return self.model.version


def _summary_and_mentions(doc: PubTatorDoc) -> tuple[SummaryRow, list[MentionRow]]:
    """The abstract as one summary and its gold mentions as linked mentions (entity_id = gold id)."""
    summary = SummaryRow(doc_key=f"pmid{doc.pmid}", summary_id=f"s-{doc.pmid}", segment_id=f"g-{doc.pmid}",
                         section="abstract", text=doc.text, n_sentences_in=10, n_sentences_out=10)
    mentions = [
        MentionRow(doc_key=summary.doc_key, mention_id=f"m{k}", summary_id=summary.summary_id,
                   segment_id=summary.segment_id, start=m.start, end=m.end, text=m.text, long_form=None,
                   type=m.type, vocab_id=None, entity_id=m.identifier, kg_id=m.identifier, kg_name=None,
                   distance=0.0, status="linked")
        for k, m in enumerate(doc.mentions)
    ]
    return summary, mentions


def test_extract_relations_keeps_types_over_theta_deduplicated(model, split):
    doc = _held_doc(split[1], "20510337")
    summary, mentions = _summary_and_mentions(doc)
    backbone = _RelationBackbone(model)
    triples = extract_relations([summary], mentions, backbone, KarmaParams())
    assert backbone.calls and triples
    keys = [(frozenset((t.head_id, t.tail_id)), t.relation) for t in triples]
    assert len(keys) == len(set(keys)), "one triple per (pair, relation) per document"
    assert len({t.triple_id for t in triples}) == len(triples)
    coq10 = next(m.identifier for m in doc.mentions if m.text == "Coenzyme Q10")
    nephro = next(m.identifier for m in doc.mentions if m.text == "nephrotoxicity")
    hit = [t for t in triples if {t.head_id, t.tail_id} == {coq10, nephro} and t.relation == "Negative_Correlation"]
    assert hit, [(t.head_name, t.relation, t.tail_name) for t in triples]
    assert hit[0].evidence in doc.text and hit[0].head_name in hit[0].evidence
    assert all(t.probability >= KarmaParams().theta_for(t.relation) for t in triples)
    # Ids are content hashes: the same input gives the same triples.
    assert [t.triple_id for t in extract_relations([summary], mentions, backbone, KarmaParams())] == \
        [t.triple_id for t in triples]


def test_theta_decides_what_is_kept_and_allows_two_types(model, split):
    doc = _held_doc(split[1], "20510337")
    summary, mentions = _summary_and_mentions(doc)
    backbone = _RelationBackbone(model)
    loose = extract_relations([summary], mentions, backbone, KarmaParams(theta={"default": 0.0}))
    # Pick the pair whose two best types are most probable and set theta just under both: both are kept.
    by_pair: dict[frozenset[str], dict[str, float]] = {}
    for t in loose:
        by_pair.setdefault(frozenset((t.head_id, t.tail_id)), {})[t.relation] = t.probability
    pair, probs = max(by_pair.items(), key=lambda kv: sorted(kv[1].values())[-2])
    (r1, p1), (r2, p2) = sorted(probs.items(), key=lambda kv: -kv[1])[:2]
    theta = {"default": 1.0, r1: p1 - 1e-6, r2: p2 - 1e-6}
    kept = extract_relations([summary], mentions, backbone, KarmaParams(theta=theta))
    assert {(frozenset((t.head_id, t.tail_id)), t.relation) for t in kept} >= {(pair, r1), (pair, r2)}
    assert all(t.relation in (r1, r2) for t in kept)
    theta[r2] = p2 + 1e-6
    fewer = extract_relations([summary], mentions, backbone, KarmaParams(theta=theta))
    assert (pair, r2) not in {(frozenset((t.head_id, t.tail_id)), t.relation) for t in fewer}
    assert (pair, r1) in {(frozenset((t.head_id, t.tail_id)), t.relation) for t in fewer}


def test_mentions_that_do_not_fit_their_summary_are_rejected(model, split):
    doc = _held_doc(split[1], "20510337")
    summary, mentions = _summary_and_mentions(doc)
    shifted = mentions[0].model_copy(update={"start": mentions[0].start + 1, "end": mentions[0].end + 1})
    with pytest.raises(RelationInputError, match="does not match summary"):
        extract_relations([summary], [shifted, *mentions[1:]], _RelationBackbone(model), KarmaParams())
    orphan = mentions[0].model_copy(update={"summary_id": "nope"})
    with pytest.raises(RelationInputError, match="unknown summary"):
        extract_relations([summary], [orphan], _RelationBackbone(model), KarmaParams())
    with pytest.raises(ValueError, match="n_samples must be >= 1"):
        extract_relations([summary], mentions, _RelationBackbone(model), KarmaParams(), n_samples=0)
