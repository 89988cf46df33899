"""The agent chain's assets: one per stage of the registry (stages.py) and backbone, `<backbone>/<stage>`.

Around every stage the same things happen: resolve the backbone, hand the stage its declared upstream tables,
call its `run` (a failure names backbone, agent and partition), validate the table with its pandera model
(a blocking check), store it atomically, book the ledger, report metadata. Orchestration only.
"""


import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import dagster as dg
import pandas as pd
import pandera.errors as pa_errors
from pydantic import BaseModel

from karma_dagster.assets.batching import DATE_BACKFILL_POLICY, STAGE_BACKFILL_POLICY, BatchState, per_document
from karma_dagster.backbones.base import Backbone
from karma_dagster.runtime.ledger import Ledger, LedgerRow, ledger_path
from karma_dagster.partitioning.definitions import documents_partitions, kg_dates_partitions
from karma_dagster.partitioning.mode import PartitionMode
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.stages import ABLATED, SEED_KG, Stage, StageInputs
from karma_dagster.runtime.stage_store import StageStore


def stage_key(namespace: str, stage: str) -> dg.AssetKey:
    return dg.AssetKey([namespace, stage])


def kg_key(namespace: str) -> dg.AssetKey:
    """A backbone's date-partitioned KG increment (assets/knowledge_graph.py)."""
    return dg.AssetKey([namespace, "knowledge_graph"])


def backbone_group(namespace: str) -> str:
    """The Dagster group of a backbone's assets (its chain, KG increments and metrics): the lineage view shows a
    box per backbone, so its `relations` is told apart from another backbone's. Group names allow letters,
    digits and underscores only: `local-single` -> `local_single`."""
    return re.sub(r"[^A-Za-z0-9_]", "_", namespace)


def check_backbone_groups(namespaces: Sequence[str]) -> None:
    """Two backbone names that differ only in '-', '.' or '_' would share a group: refuse, naming both."""
    seen: dict[str, str] = {}
    for ns in namespaces:
        other = seen.setdefault(backbone_group(ns), ns)
        if other != ns:
            raise ValueError(f"backbones {other!r} and {ns!r} would share the Dagster group {backbone_group(ns)!r}: "
                             "rename one in backbones.yaml (names differing only in '-', '.' or '_' collide)")


def check_name(stage: Stage) -> str:
    return f"{stage.name}_table_schema"


def validate_table(namespace: str, stage: Stage, frame: pd.DataFrame) -> dg.AssetCheckResult:
    key, name = stage_key(namespace, stage.name), check_name(stage)
    try:
        stage.table_model.validate(frame, lazy=True)  # type: ignore[attr-defined]
    except pa_errors.SchemaErrors as exc:
        cases = exc.failure_cases.head(20)
        return dg.AssetCheckResult(
            passed=False, asset_key=key, check_name=name,
            metadata={"failures": len(exc.failure_cases), "failure_cases": dg.MetadataValue.md(cases.to_markdown())},
        )
    return dg.AssetCheckResult(passed=True, asset_key=key, check_name=name, metadata={"rows": len(frame)})


def preview(rows: Sequence[BaseModel], columns: Sequence[str], limit: int = 10, width: int = 80) -> dg.MetadataValue:
    """The first rows of the stage's table as a markdown table, long texts cut. Read from the stage's records (the
    table's cells, as records_to_frame takes them), not from the frame: pandas' row access (`loc`, `itertuples`)
    and tabulate's per-cell typing (`to_markdown`) cost 1-2 ms a table, paid for every paper and stage of a run."""
    if not rows:
        return dg.MetadataValue.md("_(no rows)_")
    shown = [c for c in columns if c in type(rows[0]).model_fields]
    if not shown:
        return dg.MetadataValue.md(f"_({len(rows)} rows)_")
    lines = ["| " + " | ".join(_cell(c, width) for c in shown) + " |", "|" + "|".join(":---" for _ in shown) + "|"]
    lines += ["| " + " | ".join(_cell(getattr(row, c), width) for c in shown) + " |" for row in rows[:limit]]
    return dg.MetadataValue.md("\n".join(lines))


def _cell(value: object, width: int) -> str:
    """One markdown table cell: a pipe escaped, line breaks as spaces, cut to `width` characters; None (or a
    missing float) empty."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    text = text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def usage_metadata(backbone: Backbone, agent: str, memo: dict[str, object] | None = None) -> dict[str, object]:
    """`memo`: a batch's values shared by its documents; the prompt id (for the local backbone a digest of its
    trained model) is the same for every document of a step, so it is computed once per step."""
    usage = backbone.usage()
    memo = {} if memo is None else memo
    key = f"prompt_id:{backbone.name}:{agent}"
    if key not in memo:
        memo[key] = backbone.prompt_id(agent)
    prompt_id = memo[key]
    return {
        "backbone": backbone.name,
        "prompt_id": prompt_id,
        "llm_calls": usage.calls,
        "cache_hits": usage.cache_hits,
        "tokens_in": usage.prompt_tokens,
        "tokens_out": usage.completion_tokens,
        "invalid_items": usage.invalid_items,
        "cost_usd": usage.cost_usd if usage.cost_usd is not None else "unpriced model (tokens only)",
    }


def record_ledger(context: dg.AssetExecutionContext, store: StageStore, stage: Stage, backbone: Backbone,
                  status: str = "materialized") -> None:
    """One ledger row for this (run, partition, backbone, agent), in the data dir beside the stage tables; in a
    batch it is booked with the batch's rows, written in one transaction at the end of the step (batching.py).
    Accounting never fails a stage that has been paid for: a ledger error is logged, not raised."""
    try:
        try:
            run_id = context.run.run_id
        except Exception:  # noqa: BLE001 - a directly invoked asset (tests) has no run
            run_id = "direct-invocation"
        row = LedgerRow.from_usage(backbone.usage(), run_id=run_id, partition=context.partition_key,
                                   backbone=backbone.name, agent=stage.agent, stage=stage.name, status=status)
        batch = _batch(context)
        if batch is not None:
            batch.book(ledger_path(store.root.parent), row)
        else:
            Ledger(ledger_path(store.root.parent)).record(row)
    except Exception as exc:  # noqa: BLE001 - accounting must not fail the stage
        context.log.warning(f"ledger: could not record {stage.name} of {context.partition_key}: {exc}")


def _batch(context: dg.AssetExecutionContext) -> BatchState | None:
    """The batch a document of a multi-document step belongs to (batching.DocumentContext), else None."""
    batch = getattr(context, "karma_batch", None)
    return batch if isinstance(batch, BatchState) else None


class StageError(RuntimeError):
    """An agent's failure with the backbone, agent and partition it happened in."""


