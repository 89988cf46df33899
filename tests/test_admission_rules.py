"""One admission rule for every write into the KG (kg/admission_rules.py), on the shipped seed KG (data/seed_kg).

The same invalid facts -- a self-edge with no metaedge (the CogMG completion a reviewer once accepted), a Compound
carrying a disease's MeSH id -- are driven through every door: the chain's merge, a review decision, a CogMG
completion, the KG tools and the MCP server, `karma dedupe`, `karma import-kg --add`; each refuses them under the same
rule name, and nothing refused is lost (the chain's row and the review decision wait in review with the reason).
`karma check` and the KG asset check find rows planted behind the doors' backs. Schema alignment is bound by the
schema's label table and the polarity of its relations.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import anyio
import pytest

from karma_dagster.agents.schema_alignment import AlignmentError, align_triples
from karma_dagster.assets.knowledge_graph import admission_check
from karma_dagster.backbones.base import AlignmentAnswer
from karma_dagster.cli import main as karma
from karma_dagster.cogmg.models import Completion
from karma_dagster.kg import admission_rules as rules
from karma_dagster.kg import dedupe, invariants
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.schema import KGSchema, SchemaError
from karma_dagster.kg.seed_import import SeedImportError, import_generic, import_hetionet
from karma_dagster.kg.store import KGStore, NodeIn
from karma_dagster.kg_tools.session import KGTools
from karma_dagster.mcp_server.server import build_server
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.cogmg_items import items_from_completions
from karma_dagster.review.karma_items import collect_karma, refused_items
from karma_dagster.review.merge_inputs import merge_accepted
from karma_dagster.review.models import DecisionIn, Evidence, ReviewItem, item_id
from karma_dagster.review.queue import ReviewQueue
from karma_dagster.schemas.records import TripleRow
from kg_backends import KGBackend, kg_backend  # noqa: F401 - fixture

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
METFORMIN, T2DM = "Compound::DB00331", "Disease::DOID:9352"
MALARIA_MESH = "MESH:D008288"  # a disease descriptor (tree C01...), which a Compound "malaria" once carried
DAY, DOC = dt.date(2016, 1, 5), "2016-01-05_pmc1"
SELF_EDGE = "admission rule self_edge"
ID_KIND = "admission rule id_kind"
SENTENCE = "Metformin lowered glucose in patients given metformin."


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("seed") / "karma"
    import_hetionet(KGStore(DataPaths(root).kg), SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    return root


@pytest.fixture
def paths(seeded: Path, tmp_path: Path) -> DataPaths:
    root = tmp_path / "karma"
    shutil.copytree(seeded, root)
    return DataPaths(root)


def _row(tid: str, head: str, tail: str, relation: str = "treats", metaedge: str | None = None, **kw) -> dict:
    return {"doc_key": DOC, "triple_id": tid, "head_id": head, "relation": relation, "tail_id": tail,
            "metaedge": metaedge, "score": 0.8, "segment_id": f"{DOC}#s1", "accepted": True, "evidence": SENTENCE, **kw}


def _count(store: KGStore, sql: str) -> int:
    with store.connect(read_only=True) as con:
        return int(con.execute(sql).fetchall()[0][0])


def _review_item(head: str, head_kind: str, tail: str, tail_kind: str, relation: str = "treats") -> ReviewItem:
    return ReviewItem(item_id=item_id("schema_review", "local", head, relation, tail, DOC), source="schema_review",
                      backbone="local", head_id=head, head_name="metformin", head_kind=head_kind, relation=relation,
                      tail_id=tail, tail_name="metformin", tail_kind=tail_kind, origin=DOC, agent="test",
                      stage="evaluated", evidence=[Evidence(text=SENTENCE, where=DOC)], score=0.9, change="")


def _accept_and_merge(paths: DataPaths, item: ReviewItem) -> str:
    """Queue the item, accept it, merge: what the queue says of it afterwards (its merge note)."""
    queue = ReviewQueue(paths.root / "review.sqlite")
    queue.add_items([item])
    queue.decide(item.item_id, DecisionIn(action="accept", reviewer="curator"))
    assert merge_accepted(paths.kg, queue) == []  # nothing entered the KG
    ((waiting, decision),) = queue.accepted(unmerged_only=True)  # the decision stays in the queue...
    assert waiting.item_id == item.item_id
    return decision.merge_note  # ...with the reason


# ---------------------------------------------------------------- the same self-edge through every door
def test_chain_merge_keeps_a_self_edge_out_without_aborting_the_date_and_sends_it_to_review(paths: DataPaths):
    store = KGStore(paths.kg)
    rows = [_row("bad", METFORMIN, METFORMIN), _row("good", METFORMIN, T2DM)]
    stats = merge_increment(store, DAY, "local", {DOC: (rows, [])}, "r1")
    assert stats.n_refused == 1 and stats.n_evidence == 1  # the date merged; only the refused row stayed out
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT triple_id, metaedge FROM evidence").fetchall() == [("good", "CtD")]  # filled in
        ((rule, reason),) = con.execute("SELECT rule, reason FROM admission_refusals").fetchall()
    assert rule == "self_edge" and SELF_EDGE in reason
    (item,) = refused_items(store, "local")  # what `karma review` collects: the fact, waiting with its reason
    assert (item.head_id, item.tail_id, item.origin) == (METFORMIN, METFORMIN, DOC) and SELF_EDGE in item.note
    assert [i.item_id for i in collect_karma(paths, KGSchema.load(), ["local"])] == [item.item_id]
    # a re-merge replaces the refusals like the evidence: one row, not two
    merge_increment(store, DAY, "local", {DOC: (rows, [])}, "r2")
    assert _count(store, "SELECT count(*) FROM admission_refusals") == 1


def test_review_merge_refuses_an_accepted_self_edge_and_keeps_it_queued_with_the_reason(paths: DataPaths):
    note = _accept_and_merge(paths, _review_item(METFORMIN, "Compound", METFORMIN, "Compound"))
    assert SELF_EDGE in note
    assert _count(KGStore(paths.kg), "SELECT count(*) FROM evidence") == 0


def _completion(head: str, head_name: str, head_kind: str, relation: str, tail: str, tail_name: str,
                tail_kind: str) -> Completion:
    return Completion(question_id="q1", question="Which drugs treat type 2 diabetes?", backbone="local",
                      head_id=head, head_name=head_name, relation=relation, tail_id=tail, tail_name=tail_name,
                      method="llm", passages=[], supported=True, score=1.0, evidence_doc_keys=[DOC],
                      head_kind=head_kind, tail_kind=tail_kind, evidence=SENTENCE)


def test_cogmg_completion_is_queued_with_the_refusal_and_refused_again_when_accepted(paths: DataPaths):
    (item,) = items_from_completions([_completion(METFORMIN, "Metformin", "Compound", "treats", METFORMIN,
                                                  "metformin", "Compound")])
    assert SELF_EDGE in item.note  # queued, never dropped: the reviewer reads why it cannot enter as it is
    assert SELF_EDGE in _accept_and_merge(paths, item)
    # the completion the issue saw: "Hypothyroidism (Side Effect) -palliates-> hypothyroidism (Disease)", no metaedge
    (odd,) = items_from_completions([_completion("Side Effect::C0020676", "Hypothyroidism", "Side Effect",
                                                 "palliates", "Disease::DOID:1459", "hypothyroidism", "Disease")])
    assert SELF_EDGE in odd.note


def test_kg_tools_and_the_mcp_server_refuse_the_self_edge_by_the_same_rule(paths: DataPaths):
    tools = KGTools(paths, namespace="tools", caller="test-model", document=DOC)
    refused = tools.create_statement(METFORMIN, "treats", METFORMIN, SENTENCE)
    assert not refused.ok and SELF_EDGE in refused.message
    server = build_server(paths, "tools", caller="test-client")

    async def call() -> str:
        try:
            result = await server.call_tool("create_statement", {
                "subject": METFORMIN, "predicate": "treats", "object": METFORMIN, "evidence": SENTENCE,
                "document": DOC})
        except Exception as exc:  # noqa: BLE001 - the SDK raises the tool's refusal as a ToolError
            return str(exc)
        return str(result)

    assert SELF_EDGE in anyio.run(call)


Row = tuple[str, str, str, str | None]


def _plant(store: KGStore, *, node: Row, evidence: Row) -> None:
    """Rows written behind the doors' backs (a KG grown before the rules, or edited by hand)."""
    now = dt.datetime(2016, 1, 5, 12)
    with store.connect() as con:
        con.execute("INSERT INTO extracted_nodes (namespace, id, name, kind, vocab_id, synonyms, doc_key, date, "
                    "run_id, merged_at) VALUES ('local', ?, ?, ?, ?, [], ?, ?, 'hand', ?)", [*node, DOC, DAY, now])
        con.execute("INSERT INTO evidence (namespace, doc_key, date, triple_id, head_id, relation, tail_id, metaedge, "
                    "score, segment_id, evidence, backbone, prompt_version, run_id, merged_at) VALUES ('local', ?, ?, "
                    "'planted', ?, ?, ?, ?, 0.9, 's1', ?, 'local', 'hand', 'hand', ?)",
                    [DOC, DAY, *evidence, SENTENCE, now])


