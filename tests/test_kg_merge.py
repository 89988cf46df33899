"""Merging accepted triples into the KG: idempotence, reinforcement, dates, crash atomicity, concurrent writers.

Every test runs on both KG stores (kg_backends.py: the DuckDB file and PostgreSQL)."""

from __future__ import annotations

import csv
import datetime as dt
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

from karma_dagster.browse.queries import edge as browse_edge
from karma_dagster.browse.queries import entity
from karma_dagster.kg.merge import TripleValidationError, merge_increment
from karma_dagster.kg import invariants, reinforcement, supersession
from karma_dagster.kg import store as store_module
from karma_dagster.kg.reinforcement import PAPER_CEILING, confidence, paper_scores, reading
from karma_dagster.kg.backends import open_kg_store
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import KGStore, NodeIn
from karma_dagster.review.changes import with_changes
from karma_dagster.review.merge_inputs import merge_accepted
from karma_dagster.review.models import DecisionIn, Evidence, ReviewItem
from karma_dagster.review.models import item_id as review_item_id
from karma_dagster.review.queue import ReviewQueue
from karma_dagster.schemas.records import EvaluatedRow
from kg_backends import KGBackend, kg_backend, location_of  # noqa: F401 - fixtures

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
METFORMIN, T2DM, METHIMAZOLE, GRAVES = "Compound::DB00331", "Disease::DOID:9352", "Compound::DB00763", "Disease::DOID:12361"
D1, D2, D3 = dt.date(2016, 1, 5), dt.date(2016, 1, 12), dt.date(2016, 2, 1)


def _seed_ids(kind: str, n: int = 40) -> list[str]:
    with open(SEED / "nodes.tsv", encoding="utf-8") as fh:
        return sorted(r["id"] for r in csv.DictReader(fh, delimiter="\t") if r["kind"] == kind)[:n]


COMPOUNDS, DISEASES = _seed_ids("Compound"), _seed_ids("Disease")


def triple(doc: str, tid: str, head: str, tail: str, score: float, relation: str = "treats", **kw: object) -> dict:
    row = {"doc_key": doc, "triple_id": tid, "head_id": head, "relation": "Negative_Correlation", "kg_relation": relation,
           "tail_id": tail, "metaedge": None, "score": score, "segment_id": f"{doc}#s1", "accepted": True,
           "evidence": "Metformin improved glycemic control in type 2 diabetes."}
    row.update(kw)
    return row


def workload(day: int, n_docs: int = 3, n_triples: int = 5) -> tuple[dt.date, dict]:
    """A date's docs: seed compound-treats-disease triples that overlap across days, plus one new entity each."""
    date = dt.date(2016, 1, 1) + dt.timedelta(days=day)
    docs = {}
    for d in range(n_docs):
        key = f"{date}_doc{d}"
        new = NodeIn(id=f"new::Compound::drug-{day}-{d}", name=f"drug {day}-{d}", kind="Compound", synonyms=[f"D{day}{d}"])
        rows = [triple(key, f"t{k}", COMPOUNDS[(day * 7 + d * 3 + k) % 40], DISEASES[(day + k) % 40],
                       0.5 + 0.08 * ((day + d + k) % 5)) for k in range(n_triples)]
        rows.append(triple(key, "tn", new.id, DISEASES[day % 40], 0.55, metaedge="CtD"))
        docs[key] = (rows, [new])
    return date, docs


@pytest.fixture(scope="module")
def base(kg_backend: KGBackend) -> tuple[KGBackend, KGStore]:
    """The seed store of the module, on one backend; tests merge into copies of it (fresh)."""
    store = kg_backend.new("seed")
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    return kg_backend, store


def fresh(base: tuple[KGBackend, KGStore], label: str) -> KGStore:
    """A copy of the seed store (a file copy, or a database created from it as template)."""
    backend, seed = base
    return backend.copy(seed, label)


