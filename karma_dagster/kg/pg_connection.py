"""A psycopg 3 connection that speaks the subset of DuckDB's Python API the KG code uses.

Why an adapter: KGStore's queries, merge.py and the callers of `KGStore.connect()` are written against DuckDB's
connection (`execute` with `?` or `$name` parameters, `executemany`, `fetchall` / `fetchone` / `description`,
`.df()`, `register(name, DataFrame)`). With this adapter the same portable SQL runs on PostgreSQL unchanged; the
few DuckDB-only spellings that are pure syntax are translated here (outside string literals):

- `?` -> `%s`, `$name` -> `%(name)s`, `%` -> `%%` (psycopg's placeholders; only when parameters are bound);
- the type `DOUBLE` -> `DOUBLE PRECISION`;
- `FILTER (cond)` -> `FILTER (WHERE cond)` (DuckDB accepts both; PostgreSQL only the latter);
- `list_contains(?, column)` with a bound list -> `column = ANY(%s)`.

Anything else DuckDB-only (list functions, table macros, EXCLUDE, GROUP BY ALL) is not translated: the Postgres
store (pg_store.py) gives those queries their own PostgreSQL text. The connection is in autocommit mode, like a
DuckDB connection: a `BEGIN TRANSACTION` ... `COMMIT` issued by the caller delimits a transaction.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import pandas as pd
import psycopg

from karma_dagster.kg.location import scrub_exception

_TOKEN = re.compile(
    r"""(?P<lit>'(?:[^']|'')*')          # a string literal: no parameter in it
      |(?P<dollar>\$\$)                  # a dollar quote: left as it is
      |(?P<named>\$[A-Za-z_]\w*)         # $name parameter
      |(?P<q>\?)                         # positional parameter
      |(?P<pct>%)                        # a literal percent sign
      |(?P<double>\bDOUBLE\b(?!\s+PRECISION))
      |(?P<filter>\bFILTER\s*\((?!\s*WHERE\b))
      |(?P<contains>\blist_contains\(\s*\?\s*,\s*(?P<elem>[A-Za-z_][\w.]*)\s*\))
    """,
    re.IGNORECASE | re.VERBOSE,
)


def translate(sql: str, with_params: bool) -> str:
    """DuckDB-flavoured SQL text -> psycopg SQL text (see the module docstring for what is translated)."""

    def sub(m: re.Match[str]) -> str:
        kind = m.lastgroup
        if kind == "lit":  # psycopg reads % even inside literals: doubled when parameters are bound
            return m.group(0).replace("%", "%%") if with_params else m.group(0)
        if kind == "dollar":
            return m.group(0)
        if kind == "named":
            return f"%({m.group(0)[1:]})s" if with_params else m.group(0)
        if kind == "q":
            return "%s" if with_params else m.group(0)
        if kind == "pct":
            return "%%" if with_params else "%"
        if kind == "double":
            return "DOUBLE PRECISION"
        if kind == "contains":
            return f"{m.group('elem')} = ANY(%s)"
        return "FILTER (WHERE "

    return _TOKEN.sub(sub, sql)


def _plain(value: Any) -> Any:
    """numpy scalars (from pandas) and tuples -> values psycopg adapts; NaN -> NULL (a missing pandas value)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)) and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, tuple):
        return list(value)
    return value


def _params(params: Sequence[Any] | Mapping[str, Any] | None) -> Sequence[Any] | Mapping[str, Any] | None:
    if params is None:
        return None
    if isinstance(params, Mapping):
        return {k: _plain(v) for k, v in params.items()}
    return [_plain(v) for v in params]


