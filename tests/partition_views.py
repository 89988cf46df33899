"""What a test reads of Dagster's records for documents, in either partition mode (partitioning/mode.py).

The suite runs in the mode of $KARMA_PARTITIONS (document by default; `KARMA_PARTITIONS=date bash scripts/test.sh`
runs it with date partitions). Document mode: a document's partition holds its materializations, runs and
metadata. Date mode: its day's partition does; the day's materialization lists it among the documents done,
and the document's own figures are those its stage table recorded (StageStore.recorded)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import dagster as dg

from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.partitioning.mode import partition_mode

MODE = partition_mode()
BY_DATE = MODE == "date"


def partition_of(doc: str) -> str:
    """The partition that holds a document's runs and materializations."""
    return date_of_document_key(doc) if BY_DATE else doc


def partitions_of(docs: Iterable[str]) -> list[str]:
    return sorted({partition_of(d) for d in docs})


def plain(metadata: dict) -> dict[str, Any]:
    return {k: getattr(v, "value", v) for k, v in metadata.items()}


def document_metadata(p: Any, asset_key: dg.AssetKey, docs: str | Iterable[str]) -> dict[str, Any]:
    """The latest materialization's metadata (plain values) of the document (or of the latest of `docs`) at this
    asset, as the UI shows it in document mode; in date mode the day's, with the document's own figures over it.
    Fails when the asset was not materialized for it."""
    docs = [docs] if isinstance(docs, str) else list(docs)
    records = p.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=partitions_of(docs)), limit=1).records
    assert records, f"{asset_key.to_user_string()} not materialized for {docs}"
    meta = plain(records[0].asset_materialization.metadata)  # type: ignore[union-attr]
    if not BY_DATE:
        return meta
    day = records[0].partition_key
    doc = next((d for d in sorted(docs, reverse=True) if partition_of(d) == day), docs[0])
    failed = meta.get("failed_documents") or {}
    failed = json.loads(failed) if isinstance(failed, str) else failed
    assert doc not in failed, f"{asset_key.to_user_string()} failed for {doc}: {failed[doc]}"
    ns, stage = asset_key.path
    return {**meta, **p.storage.stage_store().recorded(ns, stage, doc)}
