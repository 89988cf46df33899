"""The document-level relation model's second round (issue 15): MeSH specificity and the roles an entity is
spoken of in as features, a chemical-disease head of its own, one relation type per entity pair.

Real data: the shipped MeSH tree numbers, and a slice of the shipped BioRED and BC5CDR training corpora.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from corpus_slices import first_abstracts
from karma_dagster.backbones.local import mesh_tree
from karma_dagster.backbones.local.doc_features import (
    Entity,
    entity_context,
    entity_pair_features,
    entity_roles,
    saliences,
)
from karma_dagster.backbones.local.doc_relations import (
    DocRelationModel,
    _one_type,
    layout_of,
)
from karma_dagster.backbones.local.relations import DEFAULT_BIORED, DEFAULT_CDR, RELATION_TYPES, _Span
from karma_dagster.backbones.single_agent import DOC_DECISION, SingleAgentBackbone
from karma_dagster.schemas.records import MentionSpan

TEXT = "Cocaine-induced seizures and ventricular tachycardia. Patients were treated with lithium for cardiovascular diseases."


def _ent(text: str, surface: str, kind: str, mesh: str) -> Entity:
    start = text.index(surface)
    return Entity(spans=(_Span(start, start + len(surface), kind),), type=kind, ids=frozenset({mesh}),
                  surfaces=(surface,))


def _entities() -> list[Entity]:
    return [_ent(TEXT, "Cocaine", "Chemical", "D003042"), _ent(TEXT, "seizures", "Disease", "D012640"),
            _ent(TEXT, "ventricular tachycardia", "Disease", "D017180"), _ent(TEXT, "lithium", "Chemical", "D008094"),
            _ent(TEXT, "cardiovascular diseases", "Disease", "D002318")]


def test_mesh_tree_says_which_entity_is_the_broader_term():
    trees = mesh_tree.tree_numbers()
    assert "C14" in trees["D002318"] and "C14.280.067.845.940" in trees["D017180"]
    flags = mesh_tree.hierarchy_flags([e.ids for e in _entities()], trees)
    # cardiovascular diseases (C14) is above ventricular tachycardia (C14.280...); seizures and the drugs are neither
    assert flags == [(False, False), (False, False), (False, True), (False, False), (True, False)]
    assert mesh_tree.hierarchy_flags([frozenset(), frozenset({"D002318"})], trees) == [(False, False)] * 2
    with pytest.raises(FileNotFoundError, match="not found"):
        mesh_tree.tree_numbers(Path("/nonexistent/mesh-tree-numbers.tsv.gz"))


def test_roles_read_adverse_effect_and_treatment_wording():
    roles = entity_roles(TEXT, _entities())
    assert "agent" in roles[0], "cocaine-induced: the chemical causes"
    assert "induced" in roles[1], "-induced seizures: the disease is caused"
    assert "treated" in roles[3], "treated with lithium: a treatment"
    assert "treated" not in roles[0] and "agent" not in roles[3]


def test_hyp_and_role_features_join_the_pair_and_drop_by_group():
    ents = _entities()
    layout = layout_of(TEXT)
    n, rank = saliences(ents)
    ctx = entity_context(TEXT, ents, mesh_tree.tree_numbers())
    assert ctx.per_type == {"Chemical": 2, "Disease": 3}
    feats = entity_pair_features(TEXT, layout, ents, 3, 4, None, n, rank, context=ctx)
    assert "hyp:Chemical|Disease_b_broader=1" in feats, "cardiovascular diseases is a broader term here"
    assert "role:Chemical=treated" in feats and any(f.startswith("role:Chemical|Disease_treated_") for f in feats)
    induced = entity_pair_features(TEXT, layout, ents, 0, 1, None, n, rank, context=ctx)
    assert "role:Chemical|Disease_agent_induced" in induced and "hyp:Chemical|Disease_b_broader=0" in induced
    plain = entity_pair_features(TEXT, layout, ents, 3, 4, None, n, rank,
                                 frozenset({"type", "dist", "cnt", "sec", "lex", "cue"}), context=ctx)
    assert not any(f.startswith(("hyp:", "role:")) for f in plain)


def test_one_type_per_pair_keeps_the_most_probable_type_over_its_threshold():
    targets = np.full(3, 0.4)
    P = np.array([[0.6, 0.5, 0.1], [0.45, 0.9, 0.2], [0.3, 0.2, 0.1]])
    one = _one_type(P, targets, 1.0)
    assert (one >= 0.4).sum(axis=1).tolist() == [1, 1, 0] and one[0, 0] == 0.6 and one[1, 1] == 0.9
    assert 0.0 < one[0, 1] < 0.4 and one[2].tolist() == P[2].tolist(), "suppressed below theta; no pass: untouched"
    assert (_one_type(P, targets, 0.5) >= 0.4).sum(axis=1).tolist() == [2, 1, 0], "a second type at p >= keep stays"
    assert np.array_equal(_one_type(P, targets, None), P), "None: multi-label as before"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> DocRelationModel:
    d = tmp_path_factory.mktemp("docrel2")
    return DocRelationModel(d / "cache", biored_path=first_abstracts(DEFAULT_BIORED, 80, d / "biored.pubtator"),
                            cdr_path=first_abstracts(DEFAULT_CDR, 80, d / "cdr.pubtator"))


def test_the_chemical_disease_head_and_the_keep_rule_are_cross_validated(model):
    f = model.fitted
    key = "Positive_Correlation@Chemical|Disease"
    assert key in f.heads and 0.1 <= f.theta_cv[key] <= 0.9 and f.cv_f1[key] > 0.3
    assert f.keep in (None, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0) and "pair+type" in f.cv_f1
    plain = DocRelationModel(model.cache_dir, biored_path=model.biored_path, cdr_path=model.cdr_path,
                             refinements=False)
    assert plain.cache_key != model.cache_key and not plain.fitted.heads and plain.fitted.keep is None


def test_a_chemical_disease_pair_is_answered_by_its_head(model):
    text = "Cocaine-induced seizures were seen in ten patients. Seizures stopped after cocaine was withdrawn."
    coc = [MentionSpan(start=0, end=7, text="Cocaine", type="Chemical"),
           MentionSpan(start=81, end=88, text="cocaine", type="Chemical")]
    sz = [MentionSpan(start=16, end=24, text="seizures", type="Disease"),
          MentionSpan(start=52, end=60, text="Seizures", type="Disease")]
    (probs,) = model.probabilities(text, [coc, sz], [(0, 1)])
    plain = DocRelationModel(model.cache_dir, biored_path=model.biored_path, cdr_path=model.cdr_path,
                             refinements=False)
    (before,) = plain.probabilities(text, [coc, sz], [(0, 1)])
    assert probs["Positive_Correlation"] != before["Positive_Correlation"], "another model answers this pair"
    assert set(probs) == set(RELATION_TYPES)
    assert probs["Positive_Correlation"] > 0.4, "cocaine-induced seizures: a chemical-induced disease"


def test_the_local_single_agent_backbone_asks_the_entity_pair_model(model):
    class Local:  # the local backbone's relation surface (no prompts, no client: not an LLM)
        def document_relation_probabilities(self, text, entities, pairs):
            return model.probabilities(text, entities, pairs)

        def sample_document_relation_probabilities(self, text, entities, pairs, sample, temperature):
            return model.sample(text, entities, pairs, sample, temperature)

    single = SingleAgentBackbone("local-single", Local())  # type: ignore[arg-type]
    assert single.own_threshold == DOC_DECISION
    text = "Cocaine-induced seizures."
    ents = [[MentionSpan(start=0, end=7, text="Cocaine", type="Chemical")],
            [MentionSpan(start=16, end=24, text="seizures", type="Disease")]]
    assert single.document_relation_probabilities(text, ents, [(0, 1)]) == model.probabilities(text, ents, [(0, 1)])
    assert not callable(getattr(SingleAgentBackbone("x", object()), "document_relation_probabilities", None))  # type: ignore[arg-type]


def test_entities_with_the_same_ids_are_answered_as_one(model):
    """Two entities the normalizer gave one id (one linked, one new in the KG) get one answer per id pair."""
    text = "Cocaine-induced seizures were seen. Cocaine use preceded the seizures."
    coc1 = [MentionSpan(start=0, end=7, text="Cocaine", type="Chemical", vocab_id="MESH:D003042")]
    coc2 = [MentionSpan(start=36, end=43, text="Cocaine", type="Chemical", vocab_id="MESH:D003042")]
    sz = [MentionSpan(start=16, end=24, text="seizures", type="Disease", vocab_id="MESH:D012640"),
          MentionSpan(start=61, end=69, text="seizures", type="Disease", vocab_id="MESH:D012640")]
    a, b, same = model.probabilities(text, [coc1, coc2, sz], [(0, 2), (1, 2), (0, 1)])
    assert a == b, "one id pair, one answer"
    assert same == dict.fromkeys(RELATION_TYPES, 0.0), "an entity is not related to itself"
    (whole,) = model.probabilities(text, [coc1 + coc2, sz], [(0, 1)])
    assert a == whole, "as if the two had been one entity with all its mentions"
    other = [MentionSpan(start=36, end=43, text="Cocaine", type="Chemical")]  # no id: stays an entity of its own
    x, y = model.probabilities(text, [coc1, other, sz], [(0, 2), (1, 2)])
    assert x != y
