"""A throwaway PostgreSQL server on 127.0.0.1 for tests (Debian's postgresql package: initdb + pg_ctl).

Why a real server and not a mock: the Postgres KG store and Dagster's Postgres instance storage are only worth
testing against the engine they run on. The server lives in a temporary data directory, listens on a free port
of 127.0.0.1 only, trusts local connections (nothing outside this machine can reach it) and is removed on stop.

initdb and postgres refuse to run as root, so under root they run as the `postgres` OS user (created by the
Debian package) or, failing that, `nobody`, via runuser, with a data directory that user owns.

Use from code:  `srv = start_postgres(); srv.url; srv.new_database("x"); srv.stop()`  (or `with start_postgres()`).
Use from pytest: the session fixture `pg_server` (import it in a conftest or test module); it skips, naming the
reason, only when the PostgreSQL binaries are absent (CI installs them, so CI never skips).
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SUPERUSER = "postgres"  # the database superuser initdb creates (not the OS user)


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries (initdb, pg_ctl, postgres) are not installed."""


def postgres_bin_dir() -> Path:
    """Directory with initdb/pg_ctl: $KARMA_PG_BIN, else the newest /usr/lib/postgresql/<v>/bin, else PATH."""
    candidates = []
    if os.environ.get("KARMA_PG_BIN"):
        candidates.append(Path(os.environ["KARMA_PG_BIN"]))
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                      if Path(p).parent.name.isdigit() else 0, reverse=True)
    candidates += [Path(p) for p in versions]
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for c in candidates:
        if (c / "initdb").is_file() and (c / "pg_ctl").is_file() and (c / "postgres").is_file():
            return c
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in $KARMA_PG_BIN, "
        "/usr/lib/postgresql/*/bin or PATH; install Debian's `postgresql` package")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _os_user() -> str | None:
    """The OS user to run the server as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and neither a `postgres` nor a `nobody` OS user exists for initdb")


@dataclass
class PostgresServer:
    """A running throwaway server. `url` points at its `postgres` database as the superuser, no password."""

    port: int
    data_dir: Path
    bin_dir: Path
    os_user: str | None
    host: str = "127.0.0.1"
    _stopped: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        """Create an empty database (dropping one of that name first) and return its URL: one per test."""
        return self._create(name)

    def copy_database(self, source: str, name: str) -> str:
        """A new database `name` holding what `source` holds (CREATE DATABASE ... TEMPLATE; nobody may be connected
        to `source`); returns its URL. How a test copies a deployment's KG, like a file copy of kg.duckdb."""
        return self._create(name, template=source)

    def _create(self, name: str, template: str | None = None) -> str:
        import psycopg

        for n in (name, template or name):
            if not n.replace("_", "").isalnum():
                raise ValueError(f"database name {n!r}: use letters, digits and underscores only")
        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            con.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.url_for(name)

    def stop(self) -> None:
        """Stop the server (immediate: its data is thrown away) and remove the data directory. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        subprocess.run(_as_user(self.os_user, [str(self.bin_dir / "pg_ctl"), "stop", "-D", str(self.data_dir),
                                               "-m", "immediate", "-w", "-t", "30"]),
                       capture_output=True, check=False)
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _as_user(user: str | None, argv: list[str]) -> list[str]:
    return argv if user is None else ["runuser", "-u", user, "--", *argv]


def start_postgres(timeout: float = 60.0) -> PostgresServer:
    """initdb a fresh cluster in a temporary directory and start it on a free 127.0.0.1 port.

    Durability settings are off (fsync, synchronous_commit): the data is thrown away with the server, and a
    client killed mid-transaction (what the crash tests do) is unaffected by them."""
    bin_dir = postgres_bin_dir()
    user = _os_user()
    root = Path(tempfile.mkdtemp(prefix="karma-pg-"))
    data = root / "data"
    data.mkdir()
    if user is not None:
        pw = pwd.getpwnam(user)
        for p in (root, data):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        os.chmod(root, 0o700)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    init = subprocess.run(
        _as_user(user, [str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
                        "--encoding=UTF8", "--no-locale", "--no-sync"]),
        capture_output=True, text=True, env=env, cwd=root, check=False)
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr.strip()[-2000:]}")
    last_error = ""
    for _attempt in range(5):  # a free port can be taken between choosing and binding it: try another
        port = _free_port()
        opts = (f"-p {port} -h 127.0.0.1 -k {data} -c fsync=off -c synchronous_commit=off "
                f"-c full_page_writes=off -c max_connections=200")
        start = subprocess.run(
            _as_user(user, [str(bin_dir / "pg_ctl"), "start", "-D", str(data), "-w", "-t", str(int(timeout)),
                            "-o", opts, "-l", str(data / "server.log")]),
            capture_output=True, text=True, env=env, cwd=root, check=False)
        if start.returncode == 0:
            server = PostgresServer(port=port, data_dir=data, bin_dir=bin_dir, os_user=user)
            atexit.register(server.stop)
            _wait_ready(server, timeout)
            return server
        log = data / "server.log"
        last_error = (start.stderr + (log.read_text(errors="replace") if log.exists() else ""))[-2000:]
        time.sleep(0.2)
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"PostgreSQL did not start: {last_error.strip()}")


def _wait_ready(server: PostgresServer, timeout: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(server.url, connect_timeout=5):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                server.stop()
                raise
            time.sleep(0.1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the test session; skips only when the binaries are absent."""
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()