class PgResult:
    """What `execute` returns: DuckDB's result methods over a psycopg cursor."""

    def __init__(self, cursor: psycopg.Cursor) -> None:
        self._cur = cursor

    @property
    def description(self) -> list[tuple] | None:
        return None if self._cur.description is None else [tuple(d) for d in self._cur.description]

    def fetchall(self) -> list[tuple]:
        return self._cur.fetchall() if self._cur.description is not None else []

    def fetchone(self) -> tuple | None:
        return self._cur.fetchone() if self._cur.description is not None else None

    def df(self) -> pd.DataFrame:
        cols = [d[0] for d in self._cur.description or []]
        return pd.DataFrame(self.fetchall(), columns=cols)


def _pg_type(series: pd.Series) -> str:
    """The column type of a registered frame's temp table, from the pandas dtype (object: from its values)."""
    kind = series.dtype.kind
    if kind == "b":
        return "BOOLEAN"
    if kind in "iu":
        return "BIGINT"
    if kind == "f":
        return "DOUBLE PRECISION"
    if kind == "M":
        return "TIMESTAMP"
    sample = next((v for v in series if _plain(v) is not None), None)
    if isinstance(sample, (list, tuple)) or (sample is not None and hasattr(sample, "tolist")):
        return "TEXT[]"
    if isinstance(sample, bool):
        return "BOOLEAN"
    if isinstance(sample, int):
        return "BIGINT"
    if isinstance(sample, float):
        return "DOUBLE PRECISION"
    if sample is not None and type(sample).__name__ == "date":
        return "DATE"
    return "TEXT"


_F = TypeVar("_F", bound=Callable[..., Any])


def _scrubbed(method: _F) -> _F:
    """A driver error leaves the method with the credentials of every store URL scrubbed from its message (same
    exception class: callers still catch UniqueViolation, LockNotAvailable...)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except psycopg.Error as exc:
            scrub_exception(exc)
            raise

    return wrapper  # type: ignore[return-value]


class PgConnection:
    """A DuckDB-like handle on one psycopg connection (autocommit; explicit BEGIN/COMMIT for transactions)."""

    def __init__(self, raw: psycopg.Connection) -> None:
        self.raw = raw
        self._registered: set[str] = set()

    @_scrubbed
    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> PgResult:
        if params is not None and len(params) == 0:
            params = None
        cur = self.raw.cursor()
        cur.execute(translate(sql, params is not None), _params(params))  # type: ignore[arg-type]
        return PgResult(cur)

    @_scrubbed
    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = [[_plain(v) for v in r] for r in rows]
        if rows:
            with self.raw.cursor() as cur:
                cur.executemany(translate(sql, True), rows)

    @_scrubbed
    def register(self, name: str, frame: pd.DataFrame) -> None:
        """Make a DataFrame queryable under `name`: a temp table filled by COPY (values are data, never SQL)."""
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ValueError(f"register: {name!r} is not a plain table name")
        cols = [str(c) for c in frame.columns]
        for c in cols:
            if not re.fullmatch(r"[A-Za-z_]\w*", c):
                raise ValueError(f"register {name}: column {c!r} is not a plain column name")
        types = [_pg_type(frame[c]) for c in frame.columns]
        with self.raw.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            quoted = [f'"{c}"' for c in cols]
            columns = ", ".join(f"{c} {t}" for c, t in zip(quoted, types, strict=True))
            cur.execute(f"CREATE TEMP TABLE {name} ({columns})")
            with cur.copy(f"COPY {name} ({', '.join(quoted)}) FROM STDIN") as copy:
                for row in frame.itertuples(index=False, name=None):
                    copy.write_row([_copy_value(v) for v in row])
        self._registered.add(name)

    @_scrubbed
    def unregister(self, name: str) -> None:
        if name in self._registered:
            self.raw.execute(f"DROP TABLE IF EXISTS {name}")
            self._registered.discard(name)

    @_scrubbed
    def close(self) -> None:
        self.raw.close()


def _copy_value(value: Any) -> Any:
    value = _plain(value)
    if hasattr(value, "tolist"):  # a numpy array cell (a list column read from parquet)
        value = value.tolist()
    return value
