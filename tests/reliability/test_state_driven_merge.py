"""Merging is driven by state (issue 11, items 1 and 6): a document evaluated but never merged (the run died between
its chain and its date's increment) is merged by the next `karma run`; `karma status` counts it; `karma run` exits
non-zero, naming what failed, when a document failed."""

from __future__ import annotations

import dagster as dg
from partition_views import partition_of
from sensor_ticks import tick
from reliability_helpers import kg_dump, kg_query

from karma_dagster import cli, runner
from karma_dagster.ingest.keys import date_of_document_key

JATS = ("PMC4686705.xml", "PMC4686705.json")  # 2015-12-08
PDF = ("PMC4738914.pdf", "PMC4738914.json")  # 2016-01-14


def _counts(p) -> dict[str, int]:
    return runner.document_states(p.defs, p.instance)["local"].counts()


def _status_table(p, monkeypatch, capsys) -> str:
    monkeypatch.setattr(cli, "_defs", lambda _args: p.defs)
    monkeypatch.setattr(runner, "instance", lambda: p.instance)
    assert cli.main(["status"]) == 0
    return capsys.readouterr().out


def test_a_document_evaluated_but_never_merged_is_merged_by_the_next_run(
    make_pipeline, another_pipeline, monkeypatch, capsys
):
    # the crash: the first paper's chain finished, the process died before its date's increment
    p = make_pipeline(inbox_files=JATS + PDF)
    assert runner.import_kg(p.defs, p.instance)
    keys, failed_files = runner.register_inbox(p.defs, p.instance)
    assert len(keys) == 2 and not failed_files
    first, second = sorted(keys)
    assert not runner.run_documents(p.defs, p.instance, [first], log=lambda _m: None)
    assert _counts(p) == {"registered": 2, "evaluated": 1, "merged": 0, "unmerged": 1, "failed": 0, "pending": 1}
    table = _status_table(p, monkeypatch, capsys)
    assert "| local | 2 | 1 | 0 | 1 | 0 | 1 |" in table and first in table
    assert not kg_query(p.storage.kg_path(), "SELECT count(*) FROM evidence WHERE doc_key = ?", [first])[0][0]

    lines: list[str] = []
    outcome = runner.run_main(p.defs, p.instance, log=lines.append)
    assert not outcome.failed, outcome.failed
    assert f"KG increments (local): {date_of_document_key(first)} ok, {date_of_document_key(second)} ok" in lines
    assert _counts(p) == {"registered": 2, "evaluated": 2, "merged": 2, "unmerged": 0, "failed": 0, "pending": 0}
    assert "| local | 2 | 2 | 2 | 0 | 0 | 0 |" in _status_table(p, monkeypatch, capsys)

    # exactly the KG of an uninterrupted run of the same inbox
    ref = another_pipeline("reference", inbox_files=JATS + PDF)
    assert not runner.run_main(ref.defs, ref.instance, log=lambda _m: None).failed
    got, want = kg_dump(p.storage.kg_path()), kg_dump(ref.storage.kg_path())
    assert got["evidence"], "the interrupted paper's evidence is in the KG"
    assert {r[1] for r in got["evidence"]} == {first, second}
    assert got == want

    # a third run has nothing left to merge: no increment runs again
    again: list[str] = []
    assert not runner.run_main(p.defs, p.instance, log=again.append).failed
    assert not any(line.startswith("KG increments (local): 2") for line in again), again


def test_karma_run_exits_non_zero_and_names_the_document_that_failed(make_pipeline, monkeypatch, capsys):
    from bad_files import image_only_pdf

    p = make_pipeline(inbox_files=JATS)
    image_only_pdf(p.inbox / "scanned.pdf")
    monkeypatch.setattr(cli, "_defs", lambda _args: p.defs)
    monkeypatch.setattr(runner, "instance", lambda: p.instance)
    assert cli.main(["run"]) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "scanned.pdf" in err, err
    # the good paper still went into the KG
    assert kg_query(p.storage.kg_path(), "SELECT count(*) FROM evidence")[0][0] > 0


def test_kg_increments_requests_the_date_of_a_document_whose_merge_never_happened(make_pipeline):
    import json

    p = make_pipeline(inbox_files=JATS)
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    date = date_of_document_key(keys[0])
    # a sensor whose cursor is already past the `evaluated` materialization (its merge run died, or it was
    # turned on after `karma run` crashed): the date is still requested, because the document is unmerged
    first = tick(p, "kg_increments")
    past = {"local": json.loads(first.cursor)["local"]}
    # ... but not while the document's own run is still in progress (it evaluates the other backbones: their
    # records bring the date, all backbones in one run)
    run_id = p.instance.get_runs(dg.RunsFilter(tags={"dagster/partition": partition_of(keys[0])}), limit=1)[0].run_id
    p.instance.run_storage.handle_run_event(run_id, dg.DagsterEvent(event_type_value="PIPELINE_START", job_name="x"))
    assert not tick(p, "kg_increments", json.dumps(past)).run_requests
    p.instance.run_storage.handle_run_event(run_id, dg.DagsterEvent(event_type_value="PIPELINE_SUCCESS",
                                                                    job_name="x"))
    result = tick(p, "kg_increments", json.dumps(past))
    assert [(r.partition_key, r.job_name) for r in result.run_requests] == [(date, "kg_increments")]
    assert result.run_requests[0].asset_selection == [dg.AssetKey(["local", "knowledge_graph"])]
    assert not tick(p, "kg_increments", result.cursor).run_requests, "requested once while its merge may be under way"
    from karma_dagster.sensors.kg_increments import RETRY_AFTER_S, UNMERGED

    # still unmerged long after the request, no run in flight: requested again under a new run key
    late = json.loads(result.cursor)
    late[UNMERGED]["local"][date]["at"] -= RETRY_AFTER_S + 1
    retry = tick(p, "kg_increments", json.dumps(late))
    assert [r.partition_key for r in retry.run_requests] == [date]
    assert retry.run_requests[0].run_key != result.run_requests[0].run_key
    # once merged, nothing is requested and the date leaves the cursor's memory
    assert all(runner.run_increments(p.defs, p.instance, "local", [date]).values())
    done = tick(p, "kg_increments", retry.cursor)
    assert not done.run_requests and json.loads(done.cursor)[UNMERGED]["local"] == {}
