"""A `questions` partition per question holds at 10,000 questions: registered, loaded with the whole code location,
and backfilled (answers + completions) in one launch. Not timed: the figures print with `-s` (issue 13's report)."""

from __future__ import annotations

import time

import dagster as dg
from dagster._core.execution.backfill import PartitionBackfill
from dagster._core.utils import make_new_backfill_id

from karma_dagster.assets.questions import QUESTIONS, QUESTIONS_PER_RUN
from karma_dagster.definitions import build_definitions
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource

N = 10_000


def test_ten_thousand_question_partitions_register_load_and_backfill(tmp_path):
    keys = [f"bench.v1__q{i:05d}" for i in range(N)]
    with dg.instance_for_test() as instance:
        t0 = time.perf_counter()
        instance.add_dynamic_partitions(QUESTIONS, keys)
        added = time.perf_counter() - t0
        t0 = time.perf_counter()
        defs = build_definitions(backbones={"local": BackboneConfig()},  # the code location holds the question assets
                                 storage=KarmaStorageResource(data_dir=str(tmp_path / "karma")))
        graph = defs.resolve_asset_graph()
        loaded = time.perf_counter() - t0
        selection = [dg.AssetKey(["local", "answers"]), dg.AssetKey(["local", "completions"])]
        assert graph.get(selection[0]).partitions_def.get_partition_keys(dynamic_partitions_store=instance) == keys
        t0 = time.perf_counter()
        backfill = PartitionBackfill.from_asset_partitions(
            backfill_id=make_new_backfill_id(), asset_graph=graph, partition_names=keys, asset_selection=selection,
            backfill_timestamp=time.time(), tags={}, dynamic_partitions_store=instance, all_partitions=False,
            title="10k questions", description=None, run_config=None)
        instance.add_backfill(backfill)
        launched = time.perf_counter() - t0
        stored = instance.get_backfill(backfill.backfill_id)
        assert stored is not None and stored.asset_backfill_data.target_subset.num_partitions_and_non_partitioned_assets == 2 * N
        # the policy batches the questions: 200 runs per asset instead of 10,000
        assert graph.get(selection[0]).backfill_policy.max_partitions_per_run == QUESTIONS_PER_RUN
    print(f"\n{N:,} question partitions: add {added:.2f} s, definitions load {loaded:.2f} s, "
          f"backfill launch (answers + completions) {launched:.2f} s")
