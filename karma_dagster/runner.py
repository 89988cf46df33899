"""Runs the main job, date-range backfills and the comparison against the local Dagster instance (for `karma`).

`run_main` goes date by date: the chains of date D's documents, each as its own in-process run (visible in the
UI, one failure never stops the others), then the KG increment of D for every backbone, then D+1 — so a document
dated D+1 is checked for conflicts against a KG that holds D's increment; then the report and the comparison.
`backfill_dates` launches real Dagster backfills that the daemon (`dagster dev`) executes and the UI shows: first the
documents of the date range, then, once they are done, the increments of those dates (a backfill selecting both
would fan out to every date through the all-partitions mapping). Documents of a range are therefore checked against
the KG as it stood before the range (only `karma run` interleaves merges date by date).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable

import dagster as dg
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.utils import make_new_backfill_id
from pydantic import BaseModel

from karma_dagster import paths, services
from karma_dagster import date_range
from karma_dagster.assets.batching import MAX_DOCUMENTS_PER_RUN
from karma_dagster.config import BackboneStatus
from karma_dagster.home import ensure_partitions
from karma_dagster.agents.integration import StageTableInvalid, collect_document
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import scan_inbox
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.kg import merge
from karma_dagster.kg.store import KGStore
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
from karma_dagster.partitions import documents_partitions
from karma_dagster.partitions import first_kg_date
from karma_dagster.report import RunReport
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.scheduling.plan import decide
from karma_dagster.scheduling.tiers import CCA_TIERS, controller_tiers
from karma_dagster.stages import FINAL_STAGE

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def instance() -> dg.DagsterInstance:
    """The instance of $DAGSTER_HOME; its creation holds the home's lock so two processes that start together on
    a fresh home do not both set up Dagster's SQLite schema (home.py)."""
    from karma_dagster.home import under_home_lock

    os.environ.setdefault("DAGSTER_HOME", str(paths.dagster_home()))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return under_home_lock(os.environ["DAGSTER_HOME"], dg.DagsterInstance.get)


def setup_pools(inst: dg.DagsterInstance, backbones: BackbonesResource) -> None:
    """One pool per LLM backbone (steps in flight = its `concurrency`), one writer for the KG."""
    inst.event_log_storage.set_concurrency_slots(KG_WRITER_POOL, KG_WRITER_POOL_LIMIT)
    for ns, config in backbones.backbones.items():
        if config.kind == "litellm":
            inst.event_log_storage.set_concurrency_slots(llm_pool(ns), config.concurrency)


def _resources(defs: dg.Definitions) -> tuple[KarmaStorageResource, BackbonesResource]:
    res = defs.resources or {}
    return res["storage"], res["backbones"]  # type: ignore[return-value]


def import_kg(defs: dg.Definitions, inst: dg.DagsterInstance, nodes: str = "", edges: str = "", fmt: str = "hetionet") -> bool:
    result = defs.resolve_job_def(IMPORT_KG_JOB).execute_in_process(
        instance=inst,
        run_config={**QUIET, "ops": {"seed_kg": {"config": {"nodes": nodes, "edges": edges, "format": fmt}}}},
        raise_on_error=False,
    )
    return result.success


def register_inbox(defs: dg.Definitions, inst: dg.DagsterInstance) -> tuple[list[str], dict[str, str]]:
    """Scan the inbox like the `new_papers` sensor does; returns (documents to run, files that failed)."""
    storage, _ = _resources(defs)
    result = scan_inbox(storage.inbox_dir(), Catalog(storage.catalog_path()), arrival_date=dt.date.today())
    keys = sorted(result.keys_to_run)
    existing = set(inst.get_dynamic_partitions(documents_partitions.name))
    if new := [k for k in keys if k not in existing]:
        inst.add_dynamic_partitions(documents_partitions.name, new)
    return keys, {f.path: f.error for f in result.failed}


