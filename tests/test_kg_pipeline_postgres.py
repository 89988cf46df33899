"""The whole chain (import the seed, run the documents, merge their dates) with $KARMA_KG_URL set builds in
PostgreSQL exactly the KG the embedded default builds in kg.duckdb: same nodes, edges (confidence), evidence,
supersessions, merged documents and adjudications; and it never creates the DuckDB file."""

from __future__ import annotations

from pathlib import Path

from karma_dagster import runner
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.kg.backends import kg_store, open_kg_store
from karma_dagster.kg.location import KG_URL_ENV
from karma_dagster.kg.pg_store import PgKGStore
from karma_dagster.kg.store import KGStore
from pg_server import PostgresServer

FILES = ("visfatin-hypothyroidism-note.txt", "PMC4738914.pdf", "PMC4738914.json")
_RUN_SPECIFIC = {"run_id"}  # Dagster run ids differ between the two deployments


def _run(p) -> None:  # noqa: ANN001 - conftest.Pipeline
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    dates = sorted({date_of_document_key(k) for k in keys})
    assert all(runner.run_increments(p.defs, p.instance, "local", dates).values())


def _snapshot(store: KGStore) -> dict:
    def clean(rows: list[dict]) -> list[dict]:
        return [{k: round(v, 12) if isinstance(v, float) else v for k, v in r.items() if k not in _RUN_SPECIFIC}
                for r in rows]

    snap = {part: clean(rows) for part, rows in store.export_snapshot("local").items()}
    snap["merged_documents"] = store.merged_documents("local")
    snap["adjudications"] = clean(store.merge_adjudications("local"))
    snap["counts"] = store.snapshot_counts()
    return snap


def test_the_chain_on_postgres_builds_the_kg_of_the_duckdb_default(
    make_pipeline, make_module_pipeline, pg_server: PostgresServer, monkeypatch
) -> None:
    monkeypatch.delenv(KG_URL_ENV, raising=False)
    duck = make_pipeline(inbox_files=FILES)
    _run(duck)
    expected = _snapshot(open_kg_store(duck.storage.kg_path()))
    assert expected["evidence"], "the documents added evidence to compare"

    monkeypatch.setenv(KG_URL_ENV, pg_server.new_database("kg_pipeline"))
    pg = make_module_pipeline(inbox_files=FILES)  # a second data folder (make_pipeline's is the DuckDB run's)
    _run(pg)
    store = kg_store(pg.storage.paths())
    assert isinstance(store, PgKGStore)
    assert _snapshot(store) == expected
    assert not pg.storage.kg_path().exists(), "the DuckDB file was never created"
