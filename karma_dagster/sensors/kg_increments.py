"""`kg_increments`: when a date's documents finish their chain, request the KG increment of that date: early once,
then when the date is done.

Follows the `evaluated` materializations of every backbone by storage id (the cursor). A date's first finished
document is merged at once (the KG shows the inbox's first results within minutes, not after the whole date);
after that the date waits in the cursor ("__waiting__") while other documents of that date are still pending,
and is requested when none is left, or when none of them has finished for DEBOUNCE_S (a paper whose run failed
or waits far back in the queue must not hold its date's KG back for ever; while one of them is being read, for
DEBOUNCE_READING_S: under load each paper run takes minutes, and the short debounce fired between every two). A date whose increment is already
queued is not requested again: that run merges what is evaluated when it starts. So a day's inbox merges each
date at most twice per backbone, not once per paper (issue 31: 68 increment runs where 25 would do), and the
backbones ready in one tick are merged by one run of the `kg_increments` job (its asset selection), not a run (a
process) each. Increment jobs
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

from karma_dagster.assets.chain import kg_key
from karma_dagster.runtime.date_range import split_dates
from karma_dagster.runtime.document_states import DocumentStates, states_in_stores
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.keys import DAY_RE, KEY_RE, date_of_document_key
from karma_dagster.jobs import DOCUMENT_JOB, merges
from karma_dagster.partitioning.definitions import KG_DATES, first_kg_date, kg_dates_partitions
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.stages import FINAL_STAGE, STAGE_NAMES


def build_kg_increments_sensor(
    namespaces: list[str], jobs: dict[str, UnresolvedAssetJobDefinition], increments: UnresolvedAssetJobDefinition,
    interval_s: int = 15,
) -> dg.SensorDefinition:
    """Requests runs of `increments` (every backbone's KG increment, the run selecting those due); `jobs` (each
    backbone's KG job) are the sensor's too, so runs launched from it by hand stay in its history."""

    @dg.sensor(
        name="kg_increments",
        jobs=[increments, *jobs.values()],
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Requests the date-partitioned KG increment for the dates of newly evaluated documents.",
    )
    def kg_increments(context: dg.SensorEvaluationContext, storage: KarmaStorageResource) -> dg.SensorResult:
        cursor: dict = json.loads(context.cursor) if context.cursor else {}
        requested_unmerged: dict[str, dict] = cursor.pop(UNMERGED, {})
        waiting: dict[str, dict[str, float]] = cursor.pop(WAITING, {})
        early: dict[str, list[str]] = cursor.pop(EARLY, {})
        runs_of: dict[str, list[str]] = cursor.pop(RUNS, {})
        requests: list[dg.RunRequest] = []
        now = time.time()
        # the stores first, the materializations after: a document the states call evaluated has its record in
        # the fetch below (a table is written before its materialization), so it is waiting, not "unmerged"
        being_read = _dates_being_read(context)  # before the stores: what a run is writing may be half there
        # the stores are read for the dates this tick can act on (waiting, merged early, requested as unmerged,
        # newly finished) and a slice of the catalog's other dates (the sweep for what history left unmerged),
        # never the whole corpus: a tick over ten million papers took 73 s that way (bench/scale.py)
        seen_before = {ns: _records(context, ns, cursor[ns]) for ns in namespaces if ns in cursor}
        active = {d for dates in waiting.values() for d in dates} | {d for ds in early.values() for d in ds} \
            | {d for entries in requested_unmerged.values() for d in entries} \
            | {date_of_document_key(r.partition_key) for rs in seen_before.values() for r in rs if r.partition_key}
        sweep, cursor[SWEEP] = _sweep(storage, cursor.get(SWEEP, ""))
        covered = active | set(sweep)
        states = _states(context, storage, namespaces, covered)
        for ns in namespaces:
            if ns not in cursor:  # first tick: start from now, no replay of history (what it left unmerged is
                cursor[ns] = _latest_storage_id(context, ns)  # requested below, from the stores' state)
                continue
            records = _records(context, ns, cursor[ns])  # again: a superset of seen_before, read after the stores
            late = {date_of_document_key(r.partition_key) for r in records if r.partition_key} - covered
            if late and states is not None:  # finished between the two reads: their dates' states, read now
                states = _joined(states, _states(context, storage, namespaces, late))
                covered |= late
            if not records:
                continue
            dates, outside = split_dates({date_of_document_key(r.partition_key) for r in records if r.partition_key},
                                         start=first_kg_date())
            for why in outside.values():  # no partition to request: say so, never fail the other dates' requests
                context.log.error(f"{ns}: {why}")
            cursor[ns] = max(r.storage_id for r in records)
            for date in dates:  # the latest finish of the date: the debounce counts from it
                waiting.setdefault(ns, {})[date] = now
            for r in records:
                if r.partition_key and date_of_document_key(r.partition_key) in dates:
                    ids = runs_of.setdefault(date_of_document_key(r.partition_key), [])
                    ids[:] = [*[i for i in ids if i != r.run_id], r.run_id][-20:]
        busy = _busy_dates(context, runs_of)
        held_dates = {d for dates in waiting.values() for d in dates} | busy  # covered for every backbone this tick
        requests += _ready_requests(context, states, namespaces, increments.name, waiting, early, busy, being_read,
                                    now)
        requests += _unmerged_requests(context, states, namespaces, increments.name, requests, requested_unmerged,
                                       held_dates, early, covered)
        cursor[UNMERGED] = requested_unmerged
        cursor[WAITING] = {ns: dates for ns, dates in waiting.items() if dates}
        cursor[EARLY] = {ns: dates for ns, dates in early.items() if dates}
        still = {d for dates in cursor[WAITING].values() for d in dates}
        cursor[RUNS] = {d: ids for d, ids in runs_of.items() if d in still}
        if not requests:
            held = sum(len(d) for d in cursor[WAITING].values())
            why = (f"{held} date(s) wait for their other documents (or {DEBOUNCE_S} s without a finish)" if held
                   else "no newly evaluated or unmerged documents")
            return dg.SensorResult(skip_reason=why, cursor=json.dumps(cursor))
        wanted = {r.partition_key for r in requests if r.partition_key}  # documents registered outside new_papers:
        missing = sorted(wanted - set(context.instance.get_existing_dynamic_partitions(KG_DATES, list(wanted))))
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor),
                               dynamic_partitions_requests=[kg_dates_partitions.build_add_request(missing)]
                               if missing else [])

    return kg_increments


def _records(context: dg.SensorEvaluationContext, ns: str, after: int) -> list:
    """The backbone's `evaluated` materializations after storage id `after`, oldest first (at most 1000)."""
    return list(context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey([ns, FINAL_STAGE]), after_storage_id=after),
        limit=1000, ascending=True,
    ).records)


