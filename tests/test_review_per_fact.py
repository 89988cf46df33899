"""One review item per fact: proposals of one fact from several backbones or documents are one item listing them;
each kind's Accept says what it does and does it; a decision counts no paper; an old queue folds once."""

from __future__ import annotations

import datetime as dt
import shutil
import sqlite3
from pathlib import Path

import pytest

from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.changes import with_changes
from karma_dagster.review.cogmg_items import accepted_item_ids, completion_item_id, items_from_completions
from karma_dagster.review.karma_items import collect_karma
from karma_dagster.review.merge_inputs import chain_docs_from, merge_accepted, pending_dates
from karma_dagster.review.models import DecisionIn, Evidence, ReviewItem, item_id
from karma_dagster.review.queue import InvalidEdit, ReviewQueue
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.schemas.records import ResolvedRow
from karma_dagster.runtime.stage_store import StageStore
from test_review_queue import (DIAB, DOC, GRAVES, METF, METFORMIN, METHIMAZOLE, T2DM, by_source, chain_rows,  # noqa: F401
                               completion, paths, resolved_row, seed_kg)

DOC2 = "2016-03-01_pmc0000002"
SENTENCE = "Methimazole was given to patients with Graves disease and symptoms improved."


def _two_backbones(paths: DataPaths) -> None:
    """The same chain rows read by a second backbone, and the schema-review fact read again from a second paper."""
    stages = StageStore(paths.stages_dir)
    stages.write("local-single", "resolved", DOC, records_to_frame(chain_rows(), ResolvedRow))
    again = resolved_row("t2", DIAB, METF, "Negative_Correlation", head_kg_type="Disease", tail_kg_type="Compound",
                         alignment_prob=0.3, doc_key=DOC2, segment_id=f"{DOC2}#s1", summary_id=f"{DOC2}#sum1",
                         evidence="In DOC2 metformin reduced type 2 diabetes progression.")
    stages.write("local", "resolved", DOC2, records_to_frame([again], ResolvedRow))


def _kg_edges(kg: Path, head: str, tail: str, ns: str = "local") -> dict[str, tuple[float, int]]:
    with KGStore(kg).connect(read_only=True) as con:
        return {r: (c, n) for r, c, n in con.execute(
            "SELECT relation, confidence, n_docs FROM kg_edges(?) WHERE head_id = ? AND tail_id = ?",
            [ns, head, tail]).fetchall()}


# ---------------------------------------------------------------- one item per fact
def test_one_fact_from_two_backbones_and_two_papers_is_one_item_listing_them(paths: DataPaths) -> None:
    _two_backbones(paths)
    proposals = collect_karma(paths, KGSchema.load())
    facts = {p.fact for p in proposals}
    assert len(proposals) == 7 and len(facts) == 3  # 3 facts: local's (3 + the second paper's) and local-single's 3
    queue = ReviewQueue.for_data(paths)
    counts = queue.add_items(with_changes(proposals, paths.kg))
    assert counts == {"new": 3, "folded": 4, "refreshed": 0, "decided_kept": 0}
    items = by_source(queue)
    assert len(queue.items(status="all")) == len(facts) == 3
    schema = items["schema_review"]
    assert schema.backbones == ["local", "local-single"]
    assert sorted((p.backbone, p.origin) for p in schema.proposals) == [
        ("local", DOC), ("local", DOC2), ("local-single", DOC)]
    assert {e.text for e in schema.evidence} >= {"In DOC2 metformin reduced type 2 diabetes progression."}
    assert all(i.backbones == ["local", "local-single"] for i in items.values())
    # each backbone's filter finds the one item; a proposal id names the item it was folded into
    assert {i.item_id for i, _ in queue.items(backbone="local-single")} == {i.item_id for i in items.values()}
    assert queue.facets()["backbone"] == ["local", "local-single"]
    single = next(p for p in proposals if p.backbone == "local-single" and p.source == "schema_review")
    assert queue.item_of(single.item_id) == schema.item_id
    # collecting again: every proposal is known, nothing new
    again = queue.add_items(with_changes(collect_karma(paths, KGSchema.load()), paths.kg))
    assert again == {"new": 0, "folded": 0, "refreshed": 7, "decided_kept": 0}

    # one decision for the fact; the accepted conflict enters both backbones' KGs, each recorded merged
    conflict = items["unresolved_conflict"]
    queue.decide(conflict.item_id, DecisionIn(action="accept", reviewer="alice"))
    today = dt.datetime.now(dt.UTC).date()
    assert pending_dates(queue) == {"local": {today}, "local-single": {today}}
    outcomes = merge_accepted(paths.kg, queue, chain_docs=chain_docs_from(paths), run_id="per-fact")
    assert [(o.namespace, o.items) for o in outcomes] == [("local", [conflict.item_id]),
                                                          ("local-single", [conflict.item_id])]
    for ns in ("local", "local-single"):
        assert "causes" in _kg_edges(paths.kg, METFORMIN, T2DM, ns)
    assert queue.decision(conflict.item_id).merged_backbones == ["local", "local-single"]
    assert pending_dates(queue) == {} and merge_accepted(paths.kg, queue, chain_docs=chain_docs_from(paths)) == []


