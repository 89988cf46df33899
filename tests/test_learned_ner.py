"""The learned NER: trained from the shipped corpora with its provenance, loaded into the dictionary's pipeline,
and unioned with the dictionary so that it finds names the lexicon does not list."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from karma_dagster.dictionary.learned_ner import LearnedNerError, read_provenance
from karma_dagster.dictionary.lexicon import CORPORA, Lexicon
from karma_dagster.dictionary.ner import DictionaryNER
from karma_dagster.dictionary.ner_training import (MODEL_DIR, NerTrainingConfig, blank_pipeline, corpus_examples,
                                                   sha256, train_ner)
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.metrics.gold_mentions import score_mentions
from karma_dagster.runtime.paths import data_file

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "lexicon"
BIORED_DEV = ROOT.parent / "shared" / "data" / "biored" / "Dev.PubTator"


@pytest.fixture(scope="module")
def lexicon() -> Lexicon:
    return Lexicon.build(cache_dir=CACHE)


def test_a_corpus_leaves_the_types_it_does_not_annotate_missing_not_outside(lexicon: Lexicon) -> None:
    """BC5CDR annotates chemicals and diseases only: its genes must not be taught as 'no entity'."""
    dictionary = DictionaryNER(lexicon, learned=None)
    docs = read_pubtator(data_file("corpora", "bc5cdr-train.pubtator.gz"))
    hits = lambda text: [(s.start, s.end, s.type) for s in dictionary.recognize(text)]  # noqa: E731
    doc = next(d for d in docs if any(t == "Gene" for *_, t in hits(d.text)))
    gene = next((s, e) for s, e, t in hits(doc.text) if t == "Gene")
    nlp = blank_pipeline(NerTrainingConfig())
    cdr = corpus_examples(nlp, [doc], CORPORA["bc5cdr"][1], hits)[0]
    biored = corpus_examples(nlp, [doc], CORPORA["biored"][1], hits)[0]
    tags = [t.ent_iob_ for t in cdr.reference]
    in_gene = [t.i for t in cdr.reference if t.idx < gene[1] and gene[0] < t.idx + len(t)]
    assert in_gene and all(tags[i] == "" for i in in_gene), "the gene's tokens are missing (unknown), not O"
    assert all(biored.reference[i].ent_iob_ == "O" for i in in_gene
               if not biored.reference[i].ent_type_), "where genes are annotated, an unannotated one is O"
    gold = {(m.start, m.end) for m in doc.mentions}
    assert {(e.start_char, e.end_char) for e in cdr.reference.ents} <= gold
    assert "O" in tags


def test_training_writes_a_model_and_the_provenance_that_reproduces_it(tmp_path: Path, lexicon: Lexicon) -> None:
    out = tmp_path / "ner"
    cfg = NerTrainingConfig(limit=8, max_epochs=1, embed_size=500, width=32, depth=1)
    prov = train_ner(out, cfg, log=lambda _m: None)
    assert prov.corpora == {fname: sha256(data_file("corpora", fname)) for fname, _ in CORPORA.values()}
    assert sum(prov.documents.values()) == 3 * 7 and prov.best_epoch == 1
    assert read_provenance(out) == prov
    ner = DictionaryNER(lexicon, learned=out)
    assert ner.version.endswith("+" + prov.version) and "learned_ner" in ner.nlp.pipe_names
    assert ner.recognize("Imatinib treats chronic myeloid leukemia.")  # the pipeline runs with it
    again = train_ner(out, cfg.model_copy(update={"seed": 14}), log=lambda _m: None)
    assert again.version != prov.version and read_provenance(out) == again  # replaced, not mixed


def test_the_shipped_model_was_trained_on_the_shipped_corpora() -> None:
    prov = read_provenance(MODEL_DIR)
    assert prov.corpora == {fname: sha256(data_file("corpora", fname)) for fname, _ in CORPORA.values()}, (
        "a training corpus changed since the shipped NER was trained: python scripts/train_ner.py")
    assert prov.config.limit is None and prov.holdout_f1 > 0.7


def test_a_damaged_or_missing_model_is_an_error_naming_its_folder(tmp_path: Path, lexicon: Lexicon) -> None:
    with pytest.raises(LearnedNerError, match="no provenance.json"):
        DictionaryNER(lexicon, learned=tmp_path / "nowhere")
    broken = tmp_path / "broken"
    shutil.copytree(MODEL_DIR, broken)
    model = broken / "ner" / "model"
    model.write_bytes(model.read_bytes()[:1000])
    with pytest.raises(LearnedNerError, match="broken: cannot load its ner/ folder"):
        DictionaryNER(lexicon, learned=broken)


@pytest.mark.skipif(not BIORED_DEV.is_file(), reason="shared BioRED dev split not present")
def test_the_union_finds_names_the_dictionary_does_not_list(lexicon: Lexicon) -> None:
    """On BioRED dev (never trained on), the union recalls more gold mentions than the dictionary and is the
    better NER; some of what it adds is a name no lexicon entry holds."""
    docs = read_pubtator(BIORED_DEV)[:30]
    texts = [d.text for d in docs]
    dictionary = DictionaryNER(lexicon, learned=None).recognize_many(texts)
    union = DictionaryNER(lexicon).recognize_many(texts)
    d = score_mentions(docs, dictionary).mentions["micro"]
    u = score_mentions(docs, union).mentions["micro"]
    assert u.recall > d.recall + 0.02 and u.f1 > d.f1
    gold = {(i, m.start, m.end) for i, doc in enumerate(docs) for m in doc.mentions}
    added = [s for i, spans in enumerate(union) for s in spans
             if (i, s.start, s.end) in gold and (s.start, s.end) not in {(x.start, x.end) for x in dictionary[i]}]
    assert any(lexicon.lookup(s.text) is None for s in added)
