"""Runs the main job, date-range backfills and the comparison against the local Dagster instance (for `karma`).

`run_main` goes date by date: the chains of date D's documents, in in-process runs of up to 50 documents
(visible in the UI; a failed batch is rerun one document per run, so one failure never stops the others), then the KG increment of D for every backbone, then D+1 — so a document
dated D+1 is checked for conflicts against a KG that holds D's increment; then the report and the comparison.
`backfill_dates` launches real Dagster backfills that the daemon (`dagster dev`) executes and the UI shows: first the
documents of the date range, then, once they are done, the increments of those dates (a backfill selecting both
would fan out to every date through the all-partitions mapping). Documents of a range are therefore checked against
the KG as it stood before the range (only `karma run` interleaves merges date by date).

Each document's line carries the rate and the time left (progress.py, tqdm). Under `karma run` a SIGINT/SIGTERM
stops the document or increment in progress and starts nothing more (interrupts.py); in-process runs carry their
process id, so a later run frees the pool slots of runs whose process was killed (`release_dead_runs`).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable

import dagster as dg
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.utils import make_new_backfill_id

from karma_dagster.runtime import interrupts, paths, services
from karma_dagster.runtime import date_range
from karma_dagster.assets.batching import MAX_DOCUMENTS_PER_RUN
from karma_dagster.assets.chain import kg_key
from karma_dagster.runtime.config import BackboneStatus
from karma_dagster.runtime.document_states import DocumentStates, states_in_stores, unmerged_dates
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import scan_inbox
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.jobs import (
    COMPARE_JOB,
    DOCUMENT_JOB,
    IMPORT_KG_JOB,
    KG_WRITER_POOL,
    KG_WRITER_POOL_LIMIT,
    REPORT_JOB,
    chain_keys,
    kg_job_name,
    llm_pool,
)
from karma_dagster.partitioning.definitions import (
    KG_DATES,
    documents_partitions,
    ensure_partitions,
    ensure_registered,
    first_kg_date,
)
from karma_dagster.partitioning.order import keys_between, positions
from karma_dagster.runtime.progress import Progress
from karma_dagster.runtime.removal import remove_deleted_citations, retire_rekeyed
from karma_dagster.report import RunReport
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.review.merge_inputs import with_review_documents
from karma_dagster.scheduling.plan import decide
from karma_dagster.scheduling.tiers import CCA_TIERS, controller_tiers

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def instance() -> dg.DagsterInstance:
    """The instance of $DAGSTER_HOME; its creation holds the home's lock so two processes that start together on
    a fresh home do not both set up Dagster's SQLite schema (home.py)."""
    from karma_dagster.runtime.home import under_home_lock
    from karma_dagster.project.discover import ProjectError

    if not os.environ.get("DAGSTER_HOME"):
        project = paths.project()
        if project is not None and not project.dagster_home.is_dir():  # Dagster would say "not a directory"
            raise ProjectError(f"project '{project.name}' has no dagster_home/ (Dagster's instance folder): "
                               "`karma init --keep-existing .` in the project writes it again with its dagster.yaml")
    os.environ.setdefault("DAGSTER_HOME", str(paths.dagster_home()))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return under_home_lock(os.environ["DAGSTER_HOME"], dg.DagsterInstance.get)


def setup_pools(inst: dg.DagsterInstance, backbones: BackbonesResource) -> list[str]:
    """One pool per LLM backbone (steps in flight = its `concurrency`), one writer for the KG; first the slots of
    runs whose `karma` process died are freed (`release_dead_runs`). Returns the ids of those runs."""
    released = release_dead_runs(inst)
    inst.event_log_storage.set_concurrency_slots(KG_WRITER_POOL, KG_WRITER_POOL_LIMIT)
    for ns, config in backbones.backbones.items():
        if config.kind == "litellm":
            inst.event_log_storage.set_concurrency_slots(llm_pool(ns), config.concurrency)
    return released


PID_TAG = "karma/pid"  # the `karma` process that runs an in-process run (release_dead_runs)
_UNFINISHED = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def _tags(**extra: str) -> dict[str, str]:
    return {PID_TAG: str(os.getpid()), **extra}


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process holds the number
    return True


def release_dead_runs(inst: dg.DagsterInstance) -> list[str]:
    """Mark failed, and free the pool slots of, the in-process runs whose `karma` process is gone (SIGKILL, power
    loss): such a run stays STARTED and keeps its slot — the KG writer pool has one — so every later increment
    would wait for it forever. Only runs tagged with a process id are judged (not the daemon's runs); a reused
    process id keeps a dead run's slot until that process ends."""
    released = []
    for run in inst.get_runs(filters=dg.RunsFilter(statuses=_UNFINISHED)):
        pid = run.tags.get(PID_TAG, "")
        if not pid.isdigit() or int(pid) == os.getpid() or _process_alive(int(pid)):
            continue
        inst.report_run_failed(run, message=f"the karma process {pid} that ran it is gone (killed or crashed)")
        inst.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run.run_id)
    return released


