"""`kg_increments`: when documents finish their chain, request the KG increment of their dates.

Follows the `evaluated` materializations of every backbone by storage id (the cursor), so each finished
document triggers its date's increment once; the merge is idempotent, so a date requested twice is harmless.
"""


import json

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from karma_dagster.date_range import split_dates
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.partitions import first_kg_date
from karma_dagster.stages import FINAL_STAGE


def build_kg_increments_sensor(
    namespaces: list[str], jobs: dict[str, UnresolvedAssetJobDefinition], interval_s: int = 30
) -> dg.SensorDefinition:
    @dg.sensor(
        name="kg_increments",
        jobs=list(jobs.values()),
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Requests the date-partitioned KG increment for the dates of newly evaluated documents.",
    )
    def kg_increments(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        cursor: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
        requests: list[dg.RunRequest] = []
        for ns in namespaces:
            after = cursor.get(ns)
            records = context.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey([ns, FINAL_STAGE]), after_storage_id=after),
                limit=1000,
                ascending=True,
            ).records
            if not records:
                continue
            dates, outside = split_dates({date_of_document_key(r.partition_key) for r in records if r.partition_key},
                                         start=first_kg_date())
            for why in outside.values():  # no partition to request: say so, never fail the other dates' requests
                context.log.error(f"{ns}: {why}")
            last = max(r.storage_id for r in records)
            cursor[ns] = last
            requests += [
                dg.RunRequest(
                    partition_key=date,
                    run_key=f"{ns}:{date}:{last}",
                    job_name=jobs[ns].name,
                    tags={"karma/backbone": ns, "karma/trigger": "kg_increments"},
                )
                for date in dates
            ]
        if not requests:
            return dg.SensorResult(skip_reason="no newly evaluated documents", cursor=json.dumps(cursor))
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor))

    return kg_increments
