"""EntityIndex over LanceDB with the default char-n-gram embedder, on real Hetionet names."""

from __future__ import annotations

import datetime as dt
import gzip
from pathlib import Path

import pytest

from karma_dagster.kg.embeddings import HashingCharNgramEmbedder, MiniLMEmbedder, normalize_name
from karma_dagster.kg.entity_index import EntityIndex, KGEntity, word_distance
from karma_dagster.runtime.params import KarmaParams

HETIONET = Path(__file__).resolve().parents[1] / "data" / "vocab" / "hetionet-nodes.tsv.gz"
KINDS = {"Disease", "Compound", "Symptom", "Side Effect", "Gene", "Pharmacologic Class"}


def hetionet_entities(kinds: set[str]) -> list[KGEntity]:
    """The shipped Hetionet nodes of the given kinds (real names to index)."""
    rows = []
    with gzip.open(HETIONET, "rt", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            node_id, name, kind = line.rstrip("\n").split("\t")
            if kind in kinds:
                rows.append(KGEntity(id=node_id, name=name, kind=kind))
    return rows


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> EntityIndex:
    rows = hetionet_entities(KINDS)
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


# ---------------------------------------------------------------- the index grows: a namespace's merged entities
CROCIN = {"id": "NEW:ChemicalEntity:crocin", "name": "crocin", "kind": "Compound", "synonyms": ["crocine"],
          "first_seen": "2016-01-10"}
VISFATIN = {"id": "NEW:GeneOrGeneProduct:visfatin", "name": "visfatin", "kind": "Gene", "synonyms": [],
            "first_seen": "2016-02-01"}


@pytest.fixture
def grown(tmp_path) -> EntityIndex:
    """A small seed (real Hetionet compounds and genes) in a fresh index."""
    rows = []
    with gzip.open(HETIONET, "rt", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            node_id, name, kind = line.rstrip("\n").split("\t")
            if kind in {"Compound", "Gene"} and len(rows) < 3000:
                rows.append(KGEntity(id=node_id, name=name, kind=kind))
    ix = EntityIndex(tmp_path / "kg.lance")
    ix.build(rows)
    return ix


def test_namespace_entities_link_after_their_date_and_only_in_their_namespace(grown):
    got = grown.sync_namespace("gpt", [CROCIN, VISFATIN], fingerprint="fp1")
    assert (got.entities, got.added, got.removed) == (2, 2, 0) and grown.synced_fingerprint("gpt") == "fp1"
    [[seed_only]] = grown.search(["crocin"], ["Chemical"])  # no namespace: the seed alone
    assert seed_only.source == "seed" and seed_only.distance > KarmaParams().rho

    later = grown.view("gpt", before=dt.date(2016, 3, 1))
    [[hit]], [[syn]] = later.search(["Crocin"], ["ChemicalEntity"]), later.search(["crocine"], ["Chemical"])
    assert (hit.entity_id, hit.source, hit.distance) == (CROCIN["id"], "extracted", 0.0)
    assert syn.entity_id == CROCIN["id"] and later.count_extracted() == 2
    [[gene]] = later.search(["visfatin"], ["GeneOrGeneProduct"])
    assert gene.entity_id == VISFATIN["id"] and gene.kind == "Gene"
    [[wrong_kind]] = later.search(["visfatin"], ["Chemical"])  # kinds still restrict the search
    assert wrong_kind.entity_id != VISFATIN["id"]

    same_day = grown.view("gpt", before=dt.date(2016, 1, 10))  # merged on the 10th: not before the 10th
    assert same_day.search(["crocin"], ["Chemical"])[0][0].source == "seed" and same_day.count_extracted() == 0
    other = grown.view("local", before=dt.date(2017, 1, 1))  # another backbone's KG never showed crocin
    assert other.search(["crocin"], ["Chemical"])[0][0].source == "seed" and other.count_extracted() == 0


def test_sync_is_state_driven_idempotent_and_repairs(grown, tmp_path):
    grown.sync_namespace("gpt", [CROCIN])
    again = grown.sync_namespace("gpt", [CROCIN])
    assert (again.added, again.removed) == (0, 0)  # nothing to do: no duplicate rows
    assert len(grown.view("gpt").search(["crocin"], ["Chemical"], k=5)[0]) == len(
        {(h.entity_id, h.name) for h in grown.view("gpt").search(["crocin"], ["Chemical"], k=5)[0]})

    # A re-merge renamed crocin's first name and dropped nothing else; then a re-merge dropped it entirely.
    renamed = {**CROCIN, "name": "Crocin", "synonyms": ["crocin", "crocine"]}
    assert grown.sync_namespace("gpt", [renamed]).added == 1
    assert grown.sync_namespace("gpt", []).removed == 1
    assert grown.view("gpt").count_extracted() == 0

    # Another process (a second handle on the same files) merged visfatin and synced; this one catches up on
    # its own next sync, from the KG's state, even though its handle was opened before.
    other = EntityIndex(tmp_path / "kg.lance")
    other.sync_namespace("gpt", [VISFATIN])
    assert grown.sync_namespace("gpt", [VISFATIN]).added == 0  # already there: seen on the latest version
    assert grown.view("gpt").search(["visfatin"], ["Gene"])[0][0].entity_id == VISFATIN["id"]


def test_sync_names_bad_input(grown):
    with pytest.raises(ValueError, match="namespace"):
        grown.sync_namespace("", [CROCIN])
    with pytest.raises(ValueError, match="first_seen"):
        grown.sync_namespace("gpt", [{k: v for k, v in CROCIN.items() if k != "first_seen"}])
