"""The DuckDB knowledge-graph store: one file, one writer at a time, the current graph as views.

Why views: the graph is seed edges plus every accepted triple occurrence (the provenance), and MedKGent's
reinforcement s = 1-(1-s_old)(1-s_new) is associative and commutative, so the confidence of an edge is exactly
1 - prod(1 - s_i) over one factor per paper (the max score of that paper's readings), the seed's confidence a prior
beside them (kg/reinforcement.py). Aggregating at read time makes merges order-independent and re-materialization (delete a
document's rows, insert them again) exact.

Why the file lock: DuckDB allows one writing process per file and refuses a read-only open while another
process writes, so every connection (reader or writer) goes through `KGStore.connect`, which holds a
cross-process `filelock.FileLock(path + ".lock")` for the duration of the `with` block. Keep blocks short.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import filelock
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

from karma_dagster.runtime.integrity import DUCKDB_OFFLINE, StoreCorrupt, duckdb_is_corruption
from karma_dagster.kg import keyed
from karma_dagster.kg import reinforcement
from karma_dagster.kg import names as kg_names
from karma_dagster.kg.edges import EdgeFacts, edge_text

SCHEMA_YAML = Path(__file__).with_name("schema.yaml")
DEFAULT_NAMESPACE = "local"


SEED_ONLY_NAMESPACE = "__seed__"  # never a backbone name: those start with a letter or digit (backbones.yaml check)


KG_REMEDY = ("restore it from a backup, or move it away: `karma run` then imports the seed KG again and re-merges "
             "every evaluated document")


# KG files this process has checked (and, if older, brought up to date), as (path, device, inode, ctime): every
# `kg_store()` is a new KGStore, and the check opens the file and reads its catalog (~30 ms, every stage of every
# document). Any write, a replaced or re-created file changes the key, and the next connect checks again.
_CHECKED: set[tuple[str, int, int, int] | None] = set()


def _file_identity(path: Path) -> tuple[str, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return str(path), st.st_dev, st.st_ino, st.st_ctime_ns


def _checked_before(path: Path) -> bool:
    key = _file_identity(path)
    return key is not None and key in _CHECKED


class KGStoreError(RuntimeError):
    """A problem with the store file itself (lock, missing file)."""


class KGLockTimeout(KGStoreError):
    """Another process held the store's lock for longer than the timeout."""


# ---------------------------------------------------------------- schema.yaml (read-only here)
class Metaedge(BaseModel):
    model_config = ConfigDict(frozen=True)
    abbrev: str
    source: str
    relation: str
    target: str


