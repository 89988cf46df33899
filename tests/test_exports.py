"""Exports of the KG as of a date (karma_dagster/export, assets/exports.py, `karma export`): the shipped seed KG
plus three merged days, one of which supersedes an edge of the first. Turtle round trip, KGX validation (our
validator over bmt and the packaged Biolink Model; the kgx package does not install beside our pins), Neo4j import
consistency, as-of correctness, atomic replacement, CLI errors, the Dagster asset."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import shutil
import socket
from pathlib import Path

import dagster as dg
import pytest
from rdflib import RDF, RDFS, Literal, URIRef
from rdflib.namespace import PROV

from karma_dagster.export import biolink, cli_export, kgx, neo4j, turtle
from karma_dagster.export.run import ExportError, export_kg, read_report
from karma_dagster.export.snapshot import read_snapshot
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import KGStore, NodeIn
from karma_dagster.resources.storage import KarmaStorageResource

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
NS = "local"
D0, D1, D2, D3 = dt.date(2016, 1, 4), dt.date(2016, 1, 5), dt.date(2016, 1, 6), dt.date(2016, 1, 10)
NEW = NodeIn(id="NEW:Chemical:zetamab", name="zetamab", kind="Compound", synonyms=["ZMB-12"])


def _row(doc: str, tid: str, head: str, relation: str, tail: str, score: float, **kw: object) -> dict:
    row = {"doc_key": doc, "triple_id": tid, "head_id": head, "relation": relation, "kg_relation": relation,
           "tail_id": tail, "metaedge": None, "score": score, "segment_id": f"{doc}#s1", "accepted": True,
           "evidence": f"{head} {relation} {tail} in this study."}
    row.update(kw)
    return row


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The shipped seed KG, then D1: a new compound treats a disease, a seed compound treats another (new edge),
    a seed CtD edge reinforced; D2 = D1 + 1: one more new edge; D3: a paper replaces D1's new treats edge by
    causes (the conflict agent's "replace": the treats edge is superseded from D3 on)."""
    path = tmp_path_factory.mktemp("kg") / "kg.duckdb"
    store = KGStore(path)
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    seed = set(store.seed_edge_triples())
    kinds = store.node_kinds()
    compounds = sorted(i for i, k in kinds.items() if k == "Compound")
    diseases = sorted(i for i, k in kinds.items() if k == "Disease")
    free = [(c, d) for c in compounds[:30] for d in diseases[:30]
            if not {(c, r, d) for r in ("treats", "causes", "palliates")} & seed]
    (c1, dis_b), (c2, dis_c), dis_a = free[0], free[40], diseases[5]
    reinforced = next(t for t in sorted(seed) if t[1] == "treats")
    merge_increment(store, D1, NS, {"2016-01-05_a": ([
        _row("2016-01-05_a", "t1", NEW.id, "treats", dis_a, 0.8),
        _row("2016-01-05_a", "t2", c1, "treats", dis_b, 0.7),
        _row("2016-01-05_a", "t3", reinforced[0], "treats", reinforced[2], 0.5),
    ], [NEW])}, "run-1")
    merge_increment(store, D2, NS, {"2016-01-06_b": ([_row("2016-01-06_b", "t1", c2, "treats", dis_c, 0.6)], [])},
                    "run-2")
    merge_increment(store, D3, NS, {"2016-01-10_c": ([
        _row("2016-01-10_c", "t1", c1, "causes", dis_b, 0.9, metaedge="CcD", action="replace", verdict="contradict",
             contradicts=f"{c1} -treats-> {dis_b}", adjudication="the newer trial shows the compound induces it"),
    ], [])}, "run-3")
    return {"store": store, "path": path, "c1": c1, "c2": c2, "dis_a": dis_a, "dis_b": dis_b, "dis_c": dis_c,
            "reinforced": reinforced, "n_seed_nodes": len(kinds), "n_seed_edges": len(seed)}


def _keys(snap) -> set[tuple[str, str, str]]:  # noqa: ANN001
    return {e.key for e in snap.edges}


