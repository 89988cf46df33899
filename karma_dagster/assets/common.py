"""What every stage asset does around its agent: validate the table, store it, report metadata."""


import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import dagster as dg
import pandas as pd
import pandera.errors as pa_errors
from pydantic import BaseModel

from karma_dagster.backbones.base import Backbone
from karma_dagster.assets.batching import STAGE_BACKFILL_POLICY
from karma_dagster.ledger import Ledger, LedgerRow, ledger_path
from karma_dagster.partitions import documents_partitions
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.schemas.tables import STAGE_TABLES
from karma_dagster.stage_store import StageStore

# Stage name -> (Dagster group, KARMA agent, one-line description a UI user understands).
STAGES: dict[str, tuple[str, str, str]] = {
    "documents": ("ingestion", "ingestion", "IA: the paper's normalized text, sections and metadata (title, authors, journal, date, DOI, PMID)."),
    "segments": ("reader", "reader", "RA: the paper cut into sections; references and acknowledgements dropped; relevance R(s) per segment, kept when R(s) >= delta."),
    "summaries": ("summarizer", "summarizer", "SA: each kept segment condensed, keeping entities, numbers and relation words."),
    "entities": ("entity_extraction", "entity_extraction", "EEA: mentions (NER filtered by the KG/MeSH dictionary, abbreviations resolved), each linked to the nearest KG entity or flagged new (distance > rho)."),
    "relations": ("relation_extraction", "relation_extraction", "REA: candidate triples between entities of one sentence, every relation type with p >= theta_r, with the evidence sentence."),
    "aligned": ("schema_alignment", "schema_alignment", "SAA: entity kinds and relations mapped onto the KG schema; no match is flagged for schema review."),
    "resolved": ("conflict_resolution", "conflict_resolution", "CRA: triples that contradict an existing KG edge, debated; contradicted ones discarded or queued for review."),
    "evaluated": ("evaluator", "evaluator", "EA: confidence, clarity and relevance per triple; accepted for the KG when their mean >= Theta."),
}
STAGE_ORDER = list(STAGES)


def stage_key(namespace: str, stage: str) -> dg.AssetKey:
    return dg.AssetKey([namespace, stage])


def check_spec(namespace: str, stage: str) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        name=f"{stage}_table_schema",
        asset=stage_key(namespace, stage),
        blocking=True,
        description=f"pandera model of the {stage} table (columns, types, ranges, unique ids); blocks what follows.",
    )


def validate_table(namespace: str, stage: str, frame: pd.DataFrame) -> dg.AssetCheckResult:
    model = STAGE_TABLES[stage]
    try:
        model.validate(frame, lazy=True)
    except pa_errors.SchemaErrors as exc:
        cases = exc.failure_cases.head(20)
        return dg.AssetCheckResult(
            passed=False,
            asset_key=stage_key(namespace, stage),
            check_name=f"{stage}_table_schema",
            metadata={"failures": len(exc.failure_cases), "failure_cases": dg.MetadataValue.md(cases.to_markdown())},
        )
    return dg.AssetCheckResult(
        passed=True, asset_key=stage_key(namespace, stage), check_name=f"{stage}_table_schema",
        metadata={"rows": len(frame)},
    )


def preview(frame: pd.DataFrame, columns: Sequence[str], rows: int = 10, width: int = 80) -> dg.MetadataValue:
    shown = frame.loc[:, [c for c in columns if c in frame.columns]].head(rows).copy()
    for col in shown.columns:
        if shown[col].dtype == object:
            shown[col] = shown[col].map(lambda v: v if not isinstance(v, str) or len(v) <= width else v[: width - 1] + "…")
    return dg.MetadataValue.md(shown.to_markdown(index=False) if len(shown) else "_(no rows)_")


