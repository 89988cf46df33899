"""The KG store test suite runs against both stores: `kg_backend` is parametrized over DuckDB and Postgres.

A backend (module scope: a module's seeded store is built once per backend) hands out fresh stores by label
(`new`), copies of a store (`copy`: a file copy for DuckDB, `CREATE DATABASE ... TEMPLATE` for Postgres) and the
location a child process opens a store from (`open_kg_store(location)`: a file path or a postgresql:// URL). The
Postgres backend uses the session's throwaway server (pg_server.py) with one database per store; it skips only
when the PostgreSQL binaries are absent.

Import the fixture into a test module with `from kg_backends import kg_backend  # noqa: F401` (pg_server comes from conftest.py).
"""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path

import pytest

from karma_dagster.kg.backends import open_kg_store
from karma_dagster.kg.store import KGStore

BACKENDS = ("duckdb", "postgres")
_SEQ = itertools.count()


class KGBackend:
    """Where a test's KG stores live: files under tmp_path, or databases on the throwaway server."""

    def __init__(self, name: str, tmp_path: Path, server: object | None = None) -> None:
        self.name = name
        self.tmp_path = tmp_path
        self.server = server

    def __repr__(self) -> str:
        return f"KGBackend({self.name})"

    @property
    def is_pg(self) -> bool:
        return self.name == "postgres"

    def location(self, label: str) -> str:
        """A fresh, empty store location for `label` (unique within the session)."""
        name = f"kg_{re.sub(r'[^a-z0-9]+', '_', label.lower())}_{next(_SEQ)}"
        if not self.is_pg:
            return str(self.tmp_path / f"{name}.duckdb")
        return self.server.new_database(name)  # type: ignore[union-attr]

    def new(self, label: str, lock_timeout: float = 120.0) -> KGStore:
        return open_kg_store(self.location(label), lock_timeout=lock_timeout)

    def copy(self, source: KGStore, label: str) -> KGStore:
        """A new store holding what `source` holds (no connection to `source` may be open)."""
        db = f"kg_{re.sub(r'[^a-z0-9]+', '_', label.lower())}_{next(_SEQ)}"
        if not self.is_pg:
            dest = self.tmp_path / f"{db}.duckdb"
            shutil.copy(source.path, dest)
            return open_kg_store(dest)
        src_db = source.url.rsplit("/", 1)[1]  # type: ignore[attr-defined]
        return open_kg_store(self.server.copy_database(src_db, db))  # type: ignore[union-attr]


@pytest.fixture(scope="module", params=BACKENDS)
def kg_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> KGBackend:
    """The module's stores on each backend in turn (module scope, so a seeded store is built once per backend)."""
    server = request.getfixturevalue("pg_server") if request.param == "postgres" else None
    return KGBackend(request.param, tmp_path_factory.mktemp(f"kg-{request.param}"), server)


def location_of(store: KGStore) -> str:
    """The string a child process passes to open_kg_store() to open the same store."""
    return getattr(store, "url", None) or str(store.path)


_VOLATILE = {"run_id", "merged_at"}  # columns that name the run, not the graph


def kg_dump_any(location: str | Path, *, with_increment_stats: bool = True) -> dict[str, list[tuple]]:
    """reliability_helpers.kg_dump for either store: the KG's own rows (without run ids / merge times) and the
    graph views' sizes, read through KGStore's connection and sorted here (no DuckDB-only SQL)."""
    store = open_kg_store(location)
    out: dict[str, list[tuple]] = {}
    with store.connect(read_only=True) as con:
        for table in ("extracted_nodes", "evidence", "increments"):
            cur = con.execute(f"SELECT * FROM {table}")  # noqa: S608 - fixed names
            cols = [d[0] for d in cur.description]
            keep = [i for i, c in enumerate(cols) if c not in _VOLATILE and (
                with_increment_stats or table != "increments" or c in ("namespace", "date", "n_docs", "n_evidence"))]
            out[table] = sorted((tuple(_plain(r[i]) for i in keep) for r in cur.fetchall()), key=repr)
        out["edges"] = sorted(((ns, h, rel, t, round(c, 12), n) for ns, h, rel, t, c, n in con.execute(
            "SELECT namespace, head_id, relation, tail_id, confidence, n_evidence FROM edges").fetchall()), key=repr)
        out["n_nodes"] = sorted(con.execute("SELECT namespace, count(*) FROM nodes GROUP BY namespace").fetchall())
        out["merged_documents"] = sorted(con.execute(
            "SELECT namespace, doc_key, date, fingerprint FROM merged_documents").fetchall())
    return out


def _plain(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value