# ---------------------------------------------------------------- the snapshot every format reads
def test_snapshot_as_of_dates_supersession_and_reinforcement(grown: dict) -> None:
    g, store = grown, grown["store"]
    added_d1 = {(NEW.id, "treats", g["dis_a"]), (g["c1"], "treats", g["dis_b"])}
    added_d2 = (g["c2"], "treats", g["dis_c"])
    replaced, replacement = (g["c1"], "treats", g["dis_b"]), (g["c1"], "causes", g["dis_b"])

    before = read_snapshot(store, NS, D0)
    assert (len(before.nodes), len(before.edges)) == (g["n_seed_nodes"], g["n_seed_edges"])
    assert before.evidence == [] and before.supersessions == []

    s1 = read_snapshot(store, NS, D1)
    assert added_d1 <= _keys(s1) and added_d2 not in _keys(s1)  # the D+1 edge is absent from the D export
    assert len(s1.edges) == g["n_seed_edges"] + 2 and len(s1.nodes) == g["n_seed_nodes"] + 1
    new = s1.node_by_id[NEW.id]
    assert (new.source, new.kind, new.first_seen, new.synonyms) == ("extracted", "Compound", D1, ["ZMB-12"])
    r = next(e for e in s1.edges if e.key == g["reinforced"])
    assert (r.in_seed, r.n_evidence, r.first_seen) == (True, 1, D1)
    assert r.confidence == pytest.approx(max(0.9, 1 - (1 - 0.9) ** 0.5 * (1 - 0.5)))  # the seed is a prior
    assert next(e for e in before.edges if e.key == g["reinforced"]).n_evidence == 0

    s2 = read_snapshot(store, NS, D2)
    assert added_d2 in _keys(s2) and replaced in _keys(s2) and replacement not in _keys(s2)

    s3 = read_snapshot(store, NS, D3)
    assert replaced not in _keys(s3) and replacement in _keys(s3)  # superseded on D3, replaced by causes
    assert [(x.head_id, x.relation, x.tail_id, x.date) for x in s3.supersessions] == [(*replaced, D3)]
    assert all((e.head_id, e.relation, e.tail_id) != replaced for e in s3.evidence)  # its support is history now
    assert len(s3.edges) == g["n_seed_edges"] + 3
    assert s3.counts()["evidence"] == 4 and s3.dangling_edges == []


# ---------------------------------------------------------------- RDF/Turtle
def test_turtle_round_trip_and_provenance(grown: dict, tmp_path: Path) -> None:
    g = grown
    result = export_kg(g["store"], "turtle", NS, D3, tmp_path / "ttl")
    assert result.files == ["kg.ttl", "export-report.json"]
    graph, back = turtle.read_back(tmp_path / "ttl" / "kg.ttl")
    assert back == result.counts  # parsed back with rdflib: the same counts as written
    assert back["instances"] == g["n_seed_nodes"] + 1 and back["statements"] == g["n_seed_edges"] + 3
    assert back["classes"] == 14 and back["properties"] == 28 + 16  # metaedges + relation names
    assert back["evidence"] == 4 and back["supersessions"] == 1
    assert back["reified_statements"] == back["statements"] + 1  # the superseded edge: described, not asserted
    v = turtle.Vocab(turtle.DEFAULT_BASE)
    c1, dis_b = v.node_iri(g["c1"]), v.node_iri(g["dis_b"])
    assert (c1, v.relation_iri("CcD"), dis_b) in graph
    assert (c1, v.relation_iri("CtD"), dis_b) not in graph  # superseded on D3
    old = v.statement_iri(NS, g["c1"], "treats", g["dis_b"])
    assert (old, PROV.invalidatedAtTime, Literal(D3)) in graph
    assert (old, v.karma.supersededBy, v.statement_iri(NS, g["c1"], "causes", g["dis_b"])) in graph
    st = v.statement_iri(NS, g["c1"], "causes", g["dis_b"])
    assert (st, RDF.subject, c1) in graph and (st, v.karma.nEvidence, Literal(1)) in graph
    evidence = list(graph.objects(st, PROV.wasDerivedFrom))
    assert len(evidence) == 1 and (evidence[0], v.karma.runId, Literal("run-3")) in graph
    assert (v.node_iri(NEW.id), URIRef("http://www.w3.org/2004/02/skos/core#altLabel"), Literal("ZMB-12")) in graph
    assert (v.node_iri(g["c2"]), v.relation_iri("CtD"), v.node_iri(g["dis_c"])) in graph  # D2's edge, kept on D3
    print(f"\nturtle, seed KG + 3 days as of {D3}: {result.counts} ({result.seconds} s)")


