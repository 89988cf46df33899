"""`new_papers` and `kg_increments`, evaluated the way the daemon does (an instance_ref context: STACK.md)."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from karma_dagster import runner
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.partitioning.definitions import documents_partitions
from karma_dagster.resources.backbones import BackboneConfig
from partition_views import BY_DATE, partition_of, partitions_of
from sensor_ticks import tick

JATS = ("PMC4686705.xml", "PMC4686705.json")


def test_new_papers_registers_partitions_requests_runs_once_and_again_on_change(make_pipeline):
    p = make_pipeline(inbox_files=JATS + ("abstracts.pubtator",))
    (p.inbox / "broken.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 50)

    first = tick(p, "new_papers")
    keys = sorted(r.partition_key for r in first.run_requests)
    docs = sorted(Catalog(p.storage.catalog_path()).all_keys())
    assert len(docs) == 11  # the JATS paper + 10 PubTator abstracts; the broken PDF is skipped, not fatal
    assert "2015-12-08_pmc4686705" in docs and keys == partitions_of(docs)  # a run per paper (or per day)
    adds = {r.partitions_def_name: sorted(r.partition_keys) for r in first.dynamic_partitions_requests}
    assert adds.get(documents_partitions.name) == (None if BY_DATE else keys)
    assert adds["kg_dates"] == sorted({k.split("_", 1)[0] for k in docs})  # the KG's: the dates with documents
    assert all(r.job_name == "document_chain" and r.run_key for r in first.run_requests)
    assert "broken.pdf" in json.loads(first.cursor)["failed"]

    for request in first.dynamic_partitions_requests:  # what the daemon does with the requests
        p.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    second = tick(p, "new_papers", first.cursor)
    assert not second.run_requests and second.skip_message

    # Edit the JATS file's content: its document (and only it) is requested again, under the same key.
    xml = p.inbox / "PMC4686705.xml"
    xml.write_text(xml.read_text().replace("Saudi", "Saudi Arabian", 1))
    third = tick(p, "new_papers", second.cursor)
    assert [r.partition_key for r in third.run_requests] == [partition_of("2015-12-08_pmc4686705")]
    assert third.run_requests[0].run_key != next(r.run_key for r in first.run_requests if r.partition_key == keys[0])
    assert not third.dynamic_partitions_requests or not third.dynamic_partitions_requests[0].partition_keys


def test_kg_increments_requests_the_dates_of_newly_evaluated_documents(make_pipeline):
    """One run per date merges every ready backbone (issue 31: a run each was a process start each)."""
    from karma_dagster.jobs import KG_INCREMENTS_JOB

    p = make_pipeline(inbox_files=JATS, backbones={"local": BackboneConfig(),
                                                   "local-single": BackboneConfig(mode="single_agent")})
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    quiet = tick(p, "kg_increments")
    assert not quiet.run_requests

    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    run_id = p.instance.fetch_materializations(dg.AssetKey(["local", "evaluated"]), limit=1).records[0].run_id
    status = p.instance.get_run_by_id(run_id).status

    def set_status(event: str) -> None:  # as the run storage records a run's start and end
        p.instance.run_storage.handle_run_event(run_id, dg.DagsterEvent(event_type_value=event, job_name="x"))

    set_status("PIPELINE_START")  # the run that evaluated it still runs (its other backbones come seconds later)
    busy = tick(p, "kg_increments", quiet.cursor)
    assert not busy.run_requests and "wait" in busy.skip_message
    set_status("PIPELINE_SUCCESS")
    assert p.instance.get_run_by_id(run_id).status == status
    result = tick(p, "kg_increments", busy.cursor)
    assert [(r.partition_key, r.job_name) for r in result.run_requests] == [("2015-12-08", KG_INCREMENTS_JOB)]
    both = [dg.AssetKey(["local", "knowledge_graph"]), dg.AssetKey(["local-single", "knowledge_graph"])]
    assert sorted(result.run_requests[0].asset_selection) == both
    again = tick(p, "kg_increments", result.cursor)
    assert not again.run_requests, "each evaluated materialization triggers its date once"

    request = result.run_requests[0]  # the request as the daemon runs it: both backbones merged by one run
    run = p.defs.resolve_job_def(KG_INCREMENTS_JOB).execute_in_process(
        instance=p.instance, partition_key=request.partition_key, asset_selection=request.asset_selection,
        tags=request.tags)
    assert run.success
    kg = p.defs.resources["storage"].kg_store()
    assert all(kg.merged_documents(ns).keys() == set(keys) for ns in ("local", "local-single"))


def test_turning_kg_increments_on_after_merged_runs_replays_nothing(make_pipeline):
    """Issue 12: the sensor's first tick used to request the date of every `evaluated` materialization on
    record (10 runs with nothing new to merge); it starts from now, requesting only what is unmerged."""
    p = make_pipeline(inbox_files=JATS + ("abstracts.pubtator",))
    assert not runner.run_main(p.defs, p.instance, log=lambda _m: None).failed  # every document merged
    first = tick(p, "kg_increments")
    assert not first.run_requests, [r.partition_key for r in first.run_requests]
    # a document evaluated after the sensor was turned on still triggers its date
    xml = p.inbox / "PMC4686705.xml"
    xml.write_text(xml.read_text().replace("Saudi", "Saudi Arabian", 1))
    keys, _ = runner.register_inbox(p.defs, p.instance)
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    assert [r.partition_key for r in tick(p, "kg_increments", first.cursor).run_requests] == ["2015-12-08"]


def test_a_tick_that_died_after_registering_loses_no_paper(make_pipeline):
    """Registration and the outbox entry share one transaction; the cursor only moves when a tick returns."""
    import datetime as dt

    from karma_dagster.ingest.inbox import scan_inbox

    p = make_pipeline(inbox_files=JATS)
    # A tick that scanned (and so registered the paper) but died before returning its requests:
    scan_inbox(p.inbox, Catalog(p.storage.catalog_path()), arrival_date=dt.date.today())
    retry = tick(p, "new_papers")  # the next tick starts from the old (empty) cursor
    assert [r.partition_key for r in retry.run_requests] == [partition_of("2015-12-08_pmc4686705")]
    assert json.loads(retry.cursor)["last_request_seq"] >= 1


def test_papers_already_processed_by_karma_run_are_not_requested_again(make_pipeline):
    p = make_pipeline(inbox_files=JATS)
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)  # `karma run` registers (outbox) and processes
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    first = tick(p, "new_papers")
    assert not first.run_requests, "same content already evaluated by every backbone"
    xml = p.inbox / "PMC4686705.xml"
    xml.write_text(xml.read_text().replace("Saudi", "Saudi Arabian", 1))
    assert [r.partition_key for r in tick(p, "new_papers", first.cursor).run_requests] == partitions_of(keys)


@pytest.mark.skipif(BY_DATE, reason="document partitions only: with date partitions a day's papers finish together "
                    "in the day's run, so no day waits with its first paper done and others pending (no early merge); "
                    "tests/test_date_partitions.py checks the day's merge request")
def test_kg_increments_requests_a_date_once_its_documents_are_done_and_outranks_paper_runs(make_pipeline,
                                                                                          monkeypatch):
    """Issue 31: a date is requested at its first finish (the KG grows while the inbox is read), then when none of
    its documents is pending (or DEBOUNCE_S after its last finish), not once per finished paper; a queued increment
    of the date covers it; increment runs outrank paper runs."""
    from dagster._core.storage.dagster_run import DagsterRun

    from karma_dagster.jobs import INCREMENT_PRIORITY, KG_INCREMENTS_JOB, kg_job_name
    from karma_dagster.sensors import kg_increments

    p = make_pipeline(inbox_files=("abstracts.pubtator",))
    shipped = p.inbox / "abstracts.pubtator"  # three of the sample's undated abstracts: one arrival date
    shipped.write_text("\n\n".join(shipped.read_text().strip().split("\n\n")[:3]) + "\n")
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    by_date: dict[str, list[str]] = {}
    for key in keys:
        by_date.setdefault(key.split("_", 1)[0], []).append(key)
    date, docs = max(by_date.items(), key=lambda kv: len(kv[1]))
    assert len(docs) == 3, by_date
    first = tick(p, "kg_increments")

    def run(some: list[str]) -> None:
        assert not runner.run_documents(p.defs, p.instance, some, log=lambda _m: None)

    run(docs[:1])  # the date's first finish: merged at once, two papers still pending
    early = tick(p, "kg_increments", first.cursor)
    assert [r.partition_key for r in early.run_requests] == [date]
    assert json.loads(early.cursor)["__early__"] == {"local": [date]}
    assert not tick(p, "kg_increments", early.cursor).run_requests  # no new finish: nothing more

    run(docs[1:2])  # another paper of the date finishes: no request, the date waits for its last paper
    held = tick(p, "kg_increments", early.cursor)
    assert not held.run_requests and "wait for their other documents" in held.skip_message
    assert json.loads(held.cursor)["__waiting__"]["local"].keys() == {date}
    still = tick(p, "kg_increments", held.cursor)
    assert not still.run_requests

    monkeypatch.setattr(kg_increments, "DEBOUNCE_S", 0)  # no finish for DEBOUNCE_S: requested despite the rest...
    p.instance.add_run(DagsterRun(job_name="document_chain", run_id="reading-the-last", status=dg.DagsterRunStatus.STARTED,
                                  tags={"dagster/partition": docs[2]}))
    reading = tick(p, "kg_increments", still.cursor)  # ...unless its last paper is being read (a loaded machine)
    assert not reading.run_requests and "wait for their other documents" in reading.skip_message
    monkeypatch.setattr(kg_increments, "DEBOUNCE_READING_S", 0)  # read for that long: requested anyway
    assert [r.partition_key for r in tick(p, "kg_increments", reading.cursor).run_requests] == [date]
    p.instance.delete_run("reading-the-last")
    debounced = tick(p, "kg_increments", still.cursor)
    assert [r.partition_key for r in debounced.run_requests] == [date]
    assert "__waiting__" not in json.loads(debounced.cursor) or not json.loads(debounced.cursor)["__waiting__"]
    monkeypatch.undo()

    run(docs[2:])  # the date's last papers: requested once, as soon as none is pending (not early again)
    p.instance.add_run(DagsterRun(job_name="document_chain", run_id="still-writing", status=dg.DagsterRunStatus.STARTED,
                                  tags={"dagster/partition": docs[2]}))  # its run between two backbones at tick start
    writing = tick(p, "kg_increments", debounced.cursor)
    assert not writing.run_requests, "a final merge of some backbones now and the rest a tick later"
    p.instance.delete_run("still-writing")
    done = tick(p, "kg_increments", writing.cursor)
    assert [(r.partition_key, r.job_name) for r in done.run_requests] == [(date, KG_INCREMENTS_JOB)]
    assert not json.loads(done.cursor).get("__early__")  # done: a later paper of the date is merged early again
    assert not tick(p, "kg_increments", done.cursor).run_requests

    # A queued or not started increment of the date covers a document that finishes before it starts.
    p.instance.add_run(DagsterRun(job_name=kg_job_name("local"), run_id="queued-increment",
                                  status=dg.DagsterRunStatus.NOT_STARTED, tags={"dagster/partition": date}))
    run(docs[:1])  # evaluated again: a new record of the date
    covered = tick(p, "kg_increments", done.cursor)
    assert not covered.run_requests, [r.run_key for r in covered.run_requests]

    for name in (kg_job_name("local"), KG_INCREMENTS_JOB):
        job = p.defs.resolve_job_def(name)
        assert int(job.tags["dagster/priority"]) == INCREMENT_PRIORITY > 100 * 100  # any controller score x 100


@pytest.mark.skipif(BY_DATE, reason="document partitions only: with date partitions a day's papers finish together "
                    "in the day's run, so no day waits with its first paper done and others pending (no early merge); "
                    "tests/test_date_partitions.py checks the day's merge request")
def test_kg_increments_turned_on_after_a_dates_first_papers_merges_it_at_most_twice(make_pipeline):
    """Issue 31: the sensor's first tick can come after the inbox's first papers were evaluated (new_papers' tick
    creating a day's runs holds it back). Their date was merged as "unmerged", then early at its next finish, then
    at its end: 3 merges. The unmerged request of a date with pending documents is its early merge."""
    p = make_pipeline(inbox_files=("abstracts.pubtator",))
    shipped = p.inbox / "abstracts.pubtator"  # three of the sample's undated abstracts: one arrival date
    shipped.write_text("\n\n".join(shipped.read_text().strip().split("\n\n")[:3]) + "\n")
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    date = keys[0].split("_", 1)[0]
    assert len(keys) == 3 and {k.split("_", 1)[0] for k in keys} == {date}

    def run(some: list[str]) -> None:
        assert not runner.run_documents(p.defs, p.instance, some, log=lambda _m: None)

    run(keys[:1])  # finished before the sensor's first tick
    first = tick(p, "kg_increments")
    assert [r.partition_key for r in first.run_requests] == [date]  # unmerged: requested at once
    assert json.loads(first.cursor)["__early__"] == {"local": [date]}
    run(keys[1:2])  # the date's next finish: it was merged early already, its last paper is pending
    held = tick(p, "kg_increments", first.cursor)
    assert not held.run_requests and "wait for their other documents" in held.skip_message
    run(keys[2:])
    done = tick(p, "kg_increments", held.cursor)
    assert [r.partition_key for r in done.run_requests] == [date]  # the second and last merge of the date
    assert not json.loads(done.cursor).get("__early__")
    assert not tick(p, "kg_increments", done.cursor).run_requests


def test_kg_increments_sweeps_the_catalog_a_slice_a_tick_for_what_history_left_unmerged(make_pipeline, monkeypatch):
    """Issue 33: a tick read every registered document's state (73 s at ten million papers). Now it reads the
    dates it acts on and a slice of the others, in date order, wrapping: an unmerged document of an old date is
    found when its slice comes, requested once (not again at each pass while its request stands)."""
    from karma_dagster.sensors import kg_increments

    p = make_pipeline(inbox_files=JATS + ("abstracts.pubtator",))
    assert not runner.run_main(p.defs, p.instance, log=lambda _m: None).failed  # every document merged
    dates = Catalog(p.storage.catalog_path()).dates_after("", 10**9)
    assert len(dates) >= 2 and dates == sorted(dates)  # the JATS paper's and the abstracts' (arrival) dates
    last = len(dates) - 1
    lost = Catalog(p.storage.catalog_path()).documents_of_days([dates[last]])[dates[last]][0]
    with p.kg.connect() as con:  # a merge that crashed after its evaluation
        con.execute("DELETE FROM merged_documents WHERE doc_key = ?", [lost])
    monkeypatch.setattr(kg_increments, "SWEEP_DOCUMENTS", 1)  # a date a tick
    cursor, seen = None, []
    for _ in range(len(dates) + 2):
        result = tick(p, "kg_increments", cursor)
        cursor = result.cursor
        seen.append((json.loads(cursor)["__sweep__"], [r.partition_key for r in result.run_requests]))
    swept = [s for s, _ in seen]
    assert swept[:len(dates)] == dates and swept[len(dates):] == dates[:2]  # in order, then from the start
    assert [requested for s, requested in seen if requested] == [[dates[last]]]  # when its slice came, once
    assert seen[last] == (dates[last], [dates[last]])
    # the whole corpus in one slice (the default at this size): the same request at the first tick
    monkeypatch.setattr(kg_increments, "SWEEP_DOCUMENTS", 5000)
    assert [r.partition_key for r in tick(p, "kg_increments").run_requests] == [dates[last]]
