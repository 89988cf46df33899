"""The two KG stores agree: the same seed and merges (reinforcement, new entities, a same-day contradiction, a
supersession, a document removed) read the same through every KGStore method on DuckDB and on PostgreSQL;
and what is particular to the Postgres store: choosing it ($KARMA_KG_URL, a postgresql:// location), its
messages (never the password), its refusal of a foreign database, and the SQL translation of its adapter."""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

import psycopg
import pytest

from karma_dagster.runtime import services
from karma_dagster.cogmg import plan as cogmg_plan
from karma_dagster.cogmg.models import LinkedEntity, QueryPlan, QueryStep
from karma_dagster.kg.backends import kg_display, kg_exists, kg_store, open_kg_store
from karma_dagster.kg.location import KG_URL_ENV, KGLocationError, kg_url, redacted
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.pg_connection import translate
from karma_dagster.kg.pg_store import PgKGStore
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import KGStore, KGStoreError, NodeIn
from karma_dagster.metrics import qa
from karma_dagster.metrics.qa import Question
from karma_dagster.runtime.paths import DataPaths
from pg_server import PostgresServer

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
METFORMIN, T2DM, SNAP25 = "Compound::DB00331", "Disease::DOID:9352", "Gene::6616"
D1, D2, D3 = dt.date(2016, 1, 5), dt.date(2016, 1, 12), dt.date(2016, 2, 1)
DRUG = NodeIn(id="new::Compound::ipilimumab", name="ipilimumab", kind="Compound", vocab_id="MESH:D000074324",
              synonyms=["Yervoy", "MDX-010"], comment="an anti-CTLA-4 antibody", class_label="Monoclonal Antibody")


def _row(doc: str, tid: str, head: str, relation: str, score: float, **kw: object) -> dict:
    return {"doc_key": doc, "triple_id": tid, "head_id": head, "relation": relation, "tail_id": T2DM, "score": score,
            "segment_id": f"{doc}#1", "evidence": f"{doc}: {head} {relation} type 2 diabetes.", "verdict": "none",
            **kw}


def _history(store: KGStore) -> dict:
    """Merge a small history into `store` and read it back through every read method."""
    stats = [
        # D1: two documents contradict each other (treats vs causes on one pair): the day's adjudication decides
        merge_increment(store, D1, "local", {
            "a": ([_row("a", "t1", METFORMIN, "treats", 0.9), _row("a", "t2", DRUG.id, "treats", 0.6)], [DRUG]),
            "b": ([_row("b", "t1", METFORMIN, "causes", 0.3)], []),
        }, "r1"),
        # D2: a triple that replaces the older treats edge (superseded from D2 on, its history kept)
        merge_increment(store, D2, "local", {"c": ([_row("c", "t1", METFORMIN, "causes", 0.95, action="replace",
                                                         contradicts=f"{METFORMIN} -treats-> {T2DM}")], [])}, "r2"),
        # D3: the new entity again, under another name, in another namespace too
        # (a KG tool's writes: the node's comment and created class, the triple's created property)
        merge_increment(store, D3, "local", {"d": ([_row("d", "t1", DRUG.id, "treats", 0.5, property="relieves")],
                                                   [DRUG.model_copy(update={"synonyms": ["ipi"], "comment": None})])},
                        "r3"),
        merge_increment(store, D3, "gpt", {"d": ([_row("d", "t1", DRUG.id, "treats", 0.5)], [DRUG])}, "r3"),
    ]
    pairs = [(METFORMIN, T2DM), (DRUG.id, T2DM), ("x", "y")]
    view = {
        "stats": [s.model_dump(exclude={"seconds"}) for s in stats],
        "counts": [store.snapshot_counts(as_of=d, namespace=ns) for d in (None, D1, D2) for ns in ("local", "gpt")],
        "seed_counts": store.seed_counts(),
        "edges_between": {d: store.edges_between(pairs, as_of=d) for d in (None, D1, D2 - dt.timedelta(days=1))},
        "adjudications": store.merge_adjudications("local"),
        "history": store.edge_history(METFORMIN, "treats", T2DM),
        "lexicon": store.lexicon_rows(),
        "entities": store.extracted_entities("local")[1],
        "kinds": store.node_kinds(),
        "by_id": store.nodes_by_id([DRUG.id, METFORMIN, "nope"]),
        "neighbours": store.neighbours(DRUG.id),
        "evidence": store.edge_evidence(DRUG.id, "treats", T2DM),
        "namespaces": store.namespace_names(),
        "merged": store.merged_documents("local"),
        "merged_of": store.merged_documents("local", ["a", "nope"]),  # a slice of the records (a sensor tick's)
        "export": store.export_snapshot("local"),
        "export_d1": store.export_snapshot("local", as_of=D1),
        # readers outside kg/ that write their own SQL on the store's connection
        "qa": qa.traverse(store, "local", Question(id="q1", question="What does metformin treat or cause?",
                                                   entity="Metformin", relations=["treats", "causes"],
                                                   plausible=["type 2 diabetes mellitus"])),
        "cogmg": cogmg_plan.execute(store, "local", QueryPlan(question="q", decomposer="test", steps=[QueryStep(
            entity=LinkedEntity(mention="metformin", entity_id=METFORMIN, name="Metformin", kind="Compound",
                                distance=0.0), relation="treats", direction="out")])),
        "footprint": store.document_footprint("a"),
        "removed": store.remove_document("a"),
        "after_removal": [store.snapshot_counts(), store.merged_documents("local"), store.merge_adjudications("local")],
    }
    return _rounded(view)