def _resources(defs: dg.Definitions) -> tuple[KarmaStorageResource, BackbonesResource]:
    res = defs.resources or {}
    return res["storage"], res["backbones"]  # type: ignore[return-value]


def import_kg(defs: dg.Definitions, inst: dg.DagsterInstance, nodes: str = "", edges: str = "", fmt: str = "hetionet",
              reimport: bool = False, on_failure: Callable[[str], None] | None = None,
              if_grown: str = "refuse") -> bool:
    """The import_kg job in process; `on_failure` gets the failed step's error (e.g. "file:line: problem");
    `if_grown`: what the import may do to a KG that grew (kg/seed_guard.py: refuse, replace or add)."""
    config = {"nodes": nodes, "edges": edges, "format": fmt, "reimport": reimport, "if_grown": if_grown}
    result = defs.resolve_job_def(IMPORT_KG_JOB).execute_in_process(
        instance=inst,
        run_config={**QUIET, "ops": {"seed_kg": {"config": config}}},
        raise_on_error=False, tags=_tags(),
    )
    if not result.success and on_failure is not None:
        on_failure(_first_failure(result))
    return result.success


def register_inbox(defs: dg.Definitions, inst: dg.DagsterInstance) -> tuple[list[str], dict[str, str]]:
    """Scan the inbox like the `new_papers` sensor does; returns (documents to run, files that failed)."""
    storage, _ = _resources(defs)
    with interrupts.active().interruptible("the inbox scan"):  # a signal stops the scan at once (no run is open)
        result = scan_inbox(storage.inbox_dir(), Catalog(storage.catalog_path()), arrival_date=dt.date.today(),
                            limits=storage.input_limits(), undated=storage.undated_policy())
    by_document = storage.partition_mode() == "document"
    for old, _new in retire_rekeyed(storage.paths()):  # a document moved to its publication date: old key gone
        if by_document and inst.has_dynamic_partition(documents_partitions.name, old):
            inst.delete_dynamic_partition(documents_partitions.name, old)
    for plan in remove_deleted_citations(storage.paths()):  # PubMed's <DeleteCitation>: as `karma remove` does
        if by_document and inst.has_dynamic_partition(documents_partitions.name, plan.doc_key):
            inst.delete_dynamic_partition(documents_partitions.name, plan.doc_key)
    keys = sorted(result.keys_to_run)
    ensure_registered(inst, keys, documents=by_document)
    return keys, {f.path: f.error for f in result.failed}


INTERRUPTED_TAG = "karma/interrupted"  # on the run of a document stopped by SIGINT/SIGTERM: its signal's name


def run_documents(
    defs: dg.Definitions, inst: dg.DagsterInstance, keys: list[str], log: Callable[[str], None] = print,
    *, first: int = 1, total: int | None = None, progress: Progress | None = None,
    per_run: int = MAX_DOCUMENTS_PER_RUN,
) -> dict[str, str]:
    """The chains of `keys`, several documents per in-process run (up to `per_run`, documents adjacent in the
    instance's partition order: a run covers a partition range); returns {document: error} for those that
    failed. A run pays its start-up and per-step event writes once for its documents (bench/throughput.py).
    When a batch fails, its documents run again one per run, so one bad document never holds the others back
    and its failure is its own run's (what `karma status` and the UI show). Progress lines count from `first`
    of `total` (a caller running the documents date by date numbers them across dates, and passes its
    `progress` so the rate and ETA span the whole run).

    A SIGINT/SIGTERM (interrupts.py) stops the run in progress — it is tagged `karma/interrupted` and its
    documents stay pending, so the next `karma run` completes them — and raises RunInterrupted: nothing more
    starts.
    """
    total = len(keys) if total is None else total
    own_progress = progress is None
    progress = progress or Progress(total)
    if _resources(defs)[0].partition_mode() == "date":
        try:
            return _run_dates(defs, inst, keys, log, first, total, progress)
        finally:
            if own_progress:
                progress.close()
    ensure_registered(inst, keys)  # a new DAGSTER_HOME over a data dir the catalog knows
    failed: dict[str, str] = {}
    done: list[str] = []
    position = first

    def run(batch: list[str]) -> _BatchOutcome:
        try:
            return _run_batch(defs, inst, batch)
        except interrupts.RunInterrupted:
            for i, key in enumerate(batch, position):
                log(f"[{i}/{total}] {key}: INTERRUPTED")
            raise

    def process(group: list[str]) -> None:
        nonlocal position
        for batch in adjacent_batches(inst, group, per_run):
            if len(batch) > 1:  # said before the run, so a long batch is not silence; its lines follow when it ends
                log(f"[{position}-{position + len(batch) - 1}/{total}] running {len(batch)} documents in one run "
                    f"({batch[0]} .. {batch[-1]}) ...")
            outcome = run(batch)
            if len(batch) > 1 and not outcome.success:
                culprits = _failed_documents(outcome.result) & set(batch) or set(batch)
                rest = [k for k in batch if k not in culprits]
                log(f"batch of {len(batch)} documents failed ({_first_failure(outcome.result)}): "
                    + (f"{len(culprits)} failing document(s) run alone, the other {len(rest)} again" if rest
                       else "running them one by one"))
                process(rest)
                for key in sorted(culprits):  # each failure in a run of its own: what `karma status` reports
                    outcome = run([key])
                    failed.update(_log_one(key, outcome, position, total, progress.finished(1), log))
                    done.append(f"document {key}")
                    position += 1
                continue
            meter = progress.finished(len(batch))  # the batch's documents finished together, now
            for key in batch:
                failed.update(_log_one(key, outcome, position, total, meter, log, len(batch)))
                done.append(f"document {key}")
                position += 1

    try:
        process(list(keys))
    except interrupts.RunInterrupted as exc:
        exc.finished += done
        raise
    finally:
        if own_progress:
            progress.close()
    return failed


