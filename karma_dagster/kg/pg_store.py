"""The PostgreSQL KG store: the same tables, views and KGStore methods as the DuckDB file, for many machines.

Why Postgres: a DuckDB file admits one writing process and its file lock is not safe on network storage, so a
KG shared by workers on several hosts needs a server. The graph is stored exactly as in DuckDB (store.py: seed
tables + evidence provenance, confidence aggregated at read time), and the DuckDB table macros `kg_nodes`,
`kg_edges`, `kg_nodes_all`, `kg_edges_all`, `kg_superseded` are SQL functions here with the same parameters, so
`kg_edges(?, as_of := ?)` means the same on both engines.

Concurrency instead of the file lock: readers need no lock (MVCC); each read block is one REPEATABLE READ
transaction, so its queries see one snapshot, as under the DuckDB lock. Writers (`connect()` without read_only)
take a session-level advisory lock on the database for the block: one writer at a time across every machine,
and a writer that dies (SIGKILL, lost host) releases it with its connection while PostgreSQL rolls back its open
transaction. The lock wait is bounded by `lock_timeout` (KGLockTimeout, like the file lock).

Text ordering: PostgreSQL orders text by the database's collation; the queries written here order by
COLLATE "C" (code points, as DuckDB does). Create the database with `--locale=C` (or `LC_COLLATE 'C'`) for the
shared portable queries to order identically too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psycopg

from karma_dagster.kg import reinforcement
from karma_dagster.kg import store as kg_store
from karma_dagster.kg.location import URL_FORM, is_pg_url, redacted, remember, scrub, scrub_exception
from karma_dagster.kg.pg_connection import PgConnection, translate
from karma_dagster.kg.store import (
    DEFAULT_NAMESPACE,
    EdgeFacts,
    KGLockTimeout,
    KGStore,
    KGStoreError,
    LexiconRow,
)

_WRITER_LOCK_KEY = 0x6B61726D61_4B47  # "karmaKG": the advisory lock of the single KG writer (per database)
_READY: set[str] = set()  # URLs whose schema this process has checked (stores are created per call: check once)


# ---------------------------------------------------------------- DDL
def _table_ddl() -> list[str]:
    """The CREATE TABLE / CREATE INDEX statements of store.DDL (one definition of the tables for both engines);
    the DuckDB views and macros are left out (PG_VIEWS_DDL defines them for PostgreSQL)."""
    text = re.sub(r"--[^\n]*", "", kg_store.DDL)
    out = []
    for stmt in (s.strip() for s in text.split(";")):
        head = " ".join(stmt.split()[:3]).upper()
        if head.startswith(("CREATE TABLE", "CREATE INDEX", "CREATE UNIQUE")):
            out.append(translate(stmt, with_params=False))
    return out


PG_VIEWS_DDL = r"""
CREATE OR REPLACE AGGREGATE product(double precision) (SFUNC = float8mul, STYPE = double precision, INITCOND = '1');

CREATE OR REPLACE VIEW namespaces AS
    SELECT 'local'::varchar AS namespace UNION SELECT namespace FROM evidence
    UNION SELECT namespace FROM extracted_nodes;

CREATE OR REPLACE FUNCTION kg_namespaces(only_ns varchar) RETURNS TABLE(namespace varchar)
LANGUAGE sql STABLE AS $$
    SELECT only_ns WHERE only_ns IS NOT NULL
    UNION ALL SELECT n.namespace FROM namespaces n WHERE only_ns IS NULL
$$;

CREATE OR REPLACE FUNCTION kg_nodes_all(as_of date, only_ns varchar DEFAULT NULL)
RETURNS TABLE(namespace varchar, id varchar, name varchar, kind varchar, source varchar, vocab_id varchar,
              first_seen date, last_seen date, created_by_doc varchar)
LANGUAGE sql STABLE AS $$
WITH ex AS (SELECT * FROM extracted_nodes x
            WHERE (as_of IS NULL OR x.date <= as_of) AND (only_ns IS NULL OR x.namespace = only_ns)),
ev AS (SELECT * FROM evidence v
       WHERE (as_of IS NULL OR v.date <= as_of) AND (only_ns IS NULL OR v.namespace = only_ns)),
