"""The KG tool API (karma_dagster/kg_tools) on the shipped seed KG (data/seed_kg, a Hetionet subset).

Searches go through the LanceDB entity index; every create is validated and refused with a message a model can
act on, nothing written; accepted writes are staged in the chain's own tables and merged by merge_increment with
provenance."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from partition_views import document_metadata
from karma_dagster.runtime import services
from karma_dagster.agents.integration import collect_document
from karma_dagster.runtime.document_states import table_fingerprint
from karma_dagster.kg import merge
from karma_dagster.kg.store import KGStore
from karma_dagster.kg_tools.schemas import ARGS, tool_schemas
from karma_dagster.kg_tools.session import KGTools
from karma_dagster.kg_tools.staging import ENTITIES, FINAL_STAGE, TOOL_LOG, staged_documents
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.schemas.tables import EntitiesTable, EvaluatedTable
from karma_dagster.runtime.stage_store import StageStore


SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
NS, DOC = "tools", "2021-03-04_tooltest"
LISINOPRIL, METFORMIN = "Compound::DB00722", "Compound::DB00331"
HYPERTENSION, GESTATIONAL_DIABETES = "Disease::DOID:10763", "Disease::DOID:11714"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("seeded") / "karma"
    services.import_seed_kg(DataPaths(root), SEED / "nodes.tsv", SEED / "edges.sif.gz", "hetionet", 0.9)
    return root


@pytest.fixture
def paths(seeded: Path, tmp_path: Path) -> DataPaths:
    """A private copy of the seeded data dir: each test may write."""
    root = tmp_path / "karma"
    shutil.copytree(seeded, root)
    services.clear()
    return DataPaths(root)


@pytest.fixture
def tools(paths: DataPaths) -> KGTools:
    return KGTools(paths, namespace=NS, caller="test-model", document=DOC)


def _files(paths: DataPaths) -> dict[str, str]:
    """Digest of every staged file and of the KG's contents: what a refused call must leave as it was."""
    out = {str(p.relative_to(paths.root)): hashlib.sha256(p.read_bytes()).hexdigest()
           for p in sorted(paths.stages_dir.rglob("*.parquet")) if p.parent.name != TOOL_LOG}
    kg = KGStore(paths.kg)
    with kg.connect(read_only=True) as con:
        for table in ("evidence", "extracted_nodes", "merged_documents"):
            out[table] = str(con.execute(f"SELECT count(*) FROM {table}").fetchall())  # noqa: S608
    out["schema_extension"] = json.dumps(kg.schema_extension(NS), default=str)
    return out


# ---------------------------------------------------------------- search
def test_search_instance_goes_through_the_index_with_ids_types_and_comments(tools: KGTools):
    r = tools.search_instance("lisinopril")
    assert r.ok
    top = r.data["results"][0]
    assert (top["id"], top["label"], top["type"], top["source"]) == (LISINOPRIL, "Lisinopril", "Compound", "seed")
    assert top["distance"] == 0.0 and "Compound" in top["comment"]
    assert LISINOPRIL in r.message
    typed = tools.search_instance("hypertension", type="Disease", k=10)
    assert typed.data["results"] and {x["type"] for x in typed.data["results"]} <= {"Disease", "Symptom", "Side Effect"}
    assert typed.data["results"][0]["id"] == HYPERTENSION
    far = tools.search_instance("zzqx unobtainium")
    assert far.ok and "search under another name" in far.message


def test_search_instance_finds_what_create_instance_refuses(tools: KGTools):
    """Search and create share one identity lookup: "paracetamol" (a MeSH entry term of acetaminophen) is found
    as the seed's Acetaminophen, the instance create_instance names when it refuses to create it."""
    found = tools.search_instance("paracetamol")
    top = found.data["results"][0]
    assert (top["id"], top["label"], top["distance"]) == ("Compound::DB00316", "Acetaminophen", 0.0)
    assert "1 likely match" in found.message and "Compound::DB00316" in found.message
    refused = tools.create_instance("paracetamol", "the analgesic", "Compound")
    assert not refused.ok and top["id"] in refused.message
    typed = tools.search_instance("paracetamol", type="Gene")  # identity never crosses kinds
    assert all(r["id"] != "Compound::DB00316" or r["distance"] > 0 for r in typed.data["results"])


def test_search_class_and_property(tools: KGTools):
    r = tools.search_class("Protein")
    assert r.data["results"][0]["label"] == "Gene" and "'Protein' means class 'Gene'" in r.message
    p = tools.search_property("treat")
    best = p.data["results"][0]
    assert best["label"] == "treats" and best["allowed"] == ["Compound -> Disease"]
    causes = next(x for x in tools.search_property("causes").data["results"] if x["label"] == "causes")
    assert set(causes["allowed"]) == {"Compound -> Side Effect", "Compound -> Disease", "Compound -> Symptom"}


