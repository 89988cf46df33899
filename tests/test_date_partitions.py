"""Date partitions (partitioning/mode.py): a stage asset's partition is a day with papers, the day's papers its rows.

The same papers through `karma run` in both modes give the same KG; one failing paper of a day is reported and
the day's others go on to the KG; the new_papers sensor asks for a run per day and registers no document
partition; the asset graph is partitioned by the KG's dates throughout."""

from __future__ import annotations

import dataclasses

import dagster as dg
import pytest

from karma_dagster import cli, runner, stages
from karma_dagster.assets.chain import kg_key, stage_key
from karma_dagster.definitions import build_definitions
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.jobs import DOCUMENT_JOB, KG_INCREMENTS_JOB
from karma_dagster.partitioning.definitions import DOCUMENTS, KG_DATES
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource
from sensor_ticks import tick

FILES = ("abstracts.pubtator", "PMC4686705.xml", "PMC4686705.json")


def _date_storage(p) -> KarmaStorageResource:
    return KarmaStorageResource(data_dir=p.storage.data_dir, inbox=p.storage.inbox, cache_dir=p.storage.cache_dir,
                                partitions="date")


def _date_mode(p) -> tuple[dg.Definitions, KarmaStorageResource]:
    storage = _date_storage(p)
    return build_definitions(backbones={"local": BackboneConfig()}, storage=storage), storage


def _edges(p) -> set[tuple]:
    with p.kg.connect() as con:
        rows = con.execute("SELECT head_id, relation, tail_id FROM edges WHERE namespace = 'local'").fetchall()
    return set(rows)


def test_both_modes_grow_the_same_kg_from_the_same_papers(make_pipeline, tmp_path_factory, monkeypatch,
                                                          capsys) -> None:
    kgs, documents = {}, {}
    for mode in ("document", "date"):
        make_pipeline.tmp_path = tmp_path_factory.mktemp(mode)  # each mode its own inbox, data and instance
        p = make_pipeline(inbox_files=FILES)
        defs = p.defs
        if mode == "date":
            defs, _ = _date_mode(p)
        assert runner.import_kg(defs, p.instance)
        keys, failed_files = runner.register_inbox(defs, p.instance)
        assert not failed_files and len(keys) == 11
        failed, merged = runner.run_dates(defs, p.instance, keys, ["local"], log=lambda _: None)
        assert failed == {} and all(merged["local"].values())
        kgs[mode] = _edges(p)
        runs = p.instance.get_runs(filters=dg.RunsFilter(job_name=DOCUMENT_JOB))
        dates = {date_of_document_key(k) for k in keys}
        if mode == "date":
            assert {r.tags["dagster/partition"] for r in runs} == dates and len(runs) == len(dates)
            assert not p.instance.get_dynamic_partitions(DOCUMENTS)  # no partition per paper
            assert set(p.instance.get_dynamic_partitions(KG_DATES)) == dates
            states = runner.document_states(defs, p.instance)["local"]
            assert set(states.merged) == set(keys) and not states.pending
            (record,) = p.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=stage_key("local", "entities"), asset_partitions=["2015-12-08"]),
                limit=1).records
            meta = record.asset_materialization.metadata
            assert meta["documents"].value == 1 and meta["documents_failed"].value == 0
            assert "2015-12-08_pmc4686705" in meta["per_document"].value
            # the day's materialization sums its papers; each paper's own figures are kept with its table
            store, day = p.storage.stage_store(), date_of_document_key(keys[-1])
            day_keys = [k for k in keys if date_of_document_key(k) == day]
            (record,) = p.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=stage_key("local", "entities"), asset_partitions=[day]),
                limit=1).records
            meta = record.asset_materialization.metadata
            own = [store.recorded("local", "entities", k) for k in day_keys]
            assert len(day_keys) == 10 and [r["document"] for r in own] == day_keys
            assert [r["rows"] for r in own] == [len(store.read("local", "entities", k)) for k in day_keys]
            assert meta["batch_rows"].value == sum(r["rows"] for r in own) > 0
            assert meta["tokens_in"].value == sum(r["tokens_in"] for r in own)
            documents[mode] = (defs, p, day_keys[0], own[0])
    assert kgs["document"] and kgs["document"] == kgs["date"]
    # `karma status --document KEY`: the paper's stages as they recorded them, in the date mode's data folder
    defs, p, key, entities = documents["date"]
    monkeypatch.setattr(cli, "_defs", lambda _args: defs)
    capsys.readouterr()
    assert cli.main(["status", "--document", key]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split(" | ")[1]: line.split(" | ") for line in lines if line.startswith("| local |")}
    assert set(rows) == set(stages.names()) and rows["entities"][2] == str(entities["rows"])
    assert cli.main(["status", "--document", "1999-01-01_nope"]) == 1
    assert "no stage table of '1999-01-01_nope'" in capsys.readouterr().err