def test_dedupe_keeps_out_the_self_edge_a_fold_would_make(paths: DataPaths):
    store = KGStore(paths.kg)
    # an extracted "Metformin" beside the seed's, and an edge between the two: folded, it is Metformin -> Metformin
    _plant(store, node=("NEW:Compound:metformin", "Metformin", "Compound", None),
           evidence=(METFORMIN, "resembles", "NEW:Compound:metformin", "CrC"))
    (fold,) = dedupe.find(store, "local")
    assert fold.new_id == METFORMIN and len(fold.refused) == 1 and SELF_EDGE in fold.refused[0]
    dedupe.repair(store, "local")
    assert _count(store, "SELECT count(*) FROM evidence") == 0  # never a self-edge in the KG ...
    assert _count(store, "SELECT count(*) FROM admission_refusals WHERE rule = 'self_edge'") == 1  # ... nor lost


def test_import_add_refuses_the_self_edge_and_writes_nothing(paths: DataPaths, tmp_path: Path):
    store = KGStore(paths.kg)
    merge_increment(store, DAY, "local", {DOC: ([_row("good", METFORMIN, T2DM)], [])}, "r1")  # the KG grew
    nodes, edges = tmp_path / "nodes.tsv", tmp_path / "edges.tsv"
    nodes.write_text("id\tname\tkind\n")
    edges.write_text(f"source\trelation\ttarget\n{METFORMIN}\ttreats\t{METFORMIN}\n")
    before = _count(store, "SELECT count(*) FROM seed_edges")
    with pytest.raises(SeedImportError, match=SELF_EDGE):
        import_generic(store, nodes, edges, if_grown="add")
    assert _count(store, "SELECT count(*) FROM seed_edges") == before


