"""Corruption of a store the project owns is found when the store is opened or read, and named with its file.

One exception, `StoreCorrupt`, for every store (KG, entity index, catalog, LLM reply cache, cost ledger,
controller history, stage tables): its message names the store, the file relative to the data dir and what to
do, and the caller never writes over the file (it stays for inspection). Derived caches (lexicon, trained
models) are not an error: `quarantine` moves a corrupt one aside and the caller rebuilds it with a warning.

The checks lean on each library's own errors (SQLite's error codes and `PRAGMA quick_check`, DuckDB's IO
errors, Lance's open/read errors, Parquet's footer and page checksums); no file format is parsed here.
Dagster-free.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from karma_dagster.runtime.paths import display_path

log = logging.getLogger(__name__)

RESTORE = "restore it from a backup"
F = TypeVar("F", bound=Callable[..., Any])


class StoreCorrupt(RuntimeError):
    """A store file that is damaged or is not the kind of file the store expects."""

    def __init__(self, kind: str, file: Path | str, detail: str, remedy: str = RESTORE, base: Path | None = None) -> None:
        """`base`: the data dir, when the store knows it (the file is then named relative to it)."""
        self.kind, self.file, self.detail, self.remedy = kind, display_path(file, base), _scrub(detail), remedy
        super().__init__(
            f"corrupt {kind}: {self.file} ({self.detail}). Nothing was written to it (kept for inspection); {remedy}."
        )


_ABS_PATH = re.compile(r"(?:/[^/\s\"'`]+)+/([^/\s\"'`]+)")


def _scrub(detail: str) -> str:
    """The library's message on one line, machine paths reduced to file names (no home dirs in logs)."""
    first = " ".join(str(detail).strip().splitlines()[:1]) or "unreadable"
    return _ABS_PATH.sub(r"\1", first)[:300]


# ---------------------------------------------------------------- SQLite
_SQLITE_CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}
_quick_checked: set[tuple[str, int]] = set()
_quick_lock = threading.Lock()


def sqlite_is_corruption(exc: BaseException) -> bool:
    """SQLite's own verdict (error code CORRUPT or NOTADB), not a lock or a constraint."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return isinstance(exc, sqlite3.DatabaseError) and any(name == c or name.startswith(c + "_") for c in _SQLITE_CORRUPT)


def check_sqlite(con: sqlite3.Connection, path: Path, kind: str, tables: Iterable[str], remedy: str = RESTORE) -> None:
    """On open: the file is a SQLite database (header, schema readable) of this store (its tables, when it has
    any), and once per process and file a `PRAGMA quick_check` (it reads every page: 0.1 s for a 40 MB catalog of
    50,000 papers, so not at every open; a page damaged later is caught by the read that meets it, `sqlite_errors`)."""
    try:
        present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = sorted(set(tables) - present)
        foreign = present - {"sqlite_sequence"}
        if foreign and missing:  # tables of something else: a file of another store or program
            raise StoreCorrupt(kind, path, f"a SQLite database without the {kind}'s table(s) {missing}", remedy)
        key = _file_key(path)
        with _quick_lock:
            done = key in _quick_checked
        if not done:
            problems = [r[0] for r in con.execute("PRAGMA quick_check(5)")]
            if problems != ["ok"]:
                raise StoreCorrupt(kind, path, "SQLite quick_check: " + "; ".join(problems), remedy)
            with _quick_lock:
                _quick_checked.add(key)
    except sqlite3.DatabaseError as exc:
        if sqlite_is_corruption(exc):
            raise StoreCorrupt(kind, path, str(exc), remedy) from exc
        raise


@contextmanager
def sqlite_errors(path: Path, kind: str, remedy: str = RESTORE) -> Iterator[None]:
    """Turns SQLite's corruption errors raised inside the block (a damaged page met by a later read) into
    StoreCorrupt; locks, constraints and the caller's own errors pass through."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if sqlite_is_corruption(exc):
            raise StoreCorrupt(kind, path, str(exc), remedy) from exc
        raise


def sqlite_guarded(kind: str, remedy: str = RESTORE) -> Callable[[F], F]:
    """Method decorator: `sqlite_errors` around the method, for stores whose methods open their own connection
    (the store object has a `path`)."""

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            with sqlite_errors(self.path, kind, remedy):
                return method(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _file_key(path: Path) -> tuple[str, int]:
    try:
        return str(Path(path).resolve()), os.stat(path).st_ino
    except OSError:
        return str(path), -1


# ---------------------------------------------------------------- DuckDB
_DUCKDB_MARKERS = ("not a valid duckdb database file", "could not read enough bytes", "corrupt database file",
                   "checksum", "sqlite_scanner", "invalid block", "failed to deserialize")


def duckdb_is_corruption(exc: BaseException) -> bool:
    """A DuckDB error that says the file is damaged (checksum, short read) or foreign (not DuckDB's, or SQLite's)."""
    import duckdb

    if not isinstance(exc, duckdb.Error):
        return False
    text = str(exc).lower()
    return any(m in text for m in _DUCKDB_MARKERS)


DUCKDB_OFFLINE = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
"""Connection settings: a foreign file (e.g. SQLite) makes DuckDB fetch a reader extension from the network."""


# ---------------------------------------------------------------- Lance
def lance_is_corruption(exc: BaseException) -> bool:
    """Lance's errors on a damaged dataset: an IO/format error, a bad magic, or a panic of its reader."""
    if type(exc).__name__ == "RustPanic":
        return True
    text = str(exc)
    return any(m in text for m in ("LanceError(IO)", "LanceError(Corrupt", "Lance file", "failed to fill whole buffer",
                                   "Invalid input, file", "out of range", "protobuf", "DecodeError"))


# ---------------------------------------------------------------- Parquet
PARQUET_WRITE = {"write_page_checksum": True}
"""Written with page CRCs, so a damaged page fails the read instead of decoding to other values."""
PARQUET_READ = {"page_checksum_verification": True}


def read_parquet_checked(path: Path, kind: str, remedy: str = RESTORE, columns: Iterable[str] = (),  # noqa: ANN201
                         base: Path | None = None):
    """pandas.read_parquet with page checksums verified; a bad footer, page or a missing column -> StoreCorrupt."""
    import pandas as pd
    import pyarrow as pa

    try:
        frame = pd.read_parquet(path, **PARQUET_READ)
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise StoreCorrupt(kind, path, str(exc), remedy, base) from exc
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise StoreCorrupt(kind, path, f"a Parquet file without the column(s) {missing}", remedy, base)
    return frame


# ---------------------------------------------------------------- derived caches
def quarantine(path: Path, kind: str, detail: str) -> Path | None:
    """Moves a corrupt derived file (rebuildable) to `<name>.corrupt` with a warning; the caller rebuilds it.
    The old copy is kept beside it, for inspection, and never read again."""
    aside = Path(path).with_name(Path(path).name + ".corrupt")
    try:
        os.replace(path, aside)
    except FileNotFoundError:  # another process moved it aside first
        return None
    log.warning("%s %s is corrupt (%s): moved to %s, rebuilding it", kind, display_path(path), _scrub(detail),
                aside.name)
    return aside