# ---------------------------------------------------------------- classes and properties
def test_create_class_validates_and_is_stored_durably(tools: KGTools, paths: DataPaths):
    bad = tools.create_class("Oncogene", "a gene whose change can cause cancer", super_class="Gen")
    assert not bad.ok and "no class 'Gen'" in bad.message and "'Gene'" in bad.message
    assert not tools.create_class("Gene", "dup").ok
    assert "means class 'Gene'" in tools.create_class("Protein", "dup of a synonym").message
    assert not tools.create_class("Oncogene", "   ", super_class="Gene").ok  # a comment is required
    ok = tools.create_class("Oncogene", "a gene whose change can cause cancer", super_class="Gene")
    assert ok.ok and ok.data["kind"] == "Gene"
    dup = tools.create_class("oncogene", "again", super_class="Gene")
    assert not dup.ok and "exists already" in dup.message
    # durable: a new session (another process would do the same) sees it, from the KG file
    fresh = KGTools(paths, namespace=NS, caller="someone-else")
    found = fresh.search_class("oncogene").data["results"][0]
    assert (found["label"], found["super_class"], found["source"]) == ("Oncogene", "Gene", "extension")
    row = KGStore(paths.kg).schema_extension(NS)[0]
    assert (row["caller"], row["doc_key"]) == ("test-model", DOC)
    assert KGTools(paths, namespace="other", caller="x").search_class("oncogene").data["results"][0]["label"] != "Oncogene"


def test_create_property_checks_domain_range_and_super_property(tools: KGTools):
    assert tools.create_class("Oncogene", "a gene whose change can cause cancer", super_class="Gene").ok
    unknown = tools.create_property("activates", "x", domain="Compund", range="Gene")
    assert not unknown.ok and "no class 'Compund'" in unknown.message and "'Compound'" in unknown.message
    misfit = tools.create_property("raises_risk_of", "x", domain="Compound", range="Disease", super_property="upregulates")
    assert not misfit.ok and "does not fit super_property 'upregulates'" in misfit.message
    no_super = tools.create_property("trats", "x", super_property="treatz")
    assert not no_super.ok and "'treats'" in no_super.message
    ok = tools.create_property("activates_oncogene", "a compound raises an oncogene's expression",
                               domain="Compound", range="Oncogene", super_property="upregulates")
    assert ok.ok and ok.data["relation"] == "upregulates"
    narrower = tools.create_property("strongly_activates_oncogene", "x", domain="Compound", range="Gene",
                                     super_property="activates_oncogene")
    assert not narrower.ok and "whose range is 'Oncogene'" in narrower.message


# ---------------------------------------------------------------- instances
def test_create_instance_validates_type_and_duplicates_and_stages_an_entity_row(tools: KGTools, paths: DataPaths):
    before = _files(paths)
    typo = tools.create_instance("FRB1", "a made-up gene", "Gen")
    assert not typo.ok and "did you mean 'Gene'" in typo.message
    synonym = tools.create_instance("FRB1", "a made-up gene", "Protein")
    assert not synonym.ok and "means class 'Gene'" in synonym.message
    dup = tools.create_instance("lisinopril", "the ACE inhibitor", "Compound")
    assert not dup.ok and LISINOPRIL in dup.message
    # another name of an existing instance (a MeSH entry term of the same drug): that instance, not a new one
    para = tools.create_instance("Paracetamol", "the analgesic", "Compound")
    assert not para.ok and "Compound::DB00316 (Acetaminophen" in para.message
    assert _files(paths) == before  # refused: nothing staged, nothing stored
    ok = tools.create_instance("FRB1", "a made-up gene", "Gene")
    assert ok.ok and ok.data["id"] == "NEW:Gene:frb1"
    again = tools.create_instance("frb1", "same", "Gene")
    assert not again.ok and "already staged" in again.message
    frame = StageStore(paths.stages_dir).read(NS, ENTITIES, DOC)
    EntitiesTable.validate(frame)
    assert frame[["entity_id", "status", "kind", "type"]].values.tolist() == [["NEW:Gene:frb1", "new", "Gene", "Gene"]]
    # the staged instance is found by search with the document, with its comment
    staged = tools.search_instance("FRB1").data["results"]
    assert staged[0]["id"] == "NEW:Gene:frb1" and staged[0]["source"] == "staged"
    assert staged[0]["comment"] == "a made-up gene"