def test_cogmg_completions_of_one_fact_from_two_questions_are_one_item(paths: DataPaths) -> None:
    queue = ReviewQueue.for_data(paths)
    a = items_from_completions([completion("q07")], partition_key="set.v1__q07")
    b = items_from_completions([completion("q08")], partition_key="set.v1__q08")
    assert queue.add_items(a + b) == {"new": 1, "folded": 1, "refreshed": 0, "decided_kept": 0}
    (item,) = [i for i, _ in queue.items()]
    queue.decide(item.item_id, DecisionIn(action="accept", reviewer="alice"))
    # the benchmark's "after review" finds either question's completion accepted
    assert accepted_item_ids(queue) >= {completion_item_id(completion("q07"), "set.v1__q07"),
                                        completion_item_id(completion("q08"), "set.v1__q08")}


# ---------------------------------------------------------------- Accept says what it does, and does it
def _item(source: str, head: tuple[str, str, str], relation: str, tail: tuple[str, str, str], **kw) -> ReviewItem:
    return ReviewItem(
        item_id=item_id(source, "local", head[0], relation, tail[0], DOC2), source=source, backbone="local",
        head_id=head[0], head_name=head[1], head_kind=head[2], relation=relation, tail_id=tail[0],
        tail_name=tail[1], tail_kind=tail[2], origin=DOC2, agent="test", stage="resolved",
        evidence=[Evidence(text=SENTENCE, where=f"{DOC2}#s1")], score=0.6, change="", **kw)


MMI = (METHIMAZOLE, "Methimazole", "Compound")
GRV = (GRAVES, "Graves disease", "Disease")


def test_accept_of_each_kind_says_what_it_does_and_does_it(paths: DataPaths) -> None:
    queue = ReviewQueue.for_data(paths)
    schema_pick = _item("schema_review", GRV, "Association", MMI)  # Disease -Association-> Compound: no metaedge
    new_type = _item("new_relation_type", MMI, "stains", (T2DM, "type 2 diabetes", "Anatomy"))  # kinds as stated
    held = _item("held_back", MMI, "treats", GRV)
    cogmg = items_from_completions([completion("q07")])[0]
    items = with_changes([schema_pick, new_type, held, cogmg], paths.kg)
    for it in items:
        assert "nothing yet" not in it.change and it.change
    said = {it.source: it.change for it in items}
    assert said["schema_review"].startswith("maps the triple to the relation you pick: Compound -treats-> Disease "
                                            "(CtD)") and "Compound -palliates-> Disease (CpD)" in said["schema_review"]
    assert "or adds relation type 'Association' (Disease -> Compound) to the schema's extensions" in \
        said["schema_review"]
    assert said["new_relation_type"].startswith("adds relation type 'stains' (Compound -> Anatomy) to the schema's "
                                                "extensions")
    assert said["held_back"].startswith(("new edge", "reinforces edge"))
    queue.add_items(items)
    assert len(queue.items()) == 3  # held_back and cogmg state one fact: Methimazole -treats-> Graves disease

    # a pick that is no metaedge between the kinds, or an extension of a schema relation, is refused, nothing stored
    with pytest.raises(InvalidEdit, match="'DrD' is not a metaedge between Disease and Compound: pick one of .*CpD"):
        queue.decide(schema_pick.item_id, DecisionIn(action="accept", reviewer="alice", choice="DrD"))
    held_item = queue.item_of(held.item_id)
    with pytest.raises(InvalidEdit, match="a held_back item is accepted as it is"):
        queue.decide(held_item, DecisionIn(action="accept", reviewer="alice", choice="CtD"))
    assert queue.decision(schema_pick.item_id) is None

    # schema review: the picked metaedge, turned to run Compound -> Disease
    d = queue.decide(schema_pick.item_id, DecisionIn(action="accept", reviewer="alice", choice="CpD"))
    assert d.choice == "CpD" and d.edits["relation"] == ["Association", "palliates"]
    assert d.edits["head_id"] == [GRAVES, METHIMAZOLE]
    # new relation type: no metaedge to pick, so Accept adds it to the extensions
    assert queue.decide(new_type.item_id, DecisionIn(action="accept", reviewer="alice")).choice == "extension"
    queue.decide(held_item, DecisionIn(action="accept", reviewer="bob"))
    before = _kg_edges(paths.kg, METHIMAZOLE, GRAVES)
    assert "palliates" not in before
    merge_accepted(paths.kg, queue, chain_docs=chain_docs_from(paths), run_id="kinds")

    after = _kg_edges(paths.kg, METHIMAZOLE, GRAVES)
    assert after["palliates"][0] == pytest.approx(0.6)  # the picked relation, a new edge
    assert "treats" in after  # the held-back / CogMG fact
    with KGStore(paths.kg).connect(read_only=True) as con:
        rows = con.execute("SELECT relation, prompt_version, paper_key FROM evidence WHERE doc_key LIKE 'review_%' "
                           "ORDER BY relation, paper_key").fetchall()
    assert rows == [("palliates", "reviewed by alice via schema_review", DOC2),
                    ("treats", "reviewed by bob via held_back", DOC),  # the CogMG proposal's supporting paper
                    ("treats", "reviewed by bob via held_back", DOC2)]
    ext = KGStore(paths.kg).schema_extension("local")
    assert [(r["label"], r["domain"], r["range"]) for r in ext] == [("stains", "Compound", "Anatomy")]
    waiting = queue.decision(new_type.item_id)  # the triple itself waits for a metaedge, saying why
    assert waiting.merged_at is None and "refused by admission rule metaedge" in waiting.merge_note