def test_a_failing_paper_is_reported_and_its_days_others_reach_the_kg(make_pipeline) -> None:
    p = make_pipeline(inbox_files=("abstracts.pubtator",))
    summaries = stages.by_name("summaries")
    keys_holder: list[str] = []

    def breaks_on_bad(inputs: stages.StageInputs):
        if inputs.document == keys_holder[0]:
            raise ValueError(f"summarizer broke on {inputs.document}")
        return summaries.run(inputs)

    registry = tuple(dataclasses.replace(s, run=breaks_on_bad) if s.name == "summaries" else s for s in stages.STAGES)
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=_date_storage(p), registry=registry)
    assert runner.import_kg(defs, p.instance)
    keys, _ = runner.register_inbox(defs, p.instance)
    bad = sorted(keys)[3]
    keys_holder.append(bad)
    lines: list[str] = []
    failed, merged = runner.run_dates(defs, p.instance, keys, ["local"], log=lines.append)
    assert set(failed) == {bad} and f"summarizer broke on {bad}" in failed[bad], failed
    assert any(f"{bad}: FAILED" in line for line in lines)
    states = runner.document_states(defs, p.instance)["local"]
    assert set(states.merged) == set(keys) - {bad}
    assert list(states.failed) == [bad] and "summarizer broke" in states.failed[bad]  # what `karma status` shows
    day = date_of_document_key(bad)
    (record,) = p.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=stage_key("local", "summaries"), asset_partitions=[day]), limit=1).records
    meta = record.asset_materialization.metadata
    assert set(meta["failed_documents"].value) == {bad} and meta["documents_failed"].value == 1
    (later,) = p.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=stage_key("local", "evaluated"), asset_partitions=[day]), limit=1).records
    assert set(later.asset_materialization.metadata["skipped_documents"].value) == {bad}  # not failed twice


def test_the_sensor_asks_for_a_run_per_day_and_the_graph_is_by_date(make_pipeline) -> None:
    p = make_pipeline(inbox_files=FILES)
    p.defs, storage = _date_mode(p)
    graph = p.defs.resolve_asset_graph()
    for key in (stage_key("local", "documents"), stage_key("local", "evaluated"), kg_key("local")):
        assert graph.get(key).partitions_def.name == KG_DATES
    result = tick(p, "new_papers")
    dates = {r.partition_key for r in result.run_requests}
    registered = Catalog(storage.catalog_path()).all_keys()
    assert len(registered) == 11 and dates == {date_of_document_key(k) for k in registered} and "2015-12-08" in dates
    assert sum(int(r.tags["karma/documents"]) for r in result.run_requests) == 11
    assert all(r.tags["karma/trigger"] == "new_papers" for r in result.run_requests)
    adds = {req.partitions_def_name: set(req.partition_keys) for req in result.dynamic_partitions_requests}
    assert set(adds) == {KG_DATES} and adds[KG_DATES] == dates
    with pytest.raises(ValueError, match="partitions"):
        KarmaStorageResource(partitions="month")

    # a day's run done, the kg_increments sensor asks for that day's merge (its records' partitions are days)
    assert runner.import_kg(p.defs, p.instance)
    quiet = tick(p, "kg_increments")
    assert not runner.run_documents(p.defs, p.instance, ["2015-12-08_pmc4686705"], log=lambda _m: None)
    merge = tick(p, "kg_increments", quiet.cursor)
    assert [(r.partition_key, r.job_name) for r in merge.run_requests] == [("2015-12-08", KG_INCREMENTS_JOB)]

