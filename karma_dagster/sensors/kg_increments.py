"""`kg_increments`: when a date's documents finish their chain, request the KG increment of that date, once.

Follows the `evaluated` materializations of every backbone by storage id (the cursor). A date with a newly
evaluated document waits in the cursor ("__waiting__") while other documents of that date are still pending,
and is requested when none is left, or when none of them has finished for DEBOUNCE_S (a paper whose run failed
or waits far back in the queue must not hold its date's KG back for ever). A date whose increment is already
queued is not requested again: that run merges what is evaluated when it starts. So a day's inbox merges each
date about once per backbone, not once per paper (issue 31: 68 increment runs where 25 would do). Increment jobs
carry `dagster/priority` (jobs.INCREMENT_PRIORITY, above every paper run the Central Controller ranks), so the KG
grows while the inbox is still being read instead of after the whole queue. Turned on (or meeting a new backbone) it
starts from now: history is not replayed, because what history left unmerged is known from the stores and
requested as below.

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
from karma_dagster.document_states import DocumentStates, states_in_stores
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
        waiting: dict[str, dict[str, float]] = cursor.pop(WAITING, {})
        requests: list[dg.RunRequest] = []
        now = time.time()
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
            cursor[ns] = max(r.storage_id for r in records)
            for date in dates:  # the latest finish of the date: the debounce counts from it
                waiting.setdefault(ns, {})[date] = now
        states = _states(context, storage, namespaces)
        requests += _ready_requests(context, states, namespaces, jobs, waiting, now)
        requests += _unmerged_requests(context, states, namespaces, jobs, requests, requested_unmerged, waiting)
        cursor[UNMERGED] = requested_unmerged
        cursor[WAITING] = {ns: dates for ns, dates in waiting.items() if dates}
        if not requests:
            held = sum(len(d) for d in cursor[WAITING].values())
            why = (f"{held} date(s) wait for their other documents (or {DEBOUNCE_S} s without a finish)" if held
                   else "no newly evaluated or unmerged documents")
            return dg.SensorResult(skip_reason=why, cursor=json.dumps(cursor))
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
WAITING = "__waiting__"  # {namespace: {date: when a document of it last finished}}: dates not yet requested
DEBOUNCE_S = 180  # a date with pending documents is requested once none of its documents finished for this long
RETRY_AFTER_S = 600  # a date still unmerged this long after its request, with no run in flight, is requested again
MAX_ATTEMPTS = 3  # per set of unmerged documents: a merge that keeps failing is left to `karma run` / the UI
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, *IN_PROGRESS_RUN_STATUSES]
_NOT_STARTED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]


def _states(context: dg.SensorEvaluationContext, storage: KarmaStorageResource,
            namespaces: list[str]) -> dict[str, DocumentStates] | None:
    """Every backbone's document states, or None (logged) when a store cannot be read: the tick then requests
    the waiting dates as the old sensor did, without holding them back."""
    try:
        return states_in_stores(storage.paths(), namespaces)
    except Exception as exc:  # noqa: BLE001 - one unreadable store must not stop the materialization requests
        context.log.error(f"kg_increments: could not read which documents are pending or unmerged: {exc}")
        return None


def _ready_requests(
    context: dg.SensorEvaluationContext, states: dict[str, DocumentStates] | None, namespaces: list[str],
    jobs: dict[str, UnresolvedAssetJobDefinition], waiting: dict[str, dict[str, float]], now: float,
) -> list[dg.RunRequest]:
    """The waiting dates that are ready: no document of the date pending, or DEBOUNCE_S since its last finish.
    A ready date whose increment is queued and not started yet is covered by that run. `waiting` loses the dates
    requested or covered (in place)."""
    out: list[dg.RunRequest] = []
    for ns in namespaces:
        dates = waiting.get(ns, {})
        pending: dict[str, int] = {}
        for key in states[ns].pending if states is not None else []:
            pending[date_of_document_key(key)] = pending.get(date_of_document_key(key), 0) + 1
        for date, last in sorted(dates.items()):
            if pending.get(date) and now - last < DEBOUNCE_S:
                continue  # its other documents are still being read
            del dates[date]
            if _runs(context, jobs[ns].name, date, _NOT_STARTED):
                continue  # a queued increment of the date merges what is evaluated when it starts
            out.append(_request(ns, date, jobs, f"ready:{int(now * 1000)}", "kg_increments"))
    return out


def _unmerged_requests(
    context: dg.SensorEvaluationContext, states: dict[str, DocumentStates] | None, namespaces: list[str],
    jobs: dict[str, UnresolvedAssetJobDefinition], already: list[dg.RunRequest], requested: dict[str, dict],
    waiting: dict[str, dict[str, float]],
) -> list[dg.RunRequest]:
    """Requests for the dates with unmerged documents that nothing else will merge: a new set of unmerged
    documents of a date, when the date is not waiting for its other documents, not requested in this tick and
    has no increment queued or running; and again (up to MAX_ATTEMPTS) when the set is still unmerged
    RETRY_AFTER_S after the last request with no run of that increment queued or running (the run crashed or
    failed).

    `requested` ({namespace: {date: {"sig", "at", "n"}}}, kept in the cursor) is updated in place; a date leaves
    it once merged. Unreadable states (None) request nothing (the tick's other requests and its cursor still go
    through)."""
    if states is None:
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
            covered = (ns, date) in in_tick or date in waiting.get(ns, {})
            if entry is None or entry.get("sig") != sig:
                if not covered and _runs(context, jobs[ns].name, date, _IN_FLIGHT):
                    continue  # a run of the date will merge them, or its documents' records request it again
                entry = {"sig": sig, "at": now, "n": 1}
                if not covered:
                    out.append(_request(ns, date, jobs, f"unmerged:{sig}:1"))
            elif not covered and entry["n"] < MAX_ATTEMPTS and now - entry["at"] >= RETRY_AFTER_S \
                    and not _runs(context, jobs[ns].name, date, _IN_FLIGHT):
                entry = {"sig": sig, "at": now, "n": entry["n"] + 1}
                out.append(_request(ns, date, jobs, f"unmerged:{sig}:{entry['n']}"))
            kept[date] = entry
        requested[ns] = kept
    return out


def _request(ns: str, date: str, jobs: dict[str, UnresolvedAssetJobDefinition], key: str,
             trigger: str = "kg_increments (unmerged)") -> dg.RunRequest:
    return dg.RunRequest(partition_key=date, run_key=f"{ns}:{date}:{key}", job_name=jobs[ns].name,
                         tags={"karma/backbone": ns, "karma/trigger": trigger})


def _runs(context: dg.SensorEvaluationContext, job_name: str, date: str, statuses: list) -> bool:
    runs = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=job_name, tags={"dagster/partition": date}, statuses=statuses), limit=1
    )
    return bool(runs)