# ---------------------------------------------------------------- a decision is no paper
def test_a_fact_the_kg_holds_from_a_paper_gains_only_the_other_papers_of_its_proposals(paths: DataPaths) -> None:
    """Accepting a fact proposed from papers P (the KG read it from P) and Q adds Q once and nothing for P."""
    day = dt.date(2016, 2, 1)
    chain = {DOC2: ([{"doc_key": DOC2, "triple_id": "c1", "head_id": METHIMAZOLE, "relation": "palliates",
                      "tail_id": GRAVES, "metaedge": "CpD", "score": 0.5, "segment_id": f"{DOC2}#s1",
                      "accepted": True, "evidence": SENTENCE}], [])}
    merge_increment(KGStore(paths.kg), day, "local", chain, "chain-run")
    before = _kg_edges(paths.kg, METHIMAZOLE, GRAVES)["palliates"]
    assert before == (pytest.approx(0.5), 1)

    from_p = _item("held_back", MMI, "palliates", GRV)  # from DOC2: the paper the KG holds
    from_q = from_p.model_copy(update={"item_id": item_id("held_back", "local", METHIMAZOLE, "palliates", GRAVES,
                                                          DOC), "origin": DOC, "score": 0.4})
    queue = ReviewQueue.for_data(paths)
    queue.add_items(with_changes([from_p, from_q], paths.kg))
    (item,) = [i for i, _ in queue.items()]
    assert [p.paper for p in item.proposals] == [DOC2, DOC]
    queue.decide(item.item_id, DecisionIn(action="accept", reviewer="alice"))
    merge_accepted(paths.kg, queue, chain_docs=lambda ns, d: chain if d == day else {}, run_id="paper")
    conf, papers = _kg_edges(paths.kg, METHIMAZOLE, GRAVES)["palliates"]
    assert papers == 2  # P and Q: the decision is neither a paper of its own nor P again
    assert conf == pytest.approx(1 - 0.5 * 0.6)  # P's 0.5 once (not P's decision score 0.6), Q's 0.4


# ---------------------------------------------------------------- the migration
_OLD_DDL = """
CREATE TABLE items(
    item_id TEXT PRIMARY KEY, source TEXT NOT NULL, backbone TEXT NOT NULL, relation TEXT NOT NULL,
    score REAL NOT NULL, origin TEXT NOT NULL, body TEXT NOT NULL, added_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE decisions(
    item_id TEXT PRIMARY KEY REFERENCES items(item_id),
    action TEXT NOT NULL CHECK (action IN ('accept', 'edit', 'reject')),
    reviewer TEXT NOT NULL, decided_at TEXT NOT NULL, edits TEXT NOT NULL, merged_at TEXT, merge_date TEXT,
    merge_note TEXT NOT NULL DEFAULT '');
"""