def _sweep(storage: KarmaStorageResource, after: str) -> tuple[list[str], str]:
    """The next slice of the catalog's dates (SWEEP_DOCUMENTS documents or more, whole dates) after `after`, and
    the cursor's next position; past the last date it starts again from the first. With fewer documents than a
    slice, every tick looks at them all (what the sensor did before it swept); at ten million, a full pass takes
    ~2,000 ticks (~8 h at a 15 s interval): the dates of newly finished papers are read on every tick anyway."""
    try:
        catalog = Catalog(storage.paths().catalog)
        dates = catalog.dates_after(after, SWEEP_DOCUMENTS) if after else []
        if not dates:
            dates = catalog.dates_after("", SWEEP_DOCUMENTS)
    except Exception:  # noqa: BLE001 - an unreadable catalog fails the states read below, which says why
        return [], after
    return dates, dates[-1] if dates else ""


def _joined(states: dict[str, DocumentStates], more: dict[str, DocumentStates] | None
            ) -> dict[str, DocumentStates] | None:
    """Two reads' states of disjoint documents as one (None if the second read failed)."""
    if more is None:
        return None
    return {ns: DocumentStates(
        backbone=ns, **{f: getattr(st, f) + getattr(more[ns], f)
                        for f in ("registered", "evaluated", "merged", "unmerged", "pending", "reviewed")},
        failed={**st.failed, **more[ns].failed}, dates={**st.dates, **more[ns].dates}) for ns, st in states.items()}