# ---------------------------------------------------------------- KGX / Biolink
def test_bmt_loads_the_packaged_biolink_model_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise OSError("network disabled in this test")

    for fn in (biolink.toolkit, biolink._load_mapping, biolink.enum_values, biolink.known_prefixes):
        fn.cache_clear()
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    mapping = biolink.load_mapping()
    assert mapping.biolink_version.startswith("4.")
    assert mapping.categories["Gene"] == "biolink:Gene" and mapping.predicates["CtD"].predicate == "biolink:treats"
    assert set(mapping.unmapped_kinds) == {"Pharmacologic Class"}
    assert {k.split()[0] for k in mapping.unmapped_metaedges} == {"GcG", "PCiC"}
    assert "knowledge_assertion" in biolink.enum_values("knowledge_level")


def test_kgx_export_validates_and_follows_the_date(grown: dict, tmp_path: Path) -> None:
    g = grown
    r1 = export_kg(g["store"], "kgx", NS, D1, tmp_path / "d1")
    r2 = export_kg(g["store"], "kgx", NS, D2, tmp_path / "d2")
    for d, r in (("d1", r1), ("d2", r2)):
        check = kgx.validate_kgx(tmp_path / d / "nodes.tsv", tmp_path / d / "edges.tsv")
        assert check.ok, check.errors[:5]
        # the only remark (an error for KGX's own validator): ids with this export's own prefix, for the 85 Hetionet
        # pathways (no registered prefix), the 35 pharmacologic classes (NDFRT) and the new compound
        assert all("'KARMA:" in w for w in check.warnings) and r.report["ids_with_own_prefix"] == 85 + 35 + 1
        assert (check.n_nodes, check.n_edges) == (r.counts["nodes"], r.counts["edges"])
    assert r2.counts["edges"] == r1.counts["edges"] + 1

    def edges(d: str) -> list[dict]:
        with open(tmp_path / d / "edges.tsv", encoding="utf-8") as fh:
            return list(csv.DictReader(fh, delimiter="\t"))

    def nodes(d: str) -> dict[str, dict]:
        with open(tmp_path / d / "nodes.tsv", encoding="utf-8") as fh:
            return {r["karma_id"]: r for r in csv.DictReader(fh, delimiter="\t")}

    n2 = nodes("d2")
    c2, dis_c = n2[g["c2"]]["id"], n2[g["dis_c"]]["id"]
    assert c2.startswith("DRUGBANK:") and dis_c.startswith("DOID:")  # vocabulary CURIEs in Biolink's spelling
    added = [e for e in edges("d2") if (e["subject"], e["object"]) == (c2, dis_c)]
    assert [(e["predicate"], e["agent_type"], e["karma_documents"]) for e in added] == [
        ("biolink:treats", "text_mining_agent", "2016-01-06_b")]
    assert not [e for e in edges("d1") if (e["subject"], e["object"]) == (c2, dis_c)]
    new = n2[NEW.id]
    assert (new["id"], new["category"], new["synonym"]) == ("KARMA:NEW%3AChemical%3Azetamab", "biolink:ChemicalEntity",
                                                            "ZMB-12")
    by_metaedge = {e["karma_metaedge"]: e for e in edges("d2")}
    assert by_metaedge["DaG"]["predicate"] == "biolink:gene_associated_with_condition"
    assert by_metaedge["DaG"]["subject"].startswith("NCBIGene:")  # inverted to Biolink's canonical direction
    assert (by_metaedge["CuG"]["predicate"], by_metaedge["CuG"]["object_direction_qualifier"]) == (
        "biolink:affects", "increased")
    report = read_report(tmp_path / "d2")["report"]
    assert report["unmapped_kinds"] == {"Pharmacologic Class": {"why": "no Biolink category in biolink_map.yaml",
                                                                "nodes": 35}}
    assert {k: v["edges"] for k, v in report["unmapped_metaedges"].items()} == {
        "GcG (Gene covaries Gene)": 2, "PCiC (Pharmacologic Class includes Compound)": 46}
    assert by_metaedge["PCiC"]["predicate"] == "biolink:related_to"
    print(f"\nkgx, seed KG + 3 days as of {D2}: {r2.counts}; unmapped: {sorted(report['unmapped_metaedges'])}, "
          f"{sorted(report['unmapped_kinds'])}")


