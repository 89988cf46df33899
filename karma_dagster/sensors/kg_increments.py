"""`kg_increments`: when documents finish their chain, request the KG increment of their dates.

Follows the `evaluated` materializations of every backbone by storage id (the cursor), so each finished
document triggers its date's increment once; the merge is idempotent, so a date requested twice is harmless.
Turned on (or meeting a new backbone) it starts from now: history is not replayed, because what history left
unmerged is known from the stores and requested as below.

It also requests the dates of *unmerged* documents (evaluated, but not recorded as merged in the KG with their
current table: a merge that crashed, failed or never ran: document_states.py), once per set of unmerged
documents of a date, and again if a merge run died or failed (_unmerged_requests): the cursor's "__unmerged__"
entry (never a backbone name) remembers what was requested when.
"""


import hashlib
import json
import time

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from dagster._core.storage.dagster_run import IN_PROGRESS_RUN_STATUSES

from karma_dagster.date_range import split_dates
from karma_dagster.document_states import states_in_stores
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.partitions import KG_DATES, first_kg_date, kg_dates_partitions
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.stages import FINAL_STAGE


def build_kg_increments_sensor(
    namespaces: list[str], jobs: dict[str, UnresolvedAssetJobDefinition], interval_s: int = 15
) -> dg.SensorDefinition:
    @dg.sensor(
        name="kg_increments",
        jobs=list(jobs.values()),
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Requests the date-partitioned KG increment for the dates of newly evaluated documents.",
    )
    def kg_increments(context: dg.SensorEvaluationContext, storage: KarmaStorageResource) -> dg.SensorResult:
        cursor: dict = json.loads(context.cursor) if context.cursor else {}
        requested_unmerged: dict[str, dict] = cursor.pop(UNMERGED, {})
        requests: list[dg.RunRequest] = []
        for ns in namespaces:
            if ns not in cursor:  # first tick: start from now, no replay of history (what it left unmerged is
                cursor[ns] = _latest_storage_id(context, ns)  # requested below, from the stores' state)
                continue
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
        requests += _unmerged_requests(context, storage, namespaces, jobs, requests, requested_unmerged)
        cursor[UNMERGED] = requested_unmerged
        if not requests:
            return dg.SensorResult(skip_reason="no newly evaluated or unmerged documents", cursor=json.dumps(cursor))
        known = set(context.instance.get_dynamic_partitions(KG_DATES))  # documents registered outside new_papers
        missing = sorted({r.partition_key for r in requests} - known)
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor),
                               dynamic_partitions_requests=[kg_dates_partitions.build_add_request(missing)]
                               if missing else [])

    return kg_increments


def _latest_storage_id(context: dg.SensorEvaluationContext, ns: str) -> int:
    latest = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey([ns, FINAL_STAGE])), limit=1, ascending=False
    ).records
    return latest[0].storage_id if latest else 0


UNMERGED = "__unmerged__"
RETRY_AFTER_S = 600  # a date still unmerged this long after its request, with no run in flight, is requested again
MAX_ATTEMPTS = 3  # per set of unmerged documents: a merge that keeps failing is left to `karma run` / the UI
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, *IN_PROGRESS_RUN_STATUSES]


def _unmerged_requests(
    context: dg.SensorEvaluationContext, storage: KarmaStorageResource, namespaces: list[str],
    jobs: dict[str, UnresolvedAssetJobDefinition], already: list[dg.RunRequest], requested: dict[str, dict],
) -> list[dg.RunRequest]:
    """Requests for the dates with unmerged documents: at once for a new set of unmerged documents of a date, and
    again (up to MAX_ATTEMPTS) when the set is still unmerged RETRY_AFTER_S after the last request with no run of
    that increment queued or running (the merge run crashed or failed).

    `requested` ({namespace: {date: {"sig", "at", "n"}}}, kept in the cursor) is updated in place; a date leaves
    it once merged. A failure to read the state is logged and requests nothing (the tick's other requests and its
    cursor still go through)."""
    try:
        states = states_in_stores(storage.paths(), namespaces)
    except Exception as exc:  # noqa: BLE001 - one unreadable store must not stop the materialization requests
        context.log.error(f"kg_increments: could not read which documents are unmerged: {exc}")
        return []
    in_tick = {(r.tags.get("karma/backbone"), r.partition_key) for r in already}
    now = time.time()
    out: list[dg.RunRequest] = []
    for ns in namespaces:
        by_date: dict[str, list[str]] = {}
        for key in states[ns].unmerged:
            by_date.setdefault(date_of_document_key(key), []).append(key)
        dates, outside = split_dates(set(by_date), start=first_kg_date())
        for why in outside.values():
            context.log.error(f"{ns}: {why}")
        seen = requested.get(ns, {})
        kept: dict[str, dict] = {}
        for date in dates:
            sig = hashlib.sha256("\n".join(sorted(by_date[date])).encode()).hexdigest()[:16]
            entry = seen.get(date)
            if entry is None or entry.get("sig") != sig:
                entry = {"sig": sig, "at": now, "n": 1}
                if (ns, date) not in in_tick:
                    out.append(_request(ns, date, jobs, f"unmerged:{sig}:1"))
            elif (ns, date) not in in_tick and entry["n"] < MAX_ATTEMPTS and now - entry["at"] >= RETRY_AFTER_S \
                    and not _in_flight(context, jobs[ns].name, date):
                entry = {"sig": sig, "at": now, "n": entry["n"] + 1}
                out.append(_request(ns, date, jobs, f"unmerged:{sig}:{entry['n']}"))
            kept[date] = entry
        requested[ns] = kept
    return out


def _request(ns: str, date: str, jobs: dict[str, UnresolvedAssetJobDefinition], key: str) -> dg.RunRequest:
    return dg.RunRequest(partition_key=date, run_key=f"{ns}:{date}:{key}", job_name=jobs[ns].name,
                         tags={"karma/backbone": ns, "karma/trigger": "kg_increments (unmerged)"})


def _in_flight(context: dg.SensorEvaluationContext, job_name: str, date: str) -> bool:
    runs = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=job_name, tags={"dagster/partition": date}, statuses=_IN_FLIGHT), limit=1
    )
    return bool(runs)