seen AS (
    SELECT u.namespace, u.id, min(u.date) AS first_seen, max(u.date) AS last_seen FROM (
        SELECT ex.namespace, ex.id, ex.date FROM ex
        UNION ALL SELECT ev.namespace, ev.head_id, ev.date FROM ev
        UNION ALL SELECT ev.namespace, ev.tail_id, ev.date FROM ev) u
    GROUP BY u.namespace, u.id),
exn AS (
    SELECT ex.namespace, ex.id,
        (array_agg(ex.name ORDER BY ex.date, ex.doc_key COLLATE "C"))[1] AS name,
        (array_agg(ex.kind ORDER BY ex.date, ex.doc_key COLLATE "C"))[1] AS kind,
        (array_agg(ex.vocab_id ORDER BY ex.date, ex.doc_key COLLATE "C"))[1] AS vocab_id,
        (array_agg(ex.doc_key ORDER BY ex.date, ex.doc_key COLLATE "C"))[1] AS created_by_doc
    FROM ex WHERE NOT EXISTS (SELECT 1 FROM seed_nodes sn WHERE sn.id = ex.id) GROUP BY ex.namespace, ex.id)
SELECT n.namespace, s.id, s.name, s.kind, 'seed'::varchar, s.vocab_id, seen.first_seen, seen.last_seen,
    NULL::varchar
FROM seed_nodes s CROSS JOIN kg_namespaces(only_ns) n
    LEFT JOIN seen ON seen.namespace = n.namespace AND seen.id = s.id
UNION ALL
SELECT e.namespace, e.id, e.name, e.kind, 'extracted'::varchar, e.vocab_id, seen.first_seen, seen.last_seen,
    e.created_by_doc
FROM exn e LEFT JOIN seen ON seen.namespace = e.namespace AND seen.id = e.id
$$;

CREATE OR REPLACE FUNCTION kg_superseded(as_of date, only_ns varchar DEFAULT NULL)
RETURNS TABLE(namespace varchar, head_id varchar, relation varchar, tail_id varchar, superseded_on date)
LANGUAGE sql STABLE AS $$
    SELECT a.namespace, a.against_head_id, a.against_relation, a.against_tail_id, max(a.date)
    FROM adjudications a
    WHERE a.action = 'replace' AND (as_of IS NULL OR a.date <= as_of) AND (only_ns IS NULL OR a.namespace = only_ns)
    GROUP BY a.namespace, a.against_head_id, a.against_relation, a.against_tail_id
$$;

