"""What a seed import may do to a KG that already grew: refuse (the default), replace the seed with the old KG kept
aside, or add the file to the seed; and the check that no evidence names a node the KG does not hold.

Why: evidence rows and extracted nodes point at seed nodes by id. Replacing the seed under a grown KG (a 4,000-node
seed swapped for 10 nodes) left thousands of evidence rows naming nodes that no longer existed, and every export
then dropped their edges without a word. So an import into a KG holding evidence or extracted nodes writes nothing
unless told how (`if_grown`):

- "replace": the KG as it was is kept aside first (the DuckDB file copied next to itself, or on PostgreSQL every KG
  table copied into a schema of its own), with the command that restores it; then the new seed goes in and the grown
  rows (evidence, extracted nodes, increments, adjudications, merge records) are emptied in the same transaction, so
  no evidence is left pointing at the old seed. The next `karma run` merges the evaluated documents again onto it.
- "add": the file's nodes and edges join the seed; nothing stored is deleted or changed (a node or edge already in
  the seed keeps its row; a node whose kind differs from the stored one stops the import, nothing written).
"""

from __future__ import annotations

import datetime as dt
import shlex
import shutil
from typing import Any, Literal

from pydantic import BaseModel

from karma_dagster.kg.store import KGStore
from karma_dagster.project.safe_files import open_new

IfGrown = Literal["refuse", "replace", "add"]
IF_GROWN: tuple[str, ...] = ("refuse", "replace", "add")

# The rows merges wrote: what "replace" empties (kept aside first) and what makes a KG "grown".
GROWN_TABLES = ("evidence", "extracted_nodes", "increments", "adjudications", "contradictions", "merged_documents",
                "kg_sizes")
SEED_TABLES = ("seed_nodes", "node_synonyms", "seed_edges", "seed_node_attrs", "seed_edge_attrs")
HOW = ("run `karma import-kg` again with --replace (the current KG is kept aside and can be restored) or --add "
       "(the file's nodes and edges are added to the seed); in the Dagster UI set the seed_kg config if_grown: "
       "replace or add")


class SeedImportRefused(ValueError):
    """A seed import into a grown KG without --replace or --add: nothing was read into the store or changed."""


class GrownKG(BaseModel):
    """What a grown KG holds beyond its seed (what a replaced seed would leave pointing at nothing)."""

    where: str
    n_evidence: int
    n_extracted_nodes: int

    def refusal(self) -> str:
        return (f"{self.where} holds a grown KG ({self.n_evidence:,} evidence rows, {self.n_extracted_nodes:,} "
                f"extracted nodes): importing would replace the seed they point at, so nothing was changed; {HOW}")


class KeptAside(BaseModel):
    """Where a replaced KG was kept, and the shell command (DuckDB) or SQL (PostgreSQL) that puts it back."""

    where: str
    restore: str


class DanglingEvidence(BaseModel):
    """Evidence rows whose head or tail is neither a seed node nor an extracted node of their namespace."""

    where: str
    n_rows: int
    examples: list[str] = []

    def text(self) -> str:
        return (f"{self.where}: {self.n_rows:,} evidence rows name a node that is neither a seed nor an extracted "
                f"node (their edges are missing from every export), e.g. {'; '.join(self.examples)}")


def where(store: KGStore) -> str:
    """The store as it may be shown (a PostgreSQL URL without its password)."""
    return getattr(store, "location", None) or str(store.path)


def _is_pg(store: KGStore) -> bool:
    return getattr(store, "url", None) is not None


def grown_in(con: Any, store: KGStore) -> GrownKG | None:  # noqa: ANN401 - either engine's connection
    """GrownKG of the store open on `con`, None when it holds no evidence and no extracted node."""
    n_evidence, n_nodes = con.execute(
        "SELECT (SELECT count(*) FROM evidence), (SELECT count(DISTINCT id) FROM extracted_nodes)").fetchall()[0]
    if not n_evidence and not n_nodes:
        return None
    return GrownKG(where=where(store), n_evidence=int(n_evidence), n_extracted_nodes=int(n_nodes))


def grown(store: KGStore) -> GrownKG | None:
    """GrownKG of the store, None when it does not exist yet (nothing is created) or holds nothing grown."""
    if not store.exists():
        return None
    with store.connect(read_only=True) as con:
        return grown_in(con, store)