def _rounded(value: object) -> object:
    """Floats to 12 digits (1 - prod(1 - s) multiplies in engine order); models to dicts; tuples to lists."""
    if isinstance(value, float):
        return round(value, 12)
    if hasattr(value, "model_dump"):
        return _rounded(value.model_dump())
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


@pytest.fixture(scope="module")
def both(pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    duck = KGStore(tmp_path_factory.mktemp("duck") / "kg.duckdb")
    pg = open_kg_store(pg_server.new_database("kg_agree"))
    for store in (duck, pg):
        import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    return _history(duck), _history(pg)


def test_the_history_exercises_what_it_compares(both) -> None:
    duck, _ = both
    actions = sorted(a["action"] for a in duck["adjudications"])
    assert actions == ["discard", "replace"]  # b's causes lost on D1; c's causes replaced treats on D2
    assert [e["event"] for e in duck["history"]] == ["seed", "evidence", "superseded"]
    assert duck["export"]["supersessions"] and duck["export_d1"]["supersessions"] == []
    assert duck["entities"][0]["synonyms"] == ["MDX-010", "Yervoy", "ipi"]
    assert "type 2 diabetes mellitus" in duck["qa"] and duck["cogmg"]
    assert duck["footprint"][0]["n_evidence"] == 2 and duck["after_removal"][0]["n_evidence"] < duck["counts"][0][
        "n_evidence"]
    drug = next(n for n in duck["export"]["nodes"] if n["id"] == DRUG.id)
    assert (drug["comment"], drug["class_label"]) == ("an anti-CTLA-4 antibody", "Monoclonal Antibody")
    assert [(e["doc_key"], e["property"]) for e in duck["evidence"]] == [("a", None), ("d", "relieves")]
    assert {e["property"] for e in duck["export"]["evidence"]} == {None, "relieves"}
    assert list(duck["merged_of"]) == ["a"] and duck["merged_of"]["a"] == duck["merged"]["a"]


@pytest.mark.parametrize("part", ["stats", "counts", "seed_counts", "edges_between", "adjudications", "history",
                                  "lexicon", "entities", "kinds", "by_id", "neighbours", "evidence", "namespaces",
                                  "merged", "merged_of", "export", "export_d1", "qa", "cogmg", "footprint", "removed",
                                  "after_removal"])
def test_duckdb_and_postgres_read_the_same(both, part: str) -> None:
    duck, pg = both
    assert pg[part] == duck[part]


# ---------------------------------------------------------------- choosing the store
def test_kg_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KG_URL_ENV, raising=False)
    assert kg_url() is None
    monkeypatch.setenv(KG_URL_ENV, "postgresql://karma:s3cret@db.example:5432/kg")
    assert kg_url() == "postgresql://karma:s3cret@db.example:5432/kg"
    assert redacted(kg_url() or "") == "postgresql://***@db.example:5432/kg"  # user name and password
    for bad, problem in (("mysql://karma:s3cret@h/kg", "not a PostgreSQL URL"),
                         ("postgresql://karma:s3cret@h", "no host or no database")):
        monkeypatch.setenv(KG_URL_ENV, bad)
        with pytest.raises(KGLocationError, match=problem) as err:
            kg_url()
        assert KG_URL_ENV in str(err.value) and "s3cret" not in str(err.value)


