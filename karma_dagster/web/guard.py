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
comes from whoever started the server: its path starts with /s/<read key>/ (the address the server prints; the
page's every link keeps that prefix, and the guard hands the app the rest with root_path set), or it carries the
decision token in the token header (the page's script, an API client that read the page). Another local user, who
never saw that address, reads nothing.

Why not a cookie: cookies are scoped by host, not by port, so a cookie holding the key went with every request the
reviewer's browser sent to any other server on 127.0.0.1 (a dev server, a notebook, a hostile local process), which
could then read the queue and decide in the reviewer's name. Nothing here sets a cookie: the key stays in this
server's own addresses (the referrer policy keeps it out of other origins' Referer), and a decision needs a second
token, derived from a per-start secret but distinct from the key, that only a page of this server shows: a leaked
address still cannot decide.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from typing import Literal, NamedTuple
from urllib.parse import parse_qs, quote, urlencode

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
TOKEN_FIELD = "_token"  # the hidden form field the page's forms carry
TOKEN_HEADER = "x-karma-token"  # what a same-origin JSON caller sends
KEY_PARAM = "key"  # an older printed address's `?key=<read key>`: redirected to the /s/<read key>/ address
SESSION_PREFIX = "/s/"  # the read key travels in the path: /s/<read key>/..., never in a cookie
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


class SessionKeys(NamedTuple):
    """One server start's credentials: the read key (in the page's addresses) and the decision token (in its forms
    and the header its script sends); both derived from one random secret, neither derivable from the other."""

    read_key: str
    decision_token: str


def session_keys(secret: bytes | None = None) -> SessionKeys:
    """New keys for a server start (HMAC-SHA256 of the secret, one label each: distinct values, same entropy)."""
    secret = secret or secrets.token_bytes(32)

    def derive(label: bytes) -> str:
        return base64.urlsafe_b64encode(hmac.new(secret, label, hashlib.sha256).digest()).decode().rstrip("=")

    return SessionKeys(read_key=derive(b"karma read key"), decision_token=derive(b"karma decision token"))


def session_address(base: str, read_key: str, path: str = "/") -> str:
    """The address the server prints: `base` (http://host:port) + /s/<read key> + path."""
    return f"{base.rstrip('/')}{SESSION_PREFIX}{read_key}{path}"


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
        """read_key: set, every request must be under /s/<read_key>/ or carry `token` in TOKEN_HEADER; it must
        differ from `token` (the decision token), so an address that leaks grants reading only."""
        if read_key is not None and secrets.compare_digest(read_key.encode(), token.encode()):
            raise ValueError("the read key must differ from the decision token")
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
            inside = self._in_session(scope)
            if inside == "bare":  # /s/<key> without the slash: its pages' relative parts need the folder form
                return await self._redirect(scope, receive, send_with_headers, _raw_path(scope) + "/")
            if inside is not None:
                scope = inside
            else:
                given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(KEY_PARAM, [])
                if scope["method"] == "GET" and len(given) == 1 and self._same_key(given[0]):
                    return await self._redirect(scope, receive, send_with_headers,
                                                SESSION_PREFIX + self.read_key + _raw_path(scope), drop_key=True)
                if not self._header_token(headers):
                    return await refuse(401, "this page answers only whoever started it: open the address "
                                             "`karma review` printed (it carries the session's key)")
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

    def _same_key(self, given: str) -> bool:
        assert self.read_key is not None
        return secrets.compare_digest(given.encode("utf-8", "replace"), self.read_key.encode())

    def _header_token(self, headers: Headers) -> bool:
        """The decision token in the token header: a caller that read a page of this server (its script)."""
        header = headers.get(TOKEN_HEADER)
        return header is not None and secrets.compare_digest(header.encode("utf-8", "replace"), self.token.encode())

    def _in_session(self, scope: Scope) -> Scope | Literal["bare"] | None:
        """A request under /s/<read key>/: its scope with root_path = that prefix (the app routes the rest and
        draws its links under it); "bare" for /s/<read key> itself; None for any other path or a wrong key."""
        assert self.read_key is not None
        path: str = scope.get("path", "")
        root = scope.get("root_path", "")
        rest = path[len(root):] if root and path.startswith(root) else path
        if not rest.startswith(SESSION_PREFIX):
            return None
        key, slash, _ = rest[len(SESSION_PREFIX):].partition("/")
        if not self._same_key(key):
            return None
        if not slash:
            return "bare"
        return {**scope, "root_path": root + SESSION_PREFIX + key}

    async def _redirect(self, scope: Scope, receive: Receive, send: Send, location: str,
                        drop_key: bool = False) -> None:
        """303 to `location` (a path as sent, percent-encoded) with the request's query (without `key` when
        drop_key); never a cookie."""
        pairs = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        query = urlencode([(k, v) for k, vs in pairs.items() if not (drop_key and k == KEY_PARAM) for v in vs])
        target = location + (f"?{query}" if query else "")
        await PlainTextResponse("", status_code=303, headers={"location": target})(scope, receive, send)

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


def _raw_path(scope: Scope) -> str:
    """The request's path as the client sent it (still percent-encoded: an id's %2F stays one path segment)."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else quote(scope.get("path", "/"))
