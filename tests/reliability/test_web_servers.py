"""The local web servers (`karma review`, `karma mcp --transport streamable-http`) answer only their own user.

What a hostile page in the user's browser can send is sent here as it would arrive: a DNS-rebinding page's
requests name the attacker's domain in Host (and, same-origin as far as the browser knows, in Origin too); another
site's page posts a form with its own Origin, or with none (a sandboxed frame sends Origin "null"); nobody but the
server's own page knows the session token. Header-level checks go through Starlette's TestClient; the rebinding
requests also go over a real socket to a real server process, and the MCP server is driven by the SDK's own client.
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.testclient import TestClient

from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.app import create_app
from karma_dagster.review.changes import with_changes
from karma_dagster.review.cogmg_items import items_from_completions
from karma_dagster.review.models import DecisionIn
from karma_dagster.review.queue import ReviewQueue
from test_mcp_server import _env, _free_port, _server_command, data_dir, seeded  # noqa: F401
from test_review_queue import by_source, completion, filled_queue, paths, seed_kg  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
PORT = 8766  # the review page's default port: what create_app answers to unless told otherwise
OWN = f"http://127.0.0.1:{PORT}"
TOKEN_HEADER = "x-karma-token"
# Host headers that do not name the server: a rebinding domain, look-alikes of loopback, another port, no port
FOREIGN_HOSTS = ["rebind.attacker.example:8766", "rebind.attacker.example", "localhost.:8766", "127.0.0.2:8766",
                 "0.0.0.0:8766", "[::ffff:127.0.0.1]:8766", "127.0.0.1:9999", "127.0.0.1", "localhost",
                 "127.0.0.1:8766.attacker.example", "attacker.example:8766@127.0.0.1:8766", ""]
FOREIGN_ORIGINS = ["http://evil.example", "null", "http://127.0.0.1:9999", "http://localhost:3000",
                   "https://127.0.0.1:8766", "http://127.0.0.1:8766.evil.example"]


@pytest.fixture
def queue(paths: DataPaths) -> ReviewQueue:  # noqa: F811
    q = filled_queue(paths)
    q.add_items(with_changes(items_from_completions([completion()]), paths.kg))
    return q


class CountingQueue(ReviewQueue):
    """The real queue, counting reads: a refused request must not have read it."""

    reads = 0

    def items(self, **kw):  # type: ignore[override]
        CountingQueue.reads += 1
        return super().items(**kw)

    def facets(self):  # type: ignore[override]
        CountingQueue.reads += 1
        return super().facets()


def opened(app) -> TestClient:  # noqa: ANN001 - the review page's Starlette app
    """A client that opened the address `karma review` prints (/s/<read key>/), as its user's browser does: its
    requests go under that prefix, as the page's links do, so it may read; no cookie is set (none holds the key);
    it has not read the page, so it has no token for a decision yet."""
    client = TestClient(app, base_url=f"{OWN}/s/{app.state.key}", follow_redirects=False)
    r = client.get("/")
    assert r.status_code == 200 and "set-cookie" not in r.headers, (r.status_code, r.text)
    assert app.state.key != app.state.token  # reading the queue is not deciding
    return client


def page_token(client: TestClient) -> str:
    """The token the server-rendered page embeds (what the page's own forms and JS send)."""
    html = client.get("/").text
    (meta,) = re.findall(r'<meta name="karma-token" content="([^"]+)">', html)
    fields = set(re.findall(r'<input type="hidden" name="_token" value="([^"]+)">', html))
    assert fields == {meta}, "every form carries the page's token"
    return meta


def test_a_foreign_host_is_refused_before_the_queue_is_read(queue: ReviewQueue) -> None:
    counting = CountingQueue(queue.path)
    app = create_app(counting)
    target = by_source(queue)["cogmg"].item_id
    for host in FOREIGN_HOSTS:
        client = TestClient(app, base_url=OWN, follow_redirects=False)
        CountingQueue.reads = 0
        for method, url, kw in [("GET", "/", {}), ("GET", "/api/items", {}),
                                ("POST", f"/api/items/{target}/decision",
                                 {"json": {"action": "edit", "reviewer": "mallory",
                                           "edits": {"relation": "causes"}}}),
                                ("POST", f"/items/{target}/decision", {"data": {"action": "accept",
                                                                              "reviewer": "mallory"}})]:
            # the rebinding page is same-origin with itself: its Origin names its own host
            headers = {"host": host, **({"origin": f"http://{host}"} if host else {})}
            r = client.request(method, url, headers=headers, **kw)
            assert r.status_code == 421, (host, method, url, r.status_code)
            assert "Metformin" not in r.text and "metformin" not in r.text.lower()
        assert CountingQueue.reads == 0, host
    assert queue.decision(target) is None
    # the own names are answered: the three loopback names with the port, case aside
    for host in (f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}", f"LOCALHOST:{PORT}"):
        assert opened(app).get("/api/items", headers={"host": host}).status_code == 200, host


def test_a_decision_needs_the_pages_token_and_the_own_origin(queue: ReviewQueue) -> None:
    client = opened(create_app(queue))
    items = by_source(queue)
    target = items["cogmg"].item_id
    token = page_token(client)
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    refused = [
        ("form without token", {"data": {"action": "accept", "reviewer": "mallory"}}),
        ("form with a wrong token", {"data": {"action": "accept", "reviewer": "mallory", "_token": wrong}}),
        ("form with an empty token", {"data": {"action": "accept", "reviewer": "mallory", "_token": ""}}),
        ("form with the token twice, one wrong", {"content": f"action=accept&reviewer=m&_token={token}&_token={wrong}",
                                                  "headers": {"content-type": "application/x-www-form-urlencoded"}}),
        ("json without token", {"json": {"action": "accept", "reviewer": "mallory"}}),
        ("json with a wrong header", {"json": {"action": "accept", "reviewer": "mallory"},
                                      "headers": {TOKEN_HEADER: wrong}}),
        ("json with the token in the body only", {"content": json.dumps({"action": "accept", "reviewer": "m",
                                                                         "_token": token}),
                                                  "headers": {"content-type": "application/json"}}),
    ]
    for name, kw in refused:
        for url in (f"/items/{target}/decision", f"/api/items/{target}/decision"):
            r = client.post(url, **kw)
            assert r.status_code == 403, (name, url, r.status_code, r.text[:200])
    for origin in FOREIGN_ORIGINS:  # with the right token, still refused from another origin
        r = client.post(f"/api/items/{target}/decision", json={"action": "accept", "reviewer": "mallory"},
                        headers={TOKEN_HEADER: token, "origin": origin})
        assert r.status_code == 403, (origin, r.status_code)
        r = client.post(f"/items/{target}/decision", data={"action": "accept", "reviewer": "mallory",
                                                           "_token": token}, headers={"origin": origin})
        assert r.status_code == 403, (origin, r.status_code)
    assert queue.decision(target) is None

    # the page's own forms (hidden field, own Origin) and a same-origin JSON caller (header) decide
    r = client.post(f"/items/{target}/decision", data={"action": "accept", "reviewer": "alice", "_token": token},
                    headers={"origin": OWN})
    assert r.status_code == 303 and queue.decision(target).reviewer == "alice"
    other = items["unresolved_conflict"].item_id
    r = client.post(f"/api/items/{other}/decision", json={"action": "reject", "reviewer": "bob"},
                    headers={TOKEN_HEADER: token})
    assert r.status_code == 201 and queue.decision(other).reviewer == "bob"
    # a new server start is a new session: the old page's token no longer decides
    restarted = opened(create_app(queue))
    last = items["schema_review"].item_id
    assert restarted.post(f"/api/items/{last}/decision", json={"action": "accept", "reviewer": "bob"},
                          headers={TOKEN_HEADER: token}).status_code == 403
    assert queue.decision(last) is None


def test_every_response_forbids_framing_inline_script_and_sniffing(queue: ReviewQueue) -> None:
    client = opened(create_app(queue))
    target = by_source(queue)["cogmg"].item_id
    responses = {"page": client.get("/"), "api": client.get("/api/items"), "static": client.get("/static/review.js"),
                 "404": client.get("/nope"), "refused host": client.get("/", headers={"host": "evil.example"}),
                 "refused token": client.post(f"/items/{target}/decision", data={"action": "accept"}),
                 "422": client.get("/", params={"min_score": "high"})}
    for name, r in responses.items():
        csp = r.headers.get("content-security-policy", "")
        directives = {d.strip().split(" ")[0]: d.strip() for d in csp.split(";") if d.strip()}
        assert directives.get("frame-ancestors") == "frame-ancestors 'none'", (name, csp)
        assert directives.get("default-src") == "default-src 'self'", (name, csp)
        assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp, (name, csp)
        assert r.headers.get("x-frame-options") == "DENY", name
        assert r.headers.get("x-content-type-options") == "nosniff", name
        assert r.headers.get("referrer-policy") in ("no-referrer", "same-origin"), name
    html = responses["page"].text  # the policy holds because the page has no inline script, style or handler
    assert not re.search(r"<script(?![^>]*\bsrc=)", html) and "<style" not in html
    assert not re.search(r"\son[a-z]+=", html) and 'style="' not in html


def test_request_bodies_are_bounded(queue: ReviewQueue) -> None:
    client = opened(create_app(queue))
    target = by_source(queue)["cogmg"].item_id
    token = page_token(client)
    big = {"action": "edit", "reviewer": "alice", "_token": token, "head_name": "x" * (1 << 20)}
    assert client.post(f"/items/{target}/decision", data=big).status_code == 413
    assert client.post(f"/api/items/{target}/decision", headers={TOKEN_HEADER: token},
                       json={"action": "accept", "reviewer": "a" * (1 << 20)}).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused while it streams
        yield b'{"action": "accept", "reviewer": "'
        for _ in range(200):
            yield b"a" * 4096
        yield b'"}'

    r = client.post(f"/api/items/{target}/decision", content=chunks(), headers={TOKEN_HEADER: token})
    assert r.status_code == 413
    assert queue.decision(target) is None


HOSTILE_NAMES = {"bidi override": "\u202eecila", "zero-width joiner": "al\u200dice", "escape": "\x1b[31malice",
                 "NUL": "alice\x00", "private use": "alice\ue000", "too long": "a" * 81, "empty": " \t\n "}


def test_reviewer_names_and_edited_names_follow_the_kg_name_rules(queue: ReviewQueue) -> None:
    for name, raw in HOSTILE_NAMES.items():
        with pytest.raises(ValueError, match="reviewer"):
            DecisionIn(action="accept", reviewer=raw)
    # cleaned as a KG name is: NFC, one line
    assert DecisionIn(action="accept", reviewer="Jose\u0301\n Garcia").reviewer == "Jos\u00e9 Garcia"
    for field, raw in [("head_name", "Metformin\u202e"), ("relation", "treats\u200b\u200d"), ("tail_id", "D\x00"),
                       ("relation", "r" * 65), ("head_name", "h" * 201)]:
        with pytest.raises(ValueError, match=f"edited {field}"):
            DecisionIn(action="edit", reviewer="alice", edits={field: raw})

    client = opened(create_app(queue))
    token = page_token(client)
    target = by_source(queue)["cogmg"].item_id
    for raw in HOSTILE_NAMES.values():
        r = client.post(f"/api/items/{target}/decision", json={"action": "accept", "reviewer": raw},
                        headers={TOKEN_HEADER: token})
        assert r.status_code == 422 and "reviewer" in r.json()["error"], (raw, r.status_code)
        r = client.post(f"/items/{target}/decision", data={"action": "accept", "reviewer": raw, "_token": token})
        assert r.status_code == 422, raw
    assert queue.decision(target) is None


def _wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float = 60) -> str:
    """The first stdout line starting with `prefix`, within `timeout` s (never blocks on a silent server)."""
    assert proc.stdout is not None
    deadline, buf = time.monotonic() + timeout, b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
        elif proc.poll() is not None:
            break
    pytest.fail(f"no line {prefix!r} from the server: {buf.decode(errors='replace')[-2000:]}")