# ---------------------------------------------------------------- statements
def test_invalid_statements_are_refused_with_a_message_and_nothing_is_written(tools: KGTools, paths: DataPaths):
    assert tools.create_instance("FRB1", "a made-up gene", "Gene").ok
    before = _files(paths)
    cases = {
        "unknown subject": (tools.create_statement("lisinoprill", "treats", HYPERTENSION, "It lowers pressure."),
                            ["subject 'lisinoprill'", LISINOPRIL, "search_instance"]),
        "unknown predicate": (tools.create_statement(LISINOPRIL, "trats", HYPERTENSION, "It lowers pressure."),
                              ["no property 'trats'", "'treats'"]),
        "extraction label": (tools.create_statement(LISINOPRIL, "Negative_Correlation", HYPERTENSION, "x"),
                             ["extraction label", "'treats'"]),
        "domain/range": (tools.create_statement(LISINOPRIL, "treats", "NEW:Gene:frb1", "Lisinopril treats FRB1."),
                         ["domain/range violation", "Compound -> Disease", "a Gene"]),
        "direction": (tools.create_statement(HYPERTENSION, "treats", LISINOPRIL, "x"), ["swapped"]),
        "contradiction": (tools.create_statement(LISINOPRIL, "causes", HYPERTENSION, "Lisinopril causes hypertension."),
                          ["contradiction", f"{LISINOPRIL} -treats-> {HYPERTENSION}"]),
        "no evidence": (tools.create_statement(LISINOPRIL, "treats", HYPERTENSION, "  "), ["evidence is empty"]),
        "bad confidence": (tools.create_statement(LISINOPRIL, "treats", HYPERTENSION, "x", confidence=1.5),
                           ["not a number in [0, 1]"]),
        "bad document": (tools.create_statement(LISINOPRIL, "treats", HYPERTENSION, "x", document="no date"),
                         ["is not a document key"]),
        "malformed JSON": (tools.call("create_statement", '{"subject": "x",'), ["not valid JSON"]),
        "missing argument": (tools.call("create_statement", {"subject": LISINOPRIL, "predicate": "treats"}),
                             ["malformed arguments", "object: Field required", "evidence: Field required"]),
        "unknown argument": (tools.call("create_statement", {"subject": LISINOPRIL, "predicate": "treats",
                                                             "object": HYPERTENSION, "evidence": "x", "sql": "DROP"}),
                             ["sql: Extra inputs are not permitted"]),
        "unknown tool": (tools.call("run_sql", {"query": "DELETE FROM evidence"}), ["no tool 'run_sql'"]),
    }
    for name, (result, needles) in cases.items():
        assert not result.ok, name
        for needle in needles:
            assert needle in result.message, (name, result.message)
    assert _files(paths) == before
    refused = [r for r in tools.transcript() if not r.ok]
    assert len(refused) >= len(cases) - 1  # every refusal with this document is in its transcript