def dump(store: KGStore, with_increment_stats: bool = True) -> dict[str, list[tuple]]:
    """Every table and view, without merge timestamps; confidences rounded (float product order); rows sorted
    here, not in SQL, so the dump reads the same on both stores."""
    inc = ("namespace, date, n_docs, n_evidence, n_new_nodes, n_new_edges, n_reinforced, nodes_before, nodes_after, "
           "edges_before, edges_after, run_id, backbone") if with_increment_stats else "namespace, date, n_docs, n_evidence"
    queries = {
        "seed_nodes": "SELECT * FROM seed_nodes", "seed_edges": "SELECT * FROM seed_edges",
        "extracted_nodes": "SELECT * FROM extracted_nodes", "evidence": "SELECT * FROM evidence",
        "increments": f"SELECT {inc} FROM increments", "nodes": "SELECT * FROM nodes", "edges": "SELECT * FROM edges",
    }
    out = {}
    with store.connect(read_only=True) as con:
        for table, sql in queries.items():
            cur = con.execute(sql)
            cols = [d[0] for d in cur.description]
            rows = []
            for row in cur.fetchall():
                values = dict(zip(cols, row, strict=True))
                values.pop("merged_at", None)
                if table == "edges":
                    values["confidence"] = round(values["confidence"], 12)
                rows.append(tuple(tuple(v) if isinstance(v, list) else v for v in values.values()))
            out[table] = sorted(rows, key=repr)
    return out


def edge(store: KGStore, head: str, tail: str, ns: str = "local") -> dict:
    with store.connect(read_only=True) as con:
        cur = con.execute("SELECT * FROM kg_edges(?) WHERE head_id = ? AND tail_id = ?", [ns, head, tail])
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
    assert len(rows) == 1
    return dict(zip(cols, rows[0], strict=True))


