"""Which axis a stage asset is partitioned on: a document each, or a date each (the `partitions` setting).

`document` (the default): a dynamic partition per paper. Every paper's runs, metadata, staleness and failures are
its own in the UI. Measured (bench/scale.py, docs/benchmarks.md): it holds a million papers with the UI's partition
query at ~3.5-7 s, and every run over a range of them costs Dagster a listing of all document partitions per asset
when the run is created (DagsterRun.get_resolved_partitions_subset_for_events): ~29 s a run at 1M, so a
backfill there creates ~2 runs a minute. Both grow with the corpus.
`date`: a partition per day that has papers (the `kg_dates` partitions the KG increment already has: ~19,000
from 1975 to 2026 however many papers), the day's papers as rows. A run processes each of its days' papers
alone (one failing paper is reported, not fatal to its day), the per-paper rows, seconds and failures are
in the day's materialization metadata, and the stores (stage tables, catalog, KG provenance) are per paper in
both modes, so `karma status`, the merge and the review queue read the same things.
"""

from __future__ import annotations

import os
from typing import Literal, get_args

PartitionMode = Literal["document", "date"]
MODES: tuple[str, ...] = get_args(PartitionMode)
ENV = "KARMA_PARTITIONS"


def partition_mode(setting: str = "") -> PartitionMode:
    """`setting`, else $KARMA_PARTITIONS, else document; a value that is neither names where it came from."""
    value = (setting or os.environ.get(ENV, "") or "document").strip().lower()
    if value not in MODES:
        origin = f"${ENV}" if not setting else "the storage setting `partitions`"
        raise ValueError(f"{origin} is {value!r}: it must be one of {', '.join(MODES)}")
    return value  # type: ignore[return-value]