def check_mode(if_grown: str) -> None:
    """A mode the import knows, before anything is read or written."""
    if if_grown not in IF_GROWN:
        raise ValueError(f"if_grown {if_grown!r}: use {', '.join(map(repr, IF_GROWN))}")


def keep_aside(store: KGStore, con: Any, now: dt.datetime | None = None) -> KeptAside:  # noqa: ANN401
    """Copy the whole KG aside before a replace, on the writer connection `con` (under the store's lock, so no
    merge slips in between the copy and the replace). Raises, having changed nothing, when the copy fails."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    if _is_pg(store):
        return _keep_aside_pg(store, con, stamp)
    path = store.path
    copy = path.with_name(f"{path.name}.before-import-{stamp}")
    con.execute("CHECKPOINT")  # the file holds every committed row (no WAL needed to read the copy)
    try:
        with path.open("rb") as src, open_new(copy) as dst:  # a new file: never through a link at its name
            shutil.copyfileobj(src, dst, 1 << 20)
        shutil.copystat(path, copy)
    except FileExistsError:
        raise
    except BaseException:
        copy.unlink(missing_ok=True)
        raise
    wal = path.with_name(path.name + ".wal")
    return KeptAside(where=str(copy), restore=(f"mv -f {shlex.quote(str(copy))} {shlex.quote(str(path))} && "
                                               f"rm -f {shlex.quote(str(wal))}"))


def _keep_aside_pg(store: KGStore, con: Any, stamp: str) -> KeptAside:  # noqa: ANN401
    schema = f"kg_before_import_{stamp.lower()}"
    present = [t for t in (*SEED_TABLES, *GROWN_TABLES, "schema_extension")
               if con.execute("SELECT to_regclass(?) IS NOT NULL", [t]).fetchall()[0][0]]
    con.execute(f"CREATE SCHEMA {schema}")
    for table in present:
        con.execute(f"CREATE TABLE {schema}.{table} AS TABLE {table}")  # noqa: S608 - fixed names
    swap = " ".join(f"DELETE FROM {t}; INSERT INTO {t} SELECT * FROM {schema}.{t};" for t in present)
    return KeptAside(where=f"{where(store)} schema {schema}",
                     restore=f"psql \"$KARMA_KG_URL\" -1 -c '{swap}'")


def clear_grown(con: Any) -> None:  # noqa: ANN401
    """Empty the rows merges wrote (inside the replace's transaction: all or nothing with the new seed)."""
    for table in GROWN_TABLES:
        con.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names


_DANGLING_SQL = """
SELECT namespace, doc_key, triple_id, head_id, relation, tail_id FROM evidence e
WHERE NOT EXISTS (SELECT 1 FROM seed_nodes s WHERE s.id = e.head_id)
      AND NOT EXISTS (SELECT 1 FROM extracted_nodes x WHERE x.namespace = e.namespace AND x.id = e.head_id)
   OR NOT EXISTS (SELECT 1 FROM seed_nodes s WHERE s.id = e.tail_id)
      AND NOT EXISTS (SELECT 1 FROM extracted_nodes x WHERE x.namespace = e.namespace AND x.id = e.tail_id)
"""


def dangling_evidence(store: KGStore, n_examples: int = 3) -> DanglingEvidence:
    """The invariant "every evidence row's head and tail is a node of the KG", checked: its violations, counted,
    with a few examples (namespace, document, triple). n_rows 0 when it holds (or the KG does not exist yet)."""
    if not store.exists():
        return DanglingEvidence(where=where(store), n_rows=0)
    with store.connect(read_only=True) as con:
        (n,) = con.execute(f"SELECT count(*) FROM ({_DANGLING_SQL}) d").fetchall()[0]  # noqa: S608 - fixed SQL
        rows = con.execute(f"{_DANGLING_SQL} ORDER BY namespace, doc_key, triple_id LIMIT {int(n_examples)}"
                           ).fetchall() if n else []
    examples = [f"{ns}/{doc}#{tid} {h} -{r}-> {t}" for ns, doc, tid, h, r, t in rows]
    return DanglingEvidence(where=where(store), n_rows=int(n), examples=examples)