def _latest_storage_id(context: dg.SensorEvaluationContext, ns: str) -> int:
    latest = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey([ns, FINAL_STAGE])), limit=1, ascending=False
    ).records
    return latest[0].storage_id if latest else 0


UNMERGED = "__unmerged__"
WAITING = "__waiting__"  # {namespace: {date: when a document of it last finished}}: dates not yet requested
EARLY = "__early__"  # {namespace: [date]}: dates merged early (their first finish) whose other documents are pending
RUNS = "__runs__"  # {date: [run id]}: the runs that evaluated the waiting dates' documents
SWEEP = "__sweep__"  # the last date of the previous tick's slice of the catalog (_sweep)
SWEEP_DOCUMENTS = 5000  # documents a tick sweeps for unmerged ones besides the dates it acts on (a few seconds)
DEBOUNCE_S = 180  # a date with pending documents is requested once none of its documents finished for this long
# ... unless one of its pending documents is being read: then up to this long (under load a paper run takes minutes,
# and a debounce that fired between every two finishes merged a date once per paper again)
DEBOUNCE_READING_S = 900
RETRY_AFTER_S = 600  # a date still unmerged this long after its request, with no run in flight, is requested again
MAX_ATTEMPTS = 3  # per set of unmerged documents: a merge that keeps failing is left to `karma run` / the UI
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, *IN_PROGRESS_RUN_STATUSES]
_NOT_STARTED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]


def _states(context: dg.SensorEvaluationContext, storage: KarmaStorageResource,
            namespaces: list[str], dates: set[str]) -> dict[str, DocumentStates] | None:
    """Every backbone's states of the documents of `dates`, or None (logged) when a store cannot be read: the
    tick then requests the waiting dates as the old sensor did, without holding them back."""
    try:
        days = Catalog(storage.paths().catalog).documents_of_days(dates)
        return states_in_stores(storage.paths(), namespaces, documents=[k for keys in days.values() for k in keys])
    except Exception as exc:  # noqa: BLE001 - one unreadable store must not stop the materialization requests
        context.log.error(f"kg_increments: could not read which documents are pending or unmerged: {exc}")
        return None


def _dates_being_read(context: dg.SensorEvaluationContext) -> set[str]:
    """The dates of the documents whose runs are in progress, asked before the stores are read. A tick that read
    the stores while a paper run was between two backbones and saw the run ended a moment later requested the
    date's final merge for the backbones done and, a tick later, for the rest (two runs: seen under load)."""
    runs = context.instance.get_runs(filters=dg.RunsFilter(statuses=list(IN_PROGRESS_RUN_STATUSES)), limit=1000)
    dates: set[str] = set()
    for run in runs:  # a document's run, or a day's (date partitions); not the KG's increments, also by date
        key = run.tags.get("dagster/partition") or ""
        if KEY_RE.fullmatch(key):
            dates.add(date_of_document_key(key))
        elif DAY_RE.fullmatch(key) and _reads_papers(run):
            dates.add(key)
    return dates


def _reads_papers(run: dg.DagsterRun) -> bool:
    """A day's run that runs its papers' chains (date partitions: the chain's job, or a backfill selecting stage
    assets), not one of its KG increments."""
    return run.job_name == DOCUMENT_JOB or any(k.path[-1] in STAGE_NAMES for k in (run.asset_selection or ()))


