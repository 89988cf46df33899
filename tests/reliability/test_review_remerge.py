"""A reviewed triple with a new entity survives every re-merge of its date (issue 27, point 4), and `karma status`
says when a date's merge failed.

The sample paper runs through the chain once (module fixture); each test works on a copy of that data folder with
its own Dagster instance. Review items come from the paper's stage tables (`karma review`'s collect); one is
accepted with one end edited to an entity no KG holds, so the review document is the only one that creates it.
"""

from __future__ import annotations

import shutil

import pytest
from reliability_helpers import kg_query, kg_state

from karma_dagster import cli, runner
from karma_dagster.runtime import services
from karma_dagster.kg.merge import TripleValidationError
from karma_dagster.review import cli_review
from karma_dagster.review.merge_inputs import doc_key, merge_date
from karma_dagster.review.models import DecisionIn, ReviewItem
from karma_dagster.review.queue import ReviewQueue

JATS = ("PMC4686705.xml", "PMC4686705.json")  # 2015-12-08


@pytest.fixture(scope="module")
def sample_run(make_module_pipeline):
    p = make_module_pipeline(inbox_files=JATS)
    outcome = runner.run_main(p.defs, p.instance, log=lambda _m: None)
    assert not outcome.failed, outcome.failed
    return p


@pytest.fixture
def run_copy(sample_run, make_pipeline):
    """The sample run's data folder (catalog, stage tables, KG, entity index) under a fresh pipeline."""
    p = make_pipeline()
    shutil.copytree(sample_run.root, p.root, dirs_exist_ok=True)
    return p


def _collected(p) -> ReviewQueue:
    paths = p.storage.paths()
    queue = ReviewQueue.for_data(paths)
    counts = cli_review.collect(paths, queue, None, [])
    assert counts["new"] > 0, "the sample paper has review items"
    return queue


def _new_entity_items(p, queue: ReviewQueue) -> list[tuple[ReviewItem, str, str]]:
    """(item, the end to make a new entity, a schema relation joining the item's kinds in its direction) for the
    items whose other end is a seed node: accepting one with that end edited adds an entity no document created."""
    schema = services.kg_schema()
    out = []
    for item, _ in sorted(queue.items(), key=lambda x: x[0].item_id):
        fits = [me.relation for me in schema.metaedges if (me.source, me.target) == (item.head_kind, item.tail_kind)]
        nodes = p.kg.nodes_by_id([item.head_id, item.tail_id], "local")
        seed = [end for end in ("head", "tail") if nodes.get(getattr(item, f"{end}_id"), {}).get("source") == "seed"]
        if fits and len(seed) == 1:
            out.append((item, "tail" if seed == ["head"] else "head", fits[0]))
    assert len(out) >= 2, "the sample paper has review items between a seed node and another entity"
    return out


def _accept_with_new_entity(p, queue: ReviewQueue, pick: tuple[ReviewItem, str, str], n: int) -> tuple[str, str]:
    """Accept the item with its `end` edited to a new entity (an id and a name no KG node has); (item id, new id)."""
    item, end, relation = pick
    new_id, new_name = f"NEW:remerge-probe-{n}", f"remerge probe entity {n}"
    assert not p.kg.nodes_by_id([new_id], "local")
    edits = {f"{end}_id": new_id, f"{end}_name": new_name, "relation": relation}
    queue.decide(item.item_id, DecisionIn(action="edit", reviewer="alice", edits=edits))
    return item.item_id, new_id


def _merge_with_karma_review(p) -> None:
    assert cli_review.main(["--data-dir", str(p.root), "--merge"]) == 0


def _status(p, monkeypatch, capsys) -> str:
    monkeypatch.setattr(cli, "_defs", lambda _args: p.defs)
    monkeypatch.setattr(runner, "instance", lambda: p.instance)
    capsys.readouterr()
    assert cli.main(["status"]) == 0
    return capsys.readouterr().out


def test_a_reviewed_new_entity_stays_resolvable_in_every_re_merge_of_its_date(run_copy, monkeypatch, capsys):
    p = run_copy
    queue = _collected(p)
    item_id, new_id = _accept_with_new_entity(p, queue, _new_entity_items(p, queue)[0], 1)
    day = merge_date(queue.decision(item_id))

    _merge_with_karma_review(p)  # `karma review --merge`: the first merge of the decision's date
    assert queue.decision(item_id).merge_date == day
    node = p.kg.nodes_by_id([new_id], "local")[new_id]
    assert (node["source"], node["created_by_doc"]) == ("extracted", doc_key(item_id))
    kg_path = p.storage.kg_path()
    edge = f"SELECT count(*) FROM kg_edges('local') WHERE '{new_id}' IN (head_id, tail_id)"
    assert kg_query(kg_path, edge)[0][0] == 1
    merged = kg_state(kg_path)

    # the KG increment asset re-merges the date (a sensor tick, a re-materialization, `karma run`): each time the
    # review document's new entity is created again by that merge and the KG is exactly the same
    for attempt in range(1, 4):
        assert runner.run_increments(p.defs, p.instance, "local", [day.isoformat()]) == {day.isoformat(): True}, \
            f"re-merge {attempt} of {day} failed"
        assert kg_state(kg_path) == merged, f"re-merge {attempt} of {day} changed the KG"
    assert p.kg.nodes_by_id([new_id], "local")[new_id]["created_by_doc"] == doc_key(item_id)

    table = _status(p, monkeypatch, capsys)
    assert "| local | 1 | 1 | 1 | 0 | 0 | 0 |" in table, table
    assert "local: 1 accepted review item(s) merged" in table


def test_karma_status_reports_a_date_whose_merge_failed_as_not_merged(run_copy, monkeypatch, capsys):
    p = run_copy
    queue = _collected(p)
    picks = _new_entity_items(p, queue)
    first, _ = _accept_with_new_entity(p, queue, picks[0], 1)
    _merge_with_karma_review(p)
    assert "| local | 1 | 1 | 1 | 0 | 0 | 0 |" in _status(p, monkeypatch, capsys)

    # a second item accepted the same day; its date's merge raises (the KG is left as it was)
    second, second_id = _accept_with_new_entity(p, queue, picks[1], 2)
    day = merge_date(queue.decision(second))
    assert day == merge_date(queue.decision(first))
    before = kg_state(p.storage.kg_path())
    with monkeypatch.context() as m:
        def refuse(*_a, **_k):
            raise TripleValidationError("injected: the merge of this date fails")

        m.setattr("karma_dagster.kg.merge.merge_increment", refuse)
        assert runner.run_increments(p.defs, p.instance, "local", [day.isoformat()]) == {day.isoformat(): False}
    assert kg_state(p.storage.kg_path()) == before

    table = _status(p, monkeypatch, capsys)
    assert "| local | 1 | 1 | 1 | 1 | 0 | 0 |" in table, table
    assert f"{doc_key(second)} (accepted review item, KG date {day})" in table
    states = runner.document_states(p.defs, p.instance)["local"]
    assert states.unmerged == [doc_key(second)] and states.reviewed == [doc_key(first)]

    # the next `karma run` merges the date; then nothing is left unmerged
    lines: list[str] = []
    assert not runner.run_main(p.defs, p.instance, log=lines.append).failed
    assert f"KG increments (local): {day} ok" in lines, lines
    assert p.kg.nodes_by_id([second_id], "local")[second_id]["created_by_doc"] == doc_key(second)
    table = _status(p, monkeypatch, capsys)
    assert "| local | 1 | 1 | 1 | 0 | 0 | 0 |" in table, table
    assert "local: 2 accepted review item(s) merged" in table
