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
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable

import dagster as dg
import pandas as pd

# Backfill policies are "beta" in 1.13 (stable behaviour since 1.6): say it once in this docstring, not per asset.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)
MAX_DOCUMENTS_PER_RUN = int(os.environ.get("KARMA_DOCUMENTS_PER_RUN", "50"))  # 1 = one run per document
STAGE_BACKFILL_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=MAX_DOCUMENTS_PER_RUN)


class DocumentContext:
    """The run's context seen as a single-document one: `partition_key` is the document being processed."""

    def __init__(self, context: dg.AssetExecutionContext, key: str, deferred: list[pd.DataFrame] | None = None) -> None:
        self._context = context
        self.partition_key = key
        self.partition_keys = [key]
        self.deferred_tables = deferred  # a batch: the body leaves its table here to be validated with the others

    def __getattr__(self, name: str):
        return getattr(self._context, name)


def merge_results(keys: list[str], results: list[dg.MaterializeResult]) -> dg.MaterializeResult:
    """One result for a multi-document run: totals, a per-document table, one check over all documents."""
    rows = [int(getattr(r.metadata.get("rows"), "value", r.metadata.get("rows")) or 0) for r in results]
    seconds = [float(r.metadata.get("seconds") or 0.0) for r in results]
    checks = [c for r in results for c in (r.check_results or [])]
    failed = [k for k, r in zip(keys, results) if any(not c.passed for c in (r.check_results or []))]
    table = "\n".join(f"| {k} | {n} | {s:.2f} |" for k, n, s in zip(keys, rows, seconds))
    metadata = {
        "documents": len(keys),
        "note": "totals of a batch: each document's own rows, prompt id and preview are in its partition's "
                "observation (per_document table below)",
        "rows": dg.MetadataValue.int(sum(rows)),
        "seconds": round(sum(seconds), 3),
        "per_document": dg.MetadataValue.md("| document | rows | seconds |\n|---|---|---|\n" + table),
    }
    for name in ("backbone", "prompt_id"):
        if results and name in results[0].metadata:
            metadata[name] = results[0].metadata[name]
    merged_checks = []
    if checks:
        first = checks[0]
        merged_checks.append(dg.AssetCheckResult(
            passed=not failed, asset_key=first.asset_key, check_name=first.check_name,
            metadata={"documents": len(keys), "failed_documents": dg.MetadataValue.json(failed)},
        ))
    return dg.MaterializeResult(metadata=metadata, check_results=merged_checks)


def observe_document(context: dg.AssetExecutionContext, key: str, result: dg.MaterializeResult) -> None:
    """A document's own metadata (rows, prompt id, preview, its figures) as an observation of its partition.

    Dagster gives every partition of a multi-partition run the same materialization (one metadata for the
    range: dagster-io/dagster#12498, #17836), so without this a document of a batch would show the batch's
    totals; the observation sits on the document's partition in the UI, next to that materialization."""
    metadata = {k: v for k, v in (result.metadata or {}).items()}
    metadata["batch"] = f"one of {len(context.partition_keys)} documents of run {context.run.run_id[:8]}"
    context.log_event(dg.AssetObservation(asset_key=context.asset_key, partition=key, metadata=metadata))


Validate = Callable[[pd.DataFrame], dg.AssetCheckResult]


def validate_batch(validate: Validate, frames: list[pd.DataFrame]) -> list[dg.AssetCheckResult]:
    """Each document's check result, from one validation of all tables when they pass together."""
    together = validate(pd.concat(frames, ignore_index=True)) if len(frames) > 1 else None
    if together is None or not together.passed:
        return [validate(frame) for frame in frames]
    return [dg.AssetCheckResult(passed=True, asset_key=together.asset_key, check_name=together.check_name,
                                metadata={"rows": len(frame)}) for frame in frames]


def per_document(validate: Validate) -> Callable[[Callable[..., dg.MaterializeResult]], Callable[..., dg.MaterializeResult]]:
    """Run a single-document asset body for each partition key of the run (in key order); a document that
    fails does not stop the others, and the run then fails naming every failed document. The body validates
    its own table when alone; in a batch it leaves the table in `context.deferred_tables` and `validate` runs
    over them all at the end (validate_batch)."""

    def decorate(fn: Callable[..., dg.MaterializeResult]) -> Callable[..., dg.MaterializeResult]:
        @functools.wraps(fn)
        def wrapper(context: dg.AssetExecutionContext, **resources) -> dg.MaterializeResult:
            if not context.has_partition_key_range:
                return fn(context, **resources)
            keys = sorted(context.partition_keys)
            if len(keys) == 1:
                return fn(DocumentContext(context, keys[0]), **resources)
            done: list[tuple[str, dg.MaterializeResult, pd.DataFrame]] = []
            errors: dict[str, str] = {}
            for key in keys:
                tables: list[pd.DataFrame] = []
                try:
                    done.append((key, fn(DocumentContext(context, key, tables), **resources), tables[0]))
                except Exception as exc:  # noqa: BLE001 - reported below, per document
                    context.log.error(f"document {key}: {type(exc).__name__}: {exc}")
                    errors[key] = f"{type(exc).__name__}: {exc}"
            checks = validate_batch(validate, [frame for _, _, frame in done]) if done else []
            results = []
            for (key, result, _), check in zip(done, checks):
                result = dg.MaterializeResult(metadata=result.metadata, check_results=[check])
                observe_document(context, key, result)
                results.append(result)
            if errors:
                raise dg.Failure(
                    description=f"{len(errors)} of {len(keys)} documents failed: {', '.join(sorted(errors))}",
                    metadata={"failed_documents": dg.MetadataValue.json(errors)},
                )
            return merge_results([key for key, _, _ in done], results)

        return wrapper

    return decorate
