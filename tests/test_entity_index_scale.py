"""The entity index's IVF search layer (kg/name_vectors.py) on real Hetionet names, with small list sizes so that
the partitioned path runs at test scale: recall against exact search, kind filters, persistence, growth without
rebuild and the background re-optimization, and a build whose two tables disagree."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from karma_dagster.kg.entity_index import IVF_BUILD_KEY, IVF_TABLE, EntityIndex, KGEntity, compatible_kinds
from karma_dagster.kg.name_vectors import IVFParams
from karma_dagster.runtime.params import KarmaParams
from test_entity_index import hetionet_entities

KINDS = {"Disease", "Compound", "Symptom", "Side Effect", "Gene", "Pharmacologic Class", "Anatomy"}
TYPE_OF = {"Disease": "Disease", "Symptom": "Disease", "Side Effect": "Disease", "Compound": "Chemical",
           "Pharmacologic Class": "Chemical", "Gene": "Gene", "Anatomy": "Anatomy"}
PARAMS = IVFParams(ann_rows=5_000, rows_per_list=200, nprobe=16, flat_kind_rows=500, train_sample=5_000,
                   reoptimize_min_rows=50, reoptimize_share=0.01)


def _hetionet() -> list[KGEntity]:
    return hetionet_entities(KINDS)


def _typo(name: str, rng: random.Random) -> str:
    words = name.split()
    j = max(range(len(words)), key=lambda i: len(words[i]))
    w = words[j]
    if len(w) >= 5:
        k = rng.randrange(1, len(w) - 1)
        words[j] = w[:k] + w[k + 1:]
    return " ".join(words).upper() if rng.random() < 0.3 else " ".join(words)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[KGEntity]]:
    ents = _hetionet()
    uri = tmp_path_factory.mktemp("lance") / "kg.lance"
    assert EntityIndex(uri, ivf=PARAMS).build(ents) == len(ents)
    return uri, ents


def _exact_top(index: EntityIndex, mentions: list[str], types: list[str]) -> np.ndarray:
    rows = index._table.search().select(["kind", "vector"]).limit(None).to_arrow()
    vecs = rows.column("vector").combine_chunks().flatten().to_numpy().reshape(rows.num_rows, -1)
    kinds = np.array(rows.column("kind").to_pylist())
    q = index.embedder.embed(mentions)
    return np.array([float((vecs[np.isin(kinds, compatible_kinds(t))] @ q[i]).max()) for i, t in enumerate(types)])


def test_lists_are_trained_stored_and_reloaded(built):
    uri, ents = built
    index = EntityIndex(uri, ivf=PARAMS)
    layer = index.seed_vectors()
    assert layer.centroids is not None and len(layer.centroids) == len(ents) // PARAMS.rows_per_list
    assert layer.tail_rows == 0 and len(layer) == len(ents)  # every row came back in its stored list
    assert IVF_TABLE in index._db.table_names()


def test_recall_against_exact_search_and_kind_filters(built):
    uri, ents = built
    index = EntityIndex(uri, ivf=PARAMS)
    rng = random.Random(7)
    sample = rng.sample(ents, 300)
    mentions = [_typo(e.name, rng) for e in sample]
    types = [TYPE_OF[e.kind] for e in sample]
    exact = _exact_top(index, mentions, types)
    layer = index.seed_vectors()
    cands = layer.search(index.embedder.embed(mentions), [compatible_kinds(t) for t in types], 10)
    found = np.array([c[0].similarity for c in cands])
    # the top hit is as close as the exact one, for every mention close enough to link (cosine distance <= rho);
    # typo'd gene symbols far from every name are the misses, and they become new entities either way
    linkable = exact >= 1 - KarmaParams().rho
    assert linkable.sum() > 100 and (found >= exact - 1e-5)[linkable].mean() >= 0.95
    hits = index.search(mentions, types, k=3)
    for t, hs in zip(types, hits):
        assert hs and all(h.kind in compatible_kinds(t) for h in hs)  # kinds pushed down, never post-hoc wrong
    # probing fewer lists loses recall: the lists are real partitions, not a full scan in disguise
    narrow = layer.params.model_copy(update={"nprobe": 1, "flat_kind_rows": 0})
    layer.params, saved = narrow, layer.params
    try:
        one = layer.search(index.embedder.embed(mentions), [compatible_kinds(t) for t in types], 1)
    finally:
        layer.params = saved
    assert (np.array([c[0].similarity if c else -1 for c in one]) >= exact - 1e-5)[linkable].mean() < 0.9


def test_small_kind_is_scanned_whole(built):
    uri, _ = built
    index = EntityIndex(uri, ivf=PARAMS)
    [[hit]] = index.search(["thrombocytopenia"], ["Disease"])  # a Side Effect/Disease, exact name
    assert hit.distance < 1e-4 and hit.kind in {"Disease", "Symptom", "Side Effect"}
    [[cls]] = index.search(["Cytochrome P450 2D6 Inhibitors"], ["Chemical"])  # Pharmacologic Class: 345 rows
    assert cls.kind == "Pharmacologic Class" and cls.distance < 1e-4


def test_added_entities_are_searchable_at_once_and_folded_in_the_background(tmp_path, built):
    _, ents = built
    uri = tmp_path / "kg.lance"
    index = EntityIndex(uri, ivf=PARAMS)
    index.build(ents)
    layer = index.seed_vectors()
    new = [KGEntity(id=f"NEW:{i}", name=f"zorbacillin {w}", kind="Compound") for i, w in enumerate(
        ["alpha", "beta", "gamma", "delta", "epsilon"])]
    index.add(new[:1])
    [[hit]] = index.search(["Zorbacillin alpha"], ["Chemical"])
    assert hit.entity_id == "NEW:0" and hit.distance < 1e-4
    assert layer.tail_rows == 1  # searched exactly beside the lists, no rebuild
    # past the threshold (1% of the indexed rows) the tail is assigned to lists in a background thread
    grown = [KGEntity(id=f"GROW:{e.id}", name=f"{e.name} analog", kind=e.kind) for e in ents[:400]]
    index.add(grown + new[1:])
    layer.wait(60)
    assert layer.tail_rows == 0 and len(layer) == len(ents) + 1 + len(grown) + 4
    [[hit]] = index.search(["zorbacillin gamma"], ["Chemical"])
    assert hit.entity_id == "NEW:2"
    g = grown[123]
    [[hit]] = index.search([g.name], [TYPE_OF[g.kind]])
    assert hit.entity_id == g.id and hit.distance < 1e-4
    # a re-added id replaces its rows, in the table and in the layer
    index.add([KGEntity(id="NEW:0", name="quuxomycin", kind="Compound")])
    [[hit]] = index.search(["zorbacillin alpha"], ["Chemical"])
    assert hit.entity_id != "NEW:0"
    # another process opening the index finds the added rows (not in a list yet: its tail, then re-assigned)
    other = EntityIndex(uri, ivf=PARAMS)
    [[hit]] = other.search(["quuxomycin"], ["Chemical"])
    assert hit.entity_id == "NEW:0"
    assert len(other.seed_vectors()) == len(index)


def test_lists_of_another_build_are_not_trusted(tmp_path, built):
    """A crash between the centroids' write and the rows' write leaves tables of two builds: the rows' lists
    are ignored (re-assigned), the answers stay exact."""
    _, ents = built
    uri = tmp_path / "kg.lance"
    index = EntityIndex(uri, ivf=PARAMS)
    index.build(ents[:6000])
    ivf = index._db.open_table(IVF_TABLE).to_arrow()
    index._db.create_table(IVF_TABLE, data=ivf.replace_schema_metadata({IVF_BUILD_KEY: b"another build"}),
                           mode="overwrite")
    reopened = EntityIndex(uri, ivf=PARAMS)
    layer = reopened.seed_vectors()
    layer.wait(60)
    assert len(layer) == 6000 and layer.tail_rows == 0 and layer.centroids is not None
    e = ents[4321]
    [[hit]] = reopened.search([e.name], [TYPE_OF[e.kind]])
    assert hit.distance < 1e-4 and hit.name.lower() == e.name.lower()


def test_table_written_before_the_lists_still_works(tmp_path):
    """An index written by the previous version (no `partition` column, no centroids table) is searched exactly
    and grows."""
    index = EntityIndex(tmp_path / "kg.lance")
    rows = index._rows([KGEntity(id="D:1", name="breast cancer", kind="Disease"),
                        KGEntity(id="C:1", name="metformin", kind="Compound")])
    index._table = index._db.create_table("entities", data=rows)
    old = EntityIndex(tmp_path / "kg.lance")
    assert "partition" not in old._table.schema.names
    [[hit]] = old.search(["Breast cancers"], ["Disease"])
    assert hit.entity_id == "D:1"
    old.add([KGEntity(id="C:2", name="crocin", kind="Compound")])
    [[hit]] = old.search(["crocin"], ["Chemical"])
    assert hit.entity_id == "C:2" and len(old) == 3


def test_bad_params_are_named():
    with pytest.raises(ValueError, match="nprobe"):
        IVFParams(nprobe=0)