# ---------------------------------------------------------------- semantics
def test_reinforcement_matches_the_formula_and_dates(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    s1 = merge_increment(store, D1, "local", {"a": ([triple("a", "t1", METFORMIN, T2DM, 0.7)], [])}, "r1")
    assert (s1.n_new_edges, s1.n_reinforced, s1.edges_after - s1.edges_before) == (0, 1, 0)
    merge_increment(store, D3, "local", {"c": ([triple("c", "t1", METFORMIN, T2DM, 0.6)], [])}, "r3")
    merge_increment(store, D2, "local", {"b": ([triple("b", "t1", METFORMIN, T2DM, 0.5)], [])}, "r2")
    e = edge(store, METFORMIN, T2DM)
    # the seed's 0.9 is a prior worth half a paper of its confidence (kg/reinforcement.py)
    assert e["confidence"] == pytest.approx(1 - (1 - 0.9) ** 0.5 * (1 - 0.7) * (1 - 0.6) * (1 - 0.5), abs=1e-12)
    assert (e["first_seen"], e["last_seen"], e["n_evidence"], e["sources"]) == (D1, D3, 3, ["extracted", "seed"])
    assert e["metaedge"] == "CtD" and e["in_seed"]

    # Re-materializing D1 without the triple drops its evidence: confidence and first_seen follow.
    merge_increment(store, D1, "local", {"a": ([], [])}, "r1b")
    e = edge(store, METFORMIN, T2DM)
    assert e["confidence"] == pytest.approx(1 - 0.1 ** 0.5 * 0.4 * 0.5, abs=1e-12)
    assert (e["first_seen"], e["n_evidence"]) == (D2, 2)


# ---------------------------------------------------------------- a paper counts once (issue 45, item 2)
PROBE = NodeIn(id="new::Compound::paper-probe", name="paper probe", kind="Compound")


def _sentence_read_twice(doc: str, a: float, b: float) -> list[dict]:
    """One sentence of `doc` read under two extractor labels that both align to `treats`: two evidence rows."""
    return [triple(doc, "t-neg", PROBE.id, GRAVES, a, segment_id=f"{doc}#s3"),
            {**triple(doc, "t-treat", PROBE.id, GRAVES, b, segment_id=f"{doc}#s3"), "relation": "Treatment"}]


def _facts(store: KGStore) -> tuple[float, int, int]:
    """(confidence, n_evidence, n_docs) of the probe edge from the keyed reads (not the view)."""
    (f,) = store.edges_between([(PROBE.id, GRAVES)])[(PROBE.id, GRAVES)]
    return f.confidence, f.n_evidence, f.n_docs


def test_one_paper_counts_once_at_its_best_reading(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    merge_increment(store, D1, "local", {"pa": (_sentence_read_twice("pa", 0.6, 0.5), [PROBE])}, "r1")
    e = edge(store, PROBE.id, GRAVES)
    assert e["confidence"] == pytest.approx(0.6, abs=1e-12)  # the best reading, not 1 - 0.4 * 0.5 = 0.8
    assert (e["n_evidence"], e["n_docs"]) == (2, 1)
    assert _facts(store) == (pytest.approx(0.6, abs=1e-12), 2, 1)

    # another paper does reinforce: one factor per paper
    merge_increment(store, D2, "local", {"pb": (_sentence_read_twice("pb", 0.3, 0.5), [PROBE])}, "r2")
    e = edge(store, PROBE.id, GRAVES)
    assert e["confidence"] == pytest.approx(1 - 0.4 * 0.5, abs=1e-12)
    assert (e["n_evidence"], e["n_docs"]) == (4, 2)
    assert _facts(store) == (pytest.approx(1 - 0.4 * 0.5, abs=1e-12), 4, 2)
    assert edge(store, PROBE.id, GRAVES)["confidence"] == pytest.approx(_facts(store)[0], abs=1e-12)
    with store.connect(read_only=True) as con:  # as of D1 the second paper is not there yet
        (c1,) = con.execute("SELECT confidence FROM kg_edges('local', as_of := ?) WHERE head_id = ?",
                            [D1, PROBE.id]).fetchall()[0]
    assert c1 == pytest.approx(0.6, abs=1e-12)


def test_no_single_paper_makes_an_edge_certain(base, tmp_path: Path) -> None:
    """An uncalibrated backbone's 1.0 (five agreeing samples, an LLM's "certain") is stored as one paper's ceiling."""
    store = fresh(base, "kg")
    certain = [triple("pa", "t1", PROBE.id, GRAVES, 1.0, segment_id="pa#s1")]
    merge_increment(store, D1, "gpt-4o", {"pa": (certain, [PROBE])}, "r1")
    e = edge(store, PROBE.id, GRAVES, "gpt-4o")
    assert e["confidence"] == pytest.approx(PAPER_CEILING, abs=1e-12) and e["confidence"] < 0.99
    merge_increment(store, D2, "gpt-4o", {"pb": ([{**certain[0], "doc_key": "pb", "segment_id": "pb#s1"}],
                                                 [PROBE])}, "r2")
    assert edge(store, PROBE.id, GRAVES, "gpt-4o")["confidence"] == pytest.approx(1 - (1 - PAPER_CEILING) ** 2)


def test_a_seed_edge_and_one_paper_are_never_certain(base, tmp_path: Path) -> None:
    """The seed's 0.9 is a prior, not a paper: with one paper at its ceiling the edge stays below 0.99 (it read
    1 - 0.1 * 0.05 = 0.995 when the seed counted as an observation); a second paper takes it past 0.99, and
    `karma check`'s certainty invariant holds throughout."""
    store = fresh(base, "kg")
    merge_increment(store, D1, "gpt-4o", {"pa": ([triple("pa", "t1", METFORMIN, T2DM, 1.0)], [])}, "r1")
    one = 1 - 0.1 ** 0.5 * (1 - PAPER_CEILING)  # 0.9842
    e = edge(store, METFORMIN, T2DM, "gpt-4o")
    assert e["confidence"] == pytest.approx(one, abs=1e-12) and e["confidence"] < 0.99
    assert (e["n_docs"], e["in_seed"]) == (1, True)
    (f,) = store.edges_between([(METFORMIN, T2DM)], namespace="gpt-4o")[(METFORMIN, T2DM)]
    assert f.confidence == pytest.approx(one, abs=1e-12)  # the keyed reads state the same rule
    assert browse_edge(store, METFORMIN, "treats", T2DM, "gpt-4o").now.confidence == pytest.approx(one, abs=1e-12)
    assert [v for v in invariants.check_store(store).violations if v.rule == "certainty"] == []

    merge_increment(store, D2, "gpt-4o", {"pb": ([triple("pb", "t1", METFORMIN, T2DM, 0.95)], [])}, "r2")
    two = edge(store, METFORMIN, T2DM, "gpt-4o")
    assert two["confidence"] == pytest.approx(1 - 0.1 ** 0.5 * 0.05 ** 2, abs=1e-12) and two["confidence"] > 0.99
    assert two["n_docs"] == 2
    assert [v for v in invariants.check_store(store).violations if v.rule == "certainty"] == []


def test_a_seed_prior_is_capped_and_papers_never_lower_it() -> None:
    """A seed stated at 1.0 is held at the prior ceiling (0.95); a weak paper leaves a seed edge where it was."""
    assert confidence(1.0, []) == pytest.approx(0.95)
    assert confidence(1.0, [reading("pa", None, 0.95)]) < 0.99
    assert confidence(0.9, [reading("pa", None, 0.3)]) == pytest.approx(0.9)
    three = [reading(p, None, 0.9) for p in ("pa", "pb", "pc")]
    assert confidence(0.9, three[:1]) < confidence(0.9, three[:2]) < confidence(0.9, three) < 1.0
    assert confidence(0.9, three) > 0.999  # several independent papers approach certainty


def test_karma_check_finds_an_edge_certain_from_one_paper(base, tmp_path: Path) -> None:
    """The certainty invariant read from the edges view: with the seed counted as a paper (the rule before),
    seed 0.9 + one paper at 0.95 reads 0.995 from one paper, and `karma check` names it."""
    backend, _ = base
    if backend.name != "duckdb":
        pytest.skip("the old rule is planted as a DuckDB macro")
    store = fresh(base, "kg")
    merge_increment(store, D1, "local", {"pa": ([triple("pa", "t1", METFORMIN, T2DM, 0.95)], [])}, "r1")
    with store.connect() as con:
        con.execute(store_module.VIEWS_DDL.replace(
            reinforcement.sql_confidence("max(s) FILTER (WHERE is_seed)", "product(1 - s) FILTER (WHERE NOT is_seed)"),
            "1 - product(1 - s)"))
    bad = [v for v in invariants.check_store(store).violations if v.rule == "certainty"]
    assert [(v.namespace, v.key) for v in bad] == [("local", f"{METFORMIN} -treats-> {T2DM}")]
    assert "confidence 0.9950 from 1 paper(s) and the seed" in bad[0].message


def test_contradicting_papers_supersede_a_seed_edge_on_both_stores(base, tmp_path: Path) -> None:
    """kg/supersession.py's SQL on each store: two papers at 0.9 against the seed's 0.9 (C 0.99, logit 4.6 >= 3.2)."""
    store = fresh(base, "kg")

    def against(doc: str) -> dict:
        return {**triple(doc, "t-causes", METFORMIN, T2DM, 0.9, relation="causes", accepted=False),
                "action": "review", "contradicts": f"{METFORMIN} -treats-> {T2DM}", supersession.ROW_FLAG: True}

    merge_increment(store, D1, "local", {"pa": ([against("pa")], [])}, "r1")
    assert edge(store, METFORMIN, T2DM)["relation"] == "treats"
    stats = merge_increment(store, D2, "local", {"pb": ([against("pb")], [])}, "r2")
    assert (stats.n_superseded, stats.n_evidence) == (1, 0)
    assert store.edges_between([(METFORMIN, T2DM)])[(METFORMIN, T2DM)] == []
    ((action, doc, on),) = [(r["action"], r["doc_key"], r["date"]) for r in store.merge_adjudications("local")]
    assert (action, doc, on) == ("replace", "pb", D2)
    assert edge_as_of(store, D1)["confidence"] == pytest.approx(0.9)  # history: as of D1 it stands


def edge_as_of(store: KGStore, day: dt.date) -> dict:
    with store.connect(read_only=True) as con:
        cur = con.execute("SELECT * FROM kg_edges('local', as_of := ?) WHERE head_id = ? AND tail_id = ?",
                          [day, METFORMIN, T2DM])
        cols = [d[0] for d in cur.description]
        (row,) = cur.fetchall()
    return dict(zip(cols, row, strict=True))


def test_the_rule_in_python_by_hand() -> None:
    """kg/reinforcement.py, what the SQL states: max per paper, a decision only for a paper the chain has not read."""
    rows = [reading("pa", None, 0.6), reading("pa", None, 0.5), reading("review_x", "pa", 0.9),
            reading("review_y", "pc", 0.5), reading("review_z", "pc", 0.4), reading("pb", "pb", 0.5)]
    assert paper_scores(rows) == {"pa": 0.6, "pb": 0.5, "pc": 0.5}
    assert confidence(None, rows) == pytest.approx(1 - 0.4 * 0.5 * 0.5)
    assert confidence(0.9, []) == pytest.approx(0.9) and confidence(None, []) == 0.0


def _review_item(origin: str, score: float) -> ReviewItem:
    """A schema-review item read from paper `origin`: the probe edge, as a curator would accept it."""
    return ReviewItem(
        item_id=review_item_id("schema_review", "local", PROBE.id, "treats", GRAVES, origin), source="schema_review",
        backbone="local", head_id=PROBE.id, head_name=PROBE.name, head_kind="Compound", relation="treats",
        tail_id=GRAVES, tail_name="Graves' disease", tail_kind="Disease", origin=origin, agent="schema alignment (SAA)",
        stage="resolved", evidence=[Evidence(text="The probe treated Graves' disease.", where=f"{origin}#s3")],
        score=score, change="", extracted_relation="Therapy")


def _accept(store: KGStore, queue: ReviewQueue, item: ReviewItem) -> None:
    queue.add_items([item])
    queue.decide(item.item_id, DecisionIn(action="accept", reviewer="curator ann"))
    (outcome,) = merge_accepted(location_of(store), queue)
    assert outcome.items == [item.item_id]


def test_a_review_decision_counts_as_its_paper_not_a_new_one(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    merge_increment(store, D1, "local", {"pa": (_sentence_read_twice("pa", 0.6, 0.5), [PROBE])}, "r1")
    merge_increment(store, D2, "local", {"pb": ([triple("pb", "t1", PROBE.id, GRAVES, 0.5)], [PROBE])}, "r2")
    before = edge(store, PROBE.id, GRAVES)
    assert (before["confidence"], before["n_docs"]) == (pytest.approx(0.8, abs=1e-12), 2)
    page = entity(store, PROBE.id, "local")
    assert (page.node.n_papers, page.groups[0].rows[0].n_papers) == (2, 2)
    queue = ReviewQueue(tmp_path / "review.sqlite")

    # a curator accepts the sentence of paper pa the KG already holds (another reading of it, scored higher):
    # one more evidence row, no new paper, nothing added to the confidence; the queue says so beforehand
    (shown,) = with_changes([_review_item("pa", 0.9)], location_of(store))
    assert shown.change.startswith("edge already read from paper pa (score 0.80, unchanged)")
    _accept(store, queue, _review_item("pa", 0.9))
    after = edge(store, PROBE.id, GRAVES)
    assert (after["confidence"], after["n_docs"], after["n_evidence"]) == (
        pytest.approx(before["confidence"], abs=1e-12), 2, before["n_evidence"] + 1)
    assert _facts(store) == (pytest.approx(before["confidence"], abs=1e-12), before["n_evidence"] + 1, 2)
    with store.connect(read_only=True) as con:
        (paper,) = con.execute("SELECT paper_key FROM evidence WHERE doc_key LIKE 'review_%'").fetchall()[0]
    assert paper == "pa"
    page = entity(store, PROBE.id, "local")
    assert (page.node.n_papers, page.groups[0].rows[0].n_papers) == (2, 2)  # papers, not decisions
    assert page.groups[0].rows[0].confidence == pytest.approx(before["confidence"], abs=1e-12)
    view = browse_edge(store, PROBE.id, "treats", GRAVES, "local")
    assert (view.now.confidence, view.now.n_papers) == (pytest.approx(before["confidence"], abs=1e-12), 2)
    assert view.reinforcement[-1].confidence == pytest.approx(before["confidence"], abs=1e-12)

    # a decision read from a paper the KG holds nothing of is that paper's one factor; the same fact proposed
    # again from paper pc is no new item: it joins the accepted one, whose KG document then carries pc too
    (shown,) = with_changes([_review_item("pc", 0.5)], location_of(store))
    assert shown.change.startswith("reinforces edge (score 0.80 → 0.90)")
    assert queue.add_items([_review_item("pc", 0.5)])["decided_kept"] == 1
    first = _review_item("pa", 0.9).item_id
    assert queue.item_of(_review_item("pc", 0.5).item_id) == first
    (outcome,) = merge_accepted(location_of(store), queue)
    assert outcome.items == [first]
    e = edge(store, PROBE.id, GRAVES)
    assert (e["confidence"], e["n_docs"]) == (pytest.approx(1 - 0.4 * 0.5 * 0.5, abs=1e-12), 3)
    assert browse_edge(store, PROBE.id, "treats", GRAVES, "local").now.n_papers == 3


def test_new_edges_nodes_and_node_dates(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    ipi = NodeIn(id="new::Compound::ipilimumab", name="ipilimumab", kind="Compound", vocab_id="MESH:D000074324")
    s = merge_increment(store, D1, "local", {"p": ([triple("p", "t1", ipi.id, GRAVES, 0.8, relation="causes")], [ipi])}, "r")
    assert (s.n_new_nodes, s.n_new_edges, s.n_reinforced) == (1, 1, 0)
    assert (s.nodes_after - s.nodes_before, s.edges_after - s.edges_before) == (1, 1)
    e = edge(store, ipi.id, GRAVES)
    assert e["confidence"] == pytest.approx(0.8) and e["sources"] == ["extracted"] and not e["in_seed"]
    assert store.existing_relations(ipi.id, GRAVES) == ["causes"]
    assert store.existing_relations(ipi.id, GRAVES, as_of=D1 - dt.timedelta(days=1)) == []
    # The same entity met again later: still one node, first/last seen span both documents.
    s2 = merge_increment(store, D3, "local", {"q": ([triple("q", "t1", ipi.id, GRAVES, 0.6, relation="causes")], [ipi])}, "r")
    assert (s2.n_new_nodes, s2.n_new_edges, s2.n_reinforced) == (0, 0, 1)
    with store.connect(read_only=True) as con:
        rows = con.execute("SELECT source, first_seen, last_seen, created_by_doc FROM nodes WHERE id = ?", [ipi.id]).fetchall()
    assert rows == [("extracted", D1, D3, "p")]
    assert store.node_kind(ipi.id) == "Compound"
    assert {r.id for r in store.lexicon_rows() if r.source == "extracted"} == {ipi.id}
    assert store.lexicon_rows(namespace=None)[-1].source == "seed"


def test_a_mention_stored_on_a_node_of_another_kind_takes_that_kinds_metaedge(base, tmp_path: Path) -> None:
    """A paper's "cardiac arrhythmia" (a MeSH Disease) is the seed's Side Effect Arrhythmia (kg/same_entity.py):
    its Compound -causes-> triple lands on that node as CcSE, the metaedge the schema has for those kinds, not as a
    CcD the schema refuses between a Compound and a Side Effect."""
    store = fresh(base, "kg")
    arrhythmia = NodeIn(id="MESH:D001145", name="cardiac arrhythmia", kind="Disease", vocab_id="MESH:D001145")
    row = triple("p", "t1", METFORMIN, arrhythmia.id, 0.8, relation="causes", metaedge="CcD",
                 evidence="Metformin caused cardiac arrhythmia in two patients.")
    merge_increment(store, D1, "local", {"p": ([row], [arrhythmia])}, "r")
    e = edge(store, METFORMIN, "Side Effect::C0003811")
    assert e["metaedge"] == "CcSE" and e["relation"] == "causes" and e["sources"] == ["extracted"]
    with store.connect(read_only=True) as con:
        assert not con.execute("SELECT 1 FROM nodes WHERE id = ?", [arrhythmia.id]).fetchall(), "not a second node"


def test_edge_sentences_are_the_evidence_as_of_a_date_newest_first(base, tmp_path: Path) -> None:
    """What the conflict agent's debate shows for the KG's side of a clash, on both stores."""
    store = fresh(base, "kg")
    said = {D1: "Metformin improved glycemic control in type 2 diabetes.", D3: "Metformin lowered HbA1c in T2DM."}
    for day, sentence in said.items():
        merge_increment(store, day, "local", {f"{day}_p": ([triple(f"{day}_p", "t1", METFORMIN, T2DM, 0.7,
                                                                   evidence=sentence)], [])}, "r")
    edge_key = (METFORMIN, "treats", T2DM)
    assert store.edge_sentences([edge_key], "local") == {edge_key: [said[D3], said[D1]]}
    assert store.edge_sentences([edge_key], "local", as_of=D2) == {edge_key: [said[D1]]}
    assert store.edge_sentences([edge_key], "other") == {}  # another backbone's KG: the seed row has no sentence


def test_as_of_date_counts(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    d1, docs1 = workload(0, n_docs=2)
    d2, docs2 = workload(30, n_docs=2)
    merge_increment(store, d1, "local", docs1, "r1")
    merge_increment(store, d2, "local", docs2, "r2")
    before = store.snapshot_counts(as_of=d1 - dt.timedelta(days=1))
    at1 = store.snapshot_counts(as_of=d1)
    now = store.snapshot_counts()
    assert (before.n_nodes, before.n_edges, before.n_evidence) == (4000, 10000, 0)
    assert (at1.n_extracted_nodes, at1.n_evidence) == (2, 12)
    assert (now.n_extracted_nodes, now.n_evidence) == (4, 24)
    assert before.n_edges < at1.n_edges < now.n_edges
    assert store.snapshot_counts(as_of=d2) == now.model_copy(update={"as_of": d2})
    with store.connect(read_only=True) as con:
        inc = con.execute("SELECT date, n_docs, n_evidence, edges_after FROM increments ORDER BY date").fetchall()
    assert [(r[0], r[1], r[2]) for r in inc] == [(d1, 2, 12), (d2, 2, 12)]
    assert inc[0][3] == at1.n_edges and inc[1][3] == now.n_edges


def test_idempotent_rematerialization(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    date, docs = workload(3)
    first = merge_increment(store, date, "local", docs, "run")
    once = dump(store)
    again = merge_increment(store, date, "local", docs, "run")
    assert dump(store) == once
    assert first.model_dump(exclude={"seconds"}) == again.model_dump(exclude={"seconds"})
    assert len(once["evidence"]) == 18 and len(once["extracted_nodes"]) == 3


def test_namespaces_share_the_seed_only(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    date, docs = workload(5)
    merge_increment(store, date, "local", docs, "r")
    merge_increment(store, date, "openai/gpt-4o", {k: v for k, v in list(docs.items())[:1]}, "r")
    local, gpt = store.snapshot_counts(), store.snapshot_counts(namespace="openai/gpt-4o")
    assert (local.n_evidence, gpt.n_evidence) == (18, 6)
    assert (local.n_seed_nodes, gpt.n_seed_nodes) == (4000, 4000)
    assert (local.n_extracted_nodes, gpt.n_extracted_nodes) == (3, 1)
    assert store.snapshot_counts(namespace="never-used").n_evidence == 0


def test_evaluated_row_merges(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    row = EvaluatedRow(
        doc_key="2016-01-28_pmc4737013", triple_id="tr1", summary_id="s1", segment_id="seg1", head_mention_id="m1",
        head_id=METHIMAZOLE, head_name="methimazole", head_type="Chemical", relation="Negative_Correlation",
        tail_mention_id="m2", tail_id=GRAVES, tail_name="Graves' disease", tail_type="Disease", probability=0.9,
        evidence="She was treated with methimazole for Graves' disease.", head_kg_type="Compound",
        tail_kg_type="Disease", kg_relation="treats", metaedge="CtD", alignment_prob=0.95, schema_status="aligned",
        conflict=False, contradicts=None, verdict="none", action="keep", confidence=0.8, clarity=0.9, relevance=0.7,
        score=0.8, accepted=True,
    )
    s = merge_increment(store, D1, "local", {row.doc_key: ([row], [])}, "r", prompt_version="rea.v1")
    assert s.n_reinforced == 1
    with store.connect(read_only=True) as con:
        ev = con.execute("SELECT relation, metaedge, score, prompt_version, backbone FROM evidence").fetchall()
    assert ev == [("treats", "CtD", 0.8, "rea.v1", "local")]
    assert edge(store, METHIMAZOLE, GRAVES)["confidence"] == pytest.approx(max(0.9, 1 - 0.1 ** 0.5 * 0.2))


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({"kg_relation": "cures"}, "relation 'cures' is not a schema relation"),
        ({"tail_id": "Disease::DOID:0000"}, "tail_id 'Disease::DOID:0000' is neither a KG node"),
        ({"score": 1.5}, "score 1.5 is not a number in"),
        ({"evidence": " "}, "provenance field 'evidence' is empty"),
        ({"segment_id": None}, "provenance field 'segment_id'"),
        ({"metaedge": "CcSE"}, "metaedge 'CcSE' means 'causes', not 'treats'"),
        ({"accepted": False}, "triple was not accepted"),
        ({"doc_key": "other"}, "row says doc_key 'other'"),
        ({"paper_key": " pmc1"}, "field 'paper_key'"),
        ({"paper_key": 7}, "paper_key 7 is not a document key"),
    ],
)
def test_validation_errors_name_doc_and_triple(base, tmp_path: Path, bad: dict, problem: str) -> None:
    store = fresh(base, "kg")
    date, docs = workload(1, n_docs=1)
    merge_increment(store, date, "local", docs, "r")
    before = dump(store)
    rows = [triple("doc9", "good", METFORMIN, T2DM, 0.6), {**triple("doc9", "bad-1", METFORMIN, T2DM, 0.6), **bad}]
    with pytest.raises(TripleValidationError, match=f"doc 'doc9', triple 'bad-1': {problem}"):
        merge_increment(store, date, "local", {**docs, "doc9": (rows, [])}, "r2")
    assert dump(store) == before


def test_model_text_is_bound_not_formatted(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    nasty = "x'); DROP TABLE evidence; --"
    node = NodeIn(id=nasty, name=nasty, kind="Compound")
    merge_increment(store, D1, nasty, {nasty: ([triple(nasty, nasty, nasty, T2DM, 0.5, evidence=nasty)], [node])}, nasty)
    assert store.snapshot_counts(namespace=nasty).n_evidence == 1
    assert store.existing_relations(nasty, T2DM, namespace=nasty) == ["treats"]


# ---------------------------------------------------------------- crashes and concurrent writers
def _merge_and_stall(location: str, day: int, n_docs: int, signal_file: str) -> None:
    def on_doc(doc_key: str, i: int, n: int) -> None:
        if i == n // 2:
            Path(signal_file).write_text(doc_key)
            time.sleep(120)  # the parent SIGKILLs us here, inside the open transaction

    date, docs = workload(day, n_docs=n_docs, n_triples=20)
    merge_increment(open_kg_store(location), date, "local", docs, "crash", on_doc=on_doc)


def test_sigkill_mid_merge_leaves_store_unchanged(base, tmp_path: Path) -> None:
    store = fresh(base, "kg")
    location = location_of(store)
    date, old_docs = workload(9, n_docs=20, n_triples=3)  # an earlier version of the same date, to be replaced
    merge_increment(store, date, "local", old_docs, "old")
    before = dump(store)

    signal_file = tmp_path / "half"
    child = mp.get_context("spawn").Process(target=_merge_and_stall, args=(location, 9, 200, str(signal_file)))
    child.start()
    deadline = time.monotonic() + 60
    while not signal_file.exists() and child.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert signal_file.exists(), "child never reached the middle of the merge"
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    assert child.exitcode == -signal.SIGKILL

    reopened = open_kg_store(location, lock_timeout=5)  # the dead child's flock (or writer lock) is gone with it
    assert dump(reopened) == before

    _, docs = workload(9, n_docs=200, n_triples=20)
    rerun = merge_increment(reopened, date, "local", docs, "crash")
    clean = fresh(base, "clean")
    merge_increment(clean, date, "local", old_docs, "old")
    uninterrupted = merge_increment(clean, date, "local", docs, "crash")
    assert dump(reopened) == dump(clean)
    assert rerun.model_dump(exclude={"seconds"}) == uninterrupted.model_dump(exclude={"seconds"})
    assert rerun.n_evidence == 200 * 21


def _merge_days(location: str, days: list[int], barrier: mp.Barrier) -> None:  # type: ignore[valid-type]
    store = open_kg_store(location, lock_timeout=60)
    barrier.wait(60)
    for day in days:
        date, docs = workload(day)
        merge_increment(store, date, "local", docs, f"run-{day}")


def test_two_processes_merging_concurrently_equal_sequential(base, tmp_path: Path) -> None:
    location = location_of(fresh(base, "kg"))
    days_a, days_b = list(range(0, 20, 2)), list(range(1, 20, 2))  # interleaved dates, shared edges
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_merge_days, args=(location, d, barrier)) for d in (days_a, days_b)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]

    seq = fresh(base, "seq")
    for day in sorted(days_a + days_b):
        date, docs = workload(day)
        merge_increment(seq, date, "local", docs, f"run-{day}")
    # Increment stats (new vs reinforced) depend on merge order; the graph and the provenance do not.
    concurrent = dump(open_kg_store(location), with_increment_stats=False)
    assert concurrent == dump(seq, with_increment_stats=False)
    assert len(concurrent["evidence"]) == 20 * 3 * 6 and len(concurrent["increments"]) == 20