def _run_dates(defs: dg.Definitions, inst: dg.DagsterInstance, keys: list[str], log: Callable[[str], None],
               first: int, total: int, progress: Progress) -> dict[str, str]:
    """Date partitions (partitioning/mode.py): one in-process run per date of `keys`, each reading every document
    of its day (batching._per_date); a document's failure is its own (`failed_documents` in the day's metadata),
    the others of its day go on. A date outside the KG's range has no partition: its documents fail, naming it."""
    ensure_registered(inst, keys, documents=False)
    by_date: dict[str, list[str]] = {}
    for key in sorted(set(keys)):
        by_date.setdefault(date_of_document_key(key), []).append(key)
    _in_range, outside = date_range.split_dates(by_date, start=first_kg_date())
    failed: dict[str, str] = {}
    position = first
    done: list[str] = []
    watch = interrupts.active()
    try:
        for date, docs in sorted(by_date.items()):
            if date in outside:
                errors = {key: f"documents: {outside[date]}" for key in docs}
                seconds = 0.0
            else:
                watch.check()
                t0 = time.perf_counter()
                result = defs.resolve_job_def(DOCUMENT_JOB).execute_in_process(
                    partition_key=date, instance=inst, raise_on_error=False, run_config=QUIET,
                    tags=_tags(**{"karma/trigger": "karma run", "karma/documents": str(len(docs))}))
                seconds = time.perf_counter() - t0
                if not result.success and (signum := watch.wait(2.0 if _was_interrupted(result) else 0)) is not None:
                    inst.add_run_tags(result.run_id, {INTERRUPTED_TAG: interrupts.RunInterrupted(signum).signal_name})
                    for i, key in enumerate(docs, position):
                        log(f"[{i}/{total}] {key}: INTERRUPTED")
                    papers = f"document {docs[0]}" if len(docs) == 1 else \
                        f"{len(docs)} documents ({', '.join(docs[:3])}{', ...' if len(docs) > 3 else ''})"
                    stop = interrupts.RunInterrupted(signum, during=f"date {date}: {papers}", run_id=result.run_id)
                    stop.stopped = [f"document {key}" for key in docs]  # not "not started": their day's run was
                    raise stop
                errors = _date_failures(result, docs)
            meter = progress.finished(len(docs))  # the day's documents finished together, in its one run
            for key in docs:
                if key in errors:
                    log(f"[{position}/{total}] {key}: FAILED: {errors[key]} | {meter}")
                    failed[key] = errors[key]
                else:
                    papers = f"{len(docs)} document{'s' if len(docs) != 1 else ''}"
                    log(f"[{position}/{total}] {key}: ok (date {date}, {papers}, "
                        f"{seconds / max(len(docs), 1):.1f} s each) | {meter}")
                done.append(f"document {key}")
                position += 1
    except interrupts.RunInterrupted as exc:
        exc.finished += done
        raise
    return failed


