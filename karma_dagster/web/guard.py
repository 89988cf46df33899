"""Who may drive a local web server: one ASGI middleware in front of the review page and the MCP HTTP server.

Loopback is not a boundary inside the browser: any page the user opens can send requests to 127.0.0.1, and a page
on a domain that resolves to 127.0.0.1 (DNS rebinding) is even same-origin with it, as far as the browser knows.
So every request must name this server in its Host header (127.0.0.1, localhost, [::1] with the server's port, or a
name given with --allow-host): a rebinding page's requests carry its own domain and are refused (421) before the
app does any work. An Origin header, when present, must be exactly this server's origin (403). A state change must
carry the session's token (random at start, in the server-rendered page or printed for the MCP client): a page of
another origin can send a form but never read the token. Request bodies are bounded (413) and read in chunks, so
a huge body is never held whole. Every response forbids framing and inline script (CSP) and sniffing.

Loopback does not tell the machine's users apart either: with `read_key`, every request (reads too) must prove it
comes from whoever started the server: the session cookie, set when the address the server printed (which carries
`?key=<token>`) is first opened, or the token header. Another local user, who never saw that address, reads nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Literal
from urllib.parse import parse_qs

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
TOKEN_FIELD = "_token"  # the hidden form field the page's forms carry
TOKEN_HEADER = "x-karma-token"  # what a same-origin JSON caller sends
KEY_PARAM = "key"  # the query parameter of the address the server prints: it sets the session cookie
MAX_BODY_BYTES = 64 * 1024  # a decision is a few hundred bytes; an edit form a few kilobytes
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # not no-referrer: with it, chromium's form posts carry Origin: null
    "cache-control": "no-store",  # the page embeds the session's token
}


def new_token() -> str:
    return secrets.token_urlsafe(32)


def host_name(host: str) -> str:
    """A host as a Host header names it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def own_hosts(host: str, port: int, extra: Iterable[str] = ()) -> list[str]:
    """The Host header values that name this server: the loopback names and `extra`, each with `port` unless given.

    A bare name in `extra` gets the server's port; "name:port" is taken as it is (a reverse proxy's own port)."""
    out = {f"{name}:{port}" for name in (*LOOPBACK_NAMES, host_name(host))}
    for name in extra:
        name = name.strip().lower()
        if not name:
            continue
        has_port = name.rsplit(":", 1)[-1].isdigit() and (not name.startswith("[") or "]:" in name)
        out.add(name if has_port else f"{host_name(name)}:{port}")
    return sorted(out)


def own_origins(hosts: Iterable[str]) -> list[str]:
    return [f"http://{h}" for h in hosts]


class LocalGuard:
    """The checks, in order: Host, Origin, body bound, token; then the app, with the security headers on every reply.

    token_mode "unsafe": POST/PUT/PATCH/DELETE need the token as TOKEN_FIELD (a url-encoded form) or TOKEN_HEADER;
    "bearer": every request needs `Authorization: Bearer <token>` (the MCP client sends it on every call).
    max_body None leaves the body to the app (the MCP SDK bounds its own)."""

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str], token: str,
                 token_mode: Literal["unsafe", "bearer"] = "unsafe", max_body: int | None = MAX_BODY_BYTES,
                 read_key: str | None = None) -> None:
        """read_key: the session cookie's name; set, every request needs the cookie or the token header."""
        self.app = app
        self.read_key = read_key
        self.hosts = frozenset(h.lower() for h in hosts)
        self.origins = frozenset(own_origins(self.hosts))
        self.token = token
        self.token_mode = token_mode
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":  # neither server speaks websocket: refuse rather than pass unchecked
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers.append(name, value)
            await send(message)

        async def refuse(status: int, text: str, extra: dict[str, str] | None = None) -> None:
            await PlainTextResponse(text, status_code=status, headers=extra)(scope, receive, send_with_headers)

        headers = Headers(scope=scope)
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            names = ", ".join(sorted(self.hosts))
            return await refuse(421, f"host {host!r} is not this server's (it answers to {names}; add a name "
                                     "with --allow-host)")
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in self.origins:
            return await refuse(403, f"origin {origin!r} is not this server's: cross-site request refused")
        if self.read_key is not None:
            given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(KEY_PARAM, [])
            if scope["method"] == "GET" and len(given) == 1 and self._same(given[0]):
                return await self._set_cookie(scope, receive, send_with_headers)  # and the key out of the address
        if self.read_key is not None and not self._token_given(headers, scope):
            return await refuse(401, "this page answers only whoever started it: open the address `karma review` "
                                     "printed (it carries the session's key)")
        if self.token_mode == "bearer":
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), self.token.encode()):
                return await refuse(401, "missing or wrong bearer token: use the token `karma mcp` printed at start",
                                    {"www-authenticate": 'Bearer realm="karma"'})
        unsafe = scope["method"] not in SAFE_METHODS
        if self.max_body is not None and unsafe:
            body = await self._bounded_body(headers, receive)
            if body is None:
                return await refuse(413, f"request body over {self.max_body} bytes refused")
            if self.token_mode == "unsafe" and not self._token_in(headers, body):
                return await refuse(403, "missing or wrong session token: reload the review page")
            receive = _replay(body, receive)
        elif self.token_mode == "unsafe" and unsafe:
            if not self._token_in(headers, b""):
                return await refuse(403, "missing or wrong session token: reload the review page")
        await self.app(scope, receive, send_with_headers)

    def _same(self, given: str) -> bool:
        return secrets.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def _token_given(self, headers: Headers, scope: Scope) -> bool:
        """The session cookie or the token header: proof of having seen the printed address or the page."""
        assert self.read_key is not None
        header = headers.get(TOKEN_HEADER)
        if header is not None and self._same(header):
            return True
        cookies = [c.strip().partition("=") for c in headers.get("cookie", "").split(";")]
        return any(name == self.read_key and self._same(value) for name, _, value in cookies)

    async def _set_cookie(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The printed address opened: the cookie (HttpOnly, SameSite=Strict: no other site's request carries
        it), then the same page without the key in its address (so it stays out of history and referrers)."""
        from urllib.parse import urlencode

        rest = [(k, v) for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()
                if k != KEY_PARAM]
        query = urlencode([(k, v) for k, vs in rest for v in vs])
        location = scope.get("path", "/") + (f"?{query}" if query else "")
        cookie = f"{self.read_key}={self.token}; HttpOnly; SameSite=Strict; Path=/"
        await PlainTextResponse("", status_code=303, headers={"location": location, "set-cookie": cookie})(
            scope, receive, send)

    async def _bounded_body(self, headers: Headers, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it is known to exceed max_body (declared or received)."""
        assert self.max_body is not None
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _token_in(self, headers: Headers, body: bytes) -> bool:
        given = headers.get(TOKEN_HEADER)
        if given is None and headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            try:
                fields = parse_qs(body.decode("latin-1"), max_num_fields=100).get(TOKEN_FIELD, [])
            except ValueError:  # more fields than any form of the page has
                fields = []
            given = fields[0] if len(fields) == 1 else None
        return given is not None and secrets.compare_digest(given.encode("utf-8", "replace"), self.token.encode())


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then the client's later messages (disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