-- A paper counts once (kg/reinforcement.py, as store.py's kg_edges_all): per paper the max score of its readings,
-- a review decision's row (paper_key set) only when the chain holds no reading of the edge from that paper.
CREATE OR REPLACE FUNCTION kg_edges_all(as_of date, only_ns varchar DEFAULT NULL)
RETURNS TABLE(namespace varchar, head_id varchar, relation varchar, tail_id varchar, metaedge varchar,
              confidence double precision, first_seen date, last_seen date, n_evidence bigint, n_docs bigint,
              in_seed boolean, sources varchar[])
LANGUAGE sql STABLE AS $$
WITH c0 AS (
    SELECT n.namespace, se.head_id, se.relation, se.tail_id, se.metaedge, se.confidence AS sc, NULL::date AS date,
        NULL::varchar AS doc_key, NULL::varchar AS paper, false AS is_decision, true AS is_seed
    FROM seed_edges se CROSS JOIN kg_namespaces(only_ns) n
    UNION ALL
    SELECT v.namespace, v.head_id, v.relation, v.tail_id, v.metaedge, v.score, v.date, v.doc_key,
        coalesce(v.paper_key, v.doc_key), coalesce(v.paper_key <> v.doc_key, false), false
    FROM evidence v WHERE (as_of IS NULL OR v.date <= as_of) AND (only_ns IS NULL OR v.namespace = only_ns)),
c AS (
    SELECT c0.* FROM c0 LEFT JOIN kg_superseded(as_of, only_ns) x
        ON x.namespace = c0.namespace AND x.head_id = c0.head_id AND x.relation = c0.relation
        AND x.tail_id = c0.tail_id
    WHERE x.superseded_on IS NULL OR c0.date > x.superseded_on),
p AS (
    SELECT c.namespace, c.head_id, c.relation, c.tail_id, c.paper, max(c.metaedge) AS metaedge,
        coalesce(max(c.sc) FILTER (WHERE NOT c.is_decision), max(c.sc)) AS sc, min(c.date) AS first_seen,
        max(c.date) AS last_seen, count(c.doc_key) AS n_evidence, bool_or(c.is_seed) AS is_seed,
        (CASE WHEN bool_or(c.is_seed) THEN 'seed' ELSE 'extracted' END)::varchar AS src
    FROM c GROUP BY c.namespace, c.head_id, c.relation, c.tail_id, c.paper)
SELECT p.namespace, p.head_id, p.relation, p.tail_id, max(p.metaedge), {CONFIDENCE}, min(p.first_seen),
    max(p.last_seen), sum(p.n_evidence)::bigint, count(p.paper), bool_or(p.is_seed),
    array_agg(DISTINCT p.src ORDER BY p.src)
FROM p GROUP BY p.namespace, p.head_id, p.relation, p.tail_id
$$;

CREATE OR REPLACE FUNCTION kg_nodes(ns varchar, as_of date DEFAULT NULL)
RETURNS TABLE(namespace varchar, id varchar, name varchar, kind varchar, source varchar, vocab_id varchar,
              first_seen date, last_seen date, created_by_doc varchar)
LANGUAGE sql STABLE AS $$ SELECT * FROM kg_nodes_all(as_of, ns) $$;

CREATE OR REPLACE FUNCTION kg_edges(ns varchar, as_of date DEFAULT NULL)
RETURNS TABLE(namespace varchar, head_id varchar, relation varchar, tail_id varchar, metaedge varchar,
              confidence double precision, first_seen date, last_seen date, n_evidence bigint, n_docs bigint,
              in_seed boolean, sources varchar[])
LANGUAGE sql STABLE AS $$ SELECT * FROM kg_edges_all(as_of, ns) $$;

CREATE OR REPLACE VIEW nodes AS SELECT * FROM kg_nodes_all(NULL);
CREATE OR REPLACE VIEW edges AS SELECT * FROM kg_edges_all(NULL);
""".replace("{CONFIDENCE}", reinforcement.sql_confidence(
    "max(p.sc) FILTER (WHERE p.is_seed)", "product(1 - p.sc) FILTER (WHERE NOT p.is_seed)"))


# ---------------------------------------------------------------- the store
class PgKGStore(KGStore):
    """Handle on the KG in one PostgreSQL database; cheap to create, connects only inside `connect()`."""

    def __init__(self, url: str, lock_timeout: float = 120.0) -> None:
        if not is_pg_url(url):
            raise KGStoreError(f"KG store URL {redacted(str(url))!r}: expected {URL_FORM}")
        remember(url)  # from now on its credentials are scrubbed from every message and log record of the process
        self.url = url
        self.location = redacted(url)
        self.path = None  # type: ignore[assignment]  # no file: the store is a database (see exists())
        self.lock_timeout = lock_timeout
        self._ready = url in _READY
        self._con: PgConnection | None = None  # type: ignore[assignment]
        self._owner: int | None = None

    def __repr__(self) -> str:
        return f"PgKGStore({self.location!r})"

    def exists(self) -> bool:
        """True once the database holds the KG's tables (False, without creating them, before the first write)."""
        with self._raw() as raw:
            return raw.execute("SELECT to_regclass('seed_nodes') IS NOT NULL").fetchone()[0]  # type: ignore[index]

    def _raw(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:  # refused, absent, or a URL libpq cannot read (its message may echo a password)
            scrub_exception(exc, self.url)
            raise KGStoreError(f"KG store {self.location}: cannot connect ({scrub(_first_line(exc), self.url)})") from exc

    def _lock_writer(self, raw: psycopg.Connection) -> None:
        raw.execute(f"SET lock_timeout = {max(1, int(self.lock_timeout * 1000))}")
        try:
            raw.execute("SELECT pg_advisory_lock(%s)", [_WRITER_LOCK_KEY])
        except psycopg.errors.LockNotAvailable as exc:
            raise KGLockTimeout(
                f"KG store {self.location}: another writer held the KG's writer lock for more than "
                f"{self.lock_timeout:g} s; a writer is still running or stuck"
            ) from exc
        raw.execute("RESET lock_timeout")

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[PgConnection]:  # type: ignore[override]
        """A connection for one block: a REPEATABLE READ snapshot for readers, the writer lock for writers.

        Nested use in the same thread gets the open connection back (as with the DuckDB store)."""
        if self._con is not None and self._owner == threading.get_ident():
            yield self._con
            return
        if not self._ready:
            self._init_schema()
        raw = self._raw()
        con = PgConnection(raw)
        try:
            if read_only:
                raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            else:
                self._lock_writer(raw)
            self._con, self._owner = con, threading.get_ident()
            try:
                yield con
            finally:
                self._con, self._owner = None, None
            if read_only:
                raw.execute("COMMIT")
        except psycopg.Error as exc:  # the session's own statements (BEGIN, the lock, COMMIT) and the block's
            scrub_exception(exc, self.url)
            raise
        finally:
            raw.close()  # ends the session: an open transaction is rolled back, the writer lock released

    def _init_schema(self) -> None:
        """Create tables, functions and views once per database. Checked without a lock first (readers never wait
        for a writer once the KG exists), created under the writer lock (two processes starting together must
        not both create them). A database with tables but none of the KG's is refused, not extended."""
        with self._raw() as raw:
            if not self._schema_missing(raw) and not self._columns_missing(raw):
                self._ready = True
                _READY.add(self.url)
                return
            self._lock_writer(raw)
            if self._schema_missing(raw):
                with raw.transaction():
                    for stmt in _table_ddl():
                        raw.execute(stmt)
                    raw.execute(PG_VIEWS_DDL)
            if self._columns_missing(raw):  # a database made before: the columns added since (store.ADDED_COLUMNS),
                with raw.transaction():  # and the functions and views that read them
                    for stmt in kg_store.added_columns_ddl():
                        raw.execute(translate(stmt, with_params=False))
                    raw.execute(PG_VIEWS_DDL)
        self._ready = True
        _READY.add(self.url)

    @staticmethod
    def _columns_missing(raw: psycopg.Connection) -> bool:
        wanted = [f"{t}.{c}" for t, c, _ in kg_store.ADDED_COLUMNS]
        row = raw.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name || '.' || column_name = ANY(%s)", [wanted]).fetchone()
        assert row is not None
        return row[0] < len(wanted)

    def _schema_missing(self, raw: psycopg.Connection) -> bool:
        present = raw.execute(
            "SELECT to_regclass('seed_nodes') IS NOT NULL, to_regclass('merged_documents') IS NOT NULL "
            "AND to_regclass('contradictions') IS NOT NULL "
            "AND to_regclass('edges') IS NOT NULL AND to_regprocedure('kg_edges(varchar, date)') IS NOT NULL, "
            "(SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema())"
        ).fetchone()
        assert present is not None
        if present[2] and not present[0]:
            raise KGStoreError(
                f"KG store {self.location}: the database holds other tables but none of the KG's (seed_nodes); "
                "give the KG a database (or schema) of its own")
        return not present[1]

    # ------------------------------------------------------------ the reads whose SQL is DuckDB-only in store.py
    def seed_fingerprint(self) -> str:
        if not self.exists():
            return "no-kg"
        with self.connect(read_only=True) as con:
            n_nodes, n_edges, digest = con.execute(
                "SELECT (SELECT count(*) FROM seed_nodes), (SELECT count(*) FROM seed_edges), "
                "(SELECT coalesce(sum(hashtext(id)::bigint), 0)::text FROM seed_nodes)").fetchall()[0]
        return hashlib.sha256(f"{n_nodes}:{n_edges}:{digest}".encode()).hexdigest()[:16]

    def edges_between(
        self, pairs: Iterable[tuple[str, str]], namespace: str = DEFAULT_NAMESPACE, as_of: dt.date | None = None
    ) -> dict[tuple[str, str], list[EdgeFacts]]:
        wanted = list(dict.fromkeys(pairs))
        out: dict[tuple[str, str], list[EdgeFacts]] = {p: [] for p in wanted}
        if not wanted:
            return out
        rows = self._fetch(
            "SELECT e.head_id, e.relation, e.tail_id, e.confidence, e.first_seen, e.last_seen, e.n_evidence, "
            "e.in_seed, e.n_docs FROM kg_edges(?, as_of := ?::date) e "
            "JOIN unnest(?::varchar[], ?::varchar[]) AS p(head_id, tail_id) "
            "ON p.head_id = e.head_id AND p.tail_id = e.tail_id "
            'ORDER BY e.head_id COLLATE "C", e.tail_id COLLATE "C", e.relation COLLATE "C"',
            [namespace, as_of, [h for h, _ in wanted], [t for _, t in wanted]])
        for h, r, t, conf, first, last, n, seed, n_docs in rows:
            out[(h, t)].append(EdgeFacts(head_id=h, relation=r, tail_id=t, confidence=float(conf), first_seen=first,
                                         last_seen=last, n_evidence=int(n), in_seed=bool(seed), n_docs=int(n_docs)))
        return out

    def lexicon_rows(self, namespace: str | None = DEFAULT_NAMESPACE) -> list[LexiconRow]:
        with self.connect(read_only=True) as con:
            seed = con.execute(
                'SELECT s.id, s.name, s.kind, coalesce(array_agg(y.synonym ORDER BY y.synonym COLLATE "C") '
                "FILTER (WHERE y.synonym IS NOT NULL), '{}') FROM seed_nodes s LEFT JOIN node_synonyms y "
                'ON y.id = s.id GROUP BY s.id, s.name, s.kind ORDER BY s.id COLLATE "C"').fetchall()
            extracted = []
            if namespace is not None:
                extracted = con.execute(
                    "SELECT n.id, n.name, n.kind, coalesce((SELECT array_agg(DISTINCT y COLLATE \"C\" ORDER BY y "
                    "COLLATE \"C\") FROM extracted_nodes x, unnest(x.synonyms) y WHERE x.namespace = n.namespace "
                    "AND x.id = n.id), '{}') FROM kg_nodes(?) n WHERE n.source = 'extracted' "
                    'ORDER BY n.id COLLATE "C"', [namespace]).fetchall()
        rows = [LexiconRow(id=i, name=n, kind=k, source="seed", synonyms=list(s)) for i, n, k, s in seed]
        rows += [LexiconRow(id=i, name=n, kind=k, source="extracted", synonyms=list(s or []))
                 for i, n, k, s in extracted]
        return rows

    def extracted_entities(self, namespace: str, known: str | None = None) -> tuple[str, list[dict] | None]:
        with self.connect(read_only=True) as con:
            n, digest = con.execute(
                "SELECT count(*), coalesce(sum(hashtext(concat_ws('|', id, name, kind, date::text, "
                "coalesce(synonyms::text, '')))::bigint), 0)::text FROM extracted_nodes WHERE namespace = ?",
                [namespace]).fetchall()[0]
            fingerprint = f"{n}:{digest}"
            if fingerprint == known:
                return fingerprint, None
            rows = con.execute(_PG_ENTITIES_SQL, {"ns": namespace}).fetchall()
        return fingerprint, [
            {"id": i, "name": name, "kind": kind, "synonyms": [s for s in names if s != name], "first_seen": first}
            for i, name, kind, names, first in rows
        ]

    def nodes_by_id(self, ids: Iterable[str], namespace: str = DEFAULT_NAMESPACE) -> dict[str, dict]:
        wanted = sorted(set(ids))
        if not wanted or not self.exists():
            return {}
        rows = self._fetch("SELECT id, name, kind, source, vocab_id, created_by_doc FROM kg_nodes(?) "
                           "WHERE id = ANY(?::varchar[])", [namespace, wanted])
        keys = ("id", "name", "kind", "source", "vocab_id", "created_by_doc")
        return {r[0]: dict(zip(keys, r, strict=True)) for r in rows}

    def schema_extension(self, namespace: str) -> list[dict]:
        if not self.exists():
            return []
        with self.connect(read_only=True) as con:
            if not con.execute("SELECT to_regclass('schema_extension') IS NOT NULL").fetchall()[0][0]:
                return []
            rows = con.execute(
                f"SELECT {', '.join(self._SCHEMA_EXTENSION_COLUMNS)} FROM schema_extension "  # noqa: S608 - fixed
                'WHERE namespace = ? ORDER BY created_at, label_key COLLATE "C"', [namespace]).fetchall()
        return [dict(zip(self._SCHEMA_EXTENSION_COLUMNS, r, strict=True)) for r in rows]

    def add_schema_extension(self, row: dict) -> None:
        """As KGStore's; a duplicate label raises duckdb.ConstraintException on both stores (the tools' contract)."""
        try:
            super().add_schema_extension(row)
        except psycopg.errors.UniqueViolation as exc:
            import duckdb

            raise duckdb.ConstraintException(f"schema_extension: {_first_line(exc)}") from exc

    @staticmethod
    def _has_table(con, name: str) -> bool:  # noqa: ANN001 - a PgConnection
        return bool(con.execute("SELECT to_regclass(?::text) IS NOT NULL", [name]).fetchone()[0])

    def export_snapshot(self, namespace: str, as_of: dt.date | None = None) -> dict[str, list[dict]]:
        p = {"ns": namespace, "as_of": as_of}
        queries = {
            "nodes": _PG_EXPORT_NODES_SQL,
            "edges": "SELECT head_id, relation, tail_id, metaedge, confidence, first_seen, last_seen, n_evidence, "
                     "n_docs, in_seed, sources FROM kg_edges($ns, as_of := $as_of::DATE) "
                     'ORDER BY head_id COLLATE "C", relation COLLATE "C", tail_id COLLATE "C"',
            "evidence": kg_store._EXPORT_EVIDENCE_SQL,
            "supersessions": "SELECT against_head_id AS head_id, against_relation AS relation, against_tail_id AS "
                             "tail_id, date, head_id AS by_head_id, relation AS by_relation, tail_id AS by_tail_id, "
                             "doc_key, reason FROM adjudications WHERE action = 'replace' AND namespace = $ns AND "
                             "($as_of::DATE IS NULL OR date <= $as_of::DATE) "
                             'ORDER BY date, doc_key COLLATE "C", triple_id COLLATE "C"',
        }
        out: dict[str, list[dict]] = {}
        with self.connect(read_only=True) as con:
            has_attrs = self._has_table(con, "seed_node_attrs")
            for name, sql in {**queries, **(kg_store.SEED_ATTRS_SQL if has_attrs else {})}.items():
                cur = con.execute(sql, p if name in queries else None)
                cols = [d[0] for d in cur.description or []]
                out[name] = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        return out


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


_PG_ENTITIES_SQL = """
WITH x AS (SELECT * FROM extracted_nodes e
           WHERE e.namespace = $ns AND NOT EXISTS (SELECT 1 FROM seed_nodes s WHERE s.id = e.id)),
names AS (SELECT x.id, x.name AS v FROM x UNION SELECT x.id, y FROM x, unnest(coalesce(x.synonyms, '{}')) y),
agg AS (SELECT names.id, array_agg(v COLLATE "C" ORDER BY v COLLATE "C") AS names FROM names GROUP BY names.id)
SELECT x.id, (array_agg(x.name ORDER BY x.date, x.doc_key COLLATE "C"))[1],
    (array_agg(x.kind ORDER BY x.date, x.doc_key COLLATE "C"))[1], agg.names, min(x.date)
FROM x JOIN agg ON agg.id = x.id GROUP BY x.id, agg.names ORDER BY x.id COLLATE "C"
"""

_PG_EXPORT_NODES_SQL = """
WITH ex AS (SELECT id, name, synonyms, comment, class_label, date, doc_key FROM extracted_nodes
            WHERE namespace = $ns AND ($as_of::DATE IS NULL OR date <= $as_of::DATE)),
syn AS (
    SELECT id, synonym FROM node_synonyms
    UNION SELECT id, name FROM ex
    UNION SELECT id, unnest(coalesce(synonyms, '{}'::varchar[])) FROM ex),
syns AS (SELECT id, array_agg(synonym COLLATE "C" ORDER BY synonym COLLATE "C") AS names FROM syn GROUP BY id),
notes AS (SELECT id,
                 (array_agg(comment ORDER BY date, doc_key COLLATE "C") FILTER (WHERE comment IS NOT NULL))[1]
                     AS comment,
                 (array_agg(class_label ORDER BY date, doc_key COLLATE "C") FILTER (WHERE class_label IS NOT NULL))[1]
                     AS class_label
          FROM ex GROUP BY id)
SELECT n.id, n.name, n.kind, n.source, n.vocab_id, n.first_seen, n.last_seen, n.created_by_doc,
    ARRAY(SELECT x FROM unnest(coalesce(s.names, '{}'::varchar[])) WITH ORDINALITY AS u(x, i)
          WHERE x <> n.name ORDER BY i)::varchar[] AS synonyms, nt.comment, nt.class_label
FROM kg_nodes($ns, as_of := $as_of::DATE) n LEFT JOIN syns s ON s.id = n.id LEFT JOIN notes nt ON nt.id = n.id
ORDER BY n.id COLLATE "C"
"""