def test_extension_property_and_class_reach_the_kg_through_their_schema_ancestors(tools: KGTools, paths: DataPaths):
    assert tools.create_class("Oncogene", "a gene whose change can cause cancer", super_class="Gene").ok
    assert tools.create_property("activates_oncogene", "raises an oncogene's expression", domain="Compound",
                                 range="Oncogene", super_property="upregulates").ok
    assert tools.create_instance("FRB1", "a made-up gene", "Gene").ok
    assert tools.create_instance("ONC9", "a made-up oncogene", "Oncogene").ok
    wrong = tools.create_statement(METFORMIN, "activates_oncogene", "NEW:Gene:frb1", "Metformin activates FRB1.")
    assert not wrong.ok and "range violation" in wrong.message and "'Oncogene'" in wrong.message
    ok = tools.create_statement(METFORMIN, "activates_oncogene", "NEW:Oncogene:onc9", "Metformin raised ONC9 levels.",
                                confidence=0.8)
    assert ok.ok and (ok.data["relation"], ok.data["metaedge"]) == ("upregulates", "CuG")
    # staged with what the function-calling paper keeps: the comment, the created class, the created property
    stages = StageStore(paths.stages_dir)
    entities = EntitiesTable.validate(stages.read(NS, ENTITIES, DOC)).set_index("entity_id")
    assert entities.loc["NEW:Oncogene:onc9", ["comment", "class_label", "kind"]].tolist() == [
        "a made-up oncogene", "Oncogene", "Gene"]
    assert entities.loc["NEW:Gene:frb1", ["comment", "class_label"]].tolist() == ["a made-up gene", None]
    evaluated = EvaluatedTable.validate(stages.read(NS, FINAL_STAGE, DOC))
    assert evaluated[["kg_relation", "property"]].values.tolist() == [["upregulates", "activates_oncogene"]]
    # tables staged before these columns existed stay readable (the merge's reader takes them, without them), and
    # fingerprint as before: a node without comment or class dumps the fields it always had
    old_triples, old_nodes = collect_document(DOC, evaluated.drop(columns=["property"]), stages.read(
        NS, ENTITIES, DOC).drop(columns=["comment", "class_label"]), "v")
    assert "property" not in old_triples[0] and set(old_nodes[0].model_dump()) == {"id", "name", "kind", "vocab_id",
                                                                                   "synonyms"}
    assert tools.merge_document().ok
    kg = KGStore(paths.kg)
    node = kg.nodes_by_id(["NEW:Oncogene:onc9"], NS)["NEW:Oncogene:onc9"]
    assert (node["name"], node["kind"], node["source"]) == ("ONC9", "Gene", "extracted")
    assert [e.relation for e in kg.edges_between([(METFORMIN, "NEW:Oncogene:onc9")], NS)[(METFORMIN, "NEW:Oncogene:onc9")]] == ["upregulates"]
    # ... and the merge keeps them in the KG: on the node row and on the evidence row
    with kg.connect(read_only=True) as con:
        stored = con.execute("SELECT comment, class_label FROM extracted_nodes WHERE namespace = ? AND id = ?",
                             [NS, "NEW:Oncogene:onc9"]).fetchall()
    assert [tuple(r) for r in stored] == [("a made-up oncogene", "Oncogene")]
    prov = tools.edge_provenance(METFORMIN, "upregulates", "NEW:Oncogene:onc9")
    assert [r["property"] for r in prov.data["evidence"]] == ["activates_oncogene"]
    # the Turtle export, parsed back with rdflib: comment, class (under its super class), property (under its super)
    from rdflib import RDF, RDFS, Literal

    from karma_dagster.export import turtle
    from karma_dagster.export.run import export_kg

    result = export_kg(kg, "turtle", NS, dt.date(2021, 3, 4), paths.root / "ttl")
    graph, counts = turtle.read_back(paths.root / "ttl" / turtle.FILE)
    assert counts == result.counts
    v = turtle.Vocab(turtle.DEFAULT_BASE)
    onc9, metformin = v.node_iri("NEW:Oncogene:onc9"), v.node_iri(METFORMIN)
    oncogene, activates = v.class_iri("Oncogene"), v.relation_iri("activates_oncogene")
    assert (onc9, RDFS.comment, Literal("a made-up oncogene")) in graph
    assert {(onc9, RDF.type, oncogene), (onc9, RDF.type, v.class_iri("Gene")),
            (oncogene, RDFS.subClassOf, v.class_iri("Gene"))} <= set(graph)
    assert (oncogene, RDFS.comment, Literal("a gene whose change can cause cancer")) in graph
    assert {(metformin, activates, onc9), (metformin, v.relation_iri("CuG"), onc9),
            (activates, RDFS.subPropertyOf, v.relation_iri("upregulates"))} <= set(graph)
    (evidence,) = graph.subjects(v.karma.property, activates)
    assert (evidence, v.karma.evidenceText, Literal("Metformin raised ONC9 levels.")) in graph


def test_valid_statements_are_staged_in_the_chain_format_and_merged_with_provenance(tools: KGTools, paths: DataPaths):
    kg = KGStore(paths.kg)
    before = kg.snapshot_counts(namespace=NS)
    new = tools.create_statement(METFORMIN, "treats", GESTATIONAL_DIABETES,
                                 "Metformin improved glycaemic control in gestational diabetes.", confidence=0.8,
                                 segment=f"{DOC}:s002")
    again = tools.create_statement(LISINOPRIL, "treats", HYPERTENSION, "Lisinopril lowered blood pressure.")
    assert new.ok and again.ok, (new.message, again.message)
    assert "a new edge" in new.message and "reinforces an existing edge" in again.message
    dup = tools.create_statement(METFORMIN, "treats", GESTATIONAL_DIABETES, "Said twice.")
    assert not dup.ok and "already staged" in dup.message
    stages = StageStore(paths.stages_dir)
    evaluated = EvaluatedTable.validate(stages.read(NS, FINAL_STAGE, DOC))
    assert evaluated["triple_id"].str.startswith("tool:test-model:").all()
    # the same reader as the KG asset's takes the staged document
    triples, nodes = collect_document(DOC, evaluated, stages.read(NS, ENTITIES, DOC), "v")
    assert [(t["head_id"], t["kg_relation"], t["tail_id"]) for t in triples] == [
        (METFORMIN, "treats", GESTATIONAL_DIABETES), (LISINOPRIL, "treats", HYPERTENSION)]
    assert nodes == [] and kg.snapshot_counts(namespace=NS) == before  # staged, not in the KG yet
    assert staged_documents(paths, NS, dt.date(2021, 3, 4)) == [DOC]

    merged = tools.merge_document()
    assert merged.ok, merged.message
    stats = merged.data["stats"]
    assert (stats["n_docs"], stats["n_evidence"], stats["n_new_edges"], stats["n_reinforced"]) == (1, 2, 1, 1)
    after = kg.snapshot_counts(namespace=NS)
    assert (after.n_edges, after.n_evidence) == (before.n_edges + 1, before.n_evidence + 2)
    # provenance: who (the caller), the document, the segment, the evidence, the namespace's merge
    prov = tools.edge_provenance(METFORMIN, "treats", GESTATIONAL_DIABETES)
    assert prov.ok
    (row,) = prov.data["evidence"]
    assert (row["doc_key"], row["segment_id"], row["tool_caller"], row["backbone"], row["score"]) == (
        DOC, f"{DOC}:s002", "test-model", NS, 0.8)
    assert row["evidence"] == "Metformin improved glycaemic control in gestational diabetes."
    # the KG's merge record matches the document's tables, as for a chain's document: nothing left unmerged
    assert kg.merged_documents(NS)[DOC] == table_fingerprint(stages, NS, DOC)
    assert kg.merged_documents(NS)[DOC] == merge.document_fingerprint(DOC, triples, nodes)
    # idempotent: merging the date again changes nothing
    assert tools.merge_document().ok
    assert kg.snapshot_counts(namespace=NS) == after
    # another namespace (a chain's) does not see the tool writes
    assert kg.snapshot_counts(namespace="local").n_evidence == 0