@contextmanager
def agent_errors(context: dg.AssetExecutionContext, store: StageStore, stage: Stage, backbone: Backbone) -> Iterator[None]:
    """Re-raise a failure of the agent as StageError naming backbone, agent and partition (the client already
    names backbone and agent; only the asset knows the partition), after recording what it spent. An interrupt
    (SIGINT/SIGTERM reach the step as BaseException) is booked as a failure too and re-raised as it is."""
    try:
        yield
    except BaseException as exc:
        record_ledger(context, store, stage, backbone, status="failed")
        if not isinstance(exc, Exception):
            raise
        raise StageError(
            f"backbone {backbone.name!r}, agent {stage.agent!r}, partition {context.partition_key!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _metadata_value(value: object) -> object:
    return dg.MetadataValue.json(value) if isinstance(value, (dict, list)) else value


def finish_stage(context: dg.AssetExecutionContext, store: StageStore, namespace: str, stage: Stage,
                 rows: Sequence[BaseModel], backbone: Backbone, started: float,
                 figures: dict[str, object]) -> dg.MaterializeResult:
    """Validate, store atomically, and report. The table is stored even when the check fails, so that a
    user can inspect it; the blocking check stops downstream stages and the KG merge re-validates."""
    frame = records_to_frame(rows, stage.row_model)
    deferred = getattr(context, "deferred_tables", None)  # in a batch, validated with the others (batching.py)
    checks = [validate_table(namespace, stage, frame)] if deferred is None else []
    if deferred is not None:
        deferred.append(frame)
    metadata: dict[str, object] = {
        "rows": dg.MetadataValue.int(len(frame)),
        "document": context.partition_key,
        "seconds": round(time.perf_counter() - started, 3),
        "preview": preview(rows, stage.preview),
        "variant": stage.variant,  # karma (the agent ran), ablated (a pass-through ran instead), single_agent
        "ablated": stage.variant == ABLATED,
        **usage_metadata(backbone, stage.agent, batch.memo if (batch := _batch(context)) else None),
        **{k: _metadata_value(v) for k, v in figures.items()},
    }
    store.write(namespace, stage.name, context.partition_key, frame, recorded=recorded_metadata(metadata))
    record_ledger(context, store, stage, backbone)
    return dg.MaterializeResult(metadata=metadata, check_results=checks)


def recorded_metadata(metadata: dict[str, object]) -> dict[str, object]:
    """The materialization metadata as plain JSON values, kept with the table (StageStore.recorded): a date
    partition's materialization holds the day's totals, the table its document's own figures."""
    return {k: getattr(v, "value", v) for k, v in metadata.items()}


def stage_asset(namespace: str, stage: Stage, code_version: str, pool: str | None,
                kinds: frozenset[str] | None = None, mode: PartitionMode = "document") -> dg.AssetsDefinition:
    """`<namespace>/<stage>`: its deps are exactly the tables (and the seed KG) the stage declares it reads;
    in its backbone's group; `kinds` are what runs in it on that backbone (Stage.kinds_for); partitioned by
    document or by date (`mode`, partitioning/mode.py)."""
    by_date = mode == "date"
    deps = [dg.AssetKey(SEED_KG) if r == SEED_KG else stage_key(namespace, r) for r in stage.reads]

    @dg.asset(
        key=stage_key(namespace, stage.name),
        partitions_def=kg_dates_partitions if by_date else documents_partitions,
        deps=deps,
        group_name=backbone_group(namespace),
        description=stage.description,
        check_specs=[dg.AssetCheckSpec(
            name=check_name(stage), asset=stage_key(namespace, stage.name), blocking=True,
            description=f"pandera model of the {stage.name} table (columns, types, ranges, unique ids); "
                        "blocks what follows.",
        )],
        code_version=code_version,
        pool=pool,
        kinds=set(stage.kinds if kinds is None else kinds),
        tags={"karma/stage": stage.name, "karma/backbone": namespace, "karma/variant": stage.variant},
        backfill_policy=DATE_BACKFILL_POLICY if by_date else STAGE_BACKFILL_POLICY,  # batching.py
    )
    @per_document(lambda frame: validate_table(namespace, stage, frame))
    def stage_table(
        context: dg.AssetExecutionContext,
        storage: KarmaStorageResource,
        backbones: BackbonesResource,
        karma_params: KarmaParamsResource,
    ) -> dg.MaterializeResult:
        started = time.perf_counter()
        store = storage.stage_store()
        backbone = backbones.get(namespace, storage)
        backbone.reset_usage()
        inputs = StageInputs(stage, namespace, context.partition_key, storage.paths(), backbone, karma_params.params())
        with agent_errors(context, store, stage, backbone):
            rows, figures = stage.run(inputs)
        return finish_stage(context, store, namespace, stage, rows, backbone, started, figures)

    return stage_table