def _wait_listening(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"nothing listens on 127.0.0.1:{port}")


def _raw(port: int, request: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 exchange over a plain socket, exactly the bytes a rebinding page's request would carry."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data


@pytest.fixture
def review_server(queue: ReviewQueue, paths: DataPaths) -> Iterator[tuple[int, str]]:  # noqa: F811
    """The real `karma review` process: its port and the address it printed (with the session's key)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "karma_dagster.review.cli_review", "--data-dir", str(paths.root),
                             "--no-collect", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ}, cwd=str(REPO))
    try:
        line = _wait_for_line(proc, "review page: ")
        _wait_listening(port)
        yield port, line.removeprefix("review page: ").split()[0]
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_dns_rebinding_page_over_a_real_socket_reads_and_decides_nothing(review_server: tuple[int, str],
                                                                          queue: ReviewQueue) -> None:
    port, address = review_server
    target = by_source(queue)["cogmg"].item_id
    evil = f"rebind.attacker.example:{port}"
    status, data = _raw(port, f"GET /api/items HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n".encode())
    assert status == 421 and b"metformin" not in data.lower()
    body = json.dumps({"action": "edit", "reviewer": "mallory",
                       "edits": {"head_name": "Metformin", "relation": "causes", "tail_name": "hypertension"}})
    status, _ = _raw(port, (f"POST /api/items/{target}/decision HTTP/1.1\r\nHost: {evil}\r\nOrigin: http://{evil}"
                            f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                            f"Connection: close\r\n\r\n{body}").encode())
    assert status == 421
    # a page of another site (its own Host is fine, the browser sends the server's) without the token
    form = "action=accept&reviewer=mallory"
    status, _ = _raw(port, (f"POST /items/{target}/decision HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                            f"Origin: http://evil.example\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                            f"Content-Length: {len(form)}\r\nConnection: close\r\n\r\n{form}").encode())
    assert status == 403
    status, _ = _raw(port, (f"POST /items/{target}/decision HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                            f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(form)}\r\n"
                            f"Connection: close\r\n\r\n{form}").encode())
    assert status == 401  # no Origin (a clumsy script, an old client), no session cookie and no token
    assert queue.decision(target) is None
    # the server's own page still works over the socket: it embeds the token and the form posts it
    browser = httpx.Client(follow_redirects=True)  # the user's browser, opening the address the server printed
    html = browser.get(address).text
    token = re.search(r'<meta name="karma-token" content="([^"]+)">', html).group(1)
    r = browser.post(f"{address}items/{target}/decision", follow_redirects=False,
                     data={"action": "accept", "reviewer": "alice", "_token": token},
                     headers={"origin": f"http://127.0.0.1:{port}"})
    assert r.status_code == 303 and queue.decision(target).reviewer == "alice"


@pytest.fixture
def mcp_server(data_dir: Path) -> Iterator[tuple[int, str]]:  # noqa: F811
    port = _free_port()
    proc = subprocess.Popen([sys.executable, *_server_command(data_dir, "--transport", "streamable-http",
                                                               "--port", str(port))],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(REPO))
    try:
        line = _wait_for_line(proc, "send the header  Authorization: Bearer ")
        _wait_listening(port)
        yield port, line.rsplit(" ", 1)[-1]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_mcp_server_answers_only_its_own_host_origin_and_token(mcp_server: tuple[int, str]) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    port, token = mcp_server
    url = f"http://127.0.0.1:{port}/mcp"

    async def tools(headers: dict[str, str]) -> set[str]:
        async with create_mcp_http_client(headers=headers) as http:
            async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=30) as client:
                return {t.name for t in (await client.list_tools()).tools}

    assert "create_statement" in anyio.run(tools, {"Authorization": f"Bearer {token}"})
    for headers in ({}, {"Authorization": "Bearer " + token[:-2]}, {"Authorization": token},
                    {"Authorization": f"Basic {token}"}):
        with pytest.raises(Exception) as caught:  # the SDK client's session fails at initialize
            anyio.run(tools, headers)
        assert "Server returned an error response" in repr(caught.value), (headers, caught.value)

    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "evil", "version": "1"}}})
    base = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"}
    for auth in ("", "Bearer", "Bearer " + token[:-2], f"Basic {token}", token):  # what the client saw: 401
        r = httpx.post(url, content=init, headers={**base, "Authorization": auth})
        assert r.status_code == 401 and "bearer token" in r.text, (auth, r.status_code)
    for host in (f"rebind.attacker.example:{port}", "127.0.0.1:1", f"localhost.:{port}"):
        headers = "".join(f"{k}: {v}\r\n" for k, v in base.items())
        status, _ = _raw(port, (f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n{headers}"
                                f"Content-Length: {len(init)}\r\nConnection: close\r\n\r\n{init}").encode())
        assert status == 421, host
    for origin in ("http://127.0.0.1:3000", "http://localhost:1", "http://evil.example", "null"):
        r = httpx.post(url, content=init, headers={**base, "origin": origin})  # another localhost port is not it
        assert r.status_code == 403, (origin, r.status_code)
    r = httpx.post(url, content=init, headers={**base, "origin": f"http://127.0.0.1:{port}"})
    assert r.status_code == 200
    assert r.headers.get("x-frame-options") == "DENY" and "frame-ancestors 'none'" in r.headers.get(
        "content-security-policy", "")


def test_allow_host_adds_exactly_the_names_given(queue: ReviewQueue, paths: DataPaths) -> None:  # noqa: F811
    from karma_dagster.review.cli_review import main
    from karma_dagster.web.guard import own_hosts

    hosts = own_hosts("127.0.0.1", PORT, ["Review.LAN", "proxy.lan:443", "[fd00::1]"])
    assert set(hosts) == {f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}", f"review.lan:{PORT}",
                          "proxy.lan:443", f"[fd00::1]:{PORT}"}
    client = opened(create_app(queue, hosts=hosts))
    assert client.get("/api/items", headers={"host": f"review.lan:{PORT}"}).status_code == 200
    for host in ("review.lan:1", "proxy.lan", f"sub.review.lan:{PORT}", f"proxy.lan:{PORT}"):
        assert client.get("/api/items", headers={"host": host}).status_code == 421, host
    # the page is still served on loopback only, whatever names it answers to
    assert main(["--data-dir", str(paths.root), "--host", "0.0.0.0", "--allow-host", "review.lan"]) == 2


def test_another_local_user_reads_nothing_without_the_printed_address(review_server: tuple[int, str],
                                                                      queue: ReviewQueue) -> None:
    """Loopback does not tell a machine's users apart: whoever did not see the address `karma review` printed
    (its path carries the session's read key) gets 401 for every page, the API and the static files, with or
    without a guess; the decision token, which the page shows, is not the read key."""
    port, address = review_server
    base = f"http://127.0.0.1:{port}"
    (key,) = re.fullmatch(re.escape(base) + r"/s/([A-Za-z0-9_-]{40,})/", address).groups()  # type: ignore[union-attr]
    stranger = httpx.Client()
    for path in ("/", "/api/items", "/static/review.js", "/?key=guess", "/?key=", f"/?key={key[-8:]}", "/s/",
                 "/s/guess/", f"/s/{key[:-1]}/", f"/s/{key}x/", f"/s/{key[:-1]}/api/items", f"/x/s/{key}/"):
        r = stranger.get(base + path, follow_redirects=False)
        assert r.status_code == 401, (path, r.status_code)
        assert "karma-token" not in r.text and "item" not in r.text.lower().split("printed")[0], path
        assert r.headers.get("x-frame-options") == "DENY"
    # the user's browser: the printed address is the page, as it is (no redirect, no cookie)
    user = httpx.Client()
    r = user.get(address, follow_redirects=False)
    assert r.status_code == 200 and "set-cookie" not in r.headers and not user.cookies, r.headers
    token = re.search(r'<meta name="karma-token" content="([^"]+)">', r.text).group(1)  # type: ignore[union-attr]
    assert token != key and stranger.get(f"{base}/s/{token}/").status_code == 401  # the token reads nothing
    local = [u for u in re.findall(r'(?:href|action|src)="([^"]+)"', r.text) if not u.startswith("http")]
    assert local and all(u.startswith(f"/s/{key}/") for u in local), local  # every link keeps the session
    assert user.get(address + "api/items").status_code == 200
    target = by_source(queue)["cogmg"].item_id
    refused = user.post(f"{address}items/{target}/decision", data={"action": "accept", "reviewer": "eve",
                                                                   "_token": key})
    assert refused.status_code == 403 and queue.decision(target) is None  # the read key does not decide
    # an address printed before (`/?key=`) leads to the page's address, query kept, and still sets no cookie
    r = user.get(f"{base}/?key={key}&status=pending", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/s/{key}/?status=pending", r.headers
    assert "set-cookie" not in r.headers
    r = user.get(f"{base}/s/{key}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/s/{key}/"


class _Recorder(BaseHTTPRequestHandler):
    """Another server on the loopback (a dev server, a notebook, a hostile local process): records what it gets."""

    seen: list[tuple[str, dict[str, str]]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Recorder.seen.append((self.path, dict(self.headers.items())))
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:  # quiet
        pass


def test_another_server_on_the_loopback_receives_neither_the_key_nor_the_token(review_server: tuple[int, str],
                                                                              queue: ReviewQueue) -> None:
    """Cookies are scoped by host, not by port: the session cookie the review page used to set went with every
    request the reviewer's browser sent to any other server on 127.0.0.1, which could then read the queue and decide
    (the cookie was the decision token too). After the reviewer's whole flow (open the printed address, read the
    API, decide through the page's form, open the KG browser and the old-style address), a request of the same
    browser (httpx's cookie jar: per host, like a browser's) to another port carries neither."""
    port, address = review_server
    base = f"http://127.0.0.1:{port}"
    other = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        key = address.removeprefix(base + "/s/").rstrip("/")
        browser = httpx.Client(follow_redirects=True)
        elsewhere = f"http://127.0.0.1:{other.server_address[1]}/page"

        def other_server_got() -> str:
            """What the other server received from the reviewer's browser, as one text to search."""
            assert browser.get(elsewhere).status_code == 200
            return json.dumps(_Recorder.seen[-1][1])

        page = browser.get(address)
        token = re.search(r'<meta name="karma-token" content="([^"]+)">', page.text)[1]  # type: ignore[index]
        sent = other_server_got()
        assert key not in sent and token not in sent and '"cookie"' not in sent.lower(), sent
        replies = [page, browser.get(f"{base}/?key={key}"), browser.get(address + "api/items",
                                                                        headers={TOKEN_HEADER: token}),
                   browser.get(address + "kg")]
        target = by_source(queue)["cogmg"].item_id
        decided = browser.post(f"{address}items/{target}/decision", headers={"origin": base},
                               data={"action": "accept", "reviewer": "alice", "_token": token})
        replies += [decided, *decided.history, *page.history]
        assert decided.status_code == 200 and queue.decision(target).reviewer == "alice"  # the flow worked
        assert all("set-cookie" not in r.headers for r in replies), [r.headers for r in replies]
        assert not browser.cookies  # the page works without any cookie
        sent = other_server_got()
        assert key not in sent and token not in sent and '"cookie"' not in sent.lower(), sent
    finally:
        other.shutdown()
        other.server_close()


def test_in_a_real_browser_no_cookie_is_set_and_another_port_gets_no_key(review_server: tuple[int, str],
                                                                        queue: ReviewQueue) -> None:
    """The same property in headless chromium (browser_harness.py): the reviewer opens the printed address,
    decides with the keyboard (the page's script, through the prefix), opens the KG browser and comes back; the
    browser then holds no cookie, and its request to another server on the loopback carries neither the read key
    nor the decision token."""
    from browser_harness import CHROMIUM, launch

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    port, address = review_server
    key = address.removeprefix(f"http://127.0.0.1:{port}/s/").rstrip("/")
    first = queue.items()[0][0]  # best score first: what the page selects on load
    other = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        elsewhere = f"http://127.0.0.1:{other.server_address[1]}/elsewhere"

        def other_server_got() -> str:
            probe.goto(elsewhere)  # a tab of the same browser (same cookie jar) opening the other server
            return json.dumps(_Recorder.seen[-1][1])

        with sync_api.sync_playwright() as pw:
            browser = launch(pw)
            context = browser.new_context()
            page, probe = context.new_page(), context.new_page()
            page.goto(address)
            token = page.get_attribute("meta[name=karma-token]", "content")
            sent = other_server_got()
            assert key not in sent and token not in sent and '"cookie"' not in sent.lower(), sent
            assert context.cookies() == []
            page.fill("#reviewer", "alice")
            page.locator("article.item.selected h2").click()
            with page.expect_response(lambda r: "/decision" in r.url) as answer:
                page.keyboard.press("a")
            assert answer.value.status == 201 and answer.value.url.startswith(address)
            with page.expect_navigation():
                page.click("nav >> text=KG browser")
            assert page.url.startswith(address + "kg")
            page.go_back()
            assert context.cookies() == []  # nothing set along the way
            sent = other_server_got()
            assert key not in sent and token not in sent and '"cookie"' not in sent.lower(), sent
            browser.close()
        assert queue.decision(first.item_id).reviewer == "alice"  # the flow worked without a cookie
    finally:
        other.shutdown()
        other.server_close()
