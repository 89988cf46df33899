"""EntityIndex over LanceDB with the default char-n-gram embedder, on real Hetionet names."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from karma_dagster.kg.embeddings import HashingCharNgramEmbedder, MiniLMEmbedder, normalize_name
from karma_dagster.kg.entity_index import EntityIndex, KGEntity, word_distance
from karma_dagster.params import KarmaParams

HETIONET = Path(__file__).resolve().parents[1] / "data" / "vocab" / "hetionet-nodes.tsv.gz"
KINDS = {"Disease", "Compound", "Symptom", "Side Effect", "Gene", "Pharmacologic Class"}


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> EntityIndex:
    rows = []
    with gzip.open(HETIONET, "rt", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            node_id, name, kind = line.rstrip("\n").split("\t")
            if kind in KINDS:
                rows.append(KGEntity(id=node_id, name=name, kind=kind))
    ix = EntityIndex(tmp_path_factory.mktemp("lance") / "kg.lance")
    assert ix.build(rows) == len(rows)
    return ix


def test_embedder_is_normalized_and_deterministic():
    emb = HashingCharNgramEmbedder()
    a, b = emb.embed(["TNF-α", "tnf alpha"])
    assert a.shape == (512,) and abs(float((a * a).sum()) - 1) < 1e-5
    assert float(a @ b) > 0.99  # greek letter and spelled-out form are the same name
    assert normalize_name("Type II Diabetes-Mellitus") == "type 2 diabetes mellitus"


def test_spelling_variant_links_and_unrelated_does_not(index):
    rho = KarmaParams().rho
    [[hit]] = index.search(["type II diabetes mellitus"], ["Disease"])
    assert hit.entity_id == "Disease::DOID:9352" and hit.distance < 0.05
    [[hit]] = index.search(["diabetes mellitus type 2"], ["Disease"])
    assert "diabetes" in hit.name.lower() and hit.distance <= rho
    [[hit]] = index.search(["zebrafish swim bladder inflation"], [None])
    assert hit.distance > rho


def test_kind_restricted_search(index):
    [[gene]] = index.search(["BRCA1"], ["Gene"])
    assert gene.entity_id == "Gene::672" and gene.distance < 1e-4
    [hits] = index.search(["thrombocytopenia"], ["Chemical"], k=3)
    assert hits and all(h.kind in {"Compound", "Pharmacologic Class"} for h in hits)
    [[dis]] = index.search(["thrombocytopenia"], ["Disease"])  # Disease mentions may link to side effects
    assert dis.kind in {"Disease", "Symptom", "Side Effect"} and dis.distance < 1e-4
    [[tie]] = index.search(["Parkinson's disease"], ["Disease"])  # equal distance: the Disease node first
    assert tie.entity_id == "Disease::DOID:14330"


def test_add_indexes_new_entities(index):
    before = len(index)
    index.add([KGEntity(id="NEW:Chemical:crocin", name="crocin", kind="Compound", synonyms=["crocine"])])
    assert len(index) == before + 2
    [[hit]] = index.search(["Crocin"], ["Chemical"])
    assert hit.entity_id == "NEW:Chemical:crocin" and hit.distance < 1e-4
    index.add([KGEntity(id="NEW:Chemical:crocin", name="crocin", kind="Compound")])  # re-adding replaces
    assert len(index) == before + 1


def test_bad_input_is_named(index):
    with pytest.raises(ValueError, match="kinds"):
        index.search(["a", "b"], ["Gene"])


def test_minilm_missing_extra_names_it():
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="minilm"):
            MiniLMEmbedder()


def test_specific_or_prefixed_names_do_not_link_but_variants_do(index):
    """Char n-grams put 'cancer' 0.20 from 'liver cancer'; the word distance keeps them apart (real Hetionet names)."""
    rho = KarmaParams().rho
    queries = ["cancer", "tyrosine", "SNAP-25", "hypothyroid", "hyperglycemia"]
    kinds = ["Disease", "Chemical", "Gene", "Disease", "Disease"]
    cancer, tyrosine, snap, hypo, hyper = (hits[0] for hits in index.search(queries, kinds))
    assert cancer.distance > rho, cancer  # a more specific entity is not the same entity
    assert not (tyrosine.name == "Metyrosine" and tyrosine.distance <= rho), tyrosine  # a prefix changes the chemical
    assert snap.entity_id == "Gene::6616" and snap.distance == 0.0  # the same symbol, punctuated
    assert hypo.name.lower() == "hypothyroidism" and hypo.distance <= rho  # a suffixed form
    assert hyper.name == "Hyperglycaemia" and hyper.distance <= rho  # British spelling
    assert word_distance("type 2 diabetes", "type 2 diabetes mellitus") < 0.2 < word_distance("cancer", "liver cancer")


def test_llm_type_labels_search_the_same_kinds(index):
    """An LLM backbone answers with BioRED's labels; 'ChemicalEntity' must find Compounds like 'Chemical' does."""
    [[a]], [[b]] = index.search(["metformin"], ["ChemicalEntity"]), index.search(["metformin"], ["Chemical"])
    assert a == b and a.kind == "Compound" and a.distance == 0.0
    [[gene]] = index.search(["BRCA1"], ["GeneOrGeneProduct"])
    assert gene.entity_id == "Gene::672"