def _date_failures(result: dg.ExecuteInProcessResult, docs: list[str]) -> dict[str, str]:
    """{document: first error} of these documents in a date run: the `failed_documents` its steps reported (in
    their materializations, or in the failure of a step where all failed); a step that failed otherwise fails
    every document of the date with its error."""
    errors: dict[str, str] = {}
    wanted = set(docs)
    for event in result.all_events:
        meta = {}
        if event.is_step_materialization:
            meta = event.step_materialization_data.materialization.metadata or {}
        elif event.is_step_failure:
            data = event.step_failure_data
            meta = getattr(getattr(data, "user_failure_data", None), "metadata", None) or {}
            if not isinstance(getattr(meta.get("failed_documents"), "value", None), dict):
                return {key: errors.get(key, _first_failure(result)) for key in docs}
        value = getattr(meta.get("failed_documents"), "value", None)
        if isinstance(value, dict):
            for key, why in value.items():
                if key in wanted:
                    errors.setdefault(key, f"{event.step_key}: {why}")
    return errors


def adjacent_batches(inst: dg.DagsterInstance, keys: list[str], per_run: int) -> list[list[str]]:
    """`keys` cut into batches of at most `per_run` documents that are neighbours in the instance's document
    partitions (a run's partition range holds every partition between its ends, so only neighbours can share one).
    Documents registered together are neighbours (they are added sorted), so a date's papers usually form one."""
    order = positions(inst, documents_partitions.name, keys)
    batches: list[list[str]] = []
    for key in sorted(set(keys), key=lambda k: order[k]):
        if batches and order[key] == order[batches[-1][-1]] + 1 and len(batches[-1]) < max(per_run, 1):
            batches[-1].append(key)
        else:
            batches.append([key])
    return batches


class _BatchOutcome:
    """A finished run over a batch of documents, with how long it took."""

    def __init__(self, result: dg.ExecuteInProcessResult, seconds: float) -> None:
        self.result, self.seconds, self.success = result, seconds, result.success


def _run_batch(defs: dg.Definitions, inst: dg.DagsterInstance, batch: list[str]) -> _BatchOutcome:
    """One in-process run over `batch` (a single partition, or the range from its first to its last document);
    a signal during it tags the run and raises RunInterrupted."""
    watch = interrupts.active()
    watch.check()
    tags = _tags(**{"karma/trigger": "karma run"})
    t0 = time.perf_counter()
    if len(batch) == 1:
        result = defs.resolve_job_def(DOCUMENT_JOB).execute_in_process(
            partition_key=batch[0], instance=inst, raise_on_error=False, tags=tags, run_config=QUIET)
    else:
        tags = {**tags, "dagster/asset_partition_range_start": batch[0],
                "dagster/asset_partition_range_end": batch[-1]}
        result = defs.resolve_job_def(DOCUMENT_JOB).execute_in_process(
            instance=inst, raise_on_error=False, tags=tags, run_config=QUIET)
    if not result.success and (signum := watch.wait(2.0 if _was_interrupted(result) else 0)) is not None:
        inst.add_run_tags(result.run_id, {INTERRUPTED_TAG: interrupts.RunInterrupted(signum).signal_name})
        during = f"document {batch[0]}" if len(batch) == 1 else f"documents {batch[0]} .. {batch[-1]}"
        raise interrupts.RunInterrupted(signum, during=during, run_id=result.run_id)
    return _BatchOutcome(result, time.perf_counter() - t0)


def _log_one(key: str, outcome: _BatchOutcome, i: int, total: int, meter: str, log: Callable[[str], None],
             batch: int = 1) -> dict[str, str]:
    """The document's progress line (`meter`: the rate and ETA as of its run's end); {key: error} when its
    (single-document) run failed."""
    took = f"{outcome.seconds:.1f} s" if batch == 1 else f"batch of {batch}, {outcome.seconds / batch:.1f} s each"
    if outcome.success:
        log(f"[{i}/{total}] {key}: ok ({took}) | {meter}")
        return {}
    error = _first_failure(outcome.result)
    log(f"[{i}/{total}] {key}: FAILED: {error} | {meter}")
    return {key: error}


def interrupted_documents(inst: dg.DagsterInstance, catalog: Catalog | None = None) -> dict[str, str]:
    """document -> "interrupted (SIGTERM) in run <id>" for documents whose latest document run was stopped by a
    signal (`karma status` can show it; the next `karma run` completes them). With date partitions, `catalog` names
    the documents of a stopped day's run (without it, the day's key stands for them)."""
    return _interrupted(_latest_document_runs(inst, catalog))