def test_new_instances_enter_the_kg_with_their_statement_and_are_searchable_after_the_merge(tools: KGTools,
                                                                                           paths: DataPaths):
    assert tools.create_instance("FRB1", "a made-up gene", "Gene").ok
    assert tools.create_instance("FRB2", "an unused made-up gene", "Gene").ok
    assert tools.create_statement(METFORMIN, "upregulates", "NEW:Gene:frb1", "Metformin raised FRB1 levels.").ok
    assert tools.merge_document().ok
    kg = KGStore(paths.kg)
    found = kg.nodes_by_id(["NEW:Gene:frb1", "NEW:Gene:frb2"], NS)
    assert list(found) == ["NEW:Gene:frb1"]  # an instance no statement uses stays staged
    hit = KGTools(paths, namespace=NS, caller="later").search_instance("FRB1").data["results"][0]
    assert (hit["id"], hit["source"]) == ("NEW:Gene:frb1", "extracted")
    assert "added by document " + DOC in hit["comment"]
    nb = tools.neighbours("NEW:Gene:frb1")
    assert nb.ok and [(e["subject"], e["predicate"], e["direction"]) for e in nb.data["edges"]] == [
        (METFORMIN, "upregulates", "in")]
    # a later document of the namespace uses the merged entity: its node travels with the triple (as in the chain)
    later = KGTools(paths, namespace=NS, caller="test-model", document="2021-05-06_later")
    assert later.create_statement(LISINOPRIL, "downregulates", "NEW:Gene:frb1", "Lisinopril lowered FRB1.").ok
    rows = StageStore(paths.stages_dir).read(NS, ENTITIES, "2021-05-06_later")
    assert rows[["entity_id", "status", "linked_to"]].values.tolist() == [["NEW:Gene:frb1", "linked", "extracted"]]


def test_read_only_queries_refuse_unknown_entities(tools: KGTools):
    between = tools.edges_between(LISINOPRIL, HYPERTENSION)
    assert between.ok and [(e["predicate"], e["in_seed"]) for e in between.data["edges"]] == [("treats", True)]
    seed_prov = tools.edge_provenance(LISINOPRIL, "treats", HYPERTENSION)
    assert seed_prov.ok and seed_prov.data["history"][0]["event"] == "seed" and seed_prov.data["evidence"] == []
    missing = tools.neighbours("Compound::DB0072")
    assert not missing.ok and "not in the KG" in missing.message
    no_edge = tools.edge_provenance(LISINOPRIL, "causes", HYPERTENSION)
    assert not no_edge.ok and "relations held from subject to object: treats" in no_edge.message


def test_tools_never_rewrite_a_chain_table(tools: KGTools, paths: DataPaths):
    assert tools.create_statement(LISINOPRIL, "treats", HYPERTENSION, "Lisinopril lowered blood pressure.").ok
    stages = StageStore(paths.stages_dir)
    frame = stages.read(NS, FINAL_STAGE, DOC)
    frame["triple_id"] = "t_chain_1"  # as if an agent chain had written this document's table
    stages.write(NS, FINAL_STAGE, DOC, frame)
    before = _files(paths)
    r = tools.create_statement(METFORMIN, "treats", GESTATIONAL_DIABETES, "Metformin helped.")
    assert not r.ok and "written by an agent chain" in r.message
    assert _files(paths) == before