def test_services_open_the_postgres_kg_when_configured(pg_server: PostgresServer, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    data = DataPaths(tmp_path / "data")
    monkeypatch.setenv(KG_URL_ENV, pg_server.new_database("kg_services"))
    services.clear()
    store = kg_store(data)
    assert isinstance(store, PgKGStore)
    assert not kg_exists(data) and services.seed_fingerprint(data) == "no-kg"
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    assert kg_exists(data) and services.seed_present(data)
    assert services.seed_fingerprint(data) == store.seed_fingerprint() != "no-kg"
    assert services.kg_kind_lookup(data)(SNAP25) == "Gene"
    assert len(services.seed_lexicon_rows(data)) == 4000
    assert [e.relation for e in services.existing_relations_lookup(data, "local")([(METFORMIN, T2DM)])[
        (METFORMIN, T2DM)]] == ["treats"]
    assert not data.kg.exists()  # nothing was written to the data folder's DuckDB file
    monkeypatch.delenv(KG_URL_ENV)
    assert type(kg_store(data)) is KGStore and kg_display(data) == str(data.kg)
    services.clear()


def test_messages_never_show_the_password_and_name_the_server() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = open_kg_store(f"postgresql://karma:s3cret@127.0.0.1:{port}/kg", lock_timeout=1)
    assert isinstance(store, PgKGStore) and "s3cret" not in repr(store)
    with pytest.raises(KGStoreError, match=rf"127\.0\.0\.1:{port}/kg: cannot connect") as err:
        store.snapshot_counts()
    assert "s3cret" not in str(err.value)
    with pytest.raises(KGStoreError, match="expected postgresql://"):
        PgKGStore("sqlite:///kg.db")


def test_a_database_of_another_program_is_refused_untouched(pg_server: PostgresServer) -> None:
    url = pg_server.new_database("kg_foreign")
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE runs(id int)")
    with pytest.raises(KGStoreError, match="other tables but none of the KG's"):
        open_kg_store(url).snapshot_counts()
    with psycopg.connect(url, autocommit=True) as con:
        tables = con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        assert [r[0] for r in tables.fetchall()] == ["runs"]


def test_readers_see_one_snapshot_while_a_writer_commits(pg_server: PostgresServer) -> None:
    """A read block is one snapshot (as under DuckDB's lock): a merge committed meanwhile shows in the next block."""
    url = pg_server.new_database("kg_snapshot")
    store = open_kg_store(url)
    import_generic_seed = store.snapshot_counts().n_nodes  # creates the schema
    assert import_generic_seed == 0
    other = open_kg_store(url)
    with store.connect(read_only=True) as con:
        first = con.execute("SELECT count(*) FROM seed_nodes").fetchall()
        with other.connect() as w:
            w.execute("INSERT INTO seed_nodes VALUES (?, ?, ?, ?)", ["G1", "gene one", "Gene", None])
        assert con.execute("SELECT count(*) FROM seed_nodes").fetchall() == first == [(0,)]
    assert store.node_kind("G1") == "Gene"


def test_adapter_translates_only_outside_literals() -> None:
    sql = "SELECT '?', '$x', 'a%' FROM t WHERE a = ? AND b = $name AND c LIKE 'x%' AND d::DOUBLE > 0"
    assert translate(sql, with_params=True) == (
        "SELECT '?', '$x', 'a%%' FROM t WHERE a = %s AND b = %(name)s AND c LIKE 'x%%' AND d::DOUBLE PRECISION > 0")
    assert translate("count(*) FILTER (x = 1), count(*) FILTER (WHERE y)", False) == (
        "count(*) FILTER (WHERE x = 1), count(*) FILTER (WHERE y)")
    assert translate("SELECT 100 % 7", with_params=True) == "SELECT 100 %% 7"
    assert translate("WHERE list_contains(?, e.head_id) AND list_contains(?,id)", True) == (
        "WHERE e.head_id = ANY(%s) AND id = ANY(%s)")


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_schema_extension_round_trip_and_duplicate_refused_alike(backend: str, pg_server: PostgresServer,
                                                                 tmp_path: Path) -> None:
    """The KG tools' classes and properties: stored, read back, and a duplicate label refused with the error the
    tools catch (duckdb.ConstraintException) on both stores."""
    import duckdb

    location = str(tmp_path / "kg.duckdb") if backend == "duckdb" else pg_server.new_database("kg_extension")
    store = open_kg_store(location)
    assert store.schema_extension("local") == []
    row = {"namespace": "local", "what": "class", "label": "Biomarker", "label_key": "biomarker",
           "comment": "a measurable indicator", "super": None, "domain": None, "range": None, "caller": "test",
           "doc_key": "d1", "created_at": dt.datetime(2016, 1, 5, 12, 0)}
    store.add_schema_extension(row)
    assert store.schema_extension("local") == [row]
    with pytest.raises(duckdb.ConstraintException):
        store.add_schema_extension({**row, "comment": "again"})
    assert store.schema_extension("local") == [row]


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_a_store_made_before_the_added_columns_gets_them_when_opened(backend: str, pg_server: PostgresServer,
                                                                     tmp_path: Path) -> None:
    """extracted_nodes.comment / class_label and evidence.property (store.ADDED_COLUMNS) came after KG stores
    existed: a store without them opens, gets them (NULL on its rows) and merges a KG tool's writes into them."""
    from karma_dagster.kg import pg_store
    from karma_dagster.kg.store import ADDED_COLUMNS

    location = str(tmp_path / "kg.duckdb") if backend == "duckdb" else pg_server.new_database("kg_added_columns")
    store = open_kg_store(location)
    disease = NodeIn(id="new::Disease::x", name="disease x", kind="Disease")
    merge_increment(store, D1, "local", {"a": ([_row("a", "t1", DRUG.id, "treats", 0.6, tail_id=disease.id)],
                                               [DRUG.model_copy(update={"comment": None, "class_label": None}),
                                                disease])}, "r1")
    with store.connect() as con:  # what a store made before the columns looks like
        for table, column, _ in ADDED_COLUMNS:
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")  # noqa: S608 - fixed names
    pg_store._READY.discard(location)
    before = open_kg_store(location)
    merge_increment(before, D2, "local", {"b": ([_row("b", "t1", DRUG.id, "treats", 0.7, tail_id=disease.id,
                                                      property="relieves")], [DRUG])}, "r2")
    with before.connect(read_only=True) as con:
        nodes = con.execute("SELECT doc_key, comment, class_label FROM extracted_nodes WHERE id = ? "
                            "ORDER BY doc_key", [DRUG.id]).fetchall()
        evidence = con.execute("SELECT doc_key, property FROM evidence ORDER BY doc_key").fetchall()
    assert [tuple(r) for r in nodes] == [("a", None, None), ("b", "an anti-CTLA-4 antibody", "Monoclonal Antibody")]
    assert [tuple(r) for r in evidence] == [("a", None), ("b", "relieves")]
    drug = next(n for n in before.export_snapshot("local")["nodes"] if n["id"] == DRUG.id)
    assert (drug["comment"], drug["class_label"]) == ("an anti-CTLA-4 antibody", "Monoclonal Antibody")


_ROW_WISE_DUCKDB = """
CREATE OR REPLACE MACRO kg_edges_all(as_of, only_ns := NULL) AS TABLE
SELECT namespace, head_id, relation, tail_id, max(metaedge) AS metaedge, 1 - product(1 - score) AS confidence,
    min(date) AS first_seen, max(date) AS last_seen, count(*) AS n_evidence, count(DISTINCT doc_key) AS n_docs,
    false AS in_seed, ['extracted'] AS sources
FROM evidence WHERE only_ns IS NULL OR namespace = only_ns GROUP BY ALL
"""
_ROW_WISE_PG = """
CREATE OR REPLACE FUNCTION kg_edges_all(as_of date, only_ns varchar DEFAULT NULL)
RETURNS TABLE(namespace varchar, head_id varchar, relation varchar, tail_id varchar, metaedge varchar,
              confidence double precision, first_seen date, last_seen date, n_evidence bigint, n_docs bigint,
              in_seed boolean, sources varchar[])
LANGUAGE sql STABLE AS $$
SELECT v.namespace, v.head_id, v.relation, v.tail_id, max(v.metaedge), 1 - product(1 - v.score), min(v.date),
    max(v.date), count(*), count(DISTINCT v.doc_key), false, ARRAY['extracted']::varchar[]
FROM evidence v WHERE only_ns IS NULL OR v.namespace = only_ns GROUP BY 1, 2, 3, 4
$$
"""


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_a_store_made_before_per_paper_reinforcement_gets_its_views_when_opened(
        backend: str, pg_server: PostgresServer, tmp_path: Path) -> None:
    """A store made before evidence.paper_key summed every evidence row (row-wise kg_edges_all): opened, it gets
    the column and the per-paper views, so one sentence read twice counts once."""
    import duckdb

    from karma_dagster.kg import pg_store

    location = str(tmp_path / "kg.duckdb") if backend == "duckdb" else pg_server.new_database("kg_per_paper")
    store = open_kg_store(location)
    disease = NodeIn(id="new::Disease::y", name="disease y", kind="Disease")
    rows = [_row("a", "t1", DRUG.id, "treats", 0.6, tail_id=disease.id),
            _row("a", "t2", DRUG.id, "treats", 0.5, tail_id=disease.id)]
    merge_increment(store, D1, "local", {"a": (rows, [DRUG, disease])}, "r1")
    with store.connect() as con:  # what a store made before the column looks like: no paper_key, row-wise views
        con.execute("ALTER TABLE evidence DROP COLUMN paper_key")
    if backend == "duckdb":
        raw = duckdb.connect(location)
        raw.execute(_ROW_WISE_DUCKDB)
        raw.close()
    else:
        with psycopg.connect(location, autocommit=True) as raw:
            raw.execute(_ROW_WISE_PG)
    pg_store._READY.discard(location)

    def confidence(s: KGStore) -> float:
        with s.connect(read_only=True) as con:
            return con.execute("SELECT confidence FROM edges WHERE head_id = ? AND tail_id = ?",
                               [DRUG.id, disease.id]).fetchall()[0][0]

    if backend == "duckdb":  # the stand-in really is the old arithmetic (read without the store's upgrade)
        raw = duckdb.connect(location, read_only=True)
        assert raw.execute("SELECT confidence FROM edges").fetchall()[0][0] == pytest.approx(0.8)
        raw.close()
    else:
        with psycopg.connect(location, autocommit=True) as raw:
            assert raw.execute("SELECT confidence FROM edges").fetchall()[0][0] == pytest.approx(0.8)
    reopened = open_kg_store(location)
    assert confidence(reopened) == pytest.approx(0.6, abs=1e-12)
    with reopened.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM evidence WHERE paper_key IS NULL").fetchall()[0][0] == 2
