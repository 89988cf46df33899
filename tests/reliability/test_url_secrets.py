"""Secrets in store URLs: a credential planted in $KARMA_KG_URL (user name, password, query parameters, a bad
percent-encoding, characters that urllib and libpq split differently, libpq's key=value form) or in
$KARMA_STORAGE_URL appears in no message, traceback, log record, console output of the `karma` commands that open
the KG, nor in any file they wrote (Dagster run and event storage, compute logs, the data folder); against a real
PostgreSQL that refuses the login (wrong password) and against a port where nothing listens."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import traceback
from pathlib import Path

import psycopg
import pytest
from pg_server import PostgresServer

from karma_dagster.kg.backends import kg_store
from karma_dagster.kg.location import KG_URL_ENV, install_scrubber, redacted
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.runtime.shared_storage import STORAGE_URL_ENV, storage_url

REPO = Path(__file__).resolve().parents[2]
SECRET = "Pl4ntedS3cret7f3a9c41"
HALVES = ("Pl4ntedHalfOne", "S3cretHalfTwo")  # a password with an unencoded "/" between them
ROLE = "karma_pw"


@pytest.fixture(scope="module")
def refusing(pg_server: PostgresServer) -> PostgresServer:
    """The test server with a role that must log in with its (other) password: a wrong one is refused."""
    hba = pg_server.data_dir / "pg_hba.conf"
    text = hba.read_text()
    line = f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n"
    if line not in text:
        hba.write_text(line + text)  # first matching line wins: before the trust lines
    with psycopg.connect(pg_server.url, autocommit=True) as con:
        con.execute(f"DROP ROLE IF EXISTS {ROLE}")
        con.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD 'the-right-one'")
        con.execute("SELECT pg_reload_conf()")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(f"postgresql://{ROLE}:wrong@127.0.0.1:{pg_server.port}/postgres", connect_timeout=10)
    return pg_server


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kg_urls(port: int) -> dict[str, str]:
    """Every place a credential can be put in (or leak from) a KG URL."""
    base = f"127.0.0.1:{port}/postgres"
    return {
        "password": f"postgresql://{ROLE}:{SECRET}@{base}",
        "query password": f"postgresql://{ROLE}@{base}?password={SECRET}",
        "sslpassword and a token": f"postgresql://{ROLE}@{base}?sslmode=disable&sslpassword={SECRET}&password=x",
        "user name": f"postgresql://{SECRET}@{base}",
        "bad percent-encoding": f"postgresql://{ROLE}:{SECRET}%zz@{base}",
        "bad percent-encoding in the query": f"postgresql://{ROLE}@{base}?password={SECRET}%zz",
        "unencoded /": f"postgresql://{ROLE}:{HALVES[0]}/{HALVES[1]}@{base}",
        "unencoded [": f"postgresql://{ROLE}:{SECRET}[x@{base}",
        "unencoded # and ?": f"postgresql://{ROLE}:{SECRET}#?x@{base}",
        "bare query item": f"postgresql://{ROLE}@{base}?{SECRET}",
        "unknown parameter": f"postgresql://{ROLE}@{base}?api_token={SECRET}",
        "key=value form": f"host=127.0.0.1 port={port} user={ROLE} password={SECRET} dbname=postgres",
    }


def leaked(text: str) -> list[str]:
    return [s for s in (SECRET, *HALVES) if s in text]


def everything_said(url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> str:
    """Open the KG at `url` as every command does (kg_store of a data folder) and ask whether it exists: the
    message, the repr, the whole traceback with its causes, and the log records of the attempt."""
    os.environ[KG_URL_ENV] = url
    said = []
    try:
        store = kg_store(DataPaths(tmp_path / "data"), lock_timeout=1)
        said.append(repr(store) + str(getattr(store, "location", "")))
        store.exists()
        said.append("opened")
    except Exception as exc:  # noqa: BLE001 - whatever it is, it must not hold the secret
        said.append("".join(traceback.format_exception(exc)))
    logging.getLogger("karma.test").error("while opening %s: %s", url, said[-1])
    said += [r.getMessage() for r in caplog.records]
    return "\n".join(said)


@pytest.mark.parametrize("server", ["refusing", "absent"])
def test_no_kg_url_form_leaks_its_secret_from_messages_tracebacks_or_logs(
        server: str, request: pytest.FixtureRequest, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    port = request.getfixturevalue("refusing").port if server == "refusing" else closed_port()
    monkeypatch.setenv(KG_URL_ENV, "")
    install_scrubber()
    for form, url in kg_urls(port).items():
        said = everything_said(url, tmp_path, caplog)
        caplog.clear()
        assert not leaked(said), (form, said)
        assert "opened" not in said, (form, "the store opened with a wrong credential")
        assert "***" in said, (form, said)  # the location is still shown, masked
    # what is shown names the server and the problem
    said = everything_said(kg_urls(port)["password"], tmp_path, caplog)
    assert f"127.0.0.1:{port}/postgres" in said
    assert ("password authentication failed" if server == "refusing" else "Connection refused") in said


def test_redacted_masks_credentials_and_keeps_the_server() -> None:
    assert redacted("postgresql://karma:s3cret@db.example:5432/kg?sslmode=require&password=x#frag") == \
        "postgresql://***@db.example:5432/kg?sslmode=require&password=***#***"
    assert redacted("postgresql://host/db?password=p@ss") == "postgresql://***"  # '@' in a value: hide it all
    assert redacted("host=h password=pw") == "host=*** password=***"


@pytest.mark.parametrize("url", [f"s3://AKIDKEY:{SECRET}@bucket/prefix", f"s3://bucket/prefix?aws_secret_access_key={SECRET}",
                                 f"s3://bucket/prefix#{SECRET}", f"s3://AKID:{HALVES[0]}/{HALVES[1]}@bucket/p",
                                 f"{SECRET}", f"s3://{SECRET}:x/prefix"])
def test_a_storage_url_with_a_credential_is_refused_without_showing_it(url: str) -> None:
    with pytest.raises(ValueError, match=STORAGE_URL_ENV) as err:
        storage_url(url)
    assert not leaked(str(err.value)) and not leaked("".join(traceback.format_exception(err.value)))
    with pytest.raises(ValueError) as err:
        DataPaths("/data/karma", storage_url=url)
    assert not leaked(str(err.value))


COMMANDS = [["status"], ["run"], ["export", "--format", "turtle"], ["import-kg"], ["ask", "What treats diabetes?"],
            ["report"]]


def test_the_karma_commands_that_open_the_kg_print_and_store_no_secret(refusing: PostgresServer,
                                                                     tmp_path: Path) -> None:
    absent = closed_port()
    refused, gone = kg_urls(refusing.port), kg_urls(absent)
    cases = [  # every command against both servers, with several URL forms
        *[(cmd, refused[form]) for cmd, form in zip(COMMANDS, ["password", "query password", "user name",
                                                             "bad percent-encoding", "unencoded /", "password"])],
        *[(cmd, gone[form]) for cmd, form in zip(COMMANDS, ["query password", "bad percent-encoding in the query",
                                                          "password", "unencoded [", "sslpassword and a token",
                                                          "bare query item"])],
    ]
    home = tmp_path / "dagster_home"
    home.mkdir()
    base_env = {k: v for k, v in os.environ.items() if k not in (KG_URL_ENV, STORAGE_URL_ENV)}
    base_env.update(DAGSTER_HOME=str(home), PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True")
    outputs = []
    for cmd, url in cases:
        argv = [sys.executable, "-m", "karma_dagster.cli", *cmd, "--data-dir", str(tmp_path / "data")]
        done = subprocess.run(argv, env={**base_env, KG_URL_ENV: url}, capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)
        outputs.append((cmd[0], done.returncode, done.stdout + done.stderr))
    for name, code, text in outputs:
        assert code != 0, (name, "a command succeeded with a wrong credential", text[-2000:])
        assert not leaked(text), (name, text[-3000:])
    assert any("password authentication failed" in text for _, _, text in outputs)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in written), "the Dagster instance's storage was searched too"
    assert [str(p) for p in written if any(s.encode() in p.read_bytes() for s in (SECRET, *HALVES))] == []