def _latest_document_runs(inst: dg.DagsterInstance, catalog: Catalog | None = None) -> dict[str, dg.DagsterRun]:
    """document -> its most recent document-job run (a batch run counts for every document of its range; with
    `catalog`, a date partition's run for every document of its days: partitioning/mode.py)."""
    latest: dict[str, dg.DagsterRun] = {}
    for run in inst.get_runs(filters=dg.RunsFilter(job_name=DOCUMENT_JOB)):  # newest first
        if key := run.tags.get("dagster/partition"):
            keys = [key]
        elif (start := run.tags.get("dagster/asset_partition_range_start")) and \
                (end := run.tags.get("dagster/asset_partition_range_end")):
            keys = keys_between(inst, KG_DATES if _is_date(start) else documents_partitions.name, start, end)
        else:
            keys = []
        if catalog is not None:
            keys = [doc for k in keys for doc in (catalog.documents_of_day(k) if _is_date(k) else [k])]
        for key in keys:
            latest.setdefault(key, run)
    return latest


def _is_date(partition_key: str) -> bool:
    return len(partition_key) == 10 and "_" not in partition_key


def _failed_in_date_runs(inst: dg.DagsterInstance, latest: dict[str, dg.DagsterRun]) -> dict[str, str]:
    """document -> why, for documents their day's latest run reported in a step's `failed_documents` (the run itself
    succeeded: a date run goes on past one bad paper, batching._per_date)."""
    from dagster._core.events import DagsterEventType

    out: dict[str, str] = {}
    runs = {run.run_id: run for key, run in latest.items() if _is_date(run.tags.get("dagster/partition", "_"))}
    for run_id, run in runs.items():
        for entry in inst.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
            meta = entry.asset_materialization.metadata if entry.asset_materialization else {}
            value = getattr(meta.get("failed_documents"), "value", None)
            for key, why in (value.items() if isinstance(value, dict) else ()):
                if latest.get(key) is run:
                    out.setdefault(key, f"failed in run {run_id[:8]}: {why}")
    return out


def _interrupted(latest: dict[str, dg.DagsterRun]) -> dict[str, str]:
    return {key: f"interrupted ({run.tags[INTERRUPTED_TAG]}) in run {run.run_id[:8]}"
            for key, run in latest.items() if INTERRUPTED_TAG in run.tags}


def run_dates(
    defs: dg.Definitions, inst: dg.DagsterInstance, keys: list[str], namespaces: list[str],
    log: Callable[[str], None] = print, *, unmerged: dict[str, set[str]] | None = None,
) -> tuple[dict[str, str], dict[str, dict[str, bool]]]:
    """The documents `keys` date by date: date D's chains, then D's KG increment for every namespace, then D+1, so
    each document's conflict check (the KG as of the day before its date) sees every earlier increment.

    `unmerged` ({namespace: dates}, from `unmerged_dates`) adds the dates of documents evaluated earlier but never
    merged (a crash between chain and merge): their increments run in the same date order.
    Returns ({document: error}, {namespace: {date: merged ok}})."""
    unmerged = unmerged or {}
    by_date: dict[str, list[str]] = {date: [] for dates in unmerged.values() for date in dates}
    for key in sorted(keys):
        by_date.setdefault(date_of_document_key(key), []).append(key)
    failed: dict[str, str] = {}
    merged: dict[str, dict[str, bool]] = {ns: {} for ns in namespaces}
    increments = [(date, ns) for date, day_keys in sorted(by_date.items()) for ns in namespaces
                  if day_keys or date in unmerged.get(ns, set())]
    finished: list[str] = []  # documents run (ok or failed) and increments run (ok or failed)
    done = 0
    with Progress(len(keys)) as progress:
        try:
            for date, day_keys in sorted(by_date.items()):
                if day_keys:
                    failed.update(run_documents(defs, inst, day_keys, log, first=done + 1, total=len(keys),
                                                progress=progress))
                    finished += [f"document {k}" for k in day_keys]
                done += len(day_keys)
                for ns in namespaces:
                    if (date, ns) in increments:
                        merged[ns].update(run_increments(defs, inst, ns, [date]))
                        finished.append(f"KG increment {ns} {date}")
        except interrupts.RunInterrupted as exc:
            stopped = {*finished, *exc.finished, exc.during, *exc.stopped}
            everything = [f"document {k}" for k in sorted(keys)] + [f"KG increment {ns} {d}" for d, ns in increments]
            exc.remaining = [item for item in everything if item not in stopped]
            raise
    return failed, merged


def document_states(defs: dg.Definitions, inst: dg.DagsterInstance | None = None) -> dict[str, DocumentStates]:
    """Every backbone's DocumentStates (document_states.py), its accepted review items included (a date whose
    merge failed after an item was accepted is unmerged, and the next `karma run` merges it), and, when `inst` is
    given, why a pending document's latest run did not finish (interrupted by a signal, or failed)."""
    storage, backbones = _resources(defs)
    by_date = storage.partition_mode() == "date"
    latest = _latest_document_runs(inst, Catalog(storage.catalog_path()) if by_date else None) if inst else {}
    known = {**(_failed_in_date_runs(inst, latest) if inst and by_date else {}),
             **_failed(latest), **_interrupted(latest)}  # an interrupted run is also a failed one: say interrupted
    return with_review_documents(storage.paths(), states_in_stores(storage.paths(), backbones.names(), known))