def test_tool_schemas_describe_every_tool_for_function_calling():
    schemas = tool_schemas()
    assert [s["function"]["name"] for s in schemas] == list(ARGS) == [
        "search_instance", "create_instance", "search_class", "create_class", "search_property", "create_property",
        "create_statement"]
    by_name = {s["function"]["name"]: s["function"] for s in schemas}
    st = by_name["create_statement"]["parameters"]
    assert st["type"] == "object" and st["additionalProperties"] is False
    assert set(st["required"]) == {"subject", "predicate", "object", "evidence"}
    assert by_name["create_class"]["parameters"]["required"] == ["label", "comment"]
    assert all(s["function"]["description"] for s in schemas)
    assert {s["function"]["name"] for s in tool_schemas(include_read=True)} >= {"neighbours", "edge_provenance"}
    json.dumps(schemas)  # plain JSON


# ---------------------------------------------------------------- the function-calling loop (a scripted model)
class _ToolCallServer:
    """A loopback OpenAI-compatible chat endpoint replaying scripted assistant turns (tool calls, then a stop)."""

    def __init__(self, turns: list[list[tuple[str, str]]] | None = None, responder=None) -> None:
        """`turns`: the assistant turns in order; or `responder(request)` -> tool calls [(name, arguments)] or the
        text of a plain answer (what the chain's other agents get)."""
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.turns, self.requests = list(turns or []), []
        owner = self
        responder = responder or (lambda _request: owner.turns.pop(0) if owner.turns else [])

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                return None

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(request)
                answer = responder(request)
                calls = answer if isinstance(answer, list) else []
                message = {"role": "assistant", "content": None if calls else (answer or "done")}
                if calls:
                    message["tool_calls"] = [{"id": f"call_{len(owner.requests)}_{i}", "type": "function",
                                              "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)]
                body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                                   "choices": [{"index": 0, "message": message,
                                                "finish_reason": "tool_calls" if calls else "stop"}],
                                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "_ToolCallServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def test_a_scripted_function_calling_model_grows_the_kg_through_the_tools_only(tools: KGTools, paths: DataPaths):
    from karma_dagster.kg_tools.loop import run_tool_loop

    args = json.dumps
    turns = [
        [("search_instance", args({"text": "metformin"})), ("search_class", args({"text": "Protien"}))],
        [("create_instance", args({"label": "FRB1", "comment": "a gene", "type": "Protien"})),  # unknown class
         ("create_instance", args({"label": "FRB1", "comment": "a gene", "type": "Gene"}))],
        [("create_statement", args({"subject": METFORMIN, "predicate": "treats", "object": "NEW:Gene:frb1",
                                    "evidence": "Metformin treats FRB1."})),  # domain violation
         ("create_statement", '{"subject": "' + METFORMIN + '", "predicate": '),  # malformed arguments
         ("create_statement", args({"subject": METFORMIN, "predicate": "upregulates", "object": "NEW:Gene:frb1",
                                    "evidence": "Metformin raised FRB1 expression.", "confidence": 0.7}))],
        [],  # segment 1 done
        [("create_statement", args({"subject": METFORMIN, "predicate": "treats", "object": GESTATIONAL_DIABETES,
                                    "evidence": "Metformin is used in gestational diabetes."}))],
        # a model that never stops (a new question each time): the step limit ends it
        [("search_property", args({"text": f"treats {i}"})) for i in range(5)],
    ]
    with _ToolCallServer(turns) as srv:
        openings = [[{"role": "system", "content": "Grow the KG with the tools."},
                     {"role": "user", "content": text}] for text in ("Segment one.", "Segment two.")]
        result = run_tool_loop(tools, openings, model="openai/scripted", api_base=srv.url, api_key="not-a-key",
                               max_steps=12)
    assert (result.stopped, result.steps, result.refused) == ("step_limit", 12, 3)
    assert srv.requests[0]["tools"] and {t["function"]["name"] for t in srv.requests[0]["tools"]} >= set(ARGS)
    # the refusals went back to the model as tool messages
    tool_msgs = [m["content"] for m in srv.requests[2]["messages"] if m["role"] == "tool"]
    assert any(m.startswith("REFUSED: no class 'Protien'") for m in tool_msgs)
    transcript = tools.transcript()
    assert [(r.tool, r.ok) for r in transcript][:7] == [
        ("search_instance", True), ("search_class", True), ("create_instance", False), ("create_instance", True),
        ("create_statement", False), ("create_statement", False), ("create_statement", True)]
    evaluated = StageStore(paths.stages_dir).read(NS, FINAL_STAGE, DOC)
    assert sorted(zip(evaluated["kg_relation"], evaluated["tail_id"])) == [
        ("treats", GESTATIONAL_DIABETES), ("upregulates", "NEW:Gene:frb1")]
    assert tools.merge_document().ok
    kg = KGStore(paths.kg)
    assert kg.snapshot_counts(namespace=NS).n_evidence == 2 and kg.count_extracted_nodes(NS) == 1


def test_a_model_that_only_repeats_an_answered_call_ends_its_segment(tools: KGTools):
    from karma_dagster.kg_tools.loop import run_tool_loop

    # what SmolLM2 does under llama-cpp-python's chatml-function-calling, whose template drops the `tool` turns:
    # it never sees the answer, so it asks again; the loop runs a call once per segment and moves on
    same = ("search_instance", json.dumps({"text": "metformin"}))
    turns = [[same], [("search_instance", json.dumps({"type": None, "text": "metformin"}))], [same], [same]]
    with _ToolCallServer(turns) as srv:
        result = run_tool_loop(tools, [[{"role": "user", "content": "Segment one."}]], model="openai/scripted",
                               api_base=srv.url, api_key="not-a-key", max_steps=10)
    assert (result.steps, result.repeated, result.rounds, result.stopped) == (2, 1, 3, "done")
    assert len(srv.requests) == 3 and result.silent_segments == 0


# ---------------------------------------------------------------- the `tools` chain mode (Dagster, a scripted LLM)
PAPER = ("900002|t|Metformin in gestational diabetes\n"
         "900002|a|Metformin improved glycaemic control in women with gestational diabetes. "
         "Lisinopril lowered blood pressure.\n\n")
SILENT_PAPER = ("900003|t|Ward rounds in winter\n"  # the scripted model answers it in prose, calling no tool
                "900003|a|The ward was quiet and the weather was mild.\n\n")


def _tools_model(request: dict):
    """A function-calling model: searches, three invalid calls, one valid statement, then stops."""
    if not request.get("tools"):  # another agent of the chain (document metadata): the usual scripted answer
        from fake_openai_server import karma_responder

        return karma_responder(request)
    if "900003" in request["messages"][1]["content"]:
        return "This segment states no relation between biomedical entities."
    turn = sum(m["role"] == "assistant" for m in request["messages"])
    segment = re.search(r"segment (\S+):", request["messages"][1]["content"]).group(1)
    if turn == 0:
        return [("search_instance", json.dumps({"text": "metformin"})),
                ("search_instance", json.dumps({"text": "gestational diabetes", "type": "Disease"}))]
    if turn == 1:
        return [("create_instance", json.dumps({"label": "glycaemic control", "comment": "x", "type": "Phenotype"})),
                ("create_statement", json.dumps({"subject": METFORMIN, "predicate": "treats", "object": LISINOPRIL,
                                                 "evidence": "Metformin treats lisinopril."})),
                ("create_statement", '{"subject": "' + METFORMIN + '", "predicate": "treats"'),
                ("create_statement", json.dumps({
                    "subject": METFORMIN, "predicate": "treats", "object": GESTATIONAL_DIABETES, "confidence": 0.8,
                    "segment": segment,
                    "evidence": "Metformin improved glycaemic control in women with gestational diabetes."}))]
    return "Nothing more in this segment."


def test_the_tools_mode_grows_the_kg_in_the_chains_place_and_is_a_row_of_the_comparison(make_pipeline):
    import dagster as dg

    from karma_dagster import runner
    from karma_dagster.definitions import build_definitions
    from karma_dagster.ingest.keys import date_of_document_key
    from karma_dagster.resources.backbones import BackboneConfig

    ns = "scripted-tools"
    with _ToolCallServer(responder=_tools_model) as srv:
        config = BackboneConfig(kind="litellm", model="openai/scripted", api_base=srv.url,
                                api_key="sk-karma-test-0000-not-a-real-key", mode="tools")
        backbones = {"local": BackboneConfig(), ns: config}
        p = make_pipeline(backbones=backbones)
        (p.inbox / "tools.pubtator").write_text(PAPER + SILENT_PAPER)
        defs = build_definitions(backbones=backbones, storage=p.storage)
        assert runner.import_kg(defs, p.instance)
        keys, failed = runner.register_inbox(defs, p.instance)
        assert len(keys) == 2 and not failed
        assert not runner.run_documents(defs, p.instance, keys, log=lambda _m: None)
        for name in backbones:
            dates = sorted({date_of_document_key(k) for k in keys})
            assert all(runner.run_increments(defs, p.instance, name, dates).values())
        ok, table = runner.run_comparison(defs, p.instance)
        report = runner.run_report(defs, p.instance, 0.0, {})
    [key] = [k for k in keys if "900002" in k]
    [silent] = [k for k in keys if "900003" in k]
    tool_requests = [r for r in srv.requests if r.get("tools") and "900002" in r["messages"][1]["content"]]
    assert len(tool_requests) == 3 and {t["function"]["name"] for t in tool_requests[0]["tools"]} >= set(ARGS)
    assert len(srv.requests) == 4, "the tools chain asks the model nothing but the tool loop"
    assert "agent: tools_agent" in tool_requests[0]["messages"][0]["content"]
    # the refusals went back to the model; only the valid statement is staged and carried to `evaluated`
    answers = [m["content"] for m in tool_requests[2]["messages"] if m["role"] == "tool"]
    assert [a.split(":")[0] for a in answers[2:]] == ["REFUSED", "REFUSED", "REFUSED", "OK"]
    store = p.storage.stage_store()
    evaluated = EvaluatedTable.validate(store.read(ns, FINAL_STAGE, key))
    assert evaluated[["head_id", "kg_relation", "tail_id", "accepted"]].values.tolist() == [
        [METFORMIN, "treats", GESTATIONAL_DIABETES, True]]
    for stage in ("relations", "aligned", "resolved"):
        assert store.read(ns, stage, key)["triple_id"].tolist() == evaluated["triple_id"].tolist()
    assert [(r["tool"], r["ok"]) for r in store.read(ns, TOOL_LOG, key).to_dict("records")][2:] == [
        ("create_instance", False), ("create_statement", False), ("create_statement", False), ("create_statement", True)]
    # the transcript and the loop's figures are the entities asset's metadata
    meta = document_metadata(p, dg.AssetKey([ns, "entities"]), key)
    assert (meta["calls_refused"], meta["calls_accepted"], meta["stopped"]) == (3, 3, "done")
    assert [t["tool"] for t in meta["transcript"]][:2] == ["search_instance", "search_instance"]
    # merged by the date increment, with the tools' provenance, in the backbone's own namespace
    prov = KGTools(DataPaths(p.storage.root()), namespace=ns, caller="reader").edge_provenance(
        METFORMIN, "treats", GESTATIONAL_DIABETES)
    assert prov.ok and [(r["doc_key"], r["tool_caller"], r["backbone"]) for r in prov.data["evidence"]] == [
        (key, ns, ns)]
    assert prov.data["evidence"][0]["prompt_version"].startswith("tools_agent.v1@")  # what answered, not the agents'
    assert KGStore(p.storage.kg_path()).snapshot_counts(namespace=ns).n_evidence == 1
    # a row of the comparison beside the local KARMA chain
    assert ok, table
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert "| tools |" in rows[ns] and "| multi_agent |" in rows["local"]
    # a document on which the model called no tool ran "ok" but is no silent ok: the entities asset and the run
    # report say so
    quiet = document_metadata(p, dg.AssetKey([ns, "entities"]), silent)
    assert quiet["tool_calls"] == 0 and quiet["segments_without_tool_call"] == quiet["segments"] >= 1
    assert "made no tool call" in quiet["warning"] and "warning" not in store.recorded(ns, "entities", key)
    assert list(report.stage_warnings) == [ns] and list(report.stage_warnings[ns]) == [silent]
    assert "made no tool call" in report.stage_warnings[ns][silent]
    assert f"WARNING, backbone {ns}: 1 document(s)" in report.markdown()


def test_the_tools_mode_is_an_llm_chain_of_the_same_shape_with_its_own_code_versions():
    from karma_dagster import stages
    from karma_dagster.runtime.config import BackboneSettings

    with pytest.raises(ValueError, match="mode 'tools' needs an LLM backbone"):
        BackboneSettings(kind="local", mode="tools")
    settings = BackboneSettings(kind="litellm", model="openai/x", mode="tools")
    chain = stages.chain_for(settings)
    assert [s.name for s in chain] == list(stages.STAGE_NAMES)
    assert [s.reads for s in chain] == [s.reads for s in stages.STAGES]  # the same asset graph
    assert {s.name: s.variant for s in chain} == {
        "documents": "karma", "segments": "tools", "summaries": "ablated", "entities": "tools", "relations": "tools",
        "aligned": "tools", "resolved": "tools", "evaluated": "tools"}
    assert stages.all_prompts(chain) == ["ingestion", "tools_agent"]
    single = BackboneSettings(kind="litellm", model="openai/x", mode="single_agent")
    entities = stages.by_name("entities")
    assert stages.code_version(entities, settings) != stages.code_version(entities, single)
    assert stages.FINAL_STAGE == FINAL_STAGE  # kg_tools.staging's copy (stages imports kg_tools, not back)