def _busy_dates(context: dg.SensorEvaluationContext, runs_of: dict[str, list[str]]) -> set[str]:
    """The dates whose documents' runs are still in progress: a document's run evaluates one backbone after the
    other, seconds apart, so a tick between them must not merge some backbones now and the rest in another run."""
    ids = sorted({i for run_ids in runs_of.values() for i in run_ids})
    if not ids:
        return set()
    live = {r.run_id for r in context.instance.get_runs(
        filters=dg.RunsFilter(run_ids=ids, statuses=list(IN_PROGRESS_RUN_STATUSES)))}
    return {date for date, run_ids in runs_of.items() if live.intersection(run_ids)}


def _ready_requests(
    context: dg.SensorEvaluationContext, states: dict[str, DocumentStates] | None, namespaces: list[str],
    job: str, waiting: dict[str, dict[str, float]], early: dict[str, list[str]], busy: set[str],
    being_read: set[str], now: float,
) -> list[dg.RunRequest]:
    """The waiting dates that are ready once the runs that evaluated them ended (`busy`: not yet): no document of
    the date pending, or DEBOUNCE_S since its last finish (DEBOUNCE_READING_S while a run reads one of its pending
    documents), or its first finish (a date not in `early`: merged at
    once, then it waits for the rest). A ready date whose
    increment is queued and not started yet is covered by that run. `waiting` loses the dates requested or covered,
    `early` gains the dates merged early and loses those with nothing left pending (both in place). One request
    per date, of `job`, selecting the ready backbones' increments."""
    ready: dict[str, list[str]] = {}
    for ns in namespaces:
        dates = waiting.get(ns, {})
        merged_early = early.setdefault(ns, [])
        pending: dict[str, list[str]] = {}
        for key in states[ns].pending if states is not None else []:
            pending.setdefault(date_of_document_key(key), []).append(key)
        for date, last in sorted(dates.items()):
            if date in busy and now - last < DEBOUNCE_S:
                continue  # its run is evaluating the other backbones: one request for all of them, at its end
            waited = now - last
            if date in merged_early and date in being_read and waited < DEBOUNCE_READING_S:
                continue  # its early merge ran; a paper of it is being read: the final merge waits for its run
            if pending.get(date) and waited < DEBOUNCE_S:
                if date in merged_early:
                    continue  # merged early: its other documents are still being read
                merged_early.append(date)  # its first finish: into the KG now, the rest when they are done
            elif not pending.get(date) and date in merged_early:
                merged_early.remove(date)  # done: a later paper of the date starts a new early merge
            del dates[date]
            if _runs(context, ns, date, _NOT_STARTED):
                continue  # a queued increment of the date merges what is evaluated when it starts
            ready.setdefault(date, []).append(ns)
        # a date merged early whose pending documents went away (deleted, or evaluated and merged by a run of
        # their own) and that waits for nothing has no final merge to wait for
        merged_early[:] = [d for d in merged_early if pending.get(d) or d in dates]
    return [_request(job, date, names, f"ready:{int(now * 1000)}", "kg_increments")
            for date, names in sorted(ready.items())]