def _failed(latest: dict[str, dg.DagsterRun]) -> dict[str, str]:
    """document -> "last run <id> failed" for documents whose most recent document-job run failed."""
    return {key: f"last run {run.run_id[:8]} failed" for key, run in latest.items()
            if run.status == dg.DagsterRunStatus.FAILURE}


def _was_interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """Whether a failed run was stopped by a signal (Dagster's interrupt error on a step or the run): then the
    caller waits a moment for the signal reader (interrupts.py) to say which signal it was."""
    for event in result.all_events:
        data = (event.step_failure_data if event.is_step_failure
                else event.job_failure_data if event.is_job_failure else None)
        if data is not None and data.error is not None and data.error.cls_name in INTERRUPT_ERRORS:
            return True
    return False


INTERRUPT_ERRORS = {"DagsterExecutionInterruptedError", "KeyboardInterrupt", "RunInterrupted"}


def _failed_documents(result: dg.ExecuteInProcessResult) -> set[str]:
    """The documents a batch run's failed steps name (batching.per_document's `failed_documents`); empty when a
    step failed otherwise (then every document of the batch is suspect)."""
    names: set[str] = set()
    for event in result.all_events:
        data = event.step_failure_data if event.is_step_failure else None
        meta = getattr(getattr(data, "user_failure_data", None), "metadata", None) or {}
        value = getattr(meta.get("failed_documents"), "value", None)
        if isinstance(value, dict):
            names |= set(value)
        elif data is not None:
            return set()
    return names


