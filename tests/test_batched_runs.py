"""`karma run` runs a date's documents several per in-process run (issue 12: a run's start-up and per-step events
are paid once per batch, bench/throughput.py), and a failing document still fails alone: the batch is rerun
without it, and it gets a run of its own, which is what `karma status` and the UI show. By date (partitioning/mode.py)
a day's partition is the batch: one run per day, and a failing paper is reported in its day's `failed_documents`
while the others of its day go on in the same run."""

from __future__ import annotations

import dataclasses

import dagster as dg

from karma_dagster import runner, stages
from karma_dagster.definitions import build_definitions
from karma_dagster.jobs import DOCUMENT_JOB
from karma_dagster.runtime.ledger import Ledger, ledger_path
from karma_dagster.resources.backbones import BackboneConfig
from partition_views import BY_DATE, document_metadata, partitions_of

RANGE_START = "dagster/asset_partition_range_start"


def _document_runs(inst: dg.DagsterInstance) -> list[dg.DagsterRun]:
    return list(reversed(inst.get_runs(filters=dg.RunsFilter(job_name=DOCUMENT_JOB))))  # oldest first


def test_a_dates_documents_share_one_run_and_each_keeps_its_own_metadata(make_pipeline):
    p = make_pipeline(inbox_files=("abstracts.pubtator",))
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    assert len(keys) == 10
    lines: list[str] = []
    listed = []  # each listing of the instance's dynamic partitions (all documents ever registered: O(catalog))
    list_partitions = p.instance.get_dynamic_partitions
    p.instance.get_dynamic_partitions = lambda *a, **k: listed.append(a) or list_partitions(*a, **k)
    try:
        assert runner.run_documents(p.defs, p.instance, keys, log=lines.append) == {}
    finally:
        del p.instance.get_dynamic_partitions
    # a document's metadata no longer lists the whole catalog once per stage (10 papers x 8 stages = 80 listings
    # before): what is left is Dagster's own, per run and step, whatever the number of papers in the batch
    assert len(listed) < len(keys) * len(stages.STAGES), f"{len(listed)} listings of the document partitions"
    lines = [line for line in lines if " in one run (" not in line]  # a run's announcement before it starts
    runs = _document_runs(p.instance)
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs) and len(lines) == 10
    if BY_DATE:  # a run per day, each reading every paper of its day
        assert sorted(r.tags["dagster/partition"] for r in runs) == partitions_of(keys)
        assert all(" ok (date " in line for line in lines), lines
    else:
        (run,) = runs
        assert run.tags[RANGE_START] == min(keys)
        assert all("ok (batch of 10" in line for line in lines), lines
    states = runner.document_states(p.defs, p.instance)["local"]
    assert set(states.evaluated) == set(keys) and not states.pending
    entities = dg.AssetKey(["local", "entities"])
    for key in keys:  # the document's own rows, not the batch's (or day's) total
        rows = len(p.storage.stage_store().read("local", "entities", key))
        assert document_metadata(p, entities, key)["rows"] == rows
    # the runs booked one ledger row per document and agent (written together at the end of each step)
    booked = [r for run in runs for r in Ledger(ledger_path(p.storage.root())).rows(run_id=run.run_id)]
    assert {(r.partition, r.stage) for r in booked} == {(k, s.name) for k in keys for s in stages.STAGES}
    assert {r.status for r in booked} == {"materialized"}


def test_a_failing_document_fails_alone_and_the_rest_of_its_batch_completes(make_pipeline):
    p = make_pipeline(inbox_files=("abstracts.pubtator",))
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    bad = sorted(keys)[3]
    summaries = stages.by_name("summaries")

    def breaks_on_bad(inputs: stages.StageInputs):
        if inputs.document == bad:
            raise ValueError(f"summarizer broke on {inputs.document}")
        return summaries.run(inputs)

    registry = tuple(dataclasses.replace(s, run=breaks_on_bad) if s.name == "summaries" else s
                     for s in stages.STAGES)
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=p.storage, registry=registry)
    lines: list[str] = []
    failed = runner.run_documents(defs, p.instance, keys, log=lines.append)
    assert set(failed) == {bad} and f"summarizer broke on {bad}" in failed[bad], failed
    states = runner.document_states(defs, p.instance)["local"]
    assert set(states.evaluated) == set(keys) - {bad}
    runs = _document_runs(p.instance)
    ledger = Ledger(ledger_path(p.storage.root()))
    if BY_DATE:
        # The bad paper's day ran once: the paper failed in it, its day's other papers were evaluated in the same
        # run, and no paper got a run of its own.
        assert not any("run alone" in line for line in lines), lines
        assert sorted(r.tags["dagster/partition"] for r in runs) == partitions_of(keys)
        (day_run,) = [r for r in runs if r.tags["dagster/partition"] == partitions_of([bad])[0]]
        assert day_run.status == dg.DagsterRunStatus.SUCCESS
        booked = {(r.partition, r.stage): r.status for r in ledger.rows(run_id=day_run.run_id)}
        assert booked[(bad, "summaries")] == "failed", "a failure in a day's run is booked too"
        assert states.failed[bad].startswith(f"failed in run {day_run.run_id[:8]}: ")
        assert f"summarizer broke on {bad}" in states.failed[bad] and set(states.failed) == {bad}
        return
    assert any("1 failing document(s) run alone, the other 9 again" in line for line in lines), lines
    assert runs[0].status == dg.DagsterRunStatus.FAILURE and runs[0].tags[RANGE_START] == min(keys)
    alone = [r for r in runs if r.tags.get("dagster/partition") == bad]
    assert len(alone) == 1 and alone[0].status == dg.DagsterRunStatus.FAILURE
    assert not any(r.tags.get("dagster/partition") in set(keys) - {bad} for r in runs), \
        "the others ran again in batches, not one by one"
    booked = {(r.partition, r.stage): r.status for r in ledger.rows(run_id=runs[0].run_id)}
    assert booked[(bad, "summaries")] == "failed", "a failure in a batch is booked too"
    assert booked[(sorted(keys)[0], "summaries")] == "materialized"
    assert states.failed == {bad: f"last run {alone[0].run_id[:8]} failed"}