def run_documents(
    defs: dg.Definitions, inst: dg.DagsterInstance, keys: list[str], log: Callable[[str], None] = print,
    *, first: int = 1, total: int | None = None,
) -> dict[str, str]:
    """One in-process run per document; returns {document: error} for those that failed. Progress lines count
    from `first` of `total` (a caller running the documents date by date numbers them across dates)."""
    job = defs.resolve_job_def(DOCUMENT_JOB)
    ensure_partitions(inst, documents_partitions.name, keys)  # a new DAGSTER_HOME over a data dir the catalog knows
    failed: dict[str, str] = {}
    total = len(keys) if total is None else total
    for i, key in enumerate(keys, first):
        t0 = time.perf_counter()
        result = job.execute_in_process(
            partition_key=key, instance=inst, raise_on_error=False, tags={"karma/trigger": "karma run"}, run_config=QUIET
        )
        if result.success:
            log(f"[{i}/{total}] {key}: ok ({time.perf_counter() - t0:.1f} s)")
        else:
            failed[key] = _first_failure(result)
            log(f"[{i}/{total}] {key}: FAILED: {failed[key]}")
    return failed


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
    done = 0
    for date, day_keys in sorted(by_date.items()):
        if day_keys:
            failed.update(run_documents(defs, inst, day_keys, log, first=done + 1, total=len(keys)))
        done += len(day_keys)
        for ns in namespaces:
            if day_keys or date in unmerged.get(ns, set()):
                merged[ns].update(run_increments(defs, inst, ns, [date]))
    return failed, merged


class DocumentStates(BaseModel):
    """Where each registered document of one backbone stands (`karma status`, and what `karma run` merges).

    merged: its evaluated table's accepted triples are in the KG as they are now (same fingerprint);
    unmerged: evaluated, but not merged or merged from a different table; pending: registered, not evaluated;
    failed: known failures (an evaluated table the merge cannot take, or a pending document whose last run failed).
    """

    backbone: str
    registered: list[str] = []
    evaluated: list[str] = []
    merged: list[str] = []
    unmerged: list[str] = []
    pending: list[str] = []
    failed: dict[str, str] = {}

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name))
                for name in ("registered", "evaluated", "merged", "unmerged", "failed", "pending")}


def document_states(defs: dg.Definitions, inst: dg.DagsterInstance | None = None) -> dict[str, DocumentStates]:
    """Every backbone's DocumentStates, from the stores (catalog, stage tables, the KG's merged_documents) and,
    when `inst` is given, the latest document run of pending documents (its failure, if it failed)."""
    storage, backbones = _resources(defs)
    return states_in_stores(storage, list(backbones.names()), _last_document_failures(inst) if inst else None)


def states_in_stores(
    storage: KarmaStorageResource, namespaces: list[str], last_failures: dict[str, str] | None = None
) -> dict[str, DocumentStates]:
    """`document_states` from the stores alone (what the kg_increments sensor can see in a tick)."""
    stages, kg = storage.stage_store(), KGStore(storage.kg_path())
    registered = sorted(Catalog(storage.catalog_path()).all_keys())
    last_failures = last_failures or {}
    out: dict[str, DocumentStates] = {}
    for ns in namespaces:
        state = DocumentStates(backbone=ns, registered=registered)
        recorded = kg.merged_documents(ns)
        for key in registered:
            if not stages.exists(ns, FINAL_STAGE, key):
                state.pending.append(key)
                if key in last_failures:
                    state.failed[key] = last_failures[key]
                continue
            state.evaluated.append(key)
            try:
                triples, nodes = collect_document(
                    key, stages.read(ns, FINAL_STAGE, key), stages.read(ns, "entities", key), ""
                )
                fingerprint = merge.document_fingerprint(key, triples, nodes)
            except (StageTableInvalid, merge.TripleValidationError, FileNotFoundError) as exc:
                state.failed[key] = f"cannot be merged: {exc}"
                continue
            (state.merged if recorded.get(key) == fingerprint else state.unmerged).append(key)
        out[ns] = state
    return out


def _last_document_failures(inst: dg.DagsterInstance) -> dict[str, str]:
    """document -> "last run <id> failed" for documents whose most recent document-job run failed."""
    latest: dict[str, dg.DagsterRun] = {}
    for run in inst.get_runs(filters=dg.RunsFilter(job_name=DOCUMENT_JOB)):  # newest first
        key = run.tags.get("dagster/partition")
        if key and key not in latest:
            latest[key] = run
    return {key: f"last run {run.run_id[:8]} failed" for key, run in latest.items()
            if run.status == dg.DagsterRunStatus.FAILURE}


