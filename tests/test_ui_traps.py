"""What surprised a UI user (issue 12). A document processed in a batch (a backfill run over many documents)
keeps its own metadata: each partition's materialization carries the document's rows, prompt id, preview and
figures (partition-scoped metadata over the batch's totals), with no extra event per document. And a
"Materialize all" does not re-import the seed KG."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest
from partition_views import BY_DATE, partitions_of

from karma_dagster import runner
from karma_dagster.runtime import services
from karma_dagster.assets.chain import stage_key
from karma_dagster.definitions import build_definitions
from karma_dagster.jobs import DOCUMENT_JOB
from karma_dagster.partitioning.definitions import documents_partitions
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.stages import STAGES

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(BY_DATE, reason="a batch of document partitions (a range run) exists in document mode only; by "
                    "date a run is a day, and test_date_partitions checks each paper's rows and recorded figures")
def test_each_document_of_a_batch_run_has_its_own_rows_and_preview(tmp_path, shared_cache):
    services.clear()
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(REPO / "data" / "inbox" / "abstracts.pubtator", inbox / "abstracts.pubtator")
    storage = KarmaStorageResource(data_dir=str(tmp_path / "karma"), inbox=str(inbox), cache_dir=str(shared_cache))
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=storage)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as inst:
        assert runner.import_kg(defs, inst)
        keys, _ = runner.register_inbox(defs, inst)
        ordered = [k for k in inst.get_dynamic_partitions(documents_partitions.name) if k in set(keys)][:3]
        tags = {"dagster/asset_partition_range_start": ordered[0], "dagster/asset_partition_range_end": ordered[-1]}
        result = defs.resolve_job_def(DOCUMENT_JOB).execute_in_process(instance=inst, tags=tags,
                                                                       run_config=runner.QUIET)
        assert result.success
        stages, sizes = storage.stage_store(), []
        for stage in ("segments", "entities", "evaluated"):
            key = stage_key("local", stage)
            batch = result.asset_materializations_for_node(key.to_python_identifier())
            assert len(batch) == len(ordered) and all(m.metadata["documents"].value == len(ordered) for m in batch)
            rows = {doc: len(stages.read("local", stage, doc)) for doc in ordered}
            assert all(m.metadata["batch_rows"].value == sum(rows.values()) for m in batch)  # the batch's total
            sizes.append(len(set(rows.values())))
            for doc in ordered:
                (record,) = inst.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=key, asset_partitions=[doc]), limit=1).records
                meta = record.asset_materialization.metadata
                assert meta["document"].value == doc
                assert meta["rows"].value == rows[doc], (stage, doc)
                assert "preview" in meta and "prompt_id" in meta and "per_document" in meta
                table = stages.read("local", stage, doc)  # the preview shows the paper's own first rows
                assert (_preview_cells(meta["preview"].value) == _first_rows(table, stage) if len(table)
                        else meta["preview"].value == "_(no rows)_")
                assert meta["batch"].value.startswith(f"one of {len(ordered)} documents")
            assert not inst.fetch_observations(key, limit=1).records, "no event beyond the materializations"
        assert max(sizes) > 1, "some stage has documents of different sizes: per-document rows are told apart"


def _preview_cells(markdown: str) -> list[list[str]]:
    """A preview's header and rows, cell by cell (its separator line left out)."""
    lines = markdown.splitlines()
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[:1] + lines[2:]]


def _first_rows(table, stage: str) -> list[list[str]]:
    """What a user should see in the stage's preview: its columns and its first ten stored rows, texts cut at 80."""
    columns = list(next(s for s in STAGES if s.name == stage).preview)
    def cell(v) -> str:
        text = "" if v is None or v != v else f"{v:g}" if isinstance(v, float) else str(v)
        text = text.replace("|", "\\|").replace("\n", " ")
        return text if len(text) <= 80 else text[:79] + "…"
    return [columns] + [[cell(v) for v in row] for row in table[columns].head(10).astype(object).itertuples(index=False)]


def test_materializing_the_seed_again_does_not_reimport_unless_asked(tmp_path, shared_cache):
    """Issue 12: "Materialize all" selects the seed KG too and used to re-import it (index rebuilt, every stage
    stale); the same files are imported once, `reimport: true` (and `karma import-kg`) import again."""
    from karma_dagster.kg.store import KGStore

    storage = KarmaStorageResource(data_dir=str(tmp_path / "karma"), cache_dir=str(shared_cache))
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=storage)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as inst:
        assert runner.import_kg(defs, inst)
        first = KGStore(storage.kg_path()).seed_fingerprint()
        assert runner.import_kg(defs, inst)  # what a "Materialize all" does to the seed
        event = inst.get_latest_materialization_event(dg.AssetKey("seed_kg"))
        assert "skipped" in event.asset_materialization.metadata
        assert event.asset_materialization.metadata["nodes"].value > 0  # the KG's figures are still shown
        assert KGStore(storage.kg_path()).seed_fingerprint() == first
        assert runner.import_kg(defs, inst, reimport=True)
        event = inst.get_latest_materialization_event(dg.AssetKey("seed_kg"))
        assert "skipped" not in event.asset_materialization.metadata


def test_selecting_the_kg_asset_requests_only_dates_that_have_documents(tmp_path, shared_cache):
    """Issue 12: "Materialize all" (every partition of every asset, as the UI's backfill dialog launches it) fanned
    out to each calendar day since the start date, one KG run over ~19,000 days of nothing. The KG's partitions
    are now the dates of registered documents, so the backfill targets exactly those."""
    from dagster._core.execution.backfill import PartitionBackfill

    from karma_dagster.ingest.keys import date_of_document_key
    from karma_dagster.partitioning.definitions import KG_DATES

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name in ("abstracts.pubtator", "PMC4686705.xml", "PMC4686705.json"):
        shutil.copy(REPO / "data" / "inbox" / name, inbox / name)
    storage = KarmaStorageResource(data_dir=str(tmp_path / "karma"), inbox=str(inbox), cache_dir=str(shared_cache))
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=storage)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as inst:
        keys, _ = runner.register_inbox(defs, inst)
        dates = {date_of_document_key(k) for k in keys}
        assert len(keys) == 11 and len(dates) >= 2
        graph = defs.resolve_asset_graph()
        backfill = PartitionBackfill.from_asset_partitions(
            backfill_id="all", asset_graph=graph, partition_names=None, asset_selection=list(graph.materializable_asset_keys),
            backfill_timestamp=0.0, tags={}, dynamic_partitions_store=inst, all_partitions=True, title=None,
            description=None, run_config=None)
        target = backfill.asset_backfill_data.target_subset
        kg = dg.AssetKey(["local", "knowledge_graph"])
        assert set(target.get_partitions_subset(kg).get_partition_keys()) == dates
        assert set(target.get_partitions_subset(stage_key("local", "evaluated")).get_partition_keys()) == set(
            partitions_of(keys))  # a partition per paper, or per day (partitioning/mode.py)
        assert sorted(inst.get_dynamic_partitions(KG_DATES)) == sorted(dates)
