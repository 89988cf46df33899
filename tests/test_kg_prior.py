"""The seed KG as a prior of the document-level relation model (backbones/local/kg_prior.py, the `kg` group).

Real data: the shipped seed KG (data/seed_kg) and the shipped lexicon bridge the corpora's ids to its nodes; a
slice of the shipped BioRED train trains a small model.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from corpus_slices import first_abstracts

from karma_dagster.backbones.local import kg_prior
from karma_dagster.backbones.local.doc_features import FEATURE_GROUPS, Entity, entity_pair_features, saliences
from karma_dagster.backbones.local.doc_relations import DocRelationModel, layout_of
from karma_dagster.backbones.local.relations import DEFAULT_BIORED, RELATION_TYPES, _Span
from karma_dagster.schemas.records import MentionSpan

# ids as the training corpora write them (bare MeSH, NCBI Gene): Metformin -treats-> type 2 diabetes mellitus is
# a seed edge (data/seed_kg/SOURCE.txt), Lymphoma a Hetionet side effect, breast cancer a DOID disease
METFORMIN, T2DM, LYMPHOMA, BREAST_CANCER = "D008687", "D003924", "D008223", "D001943"


@pytest.fixture(scope="module")
def prior(tmp_path_factory) -> kg_prior.KGPrior:
    return kg_prior.seed_prior(tmp_path_factory.mktemp("kg-lexicon"))


def _seed_nodes() -> list[dict[str, str]]:
    with open(kg_prior.seed_paths()[0], encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_every_seed_gene_is_found_by_its_entrez_id(prior):
    genes = [n["id"] for n in _seed_nodes() if n["kind"] == "Gene"]
    assert len(genes) > 500
    for node in genes:
        entrez = node.split("::", 1)[1]
        assert prior.nodes("Gene", {entrez}) == {node}
    assert prior.nodes("Species", {genes[0].split("::", 1)[1]}) == frozenset()  # a taxon id is no gene


def test_diseases_and_chemicals_are_found_by_name_through_the_lexicon(prior):
    assert "Side Effect::C0024299" in prior.nodes("Disease", {LYMPHOMA})  # the node named Lymphoma
    assert "Disease::DOID:1612" in prior.nodes("Disease", {BREAST_CANCER})  # "breast cancer": the corpora's name
    assert "Disease::DOID:9352" in prior.nodes("Disease", {T2DM})  # MeSH's Diabetes Mellitus, Type 2
    assert prior.nodes("Chemical", {METFORMIN}) == {"Compound::DB00331"}
    assert prior.nodes("Chemical", {LYMPHOMA}) == frozenset()  # a disease's id is no chemical
    # the pipeline's vocabulary ids of Hetionet nodes (the lexicon writes DRUGBANK:, the importer DrugBank:)
    assert prior.nodes("Chemical", {"DRUGBANK:DB00331"}) == prior.nodes("Chemical", {"DrugBank:DB00331"}) \
        == {"Compound::DB00331"}
    assert prior.nodes("Disease", {"UMLS:C0024299"}) == {"Side Effect::C0024299"}


def test_a_kg_vocabulary_id_is_seen_by_its_nodes_mesh_id(prior):
    assert prior.canonical_ids("Disease", frozenset({"UMLS:C0024299"})) == {LYMPHOMA}
    assert prior.canonical_ids("Disease", frozenset({LYMPHOMA})) == {LYMPHOMA}
    assert prior.canonical_ids("Disease", frozenset({"UMLS:C9999999"})) == {"UMLS:C9999999"}  # no node: as is


def test_an_edge_or_a_path_is_a_feature_only_for_a_pair_the_kg_joins(prior):
    joined = prior.features("Chemical", frozenset({METFORMIN}), "Disease", frozenset({T2DM}), "Chemical|Disease")
    assert {"kg:in=2", "kg:edge=1", "kg:rel=treats", "kg:tp_rel=Chemical|Disease_treats"} <= set(joined)
    # two seed genes without an edge but with a shared neighbour: a 2-hop path, no edge
    genes = sorted(n for n in prior.adjacency if n.startswith("Gene::"))
    a, b = next((x, y) for x in genes for y in genes
                if x < y and y not in prior.adjacency[x] and set(prior.adjacency[x]) & set(prior.adjacency[y]))
    ga, gb = frozenset({a.split("::")[1]}), frozenset({b.split("::")[1]})
    path = prior.features("Gene", ga, "Gene", gb, "Gene|Gene")
    assert "kg:edge=0" in path and "kg:shared=<=0" not in path and any(f.startswith("kg:shared=") for f in path)
    # an unjoined pair (no edge, no shared neighbour) and a pair with one entity outside the KG
    lonely = next(g for g in genes if g != a and g not in prior.adjacency[a]
                  and not set(prior.adjacency[g]) & set(prior.adjacency[a]))
    unjoined = prior.features("Gene", ga, "Gene", frozenset({lonely.split("::")[1]}), "Gene|Gene")
    assert "kg:edge=0" in unjoined and "kg:shared=<=0" in unjoined
    assert not any(f.startswith("kg:rel=") for f in unjoined)
    outside = prior.features("Chemical", frozenset({METFORMIN}), "Disease", frozenset({"D999999"}), "Chemical|Disease")
    assert outside == ["kg:in=1", "kg:tp_in=Chemical|Disease_1"]


def test_the_kg_group_is_in_the_features_and_drops_by_prefix(prior):
    text = "Metformin lowers glucose in type 2 diabetes. Metformin was well tolerated."
    ents = [Entity(spans=(_Span(0, 9, "Chemical"), _Span(45, 54, "Chemical")), type="Chemical",
                   ids=frozenset({METFORMIN})),
            Entity(spans=(_Span(28, 43, "Disease"),), type="Disease", ids=frozenset({T2DM}))]
    n, rank = saliences(ents)
    layout = layout_of(text)
    full = entity_pair_features(text, layout, ents, 0, 1, None, n, rank, frozenset(FEATURE_GROUPS), kg=prior)
    assert "kg:edge=1" in full
    without = entity_pair_features(text, layout, ents, 0, 1, None, n, rank,
                                   frozenset(FEATURE_GROUPS) - {"kg"}, kg=prior)
    assert not any(f.startswith("kg:") for f in without)
    assert set(full) - set(without) == {f for f in full if f.startswith("kg:")}


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    return first_abstracts(DEFAULT_BIORED, 80, tmp_path_factory.mktemp("kg-docrel") / "small.pubtator")


def test_the_model_is_trained_with_the_kg_group_and_keyed_by_it(small_corpus, tmp_path):
    with_kg = DocRelationModel(tmp_path / "with", biored_path=small_corpus)
    without = DocRelationModel(tmp_path / "without", biored_path=small_corpus,
                               groups=[g for g in FEATURE_GROUPS if g != "kg"])
    assert with_kg.cache_key != without.cache_key
    vocab_with = set(with_kg.fitted.vectorizer.vocabulary_)
    vocab_without = set(without.fitted.vectorizer.vocabulary_)
    assert any(f.startswith("kg:") for f in vocab_with) and not any(f.startswith("kg:") for f in vocab_without)
    assert with_kg.fitted.kg is not None and with_kg.fitted.kg.n_edges > 0  # inference needs no lexicon


def test_inference_merges_an_entity_named_by_its_kg_id_with_its_mesh_twin(small_corpus, tmp_path):
    """The pipeline hands over a Hetionet side effect's vocabulary id (UMLS) where the corpora have MeSH: the
    model sees both as one entity, so the same id pair gets one answer."""
    model = DocRelationModel(tmp_path / "m", biored_path=small_corpus)
    text = "Lymphoma developed after doxorubicin. Doxorubicin-induced lymphoma was rare."
    lym1 = [MentionSpan(start=0, end=8, text="Lymphoma", type="Disease", vocab_id="MESH:D008223")]
    lym2 = [MentionSpan(start=58, end=66, text="lymphoma", type="Disease", vocab_id="UMLS:C0024299")]
    dox = [MentionSpan(start=25, end=36, text="doxorubicin", type="Chemical", vocab_id="MESH:D004317"),
           MentionSpan(start=38, end=49, text="Doxorubicin", type="Chemical", vocab_id="MESH:D004317")]
    assert text[58:66] == "lymphoma" and text[25:36] == "doxorubicin"
    p02, p12, p01 = model.probabilities(text, [lym1, lym2, dox], [(0, 2), (1, 2), (0, 1)])
    assert p02 == p12 and any(p02.values())
    assert p01 == dict.fromkeys(RELATION_TYPES, 0.0)  # one entity: no relation with itself