def _unmerged_requests(
    context: dg.SensorEvaluationContext, states: dict[str, DocumentStates] | None, namespaces: list[str],
    job: str, already: list[dg.RunRequest], requested: dict[str, dict], held: set[str],
    early: dict[str, list[str]], read: set[str],
) -> list[dg.RunRequest]:
    """Requests for the dates with unmerged documents that nothing else will merge: a new set of unmerged
    documents of a date, when the date is not waiting (`held`: for its other documents or runs, in any backbone: the
    ready requests take it), not requested in this tick and
    has no increment queued or running; and again (up to MAX_ATTEMPTS) when the set is still unmerged
    RETRY_AFTER_S after the last request with no run of that increment queued or running (the run crashed or
    failed). One request per date, of `job`, selecting the backbones it merges. A date requested here while
    some of its documents are still pending counts as its early merge (`early`, in place): the sensor turned on
    after the inbox's first papers finished must not merge that date once here, once early and once at its end.

    `requested` ({namespace: {date: {"sig", "at", "n"}}}, kept in the cursor) is updated in place; a date leaves
    it once merged, as seen by a tick whose states `read` it (the others keep their entries). Unreadable states (None) request nothing (the tick's other requests and its cursor still go
    through)."""
    if states is None:
        return []
    in_tick = {(ns, r.partition_key) for r in already for ns in namespaces
               if r.asset_selection and kg_key(ns) in r.asset_selection}
    now = time.time()
    wanted: dict[str, dict[str, str]] = {}  # date -> {backbone: "<sig>:<attempt>"}
    for ns in namespaces:
        by_date: dict[str, list[str]] = {}
        for key in states[ns].unmerged:
            by_date.setdefault(date_of_document_key(key), []).append(key)
        dates, outside = split_dates(set(by_date), start=first_kg_date())
        for why in outside.values():
            context.log.error(f"{ns}: {why}")
        seen = requested.get(ns, {})
        pending = {date_of_document_key(key) for key in states[ns].pending}
        kept: dict[str, dict] = {date: entry for date, entry in seen.items() if date not in read}
        for date in dates:
            sig = hashlib.sha256("\n".join(sorted(by_date[date])).encode()).hexdigest()[:16]
            entry = seen.get(date)
            covered = (ns, date) in in_tick or date in held
            if entry is None or entry.get("sig") != sig:
                if not covered and (_runs(context, ns, date, _IN_FLIGHT) or _reading(context, by_date[date])):
                    continue  # a run of the date will merge them, or its documents' records request it again
                entry = {"sig": sig, "at": now, "n": 1}
                if not covered:
                    wanted.setdefault(date, {})[ns] = f"{sig}:1"
                    if date in pending and date not in early.setdefault(ns, []):
                        early[ns].append(date)  # its other documents wait for the date's final merge
            elif not covered and entry["n"] < MAX_ATTEMPTS and now - entry["at"] >= RETRY_AFTER_S \
                    and not _runs(context, ns, date, _IN_FLIGHT):
                entry = {"sig": sig, "at": now, "n": entry["n"] + 1}
                wanted.setdefault(date, {})[ns] = f"{sig}:{entry['n']}"
            kept[date] = entry
        requested[ns] = kept
    return [_request(job, date, sorted(by_ns), "unmerged:" + hashlib.sha256(
                " ".join(f"{ns}:{key}" for ns, key in sorted(by_ns.items())).encode()).hexdigest()[:16],
                     "kg_increments (unmerged)")
            for date, by_ns in sorted(wanted.items())]


def _request(job: str, date: str, namespaces: list[str], key: str, trigger: str) -> dg.RunRequest:
    """One run of the all-backbones KG job for `date`, merging these backbones' increments."""
    return dg.RunRequest(partition_key=date, run_key=f"{date}:{key}", job_name=job,
                         asset_selection=[kg_key(ns) for ns in namespaces],
                         tags={"karma/backbones": ",".join(namespaces)[:255], "karma/trigger": trigger})


def _reading(context: dg.SensorEvaluationContext, doc_keys: list[str]) -> bool:
    """Whether a run of one of these documents, or of their day (date partitions), is still in progress (its other
    backbones are being evaluated: its materializations will bring the date through the ready requests, all
    backbones in one run)."""
    days = sorted({date_of_document_key(key) for key in doc_keys})
    in_progress = list(IN_PROGRESS_RUN_STATUSES)
    return any(_reads_papers(run) for day in days for run in context.instance.get_runs(
        filters=dg.RunsFilter(tags={"dagster/partition": day}, statuses=in_progress), limit=100)) or any(
        context.instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": key}, statuses=in_progress), limit=1)
        for key in doc_keys[:20])


def _runs(context: dg.SensorEvaluationContext, ns: str, date: str, statuses: list) -> bool:
    """Whether a run that merges `ns`'s increment of `date` (its own KG job's, or the all-backbones job's selecting
    it) has one of these statuses. The date's runs are few: the documents' runs have other partition keys."""
    runs = context.instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": date}, statuses=statuses),
                                     limit=100)
    return any(merges(r.job_name, r.asset_selection, ns) for r in runs)