def test_kgx_validator_names_what_is_wrong(grown: dict, tmp_path: Path) -> None:
    export_kg(grown["store"], "kgx", NS, D1, tmp_path / "ok")
    bad = tmp_path / "bad"
    shutil.copytree(tmp_path / "ok", bad)
    lines = (bad / "edges.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    row = lines[1].split("\t")
    row[header.index("predicate")] = "biolink:cures_everything"
    row[header.index("subject")] = "DOID:0000000"
    row[header.index("agent_type")] = "a_guess"
    (bad / "edges.tsv").write_text("\n".join([lines[0], "\t".join(row), *lines[2:]]) + "\n", encoding="utf-8")
    nlines = (bad / "nodes.tsv").read_text(encoding="utf-8").splitlines()
    nh = nlines[0].split("\t")
    nrow = nlines[1].split("\t")
    nrow[nh.index("category")] = "biolink:Gizmo"
    (bad / "nodes.tsv").write_text("\n".join([nlines[0], "\t".join(nrow), *nlines[2:]]) + "\n", encoding="utf-8")
    errors = kgx.validate_kgx(bad / "nodes.tsv", bad / "edges.tsv").errors
    assert any("'biolink:Gizmo' is not a Biolink class" in e for e in errors)
    assert any("predicate 'biolink:cures_everything' is not a Biolink predicate" in e for e in errors)
    assert any("subject 'DOID:0000000' is no node" in e for e in errors)
    assert any("agent_type 'a_guess' is not a permissible value" in e for e in errors)
    cut = [c for c in header if c != "knowledge_level"]
    (bad / "edges.tsv").write_text("\t".join(cut) + "\n", encoding="utf-8")
    assert "edges.tsv: required column 'knowledge_level' missing" in kgx.validate_kgx(
        bad / "nodes.tsv", bad / "edges.tsv").errors


# ---------------------------------------------------------------- Neo4j
def test_neo4j_import_files_are_consistent(grown: dict, tmp_path: Path) -> None:
    g = grown
    result = export_kg(g["store"], "neo4j", NS, D3, tmp_path / "neo")
    out = tmp_path / "neo"
    assert neo4j.check_import_files(out / "nodes.csv", out / "relationships.csv") == []
    with open(out / "nodes.csv", encoding="utf-8", newline="") as fh:
        nodes = list(csv.reader(fh))
    with open(out / "relationships.csv", encoding="utf-8", newline="") as fh:
        rels = list(csv.reader(fh))
    assert nodes[0][0] == "id:ID" and nodes[0][-1] == ":LABEL" and rels[0][:3] == [":START_ID", ":END_ID", ":TYPE"]
    ids = {r[0] for r in nodes[1:]}
    assert len(ids) == len(nodes) - 1 == g["n_seed_nodes"] + 1
    assert all(r[0] in ids and r[1] in ids for r in rels[1:])  # every relationship end is a node id
    assert len(rels) - 1 == result.counts["relationships"] == g["n_seed_edges"] + 3
    by_ends = {(r[0], r[2], r[1]): dict(zip(rels[0], r, strict=True)) for r in rels[1:]}
    assert (g["c1"], "TREATS", g["dis_b"]) not in by_ends  # superseded as of D3
    causes = by_ends[(g["c1"], "CAUSES", g["dis_b"])]
    assert (causes["metaedge"], causes["documents:string[]"], causes["in_seed:boolean"]) == ("CcD", "2016-01-10_c",
                                                                                             "false")
    new = next(r for r in nodes[1:] if r[0] == NEW.id)
    assert new[-1] == "Entity|Compound|Extracted" and new[nodes[0].index("first_seen:date")] == "2016-01-05"
    assert "--array-delimiter=\"|\"" in (out / "import-command.txt").read_text(encoding="utf-8")
    # a relationship to a missing node and a badly typed value are caught
    (out / "relationships.csv").write_text(
        ",".join(rels[0]) + "\n" + ",".join(["nobody", g["c1"], "TREATS", "treats", "", "high", "0", "0", "true",
                                             "", "", "", "", "", ""]) + "\n", encoding="utf-8")
    problems = neo4j.check_import_files(out / "nodes.csv", out / "relationships.csv")
    assert any("start 'nobody' is no node id" in p for p in problems)
    assert any("confidence 'high' is not a double" in p for p in problems)
    print(f"\nneo4j, seed KG + 3 days as of {D3}: {result.counts}")


# ---------------------------------------------------------------- the export folder, the CLI, the asset
def test_a_failed_export_keeps_the_previous_one(grown: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "neo"
    export_kg(grown["store"], "neo4j", NS, D1, out)
    before = (out / "relationships.csv").read_bytes()

    def broken(snap, out_dir):  # noqa: ANN001, ANN202
        (out_dir / "nodes.csv").write_text("half", encoding="utf-8")
        raise OSError("disk full")

    monkeypatch.setattr(neo4j, "write_neo4j", broken)
    with pytest.raises(OSError, match="disk full"):
        export_kg(grown["store"], "neo4j", NS, D3, out)
    assert (out / "relationships.csv").read_bytes() == before and read_report(out)["as_of"] == str(D1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["neo"]  # no temporary folder left
    with pytest.raises(ExportError, match="format 'xml'"):
        export_kg(grown["store"], "xml", NS, D1, out)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="karma")
    cli_export.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_export_and_its_errors(grown: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    storage = KarmaStorageResource(data_dir=str(tmp_path / "karma"))
    base = ["export", "--data-dir", str(tmp_path / "karma")]
    assert _cli([*base, "--format", "kgx", "--as-of", "2016-01-06"]) == 2
    assert "no KG in the data folder yet" in capsys.readouterr().err
    storage.kg_path().parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(grown["path"], storage.kg_path())
    assert _cli([*base, "--format", "kgx", "--as-of", "2016-02-30"]) == 2
    assert "--as-of '2016-02-30': not a date" in capsys.readouterr().err
    assert _cli([*base, "--format", "owl", "--as-of", "2016-01-06"]) == 2
    assert "--format 'owl': not one of turtle, kgx, neo4j" in capsys.readouterr().err
    assert _cli([*base, "--format", "kgx", "--as-of", "2016-01-06", "--backbone", "gpt-9"]) == 2
    err = capsys.readouterr().err
    assert "--backbone 'gpt-9': unknown" in err and "local" in err
    assert _cli([*base, "--format", "neo4j", "--as-of", "2016-01-06"]) == 0
    out = capsys.readouterr().out
    assert f"neo4j export of local as of 2016-01-06: nodes {grown['n_seed_nodes'] + 1}" in out
    assert "in exports/local/neo4j/2016-01-06" in out and str(tmp_path) not in out
    folder = storage.root() / "exports" / "local" / "neo4j" / "2016-01-06"
    assert sorted(p.name for p in folder.iterdir()) == ["export-report.json", "import-command.txt", "nodes.csv",
                                                        "relationships.csv"]


def test_export_asset_writes_under_the_data_dir_with_relative_metadata(grown: dict, tmp_path: Path) -> None:
    from karma_dagster.assets.exports import EXPORT_PARTITIONS, export_assets, export_key

    storage = KarmaStorageResource(data_dir=str(tmp_path / "karma"))
    storage.kg_path().parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(grown["path"], storage.kg_path())
    assets = export_assets([NS])
    assert [a.key for a in assets] == [export_key(NS, f) for f in ("turtle", "kgx", "neo4j")]
    kgx_asset = assets[1]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(EXPORT_PARTITIONS.name, [D2.isoformat()])
        res = dg.materialize([kgx_asset], partition_key=D2.isoformat(), resources={"storage": storage},
                             instance=instance)
        assert res.success
        md = res.asset_materializations_for_node(kgx_asset.node_def.name)[0].metadata
    assert md["folder"].value == "exports/local/kgx/2016-01-06"
    assert md["files"].value == ["nodes.tsv", "edges.tsv", "export-report.json"]
    assert md["n_nodes"].value == grown["n_seed_nodes"] + 1 and md["n_edges"].value == grown["n_seed_edges"] + 3
    assert set(md["unmapped"].value["unmapped_metaedges"]) == {"GcG (Gene covaries Gene)",
                                                               "PCiC (Pharmacologic Class includes Compound)"}
    assert str(tmp_path) not in str({k: v.value for k, v in md.items()})  # no machine path in metadata
    assert (storage.root() / "exports" / "local" / "kgx" / "2016-01-06" / "edges.tsv").is_file()


def test_tool_created_classes_and_properties_are_exported_from_their_date(grown: dict, tmp_path: Path) -> None:
    """Classes and properties KG tool callers added (schema_extension) appear as of their creation date, as
    owl:Class / owl:ObjectProperty with their super class, domain and range; a node kind or relation nobody
    declared is declared in the file too, so the Turtle still parses back to the counts written."""
    path = tmp_path / "kg.duckdb"
    shutil.copy(grown["path"], path)
    store = KGStore(path)
    base = {"namespace": NS, "caller": "test", "doc_key": None, "created_at": dt.datetime(2016, 1, 6, 12)}
    store.add_schema_extension({**base, "what": "class", "label": "Monoclonal Antibody",
                                "label_key": "monoclonal antibody", "comment": "an antibody drug", "super": "Compound"})
    store.add_schema_extension({**base, "what": "property", "label": "targets", "label_key": "targets",
                                "comment": "binds to", "domain": "Monoclonal Antibody", "range": "Gene"})
    assert read_snapshot(store, NS, D1).extension == []
    snap = read_snapshot(store, NS, D2)
    assert [(t.what, t.label) for t in snap.extension] == [("class", "Monoclonal Antibody"), ("property", "targets")]

    small = dataclasses.replace(
        snap, nodes=[snap.node_by_id[NEW.id], snap.node_by_id[grown["dis_a"]],
                     snap.node_by_id[grown["dis_a"]].model_copy(update={"id": "x", "kind": "Organoid"})],
        edges=[e for e in snap.edges if e.head_id == NEW.id]
        + [next(e for e in snap.edges if e.head_id == NEW.id).model_copy(update={"relation": "modulates"})],
        evidence=[], supersessions=[])
    assert len(small.node_by_id) == 3
    g, counts = turtle.build_graph(small)
    v = turtle.Vocab(turtle.DEFAULT_BASE)
    assert (v.class_iri("Monoclonal Antibody"), URIRef("http://www.w3.org/2000/01/rdf-schema#subClassOf"),
            v.class_iri("Compound")) in g
    assert (v.relation_iri("targets"), URIRef("http://www.w3.org/2000/01/rdf-schema#range"), v.class_iri("Gene")) in g
    assert (v.class_iri("Organoid"), v.karma.source, Literal("undeclared")) in g
    assert (v.relation_iri("modulates"), v.karma.source, Literal("undeclared")) in g
    assert counts["classes"] == 14 + 2 and counts["properties"] == 44 + 2 and counts["statements"] == 2
    (tmp_path / "small").mkdir()
    g.serialize(destination=tmp_path / "small" / "kg.ttl", format="turtle")
    assert turtle.read_back(tmp_path / "small" / "kg.ttl")[1] == counts


def test_tool_instances_keep_comment_class_and_property_in_every_format(grown: dict, tmp_path: Path) -> None:
    """What a KG tool caller's writes carry (the function-calling paper's): an instance's comment and tool-created
    class, a statement's tool-created property, merged by merge_increment (the staged tables' path: NodeIn and the
    evaluated row's `property`), are in the KG and in Turtle (rdfs:comment, rdf:type the class under its super
    class, the property beside the metaedge's under its super property), KGX (description, karma_class,
    karma_property) and Neo4j (comment, class and its label, properties). The class and property were created after
    the paper's date: the export as of that date declares them all the same, since its instance and edge use them."""
    path = tmp_path / "kg.duckdb"
    shutil.copy(grown["path"], path)
    store = KGStore(path)
    d4, doc = dt.date(2016, 1, 12), "2016-01-12_t"
    gene = sorted(i for i, k in store.node_kinds().items() if k == "Gene")[0]
    base = {"namespace": NS, "caller": "test-model", "doc_key": doc, "created_at": dt.datetime(2016, 2, 1, 9)}
    store.add_schema_extension({**base, "what": "class", "label": "Monoclonal Antibody",
                                "label_key": "monoclonalantibody", "comment": "an antibody drug", "super": "Compound"})
    store.add_schema_extension({**base, "what": "property", "label": "raises_expression_of",
                                "label_key": "raises_expression_of", "comment": "raises the gene's expression",
                                "super": "upregulates", "domain": "Monoclonal Antibody", "range": "Gene"})
    mab = NodeIn(id="NEW:Monoclonal Antibody:mab9", name="mab9", kind="Compound", class_label="Monoclonal Antibody",
                 comment="a made-up | antibody,\n\tfor tests")
    merge_increment(store, d4, NS, {doc: ([_row(doc, "tool:t1", mab.id, "upregulates", gene, 0.7, metaedge="CuG",
                                                property="raises_expression_of")], [mab])}, "run-4")
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT comment, class_label FROM extracted_nodes WHERE id = ?", [mab.id]).fetchall() == [
            ("a made-up | antibody, for tests", "Monoclonal Antibody")]  # cleaned like evidence text
        assert con.execute("SELECT relation, property FROM evidence WHERE doc_key = ?", [doc]).fetchall() == [
            ("upregulates", "raises_expression_of")]
    snap = read_snapshot(store, NS, d4)
    node = snap.node_by_id[mab.id]
    assert (node.comment, node.class_label) == ("a made-up | antibody, for tests", "Monoclonal Antibody")
    assert [(t.what, t.label) for t in snap.extension] == [("class", "Monoclonal Antibody"),
                                                           ("property", "raises_expression_of")]
    assert read_snapshot(store, NS, D3).extension == []  # neither created nor used by then

    result = export_kg(store, "turtle", NS, d4, tmp_path / "ttl")
    graph, back = turtle.read_back(tmp_path / "ttl" / "kg.ttl")
    assert back == result.counts
    v = turtle.Vocab(turtle.DEFAULT_BASE)
    m, gn = v.node_iri(mab.id), v.node_iri(gene)
    mab_class, raises = v.class_iri("Monoclonal Antibody"), v.relation_iri("raises_expression_of")
    assert (m, RDFS.comment, Literal("a made-up | antibody, for tests")) in graph
    assert {(m, RDF.type, mab_class), (m, RDF.type, v.class_iri("Compound")),
            (mab_class, RDFS.subClassOf, v.class_iri("Compound"))} <= set(graph)
    assert {(m, raises, gn), (m, v.relation_iri("CuG"), gn), (raises, RDFS.domain, mab_class),
            (raises, RDFS.subPropertyOf, v.relation_iri("upregulates"))} <= set(graph)
    st = v.statement_iri(NS, mab.id, "upregulates", gene)
    assert (st, RDF.predicate, v.relation_iri("CuG")) in graph
    (ev,) = graph.objects(st, PROV.wasDerivedFrom)
    assert (ev, v.karma.property, raises) in graph
    assert back["statements"] == grown["n_seed_edges"] + 3 + 2  # the new edge, asserted with CuG and its property

    export_kg(store, "kgx", NS, d4, tmp_path / "kgx")
    with open(tmp_path / "kgx" / "nodes.tsv", encoding="utf-8") as fh:
        kgx_node = next(r for r in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
                        if r["karma_id"] == mab.id)
    assert (kgx.unescape(kgx_node["description"]), kgx_node["karma_class"], kgx_node["category"]) == (
        "a made-up | antibody, for tests", "Monoclonal Antibody", "biolink:ChemicalEntity")
    with open(tmp_path / "kgx" / "edges.tsv", encoding="utf-8") as fh:
        kgx_edge = next(r for r in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
                        if r["subject"] == kgx_node["id"])
    assert (kgx_edge["karma_property"], kgx_edge["original_predicate"]) == ("raises_expression_of", "KARMA:upregulates")

    export_kg(store, "neo4j", NS, d4, tmp_path / "neo")
    with open(tmp_path / "neo" / "nodes.csv", encoding="utf-8", newline="") as fh:
        neo_node = next(r for r in csv.DictReader(fh) if r["id:ID"] == mab.id)
    assert (neo_node["comment"], neo_node["class"], neo_node[":LABEL"]) == (
        "a made-up | antibody, for tests", "Monoclonal Antibody", "Entity|Compound|Extracted|MonoclonalAntibody")
    with open(tmp_path / "neo" / "relationships.csv", encoding="utf-8", newline="") as fh:
        neo_rel = next(r for r in csv.DictReader(fh) if r[":START_ID"] == mab.id)
    assert (neo_rel[":TYPE"], neo_rel["properties:string[]"]) == ("UPREGULATES", "raises_expression_of")