# ---------------------------------------------------------------- a Compound carrying a disease's MeSH id
def test_a_compound_with_a_disease_mesh_id_is_refused_by_every_door_that_makes_nodes(paths: DataPaths,
                                                                                      tmp_path: Path):
    store = KGStore(paths.kg)
    malaria = NodeIn(id="NEW:Compound:malaria", name="malaria", kind="Compound", vocab_id=MALARIA_MESH)
    stats = merge_increment(store, DAY, "local", {DOC: ([_row("t1", malaria.id, T2DM)], [malaria])}, "r1")
    assert stats.n_refused == 1 and stats.n_new_nodes == 0
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT rule FROM admission_refusals").fetchall() == [("id_kind",)]
        assert con.execute("SELECT count(*) FROM extracted_nodes").fetchall() == [(0,)]  # never stored half
    assert ID_KIND in _accept_and_merge(paths, _review_item(MALARIA_MESH, "Compound", T2DM, "Disease"))
    (item,) = items_from_completions([_completion(MALARIA_MESH, "malaria", "Compound", "treats", T2DM,
                                                  "type 2 diabetes mellitus", "Disease")])
    assert ID_KIND in item.note
    nodes, edges = tmp_path / "nodes.tsv", tmp_path / "edges.tsv"
    nodes.write_text(f"id\tname\tkind\n{MALARIA_MESH}\tmalaria\tCompound\n")
    edges.write_text(f"source\trelation\ttarget\n{MALARIA_MESH}\ttreats\t{T2DM}\n")
    with pytest.raises(SeedImportError, match=ID_KIND):
        import_generic(store, nodes, edges, if_grown="add")
    # a vocabulary id of the node's own kind passes: MeSH D-tree chemicals are compounds
    assert rules.check_node("NEW:Compound:metformin", "Compound", "MESH:D008687") is None


# ---------------------------------------------------------------- karma check and the asset check
def test_karma_check_reports_planted_rows_and_exits_1(paths: DataPaths, capsys: pytest.CaptureFixture[str]):
    assert karma(["check", "--data-dir", str(paths.root)]) == 0  # the shipped seed passes every rule
    assert "every one admitted" in capsys.readouterr().out
    store = KGStore(paths.kg)
    assert admission_check("local", store).passed
    # the rows: an edge stored with metaedge NULL, and a Compound carrying a disease's MeSH id
    _plant(store, node=("NEW:Compound:malaria", "malaria", "Compound", MALARIA_MESH),
           evidence=(METFORMIN, "treats", T2DM, None))
    report = invariants.check_store(store)
    assert report.by_rule() == {"id_kind": 1, "metaedge": 1}
    assert karma(["check", "--data-dir", str(paths.root)]) == 1
    out = capsys.readouterr().out
    assert "metaedge 1" in out and "id_kind 1" in out and "NEW:Compound:malaria" in out and "planted" in out
    result = admission_check("local", store)
    assert not result.passed and result.check_name == "admission_rule"