def usage_metadata(backbone: Backbone, agent: str) -> dict[str, object]:
    usage = backbone.usage()
    meta: dict[str, object] = {
        "backbone": backbone.name,
        "prompt_id": backbone.prompt_id(agent),
        "llm_calls": usage.calls,
        "cache_hits": usage.cache_hits,
        "tokens_in": usage.prompt_tokens,
        "tokens_out": usage.completion_tokens,
        "invalid_items": usage.invalid_items,
    }
    meta["cost_usd"] = usage.cost_usd if usage.cost_usd is not None else "unpriced model (tokens only)"
    return meta


class StageTimer:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    def seconds(self) -> float:
        return round(time.perf_counter() - self.started, 3)


def finish_stage(
    context: dg.AssetExecutionContext,
    store: StageStore,
    namespace: str,
    stage: str,
    records: Sequence[BaseModel],
    model: type[BaseModel],
    backbone: Backbone,
    timer: StageTimer,
    preview_columns: Sequence[str],
    extra: dict[str, object] | None = None,
) -> dg.MaterializeResult:
    """Validate, store atomically, and report. The table is stored even when the check fails, so that a
    user can inspect it; the blocking check stops downstream stages and the KG merge re-validates."""
    frame = records_to_frame(records, model)
    check = validate_table(namespace, stage, frame)
    store.write(namespace, stage, context.partition_key, frame)
    record_ledger(context, store, stage, backbone)
    metadata: dict[str, object] = {
        "rows": dg.MetadataValue.int(len(frame)),
        "document": context.partition_key,
        "seconds": timer.seconds(),
        "preview": preview(frame, preview_columns),
        **usage_metadata(backbone, STAGES[stage][1]),
        **(extra or {}),
    }
    return dg.MaterializeResult(metadata=metadata, check_results=[check])


def record_ledger(context: dg.AssetExecutionContext, store: StageStore, stage: str, backbone: Backbone,
                  status: str = "materialized") -> None:
    """One ledger row for this (run, partition, backbone, agent), in the data dir beside the stage tables.
    Accounting never fails a stage that has been paid for: a ledger error is logged, not raised."""
    try:
        try:
            run_id = context.run.run_id
        except Exception:  # noqa: BLE001 - a directly invoked asset (tests) has no run
            run_id = "direct-invocation"
        row = LedgerRow.from_usage(backbone.usage(), run_id=run_id, partition=context.partition_key,
                                   backbone=backbone.name, agent=STAGES[stage][1], stage=stage, status=status)
        Ledger(ledger_path(store.root.parent)).record(row)
    except Exception as exc:  # noqa: BLE001 - accounting must not fail the stage
        context.log.warning(f"ledger: could not record {stage} of {context.partition_key}: {exc}")


class StageError(RuntimeError):
    """An agent's failure with the backbone, agent and partition it happened in."""


@contextmanager
def agent_errors(context: dg.AssetExecutionContext, store: StageStore, stage: str, backbone: Backbone) -> Iterator[None]:
    """Re-raise a failure of the agent as StageError naming backbone, agent and partition (the client already
    names backbone and agent; only the asset knows the partition), after recording what it spent."""
    try:
        yield
    except Exception as exc:
        record_ledger(context, store, stage, backbone, status="failed")
        raise StageError(
            f"backbone {backbone.name!r}, agent {STAGES[stage][1]!r}, partition {context.partition_key!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def stage_asset_kwargs(
    namespace: str, stage: str, code_version: str, upstream: str | None, pool: str | None,
    kinds: set[str], extra_deps: Sequence[dg.AssetKey] = (),
) -> dict:
    group, _agent, description = STAGES[stage]
    deps: list = ([stage_key(namespace, upstream)] if upstream else []) + list(extra_deps)
    return dict(
        key=stage_key(namespace, stage),
        partitions_def=documents_partitions,
        deps=deps,
        group_name=group,
        description=description,
        check_specs=[check_spec(namespace, stage)],
        code_version=code_version,
        pool=pool,
        kinds=kinds,
        tags={"karma/stage": stage, "karma/backbone": namespace},
        backfill_policy=STAGE_BACKFILL_POLICY,  # many documents per backfill run (batching.py)
    )