def test_an_old_queue_is_folded_to_one_item_per_fact_keeping_every_proposal(paths: DataPaths) -> None:
    _two_backbones(paths)
    proposals = sorted(collect_karma(paths, KGSchema.load()), key=lambda p: (p.backbone, p.origin, p.source))
    path = paths.root / "review" / "queue.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(_OLD_DDL)
    for k, p in enumerate(proposals):  # the old queue: one item per backbone and document
        con.execute("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (p.item_id, p.source, p.backbone, p.relation, p.score, p.origin,
                     p.model_dump_json(exclude={"proposals"}), f"2026-12-01T00:00:{k:02d}", "2026-12-01T00:00:00"))
    rejected = next(p for p in proposals if p.source == "unresolved_conflict" and p.backbone == "local-single")
    con.execute("INSERT INTO decisions (item_id, action, reviewer, decided_at, edits) VALUES (?, 'reject', 'zoe', "
                "'2026-12-01T10:00:00', '{}')", (rejected.item_id,))
    con.commit()
    con.close()

    queue = ReviewQueue(path)
    items = queue.items(status="all")
    assert len(proposals) == 7 and len(items) == len({p.fact for p in proposals}) == 3
    by_id = {i.item_id: (i, d) for i, d in items}
    # the decided item survives for its fact, its decision kept, the other proposals listed on it
    survivor, decision = by_id[rejected.item_id]
    assert decision is not None and decision.reviewer == "zoe"
    assert sorted(p.backbone for p in survivor.all_proposals()) == ["local", "local-single"]
    # every old item id still names its item, and no proposal's provenance is lost
    assert {queue.item_of(p.item_id) for p in proposals} == set(by_id)
    kept = {(p.backbone, p.origin, p.source) for i, _ in items for p in i.all_proposals()}
    assert kept == {(p.backbone, p.origin, p.source) for p in proposals}
    schema = next(i for i, _ in items if i.source == "schema_review")
    assert len(schema.evidence) == 2 and len(schema.all_proposals()) == 3  # both papers' sentences
    # opened again: nothing more to fold
    assert len(ReviewQueue(path).items(status="all")) == 3


# ---------------------------------------------------------------- day order
def _merged_both_ways(paths: DataPaths, tmp_path: Path, source: str, row: dict) -> list[list]:
    """The review decision of `source` dated D1 and a chain document `row` of D2 > D1, merged D1 first and D2
    first: the edges of the pair now and as of each date."""
    today = dt.datetime.now(dt.UTC).date()
    d1, d2 = today - dt.timedelta(days=2), today - dt.timedelta(days=1)
    chain = {"x": ([row], [])}
    out = []
    for order in ("in order", "decision last"):
        data = DataPaths(tmp_path / order.replace(" ", "-"))
        shutil.copytree(paths.root, data.root)
        queue = ReviewQueue.for_data(data)
        queue.add_items(with_changes(collect_karma(data, KGSchema.load()), data.kg))
        queue.decide(by_source(queue)[source].item_id, DecisionIn(action="accept", reviewer="alice"),
                     now=dt.datetime.combine(d1, dt.time(12)))
        steps = [lambda: merge_accepted(data.kg, queue, chain_docs=lambda ns, d: chain if d == d2 else {}),
                 lambda: merge_increment(KGStore(data.kg), d2, "local", chain, "chain", withdraw_later=True)]
        for step in steps if order == "in order" else steps[::-1]:
            step()
        with KGStore(data.kg).connect(read_only=True) as con:
            out.append([sorted(con.execute(
                "SELECT relation, round(confidence, 9), n_docs FROM kg_edges('local', as_of := ?) "
                "WHERE head_id = ? AND tail_id = ?", [d, METFORMIN, T2DM]).fetchall()) for d in (d1, d2, None)])
    return out


def test_a_decision_of_an_older_date_never_undoes_a_newer_dates_evidence(paths: DataPaths, tmp_path: Path) -> None:
    """A review merge reaching the KG after a later date merged gives the KG the in-order merge gives: the later
    date's replace stands over the older decision (KG dates in order, as the chain's increments keep them)."""
    replace_later = {"doc_key": "x", "triple_id": "c1", "head_id": METFORMIN, "relation": "causes", "tail_id": T2DM,
                     "metaedge": "CcD", "score": 0.8, "segment_id": "x#s1", "accepted": True, "action": "replace",
                     "evidence": "Metformin worsened type 2 diabetes.", "contradicts": f"{METFORMIN} -treats-> {T2DM}"}
    in_order, late = _merged_both_ways(paths, tmp_path, "schema_review", replace_later)  # D1 reinforces treats
    assert late == in_order
    assert in_order[0] == [("treats", pytest.approx(0.9), 1)]  # as of D1: the seed's 0.9 prior over a 0.6 reading
    assert in_order[2] == [("causes", pytest.approx(0.8), 1)]  # now: D2's replace stands

