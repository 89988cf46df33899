"""`karma backfill` through the real backfill daemon logic (its passes run in this process): only the documents
of the chosen dates, many documents per run (the stages' backfill policy; by date, a run per day), then the
increments in date order."""

from __future__ import annotations

import datetime as dt
import shutil
from collections import defaultdict
from pathlib import Path

import dagster as dg

from karma_dagster import runner
from karma_dagster.runtime import services
from karma_dagster.kg.store import KGStore
from karma_dagster.stages import STAGE_NAMES
from karma_dagster.definitions import build_definitions
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource
import daemon_harness as daemon
from partition_views import BY_DATE

REPO = Path(__file__).resolve().parent.parent


def _run_partitions(run: dg.DagsterRun) -> list[str]:
    return [run.tags[k] for k in ("dagster/partition", "dagster/asset_partition_range_start",
                                  "dagster/asset_partition_range_end") if k in run.tags]


def test_backfill_of_two_dates_runs_only_their_documents_then_their_increments_in_order(tmp_path, shared_cache):
    services.clear()
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name in ("abstracts.pubtator", "PMC4686705.xml", "PMC4686705.json", "PMC4736972.pdf", "PMC4736972.json",
                 "PMC4737013.pdf", "PMC4737013.json", "PMC4738914.pdf", "PMC4738914.json"):
        shutil.copy(REPO / "data" / "inbox" / name, inbox / name)
    storage = {"data_dir": str(tmp_path / "karma"), "inbox": str(inbox), "cache_dir": str(shared_cache)}
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=KarmaStorageResource(**storage))
    code = daemon.write_code_location(tmp_path, {"local": {}}, storage)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home"), synchronous_run_launcher=True,
                           synchronous_run_coordinator=True) as inst:
        assert runner.import_kg(defs, inst)
        keys, failed = runner.register_inbox(defs, inst)
        assert not failed and len(keys) == 14
        by_date: dict[str, list[str]] = defaultdict(list)
        for key in keys:
            by_date[date_of_document_key(key)].append(key)
        dates = sorted(by_date)
        assert len(dates) >= 3
        start, end = dates[0], dates[1]  # the first two publication dates; later ones (and today's) stay out
        chosen = sorted(by_date[start] + by_date[end])

        backfill_ids: list[str] = []
        with daemon.workspace(inst, code) as ws:
            def wait(backfill_id: str) -> str:
                backfill_ids.append(backfill_id)
                return daemon.run_backfill(ws, backfill_id)

            status = runner.backfill_dates(
                defs, inst, dt.date.fromisoformat(start), dt.date.fromisoformat(end), ["local"], wait=wait, log=lambda _: None
            )
        assert status == {"documents": "COMPLETED_SUCCESS", "increments": "COMPLETED_SUCCESS"}

        docs_backfills = [inst.get_backfill(b) for b in backfill_ids[:-1]]
        targeted = defaultdict(list)
        for backfill in docs_backfills:
            for akpk in backfill.asset_backfill_data.target_subset.iterate_asset_partitions():
                targeted[akpk.asset_key.to_user_string()].append(akpk.partition_key)
        doc_runs = [r for b in backfill_ids[:-1] for r in inst.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": b}))]
        assert doc_runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in doc_runs)
        if BY_DATE:
            # One backfill of the two days (a day's partition holds its documents), a run per day, each
            # reading every paper of its day.
            assert len(docs_backfills) == 1
            assert {k: sorted(v) for k, v in targeted.items()} == {f"local/{s}": [start, end] for s in STAGE_NAMES}
            assert sorted(day for r in doc_runs for day in set(_run_partitions(r))) == [start, end]
        else:
            # The documents backfills (one per controller priority tier) target exactly the chain of the chosen
            # dates' documents, each document once, higher tiers with a higher run priority ...
            assert {k: sorted(v) for k, v in targeted.items()} == {f"local/{s}": chosen for s in STAGE_NAMES}
            priorities = [int(b.tags["dagster/priority"]) for b in docs_backfills]
            assert priorities == sorted(priorities, reverse=True)
            # ... and ran them in few runs (many documents a run), touching no other document.
            assert all(r.tags.get("dagster/priority") and r.tags.get("karma/cca_tier") for r in doc_runs)
            assert len(doc_runs) <= len(docs_backfills) < len(chosen) * len(STAGE_NAMES)
            assert any(r.tags.get("dagster/asset_partition_range_start") != r.tags.get("dagster/asset_partition_range_end")
                       for r in doc_runs)  # a multi-document run
        stages = KarmaStorageResource(**storage).stage_store()
        assert {k for k in keys if stages.exists("local", "evaluated", k)} == set(chosen)

        # Then the increments of exactly those dates, after every document run, in date order.
        kg_backfill = inst.get_backfill(backfill_ids[-1])
        kg_target = {p.partition_key for p in kg_backfill.asset_backfill_data.target_subset.iterate_asset_partitions()}
        assert kg_target == {start, end}
        kg_runs = sorted(inst.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_ids[-1]})),
                         key=lambda r: inst.get_run_record_by_id(r.run_id).start_time)
        assert kg_runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in kg_runs)
        last_doc_end = max(inst.get_run_record_by_id(r.run_id).end_time for r in doc_runs)
        assert inst.get_run_record_by_id(kg_runs[0].run_id).start_time >= last_doc_end
        merged = [d for r in kg_runs for d in _run_partitions(r)]
        assert merged == sorted(merged) and set(merged) == {start, end}
        with KGStore(KarmaStorageResource(**storage).kg_path()).connect(read_only=True) as con:
            rows = con.execute("SELECT date::VARCHAR FROM increments WHERE namespace = 'local' ORDER BY merged_at").fetchall()
        assert [r[0] for r in rows] == sorted({start, end})
