"""Issue 29 (5): KGX in as well as out (export/kgx_import.py, `karma import-kg --format kgx`).

The KG grown from the shipped seed (test_exports.py's `grown`: seed + three merged days, a new node, a superseded
edge) exported as KGX, imported into a fresh store and exported again gives byte-identical files; a graph in
Monarch's KGX column layout (real Biolink categories and predicates, real CURIEs of the shipped seed KG) imports
through the import_kg job, says what it refused, and mentions extracted from text link to imported nodes by their
CURIE and by the file's xrefs; the columns the import keeps work on both KG stores; bad input names the file, line
and problem and leaves the stored KG as it was; kgx itself (in .venv-kgx) validates and rewrites the Monarch-layout
graph, and its rewrite imports the same."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import subprocess
from pathlib import Path

import pytest

from karma_dagster import runner
from karma_dagster.runtime import services
from karma_dagster.agents.entity_extraction import extract_entities_counted
from karma_dagster.assets.seed_kg import import_summary
from karma_dagster.dictionary.lexicon import Lexicon
from karma_dagster.dictionary.ner import DictionaryNER
from karma_dagster.export import kgx
from karma_dagster.export.run import export_kg
from karma_dagster.export.kgx_import import import_kgx
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.seed_import import SeedImportError, import_hetionet
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import SummaryRow
from kg_backends import KGBackend, kg_backend  # noqa: F401 - fixture
from test_exports import D3, NEW, NS, _row, grown  # noqa: F401 - `grown`: the module-scoped KG fixture

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "data" / "seed_kg"

# Monarch's KGX layout (monarch-kg_nodes.tsv / monarch-kg_edges.tsv columns), with CURIEs of the shipped seed KG.
# in_taxon is left out: kgx 2.6's validator flags it on the last node it reads (a list where it expects a string)
# whatever the file says.
MONARCH_NODES = [
    ["id", "category", "name", "description", "xref", "provided_by", "synonym", "full_name", "symbol", "deprecated",
     "iri", "same_as"],
    ["NCBIGene:2645", "biolink:Gene", "GCK", "glucokinase", "ENSEMBL:ENSG00000106633|HGNC:4195", "infores:ncbi-gene",
     "glucokinase|MODY2|hexokinase 4", "glucokinase", "GCK", "", "https://identifiers.org/ncbigene:2645", ""],
    ["NCBIGene:5468", "biolink:Gene", "PPARG", "", "HGNC:9236", "infores:ncbi-gene", "PPAR-gamma",
     "peroxisome proliferator activated receptor gamma", "PPARG", "", "", ""],
    ["DOID:9352", "biolink:Disease", "type 2 diabetes mellitus", "", "MESH:D003924|UMLS:C0011860", "infores:mondo",
     "T2DM|type II diabetes", "", "", "", "", ""],
    # most general first: the import takes the most specific category that maps (SmallMolecule -> Compound)
    ["DRUGBANK:DB00331", "biolink:NamedThing|biolink:ChemicalEntity|biolink:SmallMolecule", "Metformin", "",
     "MESH:D008687|CHEBI:6801", "infores:drugbank", "metformin hydrochloride", "", "", "", "", ""],
    ["MESH:D011141", "biolink:PhenotypicFeature", "Polyuria", "", "UMLS:C0032617", "infores:hpo", "", "", "", "", "",
     ""],
    ["UBERON:0001264", "biolink:AnatomicalEntity", "pancreas", "", "", "infores:uberon", "", "", "", "", "", ""],
    ["GO:0042593", "biolink:BiologicalProcess", "glucose homeostasis", "", "", "infores:go", "", "", "", "", "", ""],
    ["UniProtKB:P35557", "biolink:Protein", "Hexokinase-4", "", "", "infores:uniprot", "", "", "", "", "", ""],
]
MONARCH_EDGES = [
    ["id", "category", "subject", "predicate", "object", "negated", "original_subject", "publications",
     "has_evidence", "primary_knowledge_source", "aggregator_knowledge_source", "knowledge_level", "agent_type"],
    ["uuid:1", "biolink:GeneToDiseaseAssociation", "NCBIGene:2645", "biolink:gene_associated_with_condition",
     "DOID:9352", "", "OMIM:138079", "PMID:8446612|PMID:1502186", "ECO:0000304", "infores:omim",
     "infores:monarchinitiative", "knowledge_assertion", "manual_agent"],
    ["uuid:2", "biolink:ChemicalToDiseaseOrPhenotypicFeatureAssociation", "DRUGBANK:DB00331", "biolink:treats",
     "DOID:9352", "", "", "", "", "infores:drugcentral", "infores:monarchinitiative", "knowledge_assertion",
     "manual_agent"],
    # an agent_type outside Biolink's enumeration: the edge is kept, the value left out (and said)
    ["uuid:3", "biolink:DiseaseToPhenotypicFeatureAssociation", "DOID:9352", "biolink:has_phenotype", "MESH:D011141",
     "", "", "PMID:1", "", "infores:hpo-annotations", "infores:monarchinitiative", "knowledge_assertion",
     "curator"],
    ["uuid:4", "biolink:GeneToExpressionSiteAssociation", "NCBIGene:2645", "biolink:expressed_in", "UBERON:0001264",
     "", "", "", "", "infores:bgee", "infores:monarchinitiative", "knowledge_assertion", "not_provided"],
    # the inverse of the mapped has_participant: read with subject and object swapped
    ["uuid:5", "biolink:FunctionalAssociation", "NCBIGene:2645", "biolink:participates_in", "GO:0042593", "", "", "",
     "", "infores:goa", "infores:monarchinitiative", "knowledge_assertion", "manual_agent"],
    ["uuid:6", "biolink:GeneToGeneHomologyAssociation", "NCBIGene:2645", "biolink:orthologous_to", "NCBIGene:5468",
     "", "", "", "", "infores:panther", "infores:monarchinitiative", "knowledge_assertion", "not_provided"],
    ["uuid:7", "biolink:FunctionalAssociation", "UniProtKB:P35557", "biolink:participates_in", "GO:0042593", "", "",
     "", "", "infores:goa", "infores:monarchinitiative", "knowledge_assertion", "manual_agent"],
    ["uuid:8", "biolink:ChemicalToDiseaseOrPhenotypicFeatureAssociation", "DRUGBANK:DB00331", "biolink:treats",
     "MESH:D011141", "True", "", "", "", "infores:drugcentral", "infores:monarchinitiative", "knowledge_assertion",
     "manual_agent"],
]


def _write_tsv(path: Path, rows: list[list[str]]) -> Path:
    text = "".join("\t".join(r) + "\n" for r in rows)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8", newline="") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


@pytest.fixture(scope="module")
def monarch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("monarch")
    return (_write_tsv(folder / "monarch-kg_nodes.tsv.gz", MONARCH_NODES),
            _write_tsv(folder / "monarch-kg_edges.tsv", MONARCH_EDGES))


def _edges(folder: Path) -> dict[str, dict[str, str]]:
    lines = (folder / kgx.EDGES).read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    return {r["karma_metaedge"] + " " + r["subject"] + " " + r["object"]: r
            for r in (dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:])}


# ---------------------------------------------------------------- export -> import -> export
def test_kgx_export_import_export_is_a_fixed_point(grown: dict, tmp_path: Path) -> None:  # noqa: F811
    first = export_kg(grown["store"], "kgx", NS, D3, tmp_path / "first")
    store = KGStore(tmp_path / "fresh" / "kg.duckdb")
    stats = import_kgx(store, tmp_path / "first" / kgx.NODES, tmp_path / "first" / kgx.EDGES)
    assert (stats.n_nodes, stats.n_edges) == (first.counts["nodes"], first.counts["edges"])
    assert stats.refused == {"nodes": {}, "edges": {}, "cells_left_out": {}}  # our own file: nothing refused
    second = export_kg(store, "kgx", NS, D3, tmp_path / "second")
    for name in (kgx.NODES, kgx.EDGES):  # the same bytes: no normalisation, not even of row order
        assert (tmp_path / "second" / name).read_bytes() == (tmp_path / "first" / name).read_bytes(), name
    assert second.report["ids_with_own_prefix"] == first.report["ids_with_own_prefix"]

    # what the fresh store holds: our node ids, kinds (Pharmacologic Class has no Biolink category: karma_kind),
    # vocabulary ids as the grown KG spelled them, the new compound and the paper-grown edges as seed rows
    old, new = grown["store"], store
    assert new.node_kinds() == old.node_kinds() and new.node_kinds()[NEW.id] == "Compound"
    with old.connect(read_only=True) as con:
        old_vocab = dict(con.execute("SELECT id, vocab_id FROM seed_nodes").fetchall())
    with new.connect(read_only=True) as con:
        new_vocab = dict(con.execute("SELECT id, vocab_id FROM seed_nodes").fetchall())
        causes = con.execute("SELECT metaedge, confidence FROM seed_edges WHERE head_id = ? AND tail_id = ?",
                             [grown["c1"], grown["dis_b"]]).fetchall()
    assert new_vocab == old_vocab | {NEW.id: None}
    assert old_vocab[grown["c1"]].startswith("DrugBank:")  # kept, though the export wrote DRUGBANK:
    assert causes == [("CcD", pytest.approx(0.9))]  # D3's replacement, not the superseded treats edge

    # the imported graph grows on: a paper reinforces an edge the import read; the export adds its evidence to the
    # counts and documents the file gave
    reinforced = grown["reinforced"]
    d4, doc = dt.date(2016, 2, 1), "2016-02-01_d"
    merge_increment(store, d4, NS, {doc: ([_row(doc, "t1", reinforced[0], "treats", reinforced[2], 0.5)], [])},
                    "run-4")
    third = export_kg(store, "kgx", NS, d4, tmp_path / "third")
    before = next(r for r in _edges(tmp_path / "first").values() if r["karma_documents"] == "2016-01-05_a"
                  and r["karma_metaedge"] == "CtD" and r["agent_type"] == "not_provided")
    after = _edges(tmp_path / "third")[f"CtD {before['subject']} {before['object']}"]
    assert (before["karma_n_evidence"], after["karma_n_evidence"]) == ("1", "2")
    assert after["karma_documents"] == f"2016-01-05_a|{doc}" and after["karma_last_seen"] == str(d4)
    assert after["karma_first_seen"] == before["karma_first_seen"] == "2016-01-05"
    from karma_dagster.kg.reinforcement import with_prior  # the imported edge is a seed row now: its score a prior

    assert float(after["has_confidence_score"]) == pytest.approx(with_prior(float(before["has_confidence_score"]), 0.5))
    assert (after["id"], after["primary_knowledge_source"]) == (before["id"], before["primary_knowledge_source"])
    assert third.counts["edges"] == first.counts["edges"]
    print(f"\nKGX round trip of the grown KG as of {D3}: {first.counts}, import {stats.seconds} s")


# ---------------------------------------------------------------- a graph in Monarch's layout
def test_monarch_layout_imports_and_a_mention_links_to_an_imported_node_by_id(
        monarch: tuple[Path, Path], make_pipeline, tmp_path: Path) -> None:  # noqa: ANN001 - conftest fixture
    nodes, edges = monarch
    p = make_pipeline()
    # through the import_kg job, as `karma import-kg --format kgx` runs it: first an edge to a node the file lacks
    bad = _write_tsv(tmp_path / "edges.tsv", [MONARCH_EDGES[0], MONARCH_EDGES[1][:4] + ["MONDO:0005148"]
                                              + MONARCH_EDGES[1][5:]])
    said: list[str] = []
    assert not runner.import_kg(p.defs, p.instance, str(nodes), str(bad), "kgx", reimport=True, on_failure=said.append)
    assert len(said) == 1 and "edges.tsv:2: object 'MONDO:0005148' is no node of monarch-kg_nodes.tsv.gz" in said[0]
    assert not p.kg.exists() or p.kg.seed_counts().n_nodes == 0  # nothing was written

    assert runner.import_kg(p.defs, p.instance, str(nodes), str(edges), "kgx", reimport=True)
    summary = import_summary(p.instance)
    assert summary[0].startswith("nodes 7, edges 5,")
    assert "nodes not imported: 1" in summary and "edges not imported: 3" in summary
    assert any("no KG kind for category biolink:Protein; e.g. monarch-kg_nodes.tsv.gz:9 UniProtKB:P35557" in line
               for line in summary)
    assert any("biolink:orthologous_to Gene -> Gene has no metaedge in the KG schema; e.g. monarch-kg_edges.tsv:7"
               in line for line in summary)
    assert any("an end is a refused node; e.g. monarch-kg_edges.tsv:8" in line for line in summary)
    assert any("negated (the KG states no negations); e.g. monarch-kg_edges.tsv:9" in line for line in summary)
    assert "values left out of rows that were imported: 1" in summary
    assert any("agent_type that is no permissible value; e.g. monarch-kg_edges.tsv:4 'curator'" in line
               for line in summary)

    store = p.kg
    assert store.node_kinds() == {"NCBIGene:2645": "Gene", "NCBIGene:5468": "Gene", "DOID:9352": "Disease",
                                  "DRUGBANK:DB00331": "Compound", "MESH:D011141": "Symptom",
                                  "UBERON:0001264": "Anatomy", "GO:0042593": "Biological Process"}
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT vocab_id FROM seed_nodes WHERE id = 'NCBIGene:2645'").fetchone() == (
            "NCBIGene:2645",)
        assert sorted(con.execute("SELECT head_id, metaedge, tail_id FROM seed_edges").fetchall()) == [
            ("DOID:9352", "DaG", "NCBIGene:2645"),  # gene_associated_with_condition: Biolink's way round
            ("DOID:9352", "DpS", "MESH:D011141"), ("DRUGBANK:DB00331", "CtD", "DOID:9352"),
            ("NCBIGene:2645", "GpBP", "GO:0042593"),  # participates_in = has_participant, swapped
            ("UBERON:0001264", "AeG", "NCBIGene:2645")]  # expressed_in: AeG, not the lossy AuG/AdG
        assert sorted(r[0] for r in con.execute("SELECT synonym FROM node_synonyms WHERE id = 'NCBIGene:2645'")
                      .fetchall()) == ["MODY2", "glucokinase", "hexokinase 4"]

    # mentions: the dictionary gives GCK its vocabulary id NCBIGene:2645, the imported node's CURIE (linked by id);
    # NIDDM and metformin get MeSH ids, which the file lists among the nodes' xrefs (linked by xref)
    data = p.storage.paths()
    text = "In NIDDM, metformin is first-line; GCK mutations cause hyperglycaemia in the young."
    summary_row = SummaryRow(doc_key="2016-01-05_gck", summary_id="s1", segment_id="g1", section="abstract",
                             text=text, n_sentences_in=1, n_sentences_out=1)
    ner = DictionaryNER(Lexicon.build(cache_dir=ROOT / ".cache" / "lexicon"))
    found = extract_entities_counted([summary_row], ner, ner, services.entity_index(data), KarmaParams(),
                                     identity=services.identity_index(data, NS))
    gck = next(r for r in found.rows if r.text == "GCK")
    assert (gck.vocab_id, gck.status, gck.kg_id, gck.distance, gck.linked_to) == (
        "NCBIGene:2645", "linked", "NCBIGene:2645", 0.0, "seed")
    assert found.counts.linked_by_id >= 1
    by_text = {r.text: r for r in found.rows}
    assert [(by_text[t].vocab_id, by_text[t].kg_id, by_text[t].distance) for t in ("NIDDM", "metformin")] == [
        ("MESH:D003924", "DOID:9352", 0.0), ("MESH:D008687", "DRUGBANK:DB00331", 0.0)]
    assert found.counts.linked_by_xref >= 2
    identity = services.identity_index(data)
    hgnc = identity.by_id("HGNC:4195")  # only the file says it: the shipped crosswalk has no gene xrefs
    assert hgnc is not None and (hgnc.node.id, hgnc.by) == ("NCBIGene:2645", "xref")
    chebi = identity.by_id("CHEBI:6801")  # the shipped crosswalk's, for Compound::DB00331: the same CURIE
    assert chebi is not None and (chebi.node.id, chebi.by) == ("DRUGBANK:DB00331", "xref")

    # exported again: Monarch's ids, categories, provenance and extra columns come back; Biolink-valid
    out = export_kg(store, "kgx", NS, None, tmp_path / "out")
    check = kgx.validate_kgx(tmp_path / "out" / kgx.NODES, tmp_path / "out" / kgx.EDGES)
    assert check.ok and check.warnings == [] and out.report["ids_with_own_prefix"] == 0
    node_lines = (tmp_path / "out" / kgx.NODES).read_text(encoding="utf-8").splitlines()
    header = node_lines[0].split("\t")
    metformin = dict(zip(header, next(x for x in node_lines if x.startswith("DRUGBANK:")).split("\t"), strict=True))
    assert metformin["category"] == "biolink:NamedThing|biolink:ChemicalEntity|biolink:SmallMolecule"
    exported = _edges(tmp_path / "out")
    dag = exported["DaG NCBIGene:2645 DOID:9352"]
    assert (dag["id"], dag["predicate"], dag["publications"], dag["primary_knowledge_source"], dag["agent_type"]) == (
        "uuid:1", "biolink:gene_associated_with_condition", "PMID:8446612|PMID:1502186", "infores:omim",
        "manual_agent")
    assert exported["GpBP NCBIGene:2645 GO:0042593"]["predicate"] == "biolink:participates_in"
    assert exported["DpS DOID:9352 MESH:D011141"]["agent_type"] == "not_provided"  # the export's default


# ---------------------------------------------------------------- both KG stores
def test_kgx_import_and_its_attributes_on_both_stores(monarch: tuple[Path, Path], kg_backend: KGBackend,  # noqa: F811
                                                      tmp_path: Path) -> None:
    """What the import keeps beside the seed rows (seed_node_attrs / seed_edge_attrs) is written and read back by
    the DuckDB file and the Postgres database alike, and a later Hetionet-format import clears it."""
    store = kg_backend.new("kgx")
    stats = import_kgx(store, *monarch)
    assert (stats.n_nodes, stats.n_edges) == (7, 5)
    export_kg(store, "kgx", NS, None, tmp_path / "out")
    dag = _edges(tmp_path / "out")["DaG NCBIGene:2645 DOID:9352"]
    assert (dag["id"], dag["publications"], dag["category"]) == ("uuid:1", "PMID:8446612|PMID:1502186",
                                                                 "biolink:GeneToDiseaseAssociation")
    nodes = (tmp_path / "out" / kgx.NODES).read_text(encoding="utf-8").splitlines()
    assert nodes[0].endswith("\tfull_name\tiri\tsymbol") and {line.split("\t")[0] for line in nodes[1:]} == {
        "NCBIGene:2645", "NCBIGene:5468", "DOID:9352", "DRUGBANK:DB00331", "MESH:D011141", "UBERON:0001264",
        "GO:0042593"}
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz")
    export_kg(store, "kgx", NS, None, tmp_path / "hetionet")
    header = (tmp_path / "hetionet" / kgx.EDGES).read_text(encoding="utf-8").split("\n", 1)[0]
    assert header == "\t".join(kgx.EDGE_COLUMNS)  # no column of the earlier KGX import is left


# ---------------------------------------------------------------- bad input
def _bad(tmp_path: Path, nodes: list[list[str]], edges: list[list[str]]) -> tuple[Path, Path]:
    folder = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    return _write_tsv(folder / "nodes.tsv", nodes), _write_tsv(folder / "edges.tsv", edges)


def test_bad_kgx_input_names_file_line_and_problem_and_keeps_the_stored_kg(tmp_path: Path) -> None:
    store = KGStore(tmp_path / "kg.duckdb")
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz")
    before = (store.seed_fingerprint(), store.seed_counts())
    n, e = MONARCH_NODES, MONARCH_EDGES
    good_edge = e[1]
    cases = [
        ([[c for c in n[0] if c != "category"], *[r[:1] + r[2:] for r in n[1:]]], e,
         "nodes.tsv:1: missing KGX column 'category'"),
        ([n[0], n[1], ["GCK gene", *n[2][1:]], *n[3:]], e, "nodes.tsv:3: id 'GCK gene' is not a CURIE"),
        ([n[0], n[1], n[2], n[1]], e, "nodes.tsv:4: duplicate node id 'NCBIGene:2645'"),
        ([n[0], n[1], n[2][:5]], e, "nodes.tsv:3: 5 fields, the header has 12"),
        (n, [e[0], good_edge[:4] + ["DOID:0000000"] + good_edge[5:]],
         "edges.tsv:2: object 'DOID:0000000' is no node of nodes.tsv"),
        (n, [e[0], good_edge[:2] + ["NCBIGene 2645"] + good_edge[3:]],
         "edges.tsv:2: subject 'NCBIGene 2645' is not a CURIE"),
        (n, [[c for c in e[0] if c != "predicate"]], "edges.tsv:1: missing KGX column 'predicate'"),
        (n, [[*e[0], "has_confidence_score"], [*good_edge, "high"]],
         "edges.tsv:2: has_confidence_score 'high' is not a number"),
        (n, [[*e[0], "karma_metaedge"], [*good_edge, "XyZ"]],
         "edges.tsv:2: karma_metaedge 'XyZ' is not a metaedge of the KG schema"),
        (n, [], "edges.tsv:1: empty file"),
    ]
    for nodes_rows, edge_rows, expected in cases:
        nodes, edges = _bad(tmp_path, nodes_rows, edge_rows)
        with pytest.raises(SeedImportError, match=re.escape(expected)):
            import_kgx(store, nodes, edges)
        assert (store.seed_fingerprint(), store.seed_counts()) == before, expected
    good_nodes, good_edges = _bad(tmp_path, n, [e[0], good_edge])
    broken = tmp_path / "broken_nodes.tsv.gz"  # a download cut short
    broken.write_bytes(gzip.compress(good_nodes.read_bytes())[:-12])
    with pytest.raises(SeedImportError, match=r"broken_nodes\.tsv\.gz:\d+: unreadable"):
        import_kgx(store, broken, good_edges)
    assert (store.seed_fingerprint(), store.seed_counts()) == before
    # the same files, valid, do import (the errors above were the edits')
    assert import_kgx(store, good_nodes, good_edges).n_edges == 1


# ---------------------------------------------------------------- kgx itself (a venv of its own)
def _kgx_python() -> Path:
    subprocess.run(["bash", str(ROOT / "scripts" / "kgx_venv.sh")], check=False, timeout=900)
    python = ROOT / ".venv-kgx" / "bin" / "python"
    if not python.exists():
        pytest.skip(f".venv-kgx could not be built (see {ROOT.name}/.venv-kgx.log): no kgx to run")
    return python


def _kgx(python: Path, *triples: tuple[Path, Path, Path | str]) -> list[dict]:
    """kgx_transform.py over (nodes, edges, out prefix or "-") triples, in one process (kgx takes seconds to load)."""
    args = [str(x) for t in triples for x in t]
    proc = subprocess.run([str(python), str(ROOT / "tests" / "kgx_transform.py"), *args], capture_output=True,
                          text=True, timeout=600, cwd=triples[0][0].parent, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # kgx prints progress lines before it


def test_kgx_validates_and_rewrites_the_graph_and_its_rewrite_imports_the_same(
        monarch: tuple[Path, Path], tmp_path: Path) -> None:
    """kgx reads the Monarch-layout graph (its validator: no error) and writes it again in its own TSV layout
    (columns reordered, empty ones dropped, its knowledge_source added), which imports the same; and kgx's
    validator finds no error in our export of the imported graph (its ids are all registered CURIEs)."""
    python = _kgx_python()
    nodes, edges = monarch
    ours = import_kgx(KGStore(tmp_path / "a.duckdb"), nodes, edges)
    export_kg(KGStore(tmp_path / "a.duckdb"), "kgx", NS, None, tmp_path / "out")
    plain = tmp_path / "monarch_nodes.tsv"  # kgx tells node from edge files by their names, and reads no .gz here
    plain.write_bytes(gzip.decompress(nodes.read_bytes()))
    for name in (kgx.NODES, kgx.EDGES):
        (tmp_path / f"export_{name}").write_bytes((tmp_path / "out" / name).read_bytes())
    read, exported = _kgx(python, (plain, edges, tmp_path / "rewritten"),
                          (tmp_path / "export_nodes.tsv", tmp_path / "export_edges.tsv", "-"))
    assert read["errors"] == {} and (read["nodes"], read["edges"]) == (8, 8)
    assert exported["errors"] == {} and (exported["nodes"], exported["edges"]) == (7, 5)
    theirs = import_kgx(KGStore(tmp_path / "b.duckdb"), tmp_path / "rewritten_nodes.tsv",
                        tmp_path / "rewritten_edges.tsv")
    assert (theirs.n_nodes, theirs.n_edges, theirs.nodes_by_kind, theirs.edges_by_metaedge) == (
        ours.n_nodes, ours.n_edges, ours.nodes_by_kind, ours.edges_by_metaedge)
    assert {k: {r: v["count"] for r, v in d.items()} for k, d in theirs.refused.items()} == {
        k: {r: v["count"] for r, v in d.items()} for k, d in ours.refused.items()}
