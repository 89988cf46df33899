"""Many document partitions in one run: what a backfill policy needs from a per-document stage asset.

A run pays its start-up (process, code load, lexicon/model load, event-log writes) once; a backfill of a
month of papers with one run per partition pays it for every paper. The stage assets therefore declare a
multi-run backfill policy (up to `MAX_DOCUMENTS_PER_RUN` documents a run) and `per_document` runs their
single-document body once per partition key of the run. A single-partition run (the UI's "materialize",
a sensor's run) is exactly what it was before.

Within a batch the tables' pandera checks run once over all documents' tables together (their checks are
row-wise or uniqueness, so a batch that passes means every document passes; one that fails is checked document
by document to name the failing ones): a validation costs ~30 ms whatever the rows, which was a quarter of a
batched document's Dagster overhead (bench/throughput.py).

Each document's own metadata (rows, prompt id, preview, figures) goes onto its partition's materialization
(`add_asset_metadata(partition_key=...)`: partition-scoped metadata, merged over the batch's), so a batch writes
no event beyond the materialization Dagster writes for each partition anyway. Its ledger rows are written in one
transaction at the end of the step (`BatchState`), and what is the same for every document of the step (the
prompt id) is computed once.
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pandas as pd

from karma_dagster.ingest.catalog import Catalog
from karma_dagster.runtime.ledger import Ledger, LedgerRow

# Backfill policies are "beta" in 1.13 (stable behaviour since 1.6): say it once in this docstring, not per asset.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)
MAX_DOCUMENTS_PER_RUN = int(os.environ.get("KARMA_DOCUMENTS_PER_RUN", "50"))  # 1 = one run per document
STAGE_BACKFILL_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=MAX_DOCUMENTS_PER_RUN)
# Date partitions (partitioning/mode.py): a day of PubMed is ~4,000 papers, so a backfill run takes one day.
DATES_PER_RUN = int(os.environ.get("KARMA_DATES_PER_RUN", "1"))
DATE_BACKFILL_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=DATES_PER_RUN)


class BatchState:
    """What the documents of one batched step share: the ledger rows they booked (written together by `flush`)
    and values that are the same for each of them (`memo`, e.g. a backbone's prompt id)."""

    FLUSH_SECONDS = 5.0  # a process killed mid-step loses at most the last few seconds' ledger rows

    def __init__(self) -> None:
        self.ledger_rows: dict[Path, list[LedgerRow]] = {}
        self.memo: dict[str, object] = {}
        self._flushed = time.monotonic()

    def book(self, path: Path, row: LedgerRow) -> None:
        self.ledger_rows.setdefault(path, []).append(row)

    def flush_if_due(self, log: Callable[[str], None]) -> None:
        """Between documents: write what is booked when the last write is FLUSH_SECONDS old (a commit every few
        seconds instead of one per document and stage, and a SIGKILL loses only those seconds' rows)."""
        if time.monotonic() - self._flushed >= self.FLUSH_SECONDS:
            self.flush(log)

    def flush(self, log: Callable[[str], None]) -> None:
        """One transaction per ledger file. Accounting never fails a step: an error is logged, not raised."""
        for path, rows in self.ledger_rows.items():
            try:
                Ledger(path).record_many(rows)
            except Exception as exc:  # noqa: BLE001 - accounting must not fail the stage
                log(f"ledger: could not record {len(rows)} rows of this batch: {exc}")
        self.ledger_rows = {}
        self._flushed = time.monotonic()


class DocumentContext:
    """The run's context seen as a single-document one: `partition_key` is the document being processed."""

    def __init__(self, context: dg.AssetExecutionContext, key: str, deferred: list[pd.DataFrame] | None = None,
                 batch: BatchState | None = None) -> None:
        self._context = context
        self.partition_key = key
        self.partition_keys = [key]
        self.deferred_tables = deferred  # a batch: the body leaves its table here to be validated with the others
        self.karma_batch = batch  # a batch: ledger rows and per-step values shared by its documents

    def __getattr__(self, name: str):
        return getattr(self._context, name)


TABLE_ROWS = 500  # rows of the per_document table in a step's metadata


def merge_results(keys: list[str], results: list[dg.MaterializeResult]) -> dg.MaterializeResult:
    """One result for a multi-document run: totals, a per-document table, one check over all documents. Each
    partition's materialization shows these under its own metadata (document_metadata): `rows` there is the
    document's, `batch_rows` the batch's total."""
    rows = [int(getattr(r.metadata.get("rows"), "value", r.metadata.get("rows")) or 0) for r in results]
    seconds = [float(r.metadata.get("seconds") or 0.0) for r in results]
    checks = [c for r in results for c in (r.check_results or [])]
    failed = [k for k, r in zip(keys, results) if any(not c.passed for c in (r.check_results or []))]
    table = "\n".join(f"| {k} | {n} | {s:.2f} |" for k, n, s in list(zip(keys, rows, seconds))[:TABLE_ROWS])
    if len(keys) > TABLE_ROWS:  # a date partition of PubMed holds thousands
        table += f"\n| ... {len(keys) - TABLE_ROWS} more | | |"
    metadata = {
        "documents": len(keys),
        "note": "one of a batch of documents run together: rows, prompt id, preview and figures are this "
                "document's own; batch_rows, batch_seconds and the per_document table are the batch's",
        "batch_rows": dg.MetadataValue.int(sum(rows)),
        "batch_seconds": round(sum(seconds), 3),
        "per_document": dg.MetadataValue.md("| document | rows | seconds |\n|---|---|---|\n" + table),
    }
    merged_checks = []
    if checks:
        first = checks[0]
        merged_checks.append(dg.AssetCheckResult(
            passed=not failed, asset_key=first.asset_key, check_name=first.check_name,
            metadata={"documents": len(keys), "failed_documents": dg.MetadataValue.json(failed)},
        ))
    return dg.MaterializeResult(metadata=metadata, check_results=merged_checks)


def document_metadata(context: dg.AssetExecutionContext, key: str, result: dg.MaterializeResult, batch: str,
                      run_keys: frozenset[str]) -> None:
    """A document's own metadata (rows, prompt id, preview, its figures) on its partition's materialization.

    The step's MaterializeResult gives every partition of a range run the same metadata; partition-scoped
    metadata (`add_asset_metadata(partition_key=...)`, merged over it) makes each partition's materialization
    the document's own, without an event of its own (it replaced an AssetObservation per document and stage:
    a write to the run's and the index's SQLite each)."""
    metadata = dict(result.metadata or {})
    metadata["batch"] = batch
    step = getattr(getattr(context, "op_execution_context", None), "_step_execution_context", None)
    accumulator = getattr(step, "_metadata_accumulator", None)
    if accumulator is None or key not in run_keys:  # another Dagster, or a key not of this run
        context.add_asset_metadata(metadata, partition_key=key)
        return
    # What `add_asset_metadata` does after checking the key is in the run's range: that check lists every
    # document partition of the instance (a dynamic partitions query), per document and stage, so a catalog of
    # N papers made each batched document cost O(N) (13 ms a call at 60 papers; seconds at a million). The key
    # was checked above against the run's own keys (`run_keys`: the step's, listed once). Dagster is pinned
    # (pyproject), and the fallback keeps the public call if the private attribute moves.
    step._metadata_accumulator = accumulator.with_additional_asset_metadata(
        asset_key=context.assets_def.key, partition_key=key, metadata=metadata)


USAGE_COUNTS = ("llm_calls", "cache_hits", "tokens_in", "tokens_out", "invalid_items")


def usage_totals(metadata: list[dict]) -> dict[str, object]:
    """A date partition's LLM figures: the sums of its documents' (chain.usage_metadata), so the backbone
    comparison and the report read a day's materialization as they read a document's. cost_usd stays the
    "unpriced" note when any document's model had no price."""
    if not metadata:
        return {}
    value = lambda m, k: getattr(m.get(k), "value", m.get(k))  # noqa: E731 - a MetadataValue or a plain value
    totals: dict[str, object] = {k: sum(int(value(m, k) or 0) for m in metadata)
                                 for k in USAGE_COUNTS if any(k in m for m in metadata)}
    costs = [value(m, "cost_usd") for m in metadata if "cost_usd" in m]
    if costs:
        priced = all(isinstance(c, (int, float)) for c in costs)
        totals["cost_usd"] = round(sum(costs), 6) if priced else next(c for c in costs if not isinstance(c, (int, float)))
    return totals


Validate = Callable[[pd.DataFrame], dg.AssetCheckResult]


def validate_batch(validate: Validate, frames: list[pd.DataFrame]) -> list[dg.AssetCheckResult]:
    """Each document's check result, from one validation of all tables when they pass together."""
    together = validate(pd.concat(frames, ignore_index=True)) if len(frames) > 1 else None
    if together is None or not together.passed:
        return [validate(frame) for frame in frames]
    return [dg.AssetCheckResult(passed=True, asset_key=together.asset_key, check_name=together.check_name,
                                metadata={"rows": len(frame)}) for frame in frames]


Done = list[tuple[str, dg.MaterializeResult, pd.DataFrame]]


def each_document(fn: Callable[..., dg.MaterializeResult], context: dg.AssetExecutionContext, keys: list[str],
                  resources: dict) -> tuple[Done, dict[str, Exception]]:
    """The single-document body once per key, in order, sharing a BatchState: (key, result, table) of those done,
    and what each of the others raised (a document's failure does not stop the rest)."""
    done: Done = []
    raised: dict[str, Exception] = {}
    batch = BatchState()
    try:
        for key in keys:
            tables: list[pd.DataFrame] = []
            try:
                done.append((key, fn(DocumentContext(context, key, tables, batch), **resources), tables[0]))
            except Exception as exc:  # noqa: BLE001 - the caller reports it, per document
                raised[key] = exc
            batch.flush_if_due(context.log.warning)
    finally:  # what the documents done so far spent is booked, even when the step stops here
        batch.flush(context.log.warning)
    return done, raised


def per_document(validate: Validate) -> Callable[[Callable[..., dg.MaterializeResult]], Callable[..., dg.MaterializeResult]]:
    """Run a single-document asset body for each partition key of the run (in key order); a document that
    fails does not stop the others, and the run then fails naming every failed document. The body validates
    its own table when alone; in a batch it leaves the table in `context.deferred_tables` and `validate` runs
    over them all at the end (validate_batch)."""

    def decorate(fn: Callable[..., dg.MaterializeResult]) -> Callable[..., dg.MaterializeResult]:
        @functools.wraps(fn)
        def wrapper(context: dg.AssetExecutionContext, **resources) -> dg.MaterializeResult:
            storage = resources.get("storage")
            if storage is not None and storage.partition_mode() == "date":
                return _per_date(fn, validate, context, storage, resources)
            if not context.has_partition_key_range:
                return fn(context, **resources)
            keys = sorted(context.partition_keys)
            if len(keys) == 1:
                return fn(DocumentContext(context, keys[0]), **resources)
            done, raised = each_document(fn, context, keys, resources)
            errors = {key: f"{type(exc).__name__}: {exc}" for key, exc in raised.items()}
            for key, error in errors.items():
                context.log.error(f"document {key}: {error}")
            checks = validate_batch(validate, [frame for _, _, frame in done]) if done else []
            results = []
            label = f"one of {len(keys)} documents of run {context.run.run_id[:8]}"
            run_keys = frozenset(keys)
            for (key, result, _), check in zip(done, checks):
                result = dg.MaterializeResult(metadata=result.metadata, check_results=[check])
                document_metadata(context, key, result, label, run_keys)
                results.append(result)
            if errors:
                raise dg.Failure(
                    description=f"{len(errors)} of {len(keys)} documents failed: {', '.join(sorted(errors))}",
                    metadata={"failed_documents": dg.MetadataValue.json(errors)},
                )
            return merge_results([key for key, _, _ in done], results)

        return wrapper

    return decorate


def _upstream_missing(exc: BaseException) -> bool:
    """The document has no table of a stage this one reads (that stage failed for it, or has not run)."""
    return any(isinstance(e, FileNotFoundError) for e in (exc, exc.__cause__))


def _per_date(fn: Callable[..., dg.MaterializeResult], validate: Validate, context: dg.AssetExecutionContext,
              storage, resources: dict) -> dg.MaterializeResult:
    """A date partition (or a range of them): the body once per document of those days, in key order.

    A document that fails is reported (log, `failed_documents`) and the others go on, here and downstream: a
    day's run must not stop at one bad paper of its thousands. One whose upstream table is missing (it failed
    at an earlier stage) is `skipped_documents`, not failed again. The step fails only when documents failed
    here and none succeeded (a broken stage, a backbone that answers nothing), so such a day shows red."""
    catalog = Catalog(storage.catalog_path())
    dates = sorted(context.partition_keys)
    keys = [k for d in dates for k in catalog.documents_of_day(d)]
    done, raised = each_document(fn, context, keys, resources)
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for key, exc in raised.items():
        (skipped if _upstream_missing(exc) else failed)[key] = f"{type(exc).__name__}: {exc}"
        if key in failed:
            context.log.error(f"document {key}: {failed[key]}")
    if failed and not done:
        raise dg.Failure(description=f"all {len(failed)} documents of {', '.join(dates)} failed at this stage",
                         metadata={"failed_documents": dg.MetadataValue.json(dict(list(failed.items())[:200]))})
    checks = validate_batch(validate, [frame for _, _, frame in done]) if done else []
    results = [dg.MaterializeResult(metadata=result.metadata, check_results=[check])
               for (_, result, _), check in zip(done, checks)]
    merged = merge_results([key for key, _, _ in done], results)
    first = results[0].metadata if results else {}
    own = {k: first[k] for k in ("backbone", "prompt_id", "variant", "ablated") if k in first}
    metadata = {
        **dict(merged.metadata or {}),
        **own,
        **usage_totals([r.metadata or {} for r in results]),
        "note": "a date partition: its documents were processed one by one; rows and seconds per document are in "
                "per_document, failures in failed_documents, each document's own figures with its stage table "
                "(StageStore.recorded, `karma status --document KEY`)",
        "dates": ", ".join(dates),
        "documents": len(keys),
        "documents_done": len(done),
        "documents_failed": len(failed),
        "failed_documents": dg.MetadataValue.json(dict(list(failed.items())[:200])),
        "documents_skipped": len(skipped),
        "skipped_documents": dg.MetadataValue.json(dict(list(skipped.items())[:200])),
    }
    if merged.check_results:
        check_results = merged.check_results
    else:  # no document to check: the day has none, or none reached this stage
        check_results = [dg.AssetCheckResult(passed=True, metadata={"documents": 0})]
    return dg.MaterializeResult(metadata=metadata, check_results=check_results)