@functools.lru_cache(maxsize=4)
def load_schema(path: str | Path = SCHEMA_YAML) -> tuple[tuple[str, ...], tuple[Metaedge, ...]]:
    """Node kinds and metaedges of the KG schema (parsed directly; kg/schema.py is the full model)."""
    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    try:
        kinds = tuple(raw["node_kinds"])
        metaedges = tuple(
            Metaedge(abbrev=m["abbrev"], source=m["source"], relation=m["relation"], target=m["target"])
            for m in raw["metaedges"]
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: schema needs 'node_kinds' and 'metaedges' ({exc})") from exc
    return kinds, metaedges


def schema_relations() -> frozenset[str]:
    return frozenset(m.relation for m in load_schema()[1])


def metaedge_by_abbrev() -> dict[str, Metaedge]:
    return {m.abbrev: m for m in load_schema()[1]}


def metaedge_for(source_kind: str, relation: str, target_kind: str) -> Metaedge | None:
    for m in load_schema()[1]:
        if (m.source, m.relation, m.target) == (source_kind, relation, target_kind):
            return m
    return None


# ---------------------------------------------------------------- boundary models
NODE_COMMENT_MAX_CHARS = 1000  # an instance's comment (kg_tools' create_instance): a sentence or two


class NodeIn(BaseModel):
    """A node entering the KG: a seed node or an entity new to the KG found in a document.

    `comment` and `class_label` are what a KG tool caller's create_instance gave: its comment (cleaned like evidence
    text), and its class when that is a tool-created class (the node's `kind` is the schema kind the class leads
    to). Both are None for everything else; when None they are left out of model_dump, so the merge fingerprint of
    a document without them is what it was before they existed (document_states tells merged from unmerged by it)."""

    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    vocab_id: str | None = None
    synonyms: list[str] = []
    comment: str | None = None
    class_label: str | None = None

    @field_validator("comment")
    @classmethod
    def _clean_comment(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return kg_names.clean_text(value, NODE_COMMENT_MAX_CHARS) or None

    @field_validator("class_label")
    @classmethod
    def _checked_class(cls, value: str | None) -> str | None:
        return None if value is None else kg_names.checked(value, "field 'class_label'", kg_names.TYPE_MAX_CHARS)

    @model_serializer(mode="wrap")
    def _without_absent_notes(self, handler):  # noqa: ANN001, ANN202 - pydantic's serializer protocol
        data = handler(self)
        for key in ("comment", "class_label"):
            if isinstance(data, dict) and data.get(key) is None:
                data.pop(key, None)
        return data


class LexiconRow(BaseModel):
    id: str
    name: str
    kind: str
    source: str
    synonyms: list[str]


class SnapshotCounts(BaseModel):
    as_of: dt.date | None
    namespace: str
    n_nodes: int
    n_seed_nodes: int
    n_extracted_nodes: int
    n_edges: int
    n_seed_only_edges: int
    n_extracted_edges: int  # edges with at least one evidence row (new or reinforcing a seed edge)
    n_evidence: int


# ---------------------------------------------------------------- DDL
SEED_DDL = """
CREATE TABLE IF NOT EXISTS seed_nodes(
    id VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, kind VARCHAR NOT NULL, vocab_id VARCHAR);
CREATE TABLE IF NOT EXISTS node_synonyms(
    id VARCHAR NOT NULL, synonym VARCHAR NOT NULL, PRIMARY KEY (id, synonym));
CREATE TABLE IF NOT EXISTS seed_edges(
    head_id VARCHAR NOT NULL, relation VARCHAR NOT NULL, tail_id VARCHAR NOT NULL, metaedge VARCHAR NOT NULL,
    confidence DOUBLE NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
    PRIMARY KEY (head_id, relation, tail_id));
-- What a KGX import read beside the graph (export/kgx_import.py): a seed node's or edge's KGX columns the tables above
-- do not hold (its KGX id, categories, provenance, publications...) as a JSON object of the file's cells, so an
-- export writes them back (export/kgx.py). Emptied by every seed import; no rows for a Hetionet or generic one.
CREATE TABLE IF NOT EXISTS seed_node_attrs(id VARCHAR PRIMARY KEY, attrs VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS seed_edge_attrs(
    head_id VARCHAR NOT NULL, relation VARCHAR NOT NULL, tail_id VARCHAR NOT NULL, attrs VARCHAR NOT NULL,
    PRIMARY KEY (head_id, relation, tail_id));
-- A namespace's edge count as its last merge left it, with the state it was counted in (kg/sizes.py): a merge
-- updates it from the edges it touched instead of counting the whole graph. A seed (re-)import empties it.
CREATE TABLE IF NOT EXISTS kg_sizes(
    namespace VARCHAR PRIMARY KEY, n_edges BIGINT NOT NULL, state VARCHAR NOT NULL);
DELETE FROM kg_sizes;
"""

# The views and table macros over the tables (re-created when a file made before gets its added columns).
VIEWS_DDL = """
CREATE OR REPLACE VIEW namespaces AS
    SELECT 'local' AS namespace UNION SELECT namespace FROM evidence UNION SELECT namespace FROM extracted_nodes;

-- Every namespace sees the shared seed plus its own extracted rows dated <= as_of (NULL = everything);
-- only_ns restricts to one namespace, which need not have any rows yet (then it is the seed alone).
CREATE OR REPLACE MACRO kg_namespaces(only_ns) AS TABLE
    SELECT only_ns AS namespace WHERE only_ns IS NOT NULL
    UNION ALL SELECT namespace FROM namespaces WHERE only_ns IS NULL;

CREATE OR REPLACE MACRO kg_nodes_all(as_of, only_ns := NULL) AS TABLE
WITH ex AS (SELECT * FROM extracted_nodes
            WHERE (as_of IS NULL OR date <= as_of) AND (only_ns IS NULL OR namespace = only_ns)),
ev AS (SELECT * FROM evidence WHERE (as_of IS NULL OR date <= as_of) AND (only_ns IS NULL OR namespace = only_ns)),
seen AS (
    SELECT namespace, id, min(date) AS first_seen, max(date) AS last_seen FROM (
        SELECT namespace, id, date FROM ex
        UNION ALL SELECT namespace, head_id, date FROM ev
        UNION ALL SELECT namespace, tail_id, date FROM ev)
    GROUP BY namespace, id),
exn AS (
    SELECT namespace, id,
        min_by(name, (date, doc_key)) AS name, min_by(kind, (date, doc_key)) AS kind,
        min_by(vocab_id, (date, doc_key)) AS vocab_id, min_by(doc_key, (date, doc_key)) AS created_by_doc
    FROM ex WHERE id NOT IN (SELECT id FROM seed_nodes) GROUP BY namespace, id)
SELECT n.namespace, s.id, s.name, s.kind, 'seed' AS source, s.vocab_id, seen.first_seen, seen.last_seen,
    NULL::VARCHAR AS created_by_doc
FROM seed_nodes s CROSS JOIN kg_namespaces(only_ns) n LEFT JOIN seen ON seen.namespace = n.namespace AND seen.id = s.id
UNION ALL
SELECT e.namespace, e.id, e.name, e.kind, 'extracted' AS source, e.vocab_id, seen.first_seen, seen.last_seen,
    e.created_by_doc
FROM exn e LEFT JOIN seen ON seen.namespace = e.namespace AND seen.id = e.id;

-- Edges superseded by a replace dated <= as_of, with the latest such date.
CREATE OR REPLACE MACRO kg_superseded(as_of, only_ns := NULL) AS TABLE
    SELECT namespace, against_head_id AS head_id, against_relation AS relation, against_tail_id AS tail_id,
        max(date) AS superseded_on
    FROM adjudications
    WHERE action = 'replace' AND (as_of IS NULL OR date <= as_of) AND (only_ns IS NULL OR namespace = only_ns)
    GROUP BY ALL;

-- An edge superseded on day S keeps only support dated after S (a later paper may assert it again).
-- A paper counts once (kg/reinforcement.py): per paper the max score of its readings, a review decision's row
-- (paper_key set: the paper it came from) only when the chain holds no reading of the edge from that paper; then
-- confidence: 1 - prod(1 - s) over those per-paper factors, the seed's stated confidence a prior beside them
-- (kg/reinforcement.py's with_prior, stated by its sql_confidence). n_docs: distinct papers.
CREATE OR REPLACE MACRO kg_edges_all(as_of, only_ns := NULL) AS TABLE
WITH c0 AS (
    SELECT n.namespace, head_id, relation, tail_id, metaedge, confidence AS s, NULL::DATE AS date,
        NULL::VARCHAR AS doc_key, NULL::VARCHAR AS paper, false AS is_decision, true AS is_seed
    FROM seed_edges CROSS JOIN kg_namespaces(only_ns) n
    UNION ALL
    SELECT namespace, head_id, relation, tail_id, metaedge, score, date, doc_key, coalesce(paper_key, doc_key),
        coalesce(paper_key <> doc_key, false), false
    FROM evidence WHERE (as_of IS NULL OR date <= as_of) AND (only_ns IS NULL OR namespace = only_ns)),
c AS (
    SELECT c0.* FROM c0 LEFT JOIN kg_superseded(as_of, only_ns := only_ns) x
        USING (namespace, head_id, relation, tail_id)
    WHERE x.superseded_on IS NULL OR c0.date > x.superseded_on),
p AS (
    SELECT namespace, head_id, relation, tail_id, paper, max(metaedge) AS metaedge,
        coalesce(max(s) FILTER (WHERE NOT is_decision), max(s)) AS s, min(date) AS first_seen,
        max(date) AS last_seen, count(doc_key) AS n_evidence, bool_or(is_seed) AS is_seed
    FROM c GROUP BY namespace, head_id, relation, tail_id, paper)
SELECT namespace, head_id, relation, tail_id, max(metaedge) AS metaedge, {CONFIDENCE} AS confidence,
    min(first_seen) AS first_seen, max(last_seen) AS last_seen, sum(n_evidence)::BIGINT AS n_evidence,
    count(paper) AS n_docs, bool_or(is_seed) AS in_seed,
    list_sort(list_distinct(list(CASE WHEN is_seed THEN 'seed' ELSE 'extracted' END))) AS sources
FROM p GROUP BY namespace, head_id, relation, tail_id;

CREATE OR REPLACE MACRO kg_nodes(ns, as_of := NULL) AS TABLE
    SELECT * FROM kg_nodes_all(as_of, only_ns := ns);
CREATE OR REPLACE MACRO kg_edges(ns, as_of := NULL) AS TABLE
    SELECT * FROM kg_edges_all(as_of, only_ns := ns);

CREATE OR REPLACE VIEW nodes AS SELECT * FROM kg_nodes_all(NULL);
CREATE OR REPLACE VIEW edges AS SELECT * FROM kg_edges_all(NULL);
""".replace("{CONFIDENCE}", reinforcement.sql_confidence(
    "max(s) FILTER (WHERE is_seed)", "product(1 - s) FILTER (WHERE NOT is_seed)"))

DDL = SEED_DDL + """
-- comment / class_label: a KG tool instance's comment and its tool-created class (NULL otherwise); evidence.property:
-- the tool-created property a triple was stated with (its `relation` is the schema relation that property leads to).
-- evidence.date_source: publication | arrival | configured, the date source of its document when merged (its
-- date is the paper's publication date only for 'publication'; NULL: a review decision, a KG tool statement, or
-- a row merged before it was recorded); ingest/dates.py. evidence.paper_key: the paper an accepted review decision's
-- row stands for (its item's origin document), so the decision folds into that paper's support instead of counting
-- as a paper of its own (kg/reinforcement.py); NULL for the chain's rows, whose paper is their doc_key.
CREATE TABLE IF NOT EXISTS extracted_nodes(
    namespace VARCHAR NOT NULL DEFAULT 'local', id VARCHAR NOT NULL, name VARCHAR NOT NULL, kind VARCHAR NOT NULL,
    vocab_id VARCHAR, synonyms VARCHAR[], doc_key VARCHAR NOT NULL, date DATE NOT NULL, run_id VARCHAR NOT NULL,
    merged_at TIMESTAMP NOT NULL, comment VARCHAR, class_label VARCHAR, PRIMARY KEY (namespace, id, doc_key));
CREATE TABLE IF NOT EXISTS evidence(
    namespace VARCHAR NOT NULL DEFAULT 'local', doc_key VARCHAR NOT NULL, date DATE NOT NULL,
    triple_id VARCHAR NOT NULL, head_id VARCHAR NOT NULL, relation VARCHAR NOT NULL, tail_id VARCHAR NOT NULL,
    metaedge VARCHAR, score DOUBLE NOT NULL CHECK (score >= 0 AND score <= 1), segment_id VARCHAR NOT NULL,
    evidence VARCHAR NOT NULL, backbone VARCHAR NOT NULL, prompt_version VARCHAR NOT NULL, run_id VARCHAR NOT NULL,
    merged_at TIMESTAMP NOT NULL, property VARCHAR, date_source VARCHAR, paper_key VARCHAR,
    PRIMARY KEY (namespace, doc_key, triple_id));
CREATE TABLE IF NOT EXISTS increments(
    namespace VARCHAR NOT NULL DEFAULT 'local', date DATE NOT NULL, n_docs INTEGER NOT NULL,
    n_new_nodes INTEGER NOT NULL, n_new_edges INTEGER NOT NULL, n_reinforced INTEGER NOT NULL,
    n_evidence INTEGER NOT NULL, nodes_before BIGINT NOT NULL, nodes_after BIGINT NOT NULL,
    edges_before BIGINT NOT NULL, edges_after BIGINT NOT NULL, run_id VARCHAR NOT NULL, backbone VARCHAR NOT NULL,
    merged_at TIMESTAMP NOT NULL, PRIMARY KEY (namespace, date));
-- What a date's merge adjudicated (one row per new triple and the edge it lost to or superseded):
-- discard / review = the triple was kept out of the KG (a same-day contradiction it lost or could not settle);
-- replace = the triple won and the `against` edge is superseded from `date` on: kg_edges as of that date or later
-- ignore its earlier support (seed row, evidence dated before), which stays stored; this is its history.
-- A re-merge of the date replaces its rows, like its evidence.
CREATE TABLE IF NOT EXISTS adjudications(
    namespace VARCHAR NOT NULL, date DATE NOT NULL, doc_key VARCHAR NOT NULL, triple_id VARCHAR NOT NULL,
    head_id VARCHAR NOT NULL, relation VARCHAR NOT NULL, tail_id VARCHAR NOT NULL, support DOUBLE,
    action VARCHAR NOT NULL CHECK (action IN ('discard', 'review', 'replace')),
    against_head_id VARCHAR NOT NULL, against_relation VARCHAR NOT NULL, against_tail_id VARCHAR NOT NULL,
    against_confidence DOUBLE, against_first_seen DATE, against_last_seen DATE, against_n_evidence INTEGER,
    against_in_seed BOOLEAN, reason VARCHAR NOT NULL, run_id VARCHAR NOT NULL, merged_at TIMESTAMP NOT NULL,
    PRIMARY KEY (namespace, doc_key, triple_id, against_head_id, against_relation, against_tail_id));
-- What a date's papers said against a KG edge without winning on their own (kg/supersession.py): one row per
-- triple the conflict agent sent to review or discarded against the edge (against_*), with its calibrated
-- probability p of being right. The weight of these rows over time can supersede the edge (an adjudication
-- 'replace' row then says so); a re-merge of the date replaces its rows, like its evidence. A KG without this table
-- was made before the seed-prior confidence rule: opening it creates the table and the views again.
CREATE TABLE IF NOT EXISTS contradictions(
    namespace VARCHAR NOT NULL, date DATE NOT NULL, doc_key VARCHAR NOT NULL, triple_id VARCHAR NOT NULL,
    head_id VARCHAR NOT NULL, relation VARCHAR NOT NULL, tail_id VARCHAR NOT NULL,
    against_head_id VARCHAR NOT NULL, against_relation VARCHAR NOT NULL, against_tail_id VARCHAR NOT NULL,
    p DOUBLE NOT NULL CHECK (p >= 0 AND p <= 1), action VARCHAR NOT NULL, evidence VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL, merged_at TIMESTAMP NOT NULL,
    PRIMARY KEY (namespace, doc_key, triple_id, against_head_id, against_relation, against_tail_id));
-- Which documents a merge took in, with the fingerprint of what it merged (merge.document_fingerprint), written in
-- the merge's transaction: a document evaluated but absent here (or with another fingerprint) is unmerged, and the
-- next `karma run` / kg_increments tick merges its date (state, not the invocation, decides what is merged).
CREATE TABLE IF NOT EXISTS merged_documents(
    namespace VARCHAR NOT NULL, doc_key VARCHAR NOT NULL, date DATE NOT NULL, fingerprint VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL, merged_at TIMESTAMP NOT NULL, PRIMARY KEY (namespace, doc_key));

""" + VIEWS_DDL


# Columns added after KG stores existed: a file or database made before gets them when it is first opened
# (KGStore._init_schema, PgKGStore._init_schema), nullable, so rows merged before read as NULL. A fresh store has
# them from its CREATE TABLE (same place: the end of the table), where these statements change nothing.
ADDED_COLUMNS = (("extracted_nodes", "comment", "VARCHAR"), ("extracted_nodes", "class_label", "VARCHAR"),
                 ("evidence", "property", "VARCHAR"), ("evidence", "date_source", "VARCHAR"),
                 ("evidence", "paper_key", "VARCHAR"))


def added_columns_ddl() -> list[str]:
    """ALTER TABLE ... ADD COLUMN IF NOT EXISTS for each of ADDED_COLUMNS (DuckDB and PostgreSQL alike)."""
    return [f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {sql_type}"
            for table, column, sql_type in ADDED_COLUMNS]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class KGStore:
    """Handle on one DuckDB KG file; cheap to create, opens the file only inside `connect()`."""

    def __init__(self, path: str | Path, lock_timeout: float = 120.0) -> None:
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self._lock = filelock.FileLock(str(self.path) + ".lock", timeout=lock_timeout)
        self._ready = False
        self._con: duckdb.DuckDBPyConnection | None = None
        self._owner: int | None = None

    def __repr__(self) -> str:
        return f"KGStore({str(self.path)!r})"

    def exists(self) -> bool:
        """Whether the store holds a KG already (the file exists); checked without creating anything."""
        return self.path.exists()

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection held under the cross-process lock; closed and unlocked when the block ends.

        Nested use in the same thread gets the open connection back (DuckDB refuses a second, differently
        configured connection to the same file in one process).
        """
        if self._con is not None and self._owner == threading.get_ident():
            yield self._con
            return
        try:
            self._lock.acquire()
        except filelock.Timeout as exc:
            raise KGLockTimeout(
                f"KG store {self.path}: another process held {self.path}.lock for more than "
                f"{self.lock_timeout:g} s; a writer is still running or stuck"
            ) from exc
        try:
            if not self._ready:
                self._ready = _checked_before(self.path)
            if not self._ready:
                self._init_schema()
                _CHECKED.add(_file_identity(self.path))
            con = self._open(read_only)
            self._con, self._owner = con, threading.get_ident()
            try:
                yield con
            except duckdb.Error as exc:  # a damaged block met by a read: name the file, never go on
                if duckdb_is_corruption(exc):
                    raise StoreCorrupt("KG", self.path, str(exc), KG_REMEDY) from exc
                raise
            finally:
                self._con, self._owner = None, None
                con.close()
        finally:
            self._lock.release()

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        """duckdb.connect, offline (a foreign file must not fetch a reader extension); a damaged or foreign file
        raises StoreCorrupt before anything is written to it."""
        try:
            return duckdb.connect(str(self.path), read_only=read_only, config=DUCKDB_OFFLINE)
        except duckdb.Error as exc:
            if duckdb_is_corruption(exc):
                raise StoreCorrupt("KG", self.path, str(exc), KG_REMEDY) from exc
            raise

    def _init_schema(self) -> None:
        """Create tables and views once per file (checked read-only first, so readers don't rewrite the catalog).
        A DuckDB file with tables but none of the KG's is another program's: refused, not extended."""
        if self.path.exists():
            con = self._open(read_only=True)
            try:
                present = con.execute(
                    "SELECT (SELECT count(*) FROM duckdb_views() WHERE view_name IN ('nodes', 'edges')) "
                    "+ (SELECT count(*) FROM duckdb_tables() WHERE table_name IN ('adjudications', 'merged_documents',"
                    " 'contradictions')),"
                    " (SELECT count(*) FROM duckdb_tables() WHERE table_name = 'seed_nodes'),"
                    " (SELECT count(*) FROM duckdb_tables() WHERE NOT internal),"
                    " (SELECT count(*) FROM duckdb_columns() WHERE list_contains(?, table_name || '.' || column_name))",
                    [[f"{t}.{c}" for t, c, _ in ADDED_COLUMNS]],
                ).fetchall()[0]
            except duckdb.Error as exc:
                if duckdb_is_corruption(exc):
                    raise StoreCorrupt("KG", self.path, str(exc), KG_REMEDY) from exc
                raise
            finally:
                con.close()
            if present[2] and not present[1]:
                raise StoreCorrupt("KG", self.path, "a DuckDB database without the KG's tables (seed_nodes)", KG_REMEDY)
            if present[0] == 5 and present[3] == len(ADDED_COLUMNS):
                self._ready = True
                return
            if present[0] == 5:  # an older file gets the columns added since, and the views that read them
                con = self._open(read_only=False)
                try:
                    for stmt in added_columns_ddl():
                        con.execute(stmt)
                    con.execute(VIEWS_DDL)
                finally:
                    con.close()
                self._ready = True
                return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = self._open(read_only=False)
        try:  # an older file gets the missing tables, new views and the columns added since
            con.execute(DDL)
            for stmt in added_columns_ddl():
                con.execute(stmt)
            con.execute(VIEWS_DDL)  # again, over the added columns
        finally:
            con.close()
        self._ready = True

    def check_integrity(self) -> None:
        """Every column of every table read once (DuckDB verifies each block's checksum as it reads it): a block
        damaged anywhere raises StoreCorrupt here, not in the merge that would meet it. ~20 ms on the sample seed
        KG (2 MB), it reads the file once: run it where a command starts, not at every connect."""
        with self.connect(read_only=True) as con:
            tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT internal ORDER BY 1").fetchall()
            for (table,) in tables:
                columns = [r[0] for r in con.execute(f"DESCRIBE {_ident(table)}").fetchall()]
                sums = ", ".join(f"sum(hash({_ident(c)}))" for c in columns)
                con.execute(f"SELECT count(*){', ' + sums if sums else ''} FROM {_ident(table)}").fetchall()

    # ------------------------------------------------------------ reads
    def snapshot_counts(self, as_of: dt.date | None = None, namespace: str = DEFAULT_NAMESPACE) -> SnapshotCounts:
        """The KG's size as of a date (evidence and extracted nodes dated <= as_of; seed always included)."""
        with self.connect(read_only=True) as con:
            nodes = con.execute(
                "SELECT count(*), count(*) FILTER (source = 'seed') FROM kg_nodes(?, as_of := ?)",
                [namespace, as_of],
            ).fetchall()[0]
            edges = con.execute(
                "SELECT count(*), count(*) FILTER (n_evidence = 0), count(*) FILTER (n_evidence > 0), "
                "coalesce(sum(n_evidence), 0) FROM kg_edges(?, as_of := ?)",
                [namespace, as_of],
            ).fetchall()[0]
        assert nodes is not None and edges is not None
        return SnapshotCounts(
            as_of=as_of, namespace=namespace, n_nodes=nodes[0], n_seed_nodes=nodes[1],
            n_extracted_nodes=nodes[0] - nodes[1], n_edges=edges[0], n_seed_only_edges=edges[1],
            n_extracted_edges=edges[2], n_evidence=int(edges[3]),
        )

    def seed_counts(self) -> SnapshotCounts:
        """The imported KG alone: what every backbone's namespace starts from (no namespace holds this name).

        Read from the seed tables' row counts (the views would aggregate every seed edge: ~1 s at 1M edges)."""
        with self.connect(read_only=True) as con:
            n_nodes, n_edges, n_other = con.execute(
                "SELECT (SELECT count(*) FROM seed_nodes), (SELECT count(*) FROM seed_edges), "
                "(SELECT count(*) FROM evidence WHERE namespace = ?) + (SELECT count(*) FROM extracted_nodes "
                "WHERE namespace = ?) + (SELECT count(*) FROM adjudications WHERE namespace = ?)",
                [SEED_ONLY_NAMESPACE] * 3).fetchall()[0]
        if n_other:  # rows under the reserved name (never written by a merge): count as the views do
            return self.snapshot_counts(as_of=None, namespace=SEED_ONLY_NAMESPACE)
        return SnapshotCounts(as_of=None, namespace=SEED_ONLY_NAMESPACE, n_nodes=n_nodes, n_seed_nodes=n_nodes,
                              n_extracted_nodes=0, n_edges=n_edges, n_seed_only_edges=n_edges, n_extracted_edges=0,
                              n_evidence=0)

    def existing_relations(
        self, head_id: str, tail_id: str, namespace: str = DEFAULT_NAMESPACE, as_of: dt.date | None = None
    ) -> list[str]:
        """Relations the KG already holds from head to tail (seed + extracted), for the conflict agent."""
        return self.existing_relations_many([(head_id, tail_id)], namespace, as_of)[(head_id, tail_id)]

    def existing_relations_many(
        self, pairs: Iterable[tuple[str, str]], namespace: str = DEFAULT_NAMESPACE, as_of: dt.date | None = None
    ) -> dict[tuple[str, str], list[str]]:
        """`existing_relations` for many pairs under one lock and one query (the relation names of edges_between)."""
        return {pair: [e.relation for e in edges] for pair, edges in self.edges_between(pairs, namespace, as_of).items()}

    def edges_between(
        self, pairs: Iterable[tuple[str, str]], namespace: str = DEFAULT_NAMESPACE, as_of: dt.date | None = None
    ) -> dict[tuple[str, str], list[EdgeFacts]]:
        """The edges stored as head -> tail for each (head, tail), with their support as of the date (seed +
        evidence dated <= as_of, minus edges superseded by then): what the conflict agent adjudicates against."""

        wanted = list(dict.fromkeys(pairs))
        out: dict[tuple[str, str], list[EdgeFacts]] = {p: [] for p in wanted}
        if not wanted:
            return out
        with self.connect(read_only=True) as con:  # only the pairs' rows are read (kg/keyed.py), not the graph
            facts = keyed.edge_facts(con, wanted, namespace, as_of)
        for (h, r, t), edge in sorted(facts.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
            out[(h, t)].append(edge)
        return out

    def edge_sentences(self, edges: Iterable[tuple[str, str, str]], namespace: str = DEFAULT_NAMESPACE,
                       as_of: dt.date | None = None) -> dict[tuple[str, str, str], list[str]]:
        """Up to three evidence sentences of each edge as of the date, newest first: what the KG's advocate in the
        conflict agent's debate is shown."""
        with self.connect(read_only=True) as con:
            return keyed.edge_sentences(con, list(edges), namespace, as_of)

    def merge_adjudications(self, namespace: str) -> list[dict]:
        """What the namespace's merges adjudicated, in date order: same-day contradictions they kept out of the KG
        (action discard / review) and older edges new triples superseded (replace). Keys: doc_key, triple_id,
        date, action, against (edge text), reason, plus the triple (head_id, relation, tail_id, support) and the
        other side's support as it stood (against_confidence, against_first_seen, against_last_seen,
        against_n_evidence, against_in_seed)."""
        with self.connect(read_only=True) as con:
            cur = con.execute(
                "SELECT doc_key, triple_id, date, action, against_head_id, against_relation, against_tail_id, reason, "
                "head_id, relation, tail_id, support, against_confidence, against_first_seen, against_last_seen, "
                "against_n_evidence, against_in_seed FROM adjudications WHERE namespace = ? "
                "ORDER BY date, doc_key, triple_id, against_relation",
                [namespace],
            )
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        out = []
        for row in rows:
            r = dict(zip(names, row, strict=True))
            r["against"] = edge_text(r.pop("against_head_id"), r.pop("against_relation"), r.pop("against_tail_id"))
            out.append(r)
        return out

    def edge_history(self, head_id: str, relation: str, tail_id: str, namespace: str = DEFAULT_NAMESPACE) -> list[dict]:
        """Everything that ever happened to one edge of the namespace, oldest first (seed first): its seed row,
        each evidence row, and each supersession (with the triple that replaced it and why). Superseded support
        is never deleted, so the history of a replaced edge stays whole."""
        with self.connect(read_only=True) as con:
            rows = con.execute(
                "SELECT NULL::DATE AS date, 'seed' AS event, NULL AS doc_key, NULL AS triple_id, confidence AS score, "
                "'imported seed edge' AS detail FROM seed_edges WHERE head_id = ? AND relation = ? AND tail_id = ? "
                "UNION ALL SELECT date, 'evidence', doc_key, triple_id, score, evidence FROM evidence "
                "WHERE namespace = ? AND head_id = ? AND relation = ? AND tail_id = ? "
                "UNION ALL SELECT date, 'superseded', doc_key, triple_id, support, "
                "'by ' || head_id || ' -' || relation || '-> ' || tail_id || ': ' || reason FROM adjudications "
                "WHERE action = 'replace' AND namespace = ? AND against_head_id = ? AND against_relation = ? "
                "AND against_tail_id = ? ORDER BY date NULLS FIRST, event, doc_key, triple_id",
                [head_id, relation, tail_id, namespace, head_id, relation, tail_id, namespace, head_id, relation,
                 tail_id],
            ).fetchall()
        keys = ("date", "event", "doc_key", "triple_id", "score", "detail")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def node_kind(self, node_id: str, namespace: str = DEFAULT_NAMESPACE) -> str | None:
        with self.connect(read_only=True) as con:
            rows = con.execute("SELECT kind FROM kg_nodes(?) WHERE id = ?", [namespace, node_id]).fetchall()
        return rows[0][0] if rows else None

    def lexicon_rows(self, namespace: str | None = DEFAULT_NAMESPACE) -> list[LexiconRow]:
        """(id, name, kind, synonyms) of every node, for building the entity index; None = seed only."""
        with self.connect(read_only=True) as con:
            seed = con.execute(
                "SELECT s.id, s.name, s.kind, coalesce(list(y.synonym ORDER BY y.synonym) "
                "FILTER (y.synonym IS NOT NULL), []) FROM seed_nodes s LEFT JOIN node_synonyms y USING (id) "
                "GROUP BY s.id, s.name, s.kind ORDER BY s.id"
            ).fetchall()
            extracted = []
            if namespace is not None:
                extracted = con.execute(
                    "SELECT n.id, n.name, n.kind, coalesce((SELECT list_sort(list_distinct(flatten(list(x.synonyms)))) "
                    "FROM extracted_nodes x WHERE x.namespace = n.namespace AND x.id = n.id), []) "
                    "FROM kg_nodes(?) n WHERE n.source = 'extracted' ORDER BY n.id",
                    [namespace],
                ).fetchall()
        rows = [LexiconRow(id=i, name=n, kind=k, source="seed", synonyms=list(s)) for i, n, k, s in seed]
        rows += [
            LexiconRow(id=i, name=n, kind=k, source="extracted", synonyms=list(s or [])) for i, n, k, s in extracted
        ]
        return rows

    def extracted_entities(self, namespace: str, known: str | None = None) -> tuple[str, list[dict] | None]:
        """(fingerprint, entities) of the nodes the namespace's merges added, for its entity index view.

        An entity: id, name and kind as first merged, synonyms = every other name any document merged it under,
        first_seen = the date of its first increment. The fingerprint changes with any extracted_nodes row of the
        namespace; entities is None when it equals `known` (the caller's index is in sync, nothing to read).
        """
        with self.connect(read_only=True) as con:
            n, digest = con.execute(
                "SELECT count(*), coalesce(sum(hash(id, name, kind, date, coalesce(synonyms::VARCHAR, ''))), 0)"
                "::VARCHAR FROM extracted_nodes WHERE namespace = ?", [namespace],
            ).fetchall()[0]
            fingerprint = f"{n}:{digest}"
            if fingerprint == known:
                return fingerprint, None
            rows = con.execute(
                "SELECT id, min_by(name, (date, doc_key)), min_by(kind, (date, doc_key)), "
                "list_sort(list_distinct(list(name) || flatten(list(coalesce(synonyms, []::VARCHAR[]))))), min(date) "
                "FROM extracted_nodes WHERE namespace = ? AND id NOT IN (SELECT id FROM seed_nodes) "
                "GROUP BY id ORDER BY id", [namespace],
            ).fetchall()
        return fingerprint, [
            {"id": i, "name": name, "kind": kind, "synonyms": [s for s in names if s != name], "first_seen": first}
            for i, name, kind, names, first in rows
        ]

    # ------------------------------------------------------------ named queries (callers write no SQL on these tables)
    def _fetch(self, sql: str, params: list[object] | None = None) -> list[tuple]:
        """Rows of one read-only query, under the lock for that query only."""
        with self.connect(read_only=True) as con:
            return con.execute(sql, params or []).fetchall()

    def seed_fingerprint(self) -> str:
        """Changes whenever the seed is re-imported (seed row counts + id hash); cache key of seed-derived builds.

        "no-kg" when the file does not exist yet, without creating it.
        """
        if not self.exists():
            return "no-kg"
        with self.connect(read_only=True) as con:
            n_nodes, n_edges = con.execute(
                "SELECT (SELECT count(*) FROM seed_nodes), (SELECT count(*) FROM seed_edges)"
            ).fetchall()[0]
            digest = con.execute("SELECT coalesce(sum(hash(id)), 0)::VARCHAR FROM seed_nodes").fetchall()[0][0]
        return hashlib.sha256(f"{n_nodes}:{n_edges}:{digest}".encode()).hexdigest()[:16]

    def node_kinds(self) -> dict[str, str]:
        """id -> kind of every node of every namespace, loaded at once (one query instead of one per triple)."""
        return dict(self._fetch(  # kg_nodes' kinds, read from the node tables (the view also scans all evidence)
            "SELECT id, kind FROM seed_nodes UNION ALL SELECT id, kind FROM (SELECT namespace, id, kind, "
            "row_number() OVER (PARTITION BY namespace, id ORDER BY date, doc_key) AS rn FROM extracted_nodes "
            "WHERE id NOT IN (SELECT id FROM seed_nodes)) first_rows WHERE rn = 1"))

    def merged_evidence(self, namespace: str) -> set[tuple[str, str]]:
        """(doc_key, triple_id) of every triple merged into the namespace: which accepted triples the KG holds."""
        return set(self._fetch("SELECT doc_key, triple_id FROM evidence WHERE namespace = ?", [namespace]))

    def chain_papers(
        self, edges: Iterable[tuple[str, str, str]], namespace: str
    ) -> dict[tuple[str, str, str], set[str]]:
        """edge -> the papers whose own reading (an evidence row that is not a review decision) states it: a review
        decision attributed to one of them would add nothing to the edge (kg/reinforcement.py). Every stored row
        counts (supersession and dates aside): what a curator is told before accepting."""
        wanted = set(edges)
        out: dict[tuple[str, str, str], set[str]] = {e: set() for e in wanted}
        heads = sorted({h for h, _, _ in wanted})
        if not heads or not self.exists():
            return out
        for h, r, t, doc in self._fetch(
                "SELECT DISTINCT head_id, relation, tail_id, doc_key FROM evidence WHERE namespace = ? "
                "AND list_contains(?, head_id) AND (paper_key IS NULL OR paper_key = doc_key)", [namespace, heads]):
            if (h, r, t) in out:
                out[(h, r, t)].add(doc)
        return out

    def seed_edge_triples(self) -> list[tuple[str, str, str]]:
        """(head_id, relation, tail_id) of the imported seed edges: the graph before any merge."""
        return self._fetch("SELECT head_id, relation, tail_id FROM seed_edges")

    def edge_triples(self, namespace: str) -> list[tuple[str, str, str]]:
        """(head_id, relation, tail_id) of the namespace's current graph (seed plus its extracted edges)."""
        return self._fetch("SELECT head_id, relation, tail_id FROM kg_edges(?)", [namespace])

    def seed_node_ids(self) -> set[str]:
        """Ids of the imported seed nodes: the entities that existed before any merge."""
        return {r[0] for r in self._fetch("SELECT id FROM seed_nodes")}

    def count_extracted_nodes(self, namespace: str) -> int:
        """How many nodes the namespace's merges added to the seed (its coverage gain)."""
        return int(self._fetch("SELECT count(*) FROM kg_nodes(?) WHERE source = 'extracted'", [namespace])[0][0])

    def merged_documents(self, namespace: str, keys: Iterable[str] | None = None) -> dict[str, str]:
        """doc_key -> fingerprint of every document a merge of the namespace took in ({} before the KG exists);
        of `keys` only when given (a sensor tick asks about a slice of the corpus, not ten million rows).

        Compared with the evaluated tables' fingerprints, it says which documents are still unmerged."""
        if not self.exists():
            return {}
        if keys is None:
            return dict(self._fetch("SELECT doc_key, fingerprint FROM merged_documents WHERE namespace = ?",
                                    [namespace]))
        wanted = sorted(set(keys))
        out: dict[str, str] = {}
        for lo in range(0, len(wanted), 5000):  # one array parameter per chunk: the same SQL on DuckDB and Postgres
            out.update(self._fetch("SELECT doc_key, fingerprint FROM merged_documents WHERE namespace = ? "
                                   "AND doc_key IN (SELECT unnest(?::varchar[]))", [namespace, wanted[lo:lo + 5000]]))
        return out

    # ------------------------------------------------------------ removal of one document (`karma remove`)
    def document_footprint(self, doc_key: str) -> list[DocumentFootprint]:
        """Per namespace, what `doc_key` contributed: evidence rows, the edges that exist only through it (they
        disappear with it), the edges it reinforces (they stay, with one evidence less), its new-entity rows, its
        adjudications and whether a merge recorded it. [] when the KG holds nothing of it (or does not exist)."""
        if not self.exists():
            return []
        with self.connect(read_only=True) as con:
            rows = con.execute(_FOOTPRINT_SQL, {"doc": doc_key}).fetchall()
        return [DocumentFootprint(namespace=r[0], date=r[1], n_evidence=int(r[2]), n_edges_removed=int(r[3]),
                                  n_edges_weakened=int(r[4]), n_node_rows=int(r[5]), n_adjudications=int(r[6]),
                                  merged=bool(r[7])) for r in rows]

    def remove_document(self, doc_key: str) -> list[DocumentFootprint]:
        """Delete everything `doc_key` contributed, in every namespace, in one transaction: its evidence, new
        entities, adjudications, contradictions and merged_documents row. Confidence and evidence counts need no update: the
        views aggregate what remains, exactly as after a merge. The date's increments row and the other documents
        of that date are marked unmerged, so the next `karma run` re-merges the date without this document
        (its same-day adjudications are decided again by merge_increment). Idempotent; returns the footprint."""
        footprint = self.document_footprint(doc_key)
        if not footprint:
            return []
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                for f in footprint:
                    if f.date is not None:
                        con.execute("DELETE FROM increments WHERE namespace = ? AND date = ?", [f.namespace, f.date])
                        con.execute("DELETE FROM merged_documents WHERE namespace = ? AND date = ?",
                                    [f.namespace, f.date])
                for table in ("evidence", "extracted_nodes", "adjudications", "contradictions", "merged_documents"):
                    con.execute(f"DELETE FROM {table} WHERE doc_key = ?", [doc_key])  # noqa: S608 - fixed names
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return footprint

    # ------------------------------------------------------------ KG tools (kg_tools/): read-only queries
    def nodes_by_id(self, ids: Iterable[str], namespace: str = DEFAULT_NAMESPACE) -> dict[str, dict]:
        """id -> {id, name, kind, source, vocab_id, created_by_doc} of the namespace's nodes among `ids`."""
        wanted = sorted(set(ids))
        if not wanted or not self.exists():
            return {}
        rows = self._fetch("SELECT id, name, kind, source, vocab_id, created_by_doc FROM kg_nodes(?) "
                           "WHERE list_contains(?, id)", [namespace, wanted])
        keys = ("id", "name", "kind", "source", "vocab_id", "created_by_doc")
        return {r[0]: dict(zip(keys, r, strict=True)) for r in rows}

    def neighbours(self, node_id: str, namespace: str = DEFAULT_NAMESPACE, limit: int = 25) -> list[dict]:
        """The node's current edges in both directions (strongest first), with the other end's name and kind."""
        rows = self._fetch(
            "SELECT e.head_id, e.relation, e.tail_id, e.metaedge, e.confidence, e.n_evidence, e.in_seed, "
            "CASE WHEN e.head_id = ? THEN 'out' ELSE 'in' END, n.id, n.name, n.kind "
            "FROM kg_edges(?) e JOIN kg_nodes(?) n ON n.id = CASE WHEN e.head_id = ? THEN e.tail_id ELSE e.head_id END "
            "WHERE e.head_id = ? OR e.tail_id = ? ORDER BY e.confidence DESC, e.relation, n.id LIMIT ?",
            [node_id, namespace, namespace, node_id, node_id, node_id, limit])
        keys = ("head_id", "relation", "tail_id", "metaedge", "confidence", "n_evidence", "in_seed", "direction",
                "other_id", "other_name", "other_kind")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def edge_evidence(self, head_id: str, relation: str, tail_id: str, namespace: str = DEFAULT_NAMESPACE) -> list[dict]:
        """Every evidence row of one edge in the namespace (oldest first): who stated it, where and when, and the
        tool-created property it was stated with (`property`, None for a schema relation's), and whether its date
        is the paper's publication date (`date_source`: publication | arrival | configured; None: not a catalog
        document, or merged before this was recorded)."""
        rows = self._fetch(
            "SELECT date, doc_key, triple_id, score, segment_id, evidence, backbone, prompt_version, run_id, property, "
            "date_source "
            "FROM evidence WHERE namespace = ? AND head_id = ? AND relation = ? AND tail_id = ? "
            "ORDER BY date, doc_key, triple_id", [namespace, head_id, relation, tail_id])
        keys = ("date", "doc_key", "triple_id", "score", "segment_id", "evidence", "backbone", "prompt_version",
                "run_id", "property", "date_source")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    # ------------------------------------------------------------ KG tools: classes and properties they add
    _SCHEMA_EXTENSION_DDL = (
        "CREATE TABLE IF NOT EXISTS schema_extension(namespace VARCHAR NOT NULL, what VARCHAR NOT NULL "
        "CHECK (what IN ('class', 'property')), label VARCHAR NOT NULL, label_key VARCHAR NOT NULL, "
        "comment VARCHAR NOT NULL, super VARCHAR, domain VARCHAR, range VARCHAR, caller VARCHAR NOT NULL, "
        "doc_key VARCHAR, created_at TIMESTAMP NOT NULL, PRIMARY KEY (namespace, what, label_key))")
    _SCHEMA_EXTENSION_COLUMNS = ("namespace", "what", "label", "label_key", "comment", "super", "domain", "range",
                                 "caller", "doc_key", "created_at")

    def schema_extension(self, namespace: str) -> list[dict]:
        """The classes and properties tool callers added to the namespace's schema, oldest first ([] before any)."""
        if not self.exists():
            return []
        with self.connect(read_only=True) as con:
            present = con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_extension'").fetchall()[0][0]
            if not present:
                return []
            rows = con.execute(
                f"SELECT {', '.join(self._SCHEMA_EXTENSION_COLUMNS)} FROM schema_extension "  # noqa: S608 - fixed
                "WHERE namespace = ? ORDER BY created_at, label_key", [namespace]).fetchall()
        return [dict(zip(self._SCHEMA_EXTENSION_COLUMNS, r, strict=True)) for r in rows]

    def add_schema_extension(self, row: dict) -> None:
        """Store one tool-created class or property (validated by the caller); the key refuses a duplicate label."""
        values = [row.get(c) for c in self._SCHEMA_EXTENSION_COLUMNS]
        with self.connect() as con:
            con.execute(self._SCHEMA_EXTENSION_DDL)
            con.execute(f"INSERT INTO schema_extension ({', '.join(self._SCHEMA_EXTENSION_COLUMNS)}) "  # noqa: S608
                        f"VALUES ({', '.join('?' * len(values))})", values)

    # ------------------------------------------------------------ exports (export/): the graph as of a date
    def namespace_names(self) -> list[str]:
        """Every namespace the store knows ('local' always; backbones once they merged something)."""
        return sorted(r[0] for r in self._fetch("SELECT namespace FROM namespaces"))

    @staticmethod
    def _has_table(con, name: str) -> bool:  # noqa: ANN001 - this engine's connection
        return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [name]).fetchone()[0])

    def seed_node_attrs(self) -> dict[str, str]:
        """node id -> the KGX cells a KGX import kept of it (JSON; export/kgx_import.py); {} when it kept none."""
        with self.connect(read_only=True) as con:
            if not self._has_table(con, "seed_node_attrs"):  # a store made before the table, never re-imported
                return {}
            return dict(con.execute("SELECT id, attrs FROM seed_node_attrs").fetchall())

    def export_snapshot(self, namespace: str, as_of: dt.date | None = None) -> dict[str, list[dict]]:
        """The namespace's graph as of a date, read in one connection so the parts agree: nodes (with synonyms
        known by then), edges (kg_edges: support dated <= as_of, superseded support dropped), the live evidence
        behind them, and the supersessions dated <= as_of (history: the edges they replaced stay out of `edges`
        unless asserted again later). as_of None = everything."""
        p = {"ns": namespace, "as_of": as_of}
        queries = {
            "nodes": _EXPORT_NODES_SQL,
            "edges": "SELECT * EXCLUDE (namespace) FROM kg_edges($ns, as_of := $as_of::DATE) "
                     "ORDER BY head_id, relation, tail_id",
            "evidence": _EXPORT_EVIDENCE_SQL,
            "supersessions": "SELECT against_head_id AS head_id, against_relation AS relation, against_tail_id AS "
                             "tail_id, date, head_id AS by_head_id, relation AS by_relation, tail_id AS by_tail_id, "
                             "doc_key, reason FROM adjudications WHERE action = 'replace' AND namespace = $ns AND "
                             "($as_of::DATE IS NULL OR date <= $as_of::DATE) ORDER BY date, doc_key, triple_id",
        }
        out: dict[str, list[dict]] = {}
        with self.connect(read_only=True) as con:
            has_attrs = self._has_table(con, "seed_node_attrs")
            for name, sql in {**queries, **(SEED_ATTRS_SQL if has_attrs else {})}.items():
                cur = con.execute(sql, p if name in queries else None)
                cols = [d[0] for d in cur.description]
                out[name] = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        return out


class DocumentFootprint(BaseModel):
    """What one document contributed to one namespace of the KG (see KGStore.document_footprint)."""

    namespace: str
    date: dt.date | None
    n_evidence: int
    n_edges_removed: int
    n_edges_weakened: int
    n_node_rows: int
    n_adjudications: int
    merged: bool


_FOOTPRINT_SQL = """
WITH ns AS (
    SELECT namespace, min(date) AS date FROM (
        SELECT namespace, date FROM evidence WHERE doc_key = $doc
        UNION ALL SELECT namespace, date FROM extracted_nodes WHERE doc_key = $doc
        UNION ALL SELECT namespace, date FROM adjudications WHERE doc_key = $doc
        UNION ALL SELECT namespace, date FROM merged_documents WHERE doc_key = $doc) AS u GROUP BY namespace),
edges AS (
    SELECT e.namespace, e.head_id, e.relation, e.tail_id,
        bool_and(e.doc_key = $doc) AND s.head_id IS NULL AS only_this, count(*) FILTER (e.doc_key = $doc) AS n
    FROM evidence e LEFT JOIN seed_edges s USING (head_id, relation, tail_id)
    GROUP BY e.namespace, e.head_id, e.relation, e.tail_id, s.head_id HAVING bool_or(e.doc_key = $doc))
SELECT ns.namespace, ns.date,
    coalesce((SELECT sum(n) FROM edges WHERE edges.namespace = ns.namespace), 0),
    (SELECT count(*) FROM edges WHERE edges.namespace = ns.namespace AND only_this),
    (SELECT count(*) FROM edges WHERE edges.namespace = ns.namespace AND NOT only_this),
    (SELECT count(*) FROM extracted_nodes x WHERE x.namespace = ns.namespace AND x.doc_key = $doc),
    (SELECT count(*) FROM adjudications a WHERE a.namespace = ns.namespace AND a.doc_key = $doc),
    EXISTS (SELECT 1 FROM merged_documents m WHERE m.namespace = ns.namespace AND m.doc_key = $doc)
FROM ns ORDER BY ns.namespace
"""


# export_snapshot: a node's synonyms as of the date (seed synonyms, and every name the namespace's merges gave it),
# and the comment and tool-created class its earliest merge that gave one stored (KG tool instances)
_EXPORT_NODES_SQL = """
WITH ex AS (SELECT id, name, synonyms, comment, class_label, date, doc_key FROM extracted_nodes
            WHERE namespace = $ns AND ($as_of::DATE IS NULL OR date <= $as_of::DATE)),
syn AS (
    SELECT id, synonym FROM node_synonyms
    UNION SELECT id, name FROM ex
    UNION SELECT id, unnest(coalesce(synonyms, []::VARCHAR[])) FROM ex),
syns AS (SELECT id, list_sort(list_distinct(list(synonym))) AS names FROM syn GROUP BY id),
notes AS (SELECT id, min_by(comment, (date, doc_key)) FILTER (WHERE comment IS NOT NULL) AS comment,
                 min_by(class_label, (date, doc_key)) FILTER (WHERE class_label IS NOT NULL) AS class_label
          FROM ex GROUP BY id)
SELECT n.id, n.name, n.kind, n.source, n.vocab_id, n.first_seen, n.last_seen, n.created_by_doc,
    coalesce(list_filter(s.names, lambda x: x <> n.name), []::VARCHAR[]) AS synonyms, x.comment, x.class_label
FROM kg_nodes($ns, as_of := $as_of::DATE) n LEFT JOIN syns s USING (id) LEFT JOIN notes x USING (id) ORDER BY n.id
"""

# export_snapshot: what a KGX import kept of the seed rows (a store made before seed_node_attrs existed has none)
SEED_ATTRS_SQL = {"node_attrs": "SELECT id, attrs FROM seed_node_attrs",
                  "edge_attrs": "SELECT head_id, relation, tail_id, attrs FROM seed_edge_attrs"}

# export_snapshot: the evidence rows kg_edges counts as of the date (superseded support left out)
_EXPORT_EVIDENCE_SQL = """
SELECT e.head_id, e.relation, e.tail_id, e.date, e.doc_key, e.triple_id, e.score, e.segment_id, e.evidence,
    e.backbone, e.prompt_version, e.run_id, e.property, e.date_source
FROM evidence e LEFT JOIN kg_superseded($as_of::DATE, only_ns := $ns) x USING (namespace, head_id, relation, tail_id)
WHERE e.namespace = $ns AND ($as_of::DATE IS NULL OR e.date <= $as_of::DATE)
    AND (x.superseded_on IS NULL OR e.date > x.superseded_on)
ORDER BY e.head_id, e.relation, e.tail_id, e.date, e.doc_key, e.triple_id
"""
