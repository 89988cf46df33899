"""The two partition axes, split on measurement (STACK.md), both dynamic: only what has papers exists.

A date x document multi-partition is a cross product that every backfill enumerates (37-40 s and 3-6 GB to
launch at 1,000 papers, out of memory at 10,000), so agent stages are partitioned by `document` alone and
the KG increment by `kg_dates`; a document feeds the increment of the date its key starts with
(`ingest.keys.date_of_document_key`).

`kg_dates` holds the dates that have documents, added when a document is registered (`karma run`, the
`new_papers` sensor, backfills, a new DAGSTER_HOME over an existing catalog: ensure_registered).
A daily partition per calendar day since 1975 (~19,000) made "Materialize all" or any selection with the KG asset
a run over every day, and the catalog showed thousands of "missing" days with nothing to merge; now a selection
with the KG asset can only ask for days with papers. A date outside [$KARMA_KG_START_DATE, today] never becomes a
partition: its documents fail at `documents`, naming the setting (date_range.py).
"""

import datetime as dt
from collections.abc import Iterable

import dagster as dg

from karma_dagster.runtime.date_range import kg_start_date, split_dates
from karma_dagster.ingest.keys import date_of_document_key

DOCUMENTS = "documents"
KG_DATES = "kg_dates"
KG_START_DATE = kg_start_date().isoformat()  # read once, when the code location loads

documents_partitions = dg.DynamicPartitionsDefinition(name=DOCUMENTS)
kg_dates_partitions = dg.DynamicPartitionsDefinition(name=KG_DATES)


def first_kg_date() -> dt.date:
    """The first KG date the loaded code location accepts (what launchers must respect, whatever the setting
    says now)."""
    return dt.date.fromisoformat(KG_START_DATE)


def kg_dates_of(document_keys: Iterable[str]) -> list[str]:
    """The KG dates of these documents that can have a partition (in range), sorted."""
    dates, _outside = split_dates({date_of_document_key(k) for k in document_keys}, start=first_kg_date())
    return dates


def ensure_partitions(store: dg.DagsterInstance, name: str, keys: Iterable[str]) -> list[str]:
    """Add those of `keys` the instance does not know as partitions of `name`; returns the added ones (sorted).
    Asks only about these keys (a bounded membership query): listing a million partitions took ~5 s."""
    wanted = set(keys)
    missing = sorted(wanted - set(store.get_existing_dynamic_partitions(name, list(wanted)))) if wanted else []
    if missing:
        store.add_dynamic_partitions(name, missing)
    return missing


def ensure_registered(store: dg.DagsterInstance, document_keys: Iterable[str], documents: bool = True) -> list[str]:
    """Add the document partitions (unless `documents` is False: date partitions, partitioning/mode.py) and the KG
    date partitions these documents need and the instance lacks (a new DAGSTER_HOME over a data dir the catalog
    knows, a document registered outside a sensor); returns the dates added."""
    keys = list(document_keys)
    if documents:
        ensure_partitions(store, DOCUMENTS, keys)
    return ensure_partitions(store, KG_DATES, kg_dates_of(keys))


def add_requests(store: dg.DagsterInstance, document_keys: Iterable[str],
                 documents: bool = True) -> list[dg.AddDynamicPartitionsRequest]:
    """What a sensor returns to register these documents (unless `documents` is False) and their KG dates (those
    the instance lacks)."""
    given = set(document_keys)
    keys = given if documents else set()
    dates = set(kg_dates_of(given))
    new_docs = sorted(keys - set(store.get_existing_dynamic_partitions(DOCUMENTS, list(keys)))) if keys else []
    new_dates = sorted(dates - set(store.get_existing_dynamic_partitions(KG_DATES, list(dates)))) if dates else []
    return ([documents_partitions.build_add_request(new_docs)] if new_docs else []) + \
           ([kg_dates_partitions.build_add_request(new_dates)] if new_dates else [])
