"""The review_decisions sensor: accepted, unmerged decisions request the KG increment of their date, once."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from karma_dagster.jobs import kg_jobs
from karma_dagster.kg.store import KGStore
from karma_dagster.partitioning.definitions import KG_DATES
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.review.merge_inputs import record_merged, review_docs
from karma_dagster.review.models import DecisionIn
from karma_dagster.sensors.review import build_review_sensor
from test_review_queue import by_source, filled_queue, paths, seed_kg  # noqa: F401


def test_accepted_decisions_request_their_kg_date_once(paths: DataPaths, tmp_path) -> None:  # noqa: F811
    queue = filled_queue(paths)
    sensor = build_review_sensor(["local"], kg_jobs(["local"]))
    storage = KarmaStorageResource(data_dir=str(paths.root))
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        def tick() -> dg.SensorResult:
            return sensor(dg.build_sensor_context(instance=instance, resources={"storage": storage}))

        assert tick().skip_reason and "no accepted review decision" in str(tick().skip_reason)
        items = by_source(queue)
        queue.decide(items["new_relation_type"].item_id, DecisionIn(action="accept", reviewer="alice"))
        assert tick().skip_reason  # a new relation type waits for the schema: nothing to launch
        queue.decide(items["unresolved_conflict"].item_id, DecisionIn(action="accept", reviewer="alice"))
        queue.decide(items["schema_review"].item_id, DecisionIn(action="reject", reviewer="alice"))

        result = tick()
        today = dt.datetime.now(dt.UTC).date().isoformat()
        (request,) = result.run_requests
        assert (request.partition_key, request.tags["karma/trigger"]) == (today, "review_decisions")
        assert result.dynamic_partitions_requests[0].partition_keys == [today]
        assert tick().run_requests[0].run_key == request.run_key  # the same waiting set: the same run key

        # what the increment asset does for that date: merge the chain's and the review's documents, record them
        docs = review_docs(queue, KGStore(paths.kg), "local", dt.date.fromisoformat(today))
        assert list(docs) == [f"review_{items['unresolved_conflict'].item_id}"]
        assert record_merged(queue, docs, dt.date.fromisoformat(today)) == [items["unresolved_conflict"].item_id]
        instance.add_dynamic_partitions(KG_DATES, [today])
        assert tick().skip_reason