def _first_failure(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            err = event.step_failure_data.error
            while err.cause is not None and "dagster" in (err.cls_name or "").lower():
                err = err.cause
            return f"{event.step_key}: {err.message.strip().splitlines()[-1] if err.message else err.cls_name}"
    return "run failed"


def run_increments(defs: dg.Definitions, inst: dg.DagsterInstance, ns: str, dates: list[str]) -> dict[str, bool]:
    """The KG increments of `dates`, in order. A date without a KG partition (before KARMA_KG_START_DATE or after
    today, date_range.py) is left out: its documents already failed at `documents`, naming the setting, and the
    other dates still merge."""
    job = defs.resolve_job_def(kg_job_name(ns))
    dates, _outside = date_range.split_dates(dates, start=first_kg_date())
    ensure_partitions(inst, KG_DATES, dates)  # unmerged documents of a date a new DAGSTER_HOME does not know yet
    watch = interrupts.active()
    out: dict[str, bool] = {}
    for date in dates:
        watch.check()
        result = job.execute_in_process(partition_key=date, instance=inst, raise_on_error=False, run_config=QUIET,
                                        tags=_tags())
        if not result.success and (signum := watch.wait(2.0 if _was_interrupted(result) else 0)) is not None:
            # a stopped merge rolled back (one transaction): the date stays unmerged and the next run merges it
            inst.add_run_tags(result.run_id, {INTERRUPTED_TAG: interrupts.RunInterrupted(signum).signal_name})
            raise interrupts.RunInterrupted(signum, during=f"KG increment {ns} {date}", run_id=result.run_id)
        out[date] = result.success
    return out


def run_report(defs: dg.Definitions, inst: dg.DagsterInstance, wall_time_s: float, failed: dict[str, str]) -> RunReport:
    """Materialize `karma_report` and return the report it built (kept in its metadata as JSON)."""
    result = defs.resolve_job_def(REPORT_JOB).execute_in_process(
        instance=inst,
        run_config={**QUIET, "ops": {"karma_report": {"config": {"wall_time_s": wall_time_s, "failed_documents": failed}}}},
        tags=_tags(),
    )
    (materialization,) = result.asset_materializations_for_node("karma_report")
    return RunReport.model_validate(materialization.metadata["report_json"].value)


class RunOutcome(RunReport):
    """The run report plus what failed in it: the caller (cli) turns `failed` into the exit status."""

    increments_failed: dict[str, str] = {}

    @property
    def failed(self) -> dict[str, str]:
        return {**self.documents_failed, **self.increments_failed}


def run_main(defs: dg.Definitions, inst: dg.DagsterInstance, log: Callable[[str], None] = print) -> RunOutcome:
    """Import the seed if needed, register the inbox, run every unfinished document and merge every date that
    has an unmerged document (this run's or an earlier, interrupted one's), date by date; then the report."""
    t0 = time.perf_counter()
    storage, backbones = _resources(defs)
    if released := setup_pools(inst, backbones):
        log(f"{len(released)} run(s) of a karma process that died marked failed and their pool slots freed: "
            + ", ".join(r[:8] for r in released))
    data = storage.paths()
    services.check_kg(data)  # a KG damaged anywhere: exit 3 now, before any chain
    if dangling := services.dangling_evidence(data):  # e.g. a seed replaced under a grown KG before the guard
        log(f"WARNING {dangling}")
    if not services.seed_present(data):
        log("importing the seed KG ...")
        if not import_kg(defs, inst):
            interrupts.active().check(during="importing the seed KG", timeout_s=2.0)
            raise RuntimeError("importing the seed KG failed; see the import_kg run in the Dagster UI")
    services.entity_index(data)  # checked against the KG; rebuilt from it after an import cut short or damage
    new_keys, failed_files = register_inbox(defs, inst)
    states = document_states(defs)  # one read of the stores: unfinished chains and unmerged increments
    unfinished = {key for st in states.values() for key in st.pending}
    keys = sorted(set(new_keys) | unfinished)
    pending_merges = unmerged_dates(states)
    n_unmerged = sum(len(d) for d in pending_merges.values())
    log(f"{len(new_keys)} new or changed documents, {len(keys)} to process, {len(failed_files)} unreadable files"
        + (f", {n_unmerged} increments with unmerged documents" if n_unmerged else ""))
    failed, merged = run_dates(defs, inst, keys, backbones.names(), log, unmerged=pending_merges)
    interrupts.active().check()  # a signal after the last increment: no report
    failed.update({f"file {path}": why for path, why in failed_files.items()})
    for ns, outcome in merged.items():
        log(f"KG increments ({ns}): " + ", ".join(f"{d} {'ok' if ok else 'FAILED'}" for d, ok in outcome.items()))
    bad_merges = {f"KG increment {ns} {d}": f"the {kg_job_name(ns)} run failed (see it in the Dagster UI)"
                  for ns, outcome in merged.items() for d, ok in outcome.items() if not ok}
    report = run_report(defs, inst, time.perf_counter() - t0, failed)
    return RunOutcome(**report.model_dump(), increments_failed=bad_merges)


# ---------------------------------------------------------------- backfills through the daemon
def documents_in_range(defs: dg.Definitions, start: dt.date, end: dt.date) -> list[str]:
    storage, _ = _resources(defs)
    return Catalog(storage.catalog_path()).documents_for_dates(start, end)


def launch_backfill(
    defs: dg.Definitions, inst: dg.DagsterInstance, assets: list[dg.AssetKey], partitions: list[str], title: str,
    tags: dict[str, str] | None = None,
) -> str:
    backfill_id = make_new_backfill_id()
    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=backfill_id,
        asset_graph=defs.resolve_asset_graph(),
        partition_names=partitions,
        asset_selection=assets,
        backfill_timestamp=time.time(),
        tags={"karma/trigger": "karma backfill", **(tags or {})},
        dynamic_partitions_store=inst,
        all_partitions=False,
        title=title,
        description=None,
        run_config=None,
    )
    inst.add_backfill(backfill)
    return backfill_id


def wait_for_backfill(inst: dg.DagsterInstance, backfill_id: str, timeout_s: float, poll_s: float = 2.0) -> str:
    done = {BulkActionStatus.COMPLETED, BulkActionStatus.COMPLETED_SUCCESS, BulkActionStatus.COMPLETED_FAILED,
            BulkActionStatus.FAILED, BulkActionStatus.CANCELED}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        backfill = inst.get_backfill(backfill_id)
        if backfill is not None and backfill.status in done:
            return backfill.status.value
        time.sleep(poll_s)
    raise TimeoutError(f"backfill {backfill_id} not finished after {timeout_s:.0f} s: is the daemon running (dagster dev)?")


def backfill_tiers(
    defs: dg.Definitions, inst: dg.DagsterInstance, keys: list[str], namespace: str, n_tiers: int = CCA_TIERS
) -> list[tuple[list[str], dict[str, str]]]:
    """The controller's decisions for `keys`, cut into priority tiers of partition-adjacent chunks (tiers.py)."""
    storage, _ = _resources(defs)
    params = defs.resources["karma_params"].params().controller  # type: ignore[union-attr]
    decisions = {d.doc_key: d for d in decide(keys, storage.paths(), namespace=namespace, params=params)}
    position = positions(inst, documents_partitions.name, decisions)
    return controller_tiers(decisions, position, MAX_DOCUMENTS_PER_RUN, n_tiers)