def test_refusals_and_the_check_on_both_stores(kg_backend: KGBackend):  # noqa: F811 - the fixture
    """The merge's refusals table and the stored-row check read and write alike on DuckDB and PostgreSQL."""
    store = kg_backend.new("admission")
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    stats = merge_increment(store, DAY, "local", {DOC: ([_row("bad", METFORMIN, METFORMIN),
                                                         _row("good", METFORMIN, T2DM)], [])}, "r1")
    assert stats.n_refused == 1 and stats.n_evidence == 1
    assert [i.note for i in refused_items(store, "local")][0].startswith(f"refused by {SELF_EDGE}")
    assert invariants.check_store(store).violations == []
    with store.connect() as con:
        con.execute("UPDATE evidence SET metaedge = NULL WHERE triple_id = 'good'")
    (v,) = invariants.check_store(store).violations
    assert (v.table, v.rule, v.key) == ("evidence", "metaedge", f"{DOC} / good")


# ---------------------------------------------------------------- alignment bound by the schema
class _Aligner:
    """An LLM backbone's alignment answer, fixed; records what it was offered."""

    name = "fake-llm"

    def __init__(self, answer: str) -> None:
        self.answer, self.offered = answer, []

    def align(self, triple, candidates):
        self.offered.append(list(candidates))
        return AlignmentAnswer(kg_relation=self.answer, probability=0.9)


def _triple(head_type: str, label: str, tail_type: str) -> TripleRow:
    return TripleRow(doc_key=DOC, triple_id=f"t-{head_type}-{label}", summary_id="s1", segment_id="g1",
                     head_mention_id="m1", head_id=f"NEW:{head_type}:a", head_name="a", head_type=head_type,
                     relation=label, tail_mention_id="m2", tail_id=f"NEW:{tail_type}:b", tail_name="b",
                     tail_type=tail_type, probability=0.9, evidence="a raised b")


def test_alignment_maps_through_the_label_table_and_binds_the_llm_to_the_labels_polarity():
    schema = KGSchema.load()

    def align(answer: str, *triple: str):
        backbone = _Aligner(answer)
        (row,) = align_triples([_triple(*triple)], [], backbone, schema, KarmaParams(), kg_kind_of=lambda _i: None)
        return row, backbone.offered

    # the table answers first, whatever the model would say: never downregulates / treats for a positive correlation
    row, offered = align("downregulates", "Disease", "Positive_Correlation", "GeneOrGeneProduct")
    assert (row.schema_status, row.metaedge, offered) == ("aligned", "DaG", [])
    row, offered = align("treats", "Chemical", "Positive_Correlation", "Disease")
    assert (row.metaedge, offered) == ("CcD", [])
    # no table row for Anatomy-Gene: the model may choose only among the label's polarity (and neutral relations)
    row, offered = align("downregulates", "Anatomy", "Positive_Correlation", "GeneOrGeneProduct")
    assert offered == [["expresses", "upregulates"]] and row.schema_status == "review" and row.metaedge is None
    row, _ = align("upregulates", "Anatomy", "Positive_Correlation", "GeneOrGeneProduct")
    assert (row.schema_status, row.metaedge) == ("aligned", "AuG")
    with pytest.raises(AlignmentError):  # outside every candidate of the kind pair
        align("treats", "Anatomy", "Positive_Correlation", "GeneOrGeneProduct")
    assert schema.polarity_of("Negative_Correlation") == "negative"
    assert {me.abbrev for me in schema.aligned_candidates("Negative_Correlation", "Compound", "Gene")} == {"CbG", "CdG"}


def test_a_schema_whose_table_maps_a_correlation_onto_the_contrary_relation_is_refused(tmp_path: Path):
    bad = tmp_path / "schema.yaml"
    bad.write_text("node_kinds: [Compound, Gene]\nner_type_to_kind: {}\nmetaedges:\n"
                   "  - {abbrev: CdG, source: Compound, relation: downregulates, target: Gene, polarity: negative}\n"
                   "relation_map:\n"
                   "  - {label: Positive_Correlation, kinds: [Compound, Gene], relation: downregulates}\n"
                   "label_polarity: {Positive_Correlation: positive}\n")
    with pytest.raises(SchemaError, match="a positive label onto a negative relation"):
        KGSchema.load(bad)
