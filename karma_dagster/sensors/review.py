"""`review_decisions`: accepted review decisions not yet in the KG request the KG increment of their date.

A reviewed item enters under the UTC date it was decided on (review/merge_inputs.py); the increment asset merges
that date's chain documents together with its accepted review documents (`review_docs`) and records them merged.
One request per set of waiting items of a date (the run key), so a tick repeats nothing a run already took.
"""

import hashlib

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from karma_dagster.runtime.date_range import split_dates
from karma_dagster.kg.store import schema_relations
from karma_dagster.partitioning.definitions import KG_DATES, first_kg_date, kg_dates_partitions
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.review.merge_inputs import merge_date
from karma_dagster.review.queue import ReviewQueue


def build_review_sensor(
    namespaces: list[str], jobs: dict[str, UnresolvedAssetJobDefinition], interval_s: int = 30
) -> dg.SensorDefinition:
    @dg.sensor(
        name="review_decisions",
        jobs=list(jobs.values()),
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Requests the KG increment of the dates holding accepted review decisions not merged yet "
                    "(`karma review`): the increment merges them with provenance 'reviewed by <name> via <source>'.",
    )
    def review_decisions(context: dg.SensorEvaluationContext, storage: KarmaStorageResource) -> dg.SensorResult:
        queue = ReviewQueue.for_data(storage.paths())
        waiting: dict[tuple[str, str], list[str]] = {}
        for item, decision in queue.accepted(unmerged_only=True):
            if item.relation not in schema_relations():  # a new relation type waits for the schema: nothing to launch
                continue
            for backbone in item.backbones:  # one item per fact: every backbone that proposed it takes it
                if not decision.merged_in(backbone):
                    waiting.setdefault((backbone, merge_date(decision).isoformat()), []).append(item.item_id)
        requests = []
        for (ns, date), ids in sorted(waiting.items()):
            if ns not in jobs:
                context.log.warning(f"review_decisions: {len(ids)} accepted item(s) of backbone {ns!r}, which is not "
                                    "enabled here: they wait")
                continue
            dates, outside = split_dates({date}, start=first_kg_date())
            for why in outside.values():
                context.log.error(f"{ns}: {why}")
            sig = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]
            requests += [dg.RunRequest(partition_key=d, run_key=f"{ns}:{d}:review:{sig}", job_name=jobs[ns].name,
                                       tags={"karma/backbone": ns, "karma/trigger": "review_decisions"})
                         for d in dates]
        if not requests:
            return dg.SensorResult(skip_reason="no accepted review decision waits for the KG")
        wanted = {r.partition_key for r in requests if r.partition_key}
        missing = sorted(wanted - set(context.instance.get_existing_dynamic_partitions(KG_DATES, list(wanted))))
        return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=[
            kg_dates_partitions.build_add_request(missing)] if missing else [])

    return review_decisions
