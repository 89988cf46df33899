"""A persistent response cache, so a re-materialization or a second backbone run over the same inputs costs nothing.

sqlite3 in WAL mode (readers never block the writer; several run processes can share the file). The key is the
sha256 of (model, prompt id, prompt hash, messages, params); only responses that parsed and validated are stored,
as the validated JSON. The api key is never part of a key or a row.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from karma_dagster.runtime.integrity import check_sqlite, sqlite_guarded

KIND = "LLM reply cache"
REMEDY = ("restore it from a backup, or move it away (a new cache starts empty: the replies are then requested "
          "again, at their cost)")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    output_model TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""

_SECRET_PARAMS = {"api_key", "api_base", "headers", "extra_headers"}


def cache_key(model: str, prompt_id: str, prompt_sha: str, messages: list[dict[str, Any]],
              params: dict[str, Any]) -> str:
    """sha256 of the request's meaning; connection details (key, base URL, headers) are left out on purpose."""
    clean = {k: v for k, v in params.items() if k not in _SECRET_PARAMS}
    payload = json.dumps(
        {"model": model, "prompt_id": prompt_id, "prompt_sha": prompt_sha, "messages": messages, "params": clean},
        sort_keys=True, ensure_ascii=False, default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class ResponseCache:
    """`get`/`put` by key; `hits`/`misses` count lookups of this instance."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._open()

    @sqlite_guarded(KIND, REMEDY)
    def _open(self) -> None:
        conn = self._connect()
        try:
            check_sqlite(conn, self.path, KIND, ("responses",), REMEDY)  # before anything writes to it
            with conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(_SCHEMA)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        # one short-lived connection per operation: safe across threads and processes
        conn = sqlite3.connect(self.path, timeout=30)
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    @sqlite_guarded(KIND, REMEDY)
    def get(self, key: str) -> str | None:
        with self._lock:
            conn = self._connect()
            try:
                row = conn.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
            finally:
                conn.close()
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
            return row[0]

    @sqlite_guarded(KIND, REMEDY)
    def put(self, key: str, *, model: str, prompt_id: str, output_model: str, response: str) -> None:
        with self._lock:
            conn = self._connect()
            try:
                with conn:
                    conn.execute(
                        "INSERT OR REPLACE INTO responses (key, model, prompt_id, output_model, response, created)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        (key, model, prompt_id, output_model, response, time.time()),
                    )
            finally:
                conn.close()

    @sqlite_guarded(KIND, REMEDY)
    def __len__(self) -> int:
        conn = self._connect()
        try:
            return int(conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
        finally:
            conn.close()