def backfill_dates(
    defs: dg.Definitions, inst: dg.DagsterInstance, start: dt.date, end: dt.date, namespaces: list[str],
    timeout_s: float = 3600, log: Callable[[str], None] = print, wait: Callable[[str], str] | None = None,
) -> dict[str, str]:
    """`wait(backfill_id) -> status` defaults to polling for the daemon (tests drive daemon passes themselves)."""
    wait = wait or (lambda backfill_id: wait_for_backfill(inst, backfill_id, timeout_s))
    services.check_kg(_resources(defs)[0].paths())  # a damaged KG: exit 3 before any backfill is launched
    keys = documents_in_range(defs, start, end)
    if not keys:
        log(f"no registered documents dated {start}..{end}")
        return {}
    dates = sorted({date_of_document_key(k) for k in keys})
    stage_assets = chain_keys(namespaces)
    if _resources(defs)[0].partition_mode() == "date":  # the days themselves, in date order (partitioning/mode.py)
        ensure_registered(inst, keys, documents=False)
        in_range, outside = date_range.split_dates(dates, start=first_kg_date())
        for why in outside.values():
            log(f"skipped: {why}")
        if not in_range:
            return {"documents": "NO_DATE_IN_RANGE"}
        docs_id = launch_backfill(defs, inst, stage_assets, in_range, f"documents {start}..{end} ({len(in_range)} dates)")
        log(f"backfill {docs_id}: {len(keys)} documents of {len(in_range)} dates launched (a run per date); "
            "waiting for the daemon ...")
        status = {"documents": wait(docs_id)}
        kg_id = launch_backfill(defs, inst, [kg_key(ns) for ns in namespaces], in_range, f"KG increments {start}..{end}")
        log(f"backfill {kg_id}: KG increments of {', '.join(in_range)} launched (date order)")
        status["increments"] = wait(kg_id)
        return status
    ensure_registered(inst, keys)
    tiers = backfill_tiers(defs, inst, keys, namespaces[0] if namespaces else "local")
    docs_ids = [
        launch_backfill(defs, inst, stage_assets, tier_keys, f"documents {start}..{end} (CCA tier {i + 1}/{len(tiers)})", tags)
        for i, (tier_keys, tags) in enumerate(tiers)
    ]
    log(f"backfills {', '.join(docs_ids)}: {len(keys)} documents of {len(dates)} dates launched in {len(tiers)} "
        "controller priority tiers; waiting for the daemon ...")
    outcomes = [wait(docs_id) for docs_id in docs_ids]
    status = {"documents": next((o for o in outcomes if o != "COMPLETED_SUCCESS"), "COMPLETED_SUCCESS")}
    kg_assets = [kg_key(ns) for ns in namespaces]
    dates, outside = date_range.split_dates(dates, start=first_kg_date())
    for why in outside.values():
        log(f"skipped: {why}")
    if not dates:
        status["increments"] = "NO_DATE_IN_RANGE"
        return status
    kg_id = launch_backfill(defs, inst, kg_assets, dates, f"KG increments {start}..{end}")
    log(f"backfill {kg_id}: KG increments of {', '.join(dates)} launched (date order)")
    status["increments"] = wait(kg_id)
    return status


# ---------------------------------------------------------------- the comparison
def run_comparison(defs: dg.Definitions, inst: dg.DagsterInstance) -> tuple[bool, str]:
    """(success, the comparison table or the failure); the table also lands in <data_dir>/metrics/."""
    result = defs.resolve_job_def(COMPARE_JOB).execute_in_process(
        instance=inst, raise_on_error=False, run_config=QUIET, tags=_tags())
    storage, _ = _resources(defs)
    path = storage.paths().metrics_dir() / "backbone_comparison.md"
    if result.success and path.exists():
        return True, path.read_text()
    failures = [e.step_key for e in result.all_events if e.is_step_failure]
    return False, f"comparison FAILED at {failures} (see the {COMPARE_JOB} run in the Dagster UI)"


def enable_hint(statuses: list[BackboneStatus]) -> str:
    """How to get a second backbone, said once, when fewer than two are running."""
    running = [s for s in statuses if s.runnable]
    lines = []
    for s in statuses:
        if s.enabled and not s.configured:
            lines.append(f"- {s.name}: NOT CONFIGURED: set {s.key_env} (export {s.key_env}=...) to run it")
    if len(running) < 2:
        lines.append("- only one backbone runs: enable `local-single` (the single-agent baseline, no key) or an LLM "
                     "backbone in backbones.yaml (`enabled: true` and its key variable) to compare two")
    return "\n".join(lines)
