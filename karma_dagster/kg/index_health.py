"""The entity index kept equal to the KG it derives from: checked where it is opened, rebuilt from the KG's tables.

The seed import writes two stores, the KG (DuckDB or Postgres, one transaction) and then the index (LanceDB, one
commit that carries the KG seed's fingerprint, `EntityIndex.build`). A kill or a full disk between or inside
them leaves a KG whose seed the index does not record, or a table whose build never committed; damaged data
files decode to non-finite vectors. `checked_index` finds each of these when the index is opened and rebuilds
what is wrong — the seed table from the KG's seed names, every namespace's merged entities from its extracted
nodes — with a warning naming the file and the reason, so a rebuilt index equals an uninterrupted one. When the
rebuild cannot make it right, it raises StoreCorrupt (exit 3). Dagster-free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from karma_dagster.runtime.integrity import StoreCorrupt
from karma_dagster.kg.entity_index import INDEX_KIND, INDEX_REMEDY, EntityIndex, IndexCorrupt, KGEntity, set_aside
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.paths import display_path
from karma_dagster.runtime.shared_storage import shared_lock

log = logging.getLogger(__name__)


def build_lock(uri: str | Path):  # noqa: ANN201 - a lock context manager (file or Redis)
    """One builder of an index at a time, across processes (the seed import and every repair take it)."""
    return shared_lock(str(uri).rstrip("/") + ".build.lock")


def sync_lock(uri: str | Path):  # noqa: ANN201 - a lock context manager (file or Redis)
    """The lock every writer of the index's namespaces holds (EntityIndex.sync_namespace takes the same one)."""
    return shared_lock(str(uri).rstrip("/") + ".sync.lock")


def build_seed(index: EntityIndex, store: KGStore, fingerprint: str) -> int:
    """The seed table from the KG's seed names (and synonyms), recorded as built from `fingerprint`."""
    rows = store.lexicon_rows(namespace=None)
    return index.build((KGEntity(id=r.id, name=r.name, kind=r.kind, synonyms=r.synonyms) for r in rows),
                       fingerprint=fingerprint)


def sync_all(index: EntityIndex, store: KGStore) -> None:
    """Every namespace's merged entities in the index made equal to the KG's extracted nodes of it."""
    for namespace in store.namespace_names():
        fingerprint, entities = store.extracted_entities(namespace)
        index.sync_namespace(namespace, entities or [], fingerprint)


def checked_index(uri: str | Path, store: KGStore, fingerprint: Callable[[], str], base: Path | None = None,
                  ) -> EntityIndex:
    """The index at `uri`, checked against the KG `store` (whose seed fingerprint `fingerprint()` gives) and
    repaired from it when it is not the index that KG builds. The check runs unlocked (many processes open the
    index at once); a repair takes the build lock and checks again first (another process may have repaired it)."""
    index, problem = _check(uri, fingerprint())
    if problem is None:
        return index  # type: ignore[return-value]
    where = display_path(uri, base)
    with build_lock(uri):
        for round_ in range(REPAIR_ROUNDS + 1):
            # under the writers' lock too: a sync in another process (rows deleted and added, files replaced) can
            # fail an unlocked read for a moment; only what is still wrong with no writer at work is repaired
            with sync_lock(uri):
                index, problem = _check(uri, fingerprint())  # first round: another process may have repaired it
            if problem is None:
                return index  # type: ignore[return-value]
            if round_ == REPAIR_ROUNDS:
                break
            if isinstance(problem, IndexCorrupt):
                moved = set_aside(uri, problem.table)
                log.warning("entity index %s: %s; %s, rebuilding it from the KG", where, problem.detail, moved)
            else:
                log.warning("entity index %s: %s; rebuilding it from the KG", where, problem)
            _repair(uri, store, fingerprint())
    detail = problem.detail if isinstance(problem, IndexCorrupt) else problem
    raise StoreCorrupt(INDEX_KIND, uri, f"rebuilt from the KG and still wrong: {detail}", INDEX_REMEDY, base)


REPAIR_ROUNDS = 2  # a damaged seed table, then a damaged extracted table; then the index must check out


def _check(uri: str | Path, fingerprint: str) -> tuple[EntityIndex | None, str | IndexCorrupt | None]:
    """(the opened index, None) when it is the KG's; else (it or None, why not)."""
    try:
        index = EntityIndex(uri)
        return index, index.check(fingerprint)
    except IndexCorrupt as exc:
        return None, exc


def _repair(uri: str | Path, store: KGStore, fingerprint: str) -> None:
    """Rebuild what is wrong: the seed table when its record does not match (a damaged one was set aside before),
    then every namespace's entities (idempotent: only rows that differ from the KG change). A table still
    damaged is met by the next round's check."""
    try:
        index = EntityIndex(uri)
    except IndexCorrupt:
        return
    if index.check(fingerprint, full=False) is not None:
        build_seed(index, store, fingerprint)
    sync_all(index, store)
