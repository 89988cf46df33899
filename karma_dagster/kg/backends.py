"""The two KG stores behind one interface (KGStore's methods): which one a location opens, and where a data
folder's KG is.

A postgresql:// URL opens the Postgres store (pg_store.py: many machines, server-side transactions and a writer
lock); any other location is the DuckDB file (store.py: the embedded default). A deployment's KG is the database
$KARMA_KG_URL when that is set, else the data folder's kg.duckdb: every caller that opens "the KG of this data
folder" goes through `kg_store(data)` (and `kg_exists(data)` instead of `data.kg.exists()`), so one variable moves
the whole deployment to Postgres. The Postgres module (and psycopg) is imported only when a URL is opened.
"""

from __future__ import annotations

from pathlib import Path

from karma_dagster.kg.location import is_pg_url, kg_url, redacted
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.paths import DataPaths

BACKENDS = ("duckdb", "postgres")


def open_kg_store(location: str | Path, lock_timeout: float = 120.0) -> KGStore:
    """The KG store at `location`: a PgKGStore for a postgresql:// URL, else a KGStore on the DuckDB file."""
    if is_pg_url(location):
        from karma_dagster.kg.pg_store import PgKGStore

        return PgKGStore(str(location), lock_timeout=lock_timeout)
    return KGStore(location, lock_timeout=lock_timeout)


def kg_store(data: DataPaths, lock_timeout: float = 120.0) -> KGStore:
    """The deployment's KG: the PostgreSQL database $KARMA_KG_URL when set, else the data folder's DuckDB file."""
    return open_kg_store(kg_url() or data.kg, lock_timeout=lock_timeout)


def kg_exists(data: DataPaths) -> bool:
    """Whether the deployment's KG exists yet (the file, or the KG's tables in the database); creates nothing."""
    return kg_store(data).exists() if kg_url() else data.kg.exists()


def kg_display(data: DataPaths) -> str:
    """The KG's location as it may be shown or used as a cache key (a URL without its password)."""
    url = kg_url()
    return redacted(url) if url else str(data.kg)


def kg_location(data: DataPaths) -> str | Path:
    """What `open_kg_store` opens for this data folder: $KARMA_KG_URL, else the kg.duckdb path (never shown: a URL
    may hold a password; show `kg_display`)."""
    return kg_url() or data.kg