def unmerged_dates(states: dict[str, DocumentStates]) -> dict[str, set[str]]:
    """{namespace: dates of its unmerged documents}: the increments the next run must (re-)merge."""
    return {ns: {date_of_document_key(k) for k in st.unmerged} for ns, st in states.items()}


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
    return {
        date: job.execute_in_process(partition_key=date, instance=inst, raise_on_error=False, run_config=QUIET).success
        for date in dates
    }


def run_report(defs: dg.Definitions, inst: dg.DagsterInstance, wall_time_s: float, failed: dict[str, str]) -> RunReport:
    """Materialize `karma_report` and return the report it built (kept in its metadata as JSON)."""
    result = defs.resolve_job_def(REPORT_JOB).execute_in_process(
        instance=inst,
        run_config={**QUIET, "ops": {"karma_report": {"config": {"wall_time_s": wall_time_s, "failed_documents": failed}}}},
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
    setup_pools(inst, backbones)
    if not services.seed_present(storage.paths()):
        log("importing the seed KG ...")
        if not import_kg(defs, inst):
            raise RuntimeError("importing the seed KG failed; see the import_kg run in the Dagster UI")
    new_keys, failed_files = register_inbox(defs, inst)
    states = document_states(defs)  # one read of the stores: unfinished chains and unmerged increments
    unfinished = {key for st in states.values() for key in st.pending}
    keys = sorted(set(new_keys) | unfinished)
    pending_merges = unmerged_dates(states)
    n_unmerged = sum(len(d) for d in pending_merges.values())
    log(f"{len(new_keys)} new or changed documents, {len(keys)} to process, {len(failed_files)} unreadable files"
        + (f", {n_unmerged} increments with unmerged documents" if n_unmerged else ""))
    failed, merged = run_dates(defs, inst, keys, backbones.names(), log, unmerged=pending_merges)
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
    position = {k: i for i, k in enumerate(inst.get_dynamic_partitions(documents_partitions.name)) if k in decisions}
    return controller_tiers(decisions, position, MAX_DOCUMENTS_PER_RUN, n_tiers)


def backfill_dates(
    defs: dg.Definitions, inst: dg.DagsterInstance, start: dt.date, end: dt.date, namespaces: list[str],
    timeout_s: float = 3600, log: Callable[[str], None] = print, wait: Callable[[str], str] | None = None,
) -> dict[str, str]:
    """`wait(backfill_id) -> status` defaults to polling for the daemon (tests drive daemon passes themselves)."""
    wait = wait or (lambda backfill_id: wait_for_backfill(inst, backfill_id, timeout_s))
    keys = documents_in_range(defs, start, end)
    if not keys:
        log(f"no registered documents dated {start}..{end}")
        return {}
    dates = sorted({date_of_document_key(k) for k in keys})
    ensure_partitions(inst, documents_partitions.name, keys)
    stage_assets = chain_keys(namespaces)
    tiers = backfill_tiers(defs, inst, keys, namespaces[0] if namespaces else "local")
    docs_ids = [
        launch_backfill(defs, inst, stage_assets, tier_keys, f"documents {start}..{end} (CCA tier {i + 1}/{len(tiers)})", tags)
        for i, (tier_keys, tags) in enumerate(tiers)
    ]
    log(f"backfills {', '.join(docs_ids)}: {len(keys)} documents of {len(dates)} dates launched in {len(tiers)} "
        "controller priority tiers; waiting for the daemon ...")
    outcomes = [wait(docs_id) for docs_id in docs_ids]
    status = {"documents": next((o for o in outcomes if o != "COMPLETED_SUCCESS"), "COMPLETED_SUCCESS")}
    kg_assets = [dg.AssetKey([ns, "knowledge_graph"]) for ns in namespaces]
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
    result = defs.resolve_job_def(COMPARE_JOB).execute_in_process(instance=inst, raise_on_error=False, run_config=QUIET)
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
