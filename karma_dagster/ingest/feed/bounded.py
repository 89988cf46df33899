"""Bounds on one HTTP answer: a wall-clock deadline on every socket wait, and a size counted while it streams.

Why: httpx's timeout is per read, so a server that drips a byte every few seconds never times out, and
`response.content` buffers whatever arrives, so an endless body grew `karma fetch` to 21.9 GB in 90 s. Here every
connect, write and read of the request is given at most what is left of its deadline (a network backend that
caps the timeout httpcore passes to each socket call; the pooled connection keeps the cap for the next request),
and the body is read chunk by chunk and refused as soon as it passes its bound, before it is all in memory.

httpx has no public setting for the network backend: `deadline_transport` builds its HTTPTransport and swaps the
connection pool for one with the same settings and the capped backend (a changed httpx fails the feed's bounds
tests, not silently).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx


class Deadline:
    """The monotonic time the current request must end by (None: no request under way, no cap)."""

    def __init__(self) -> None:
        self.at: float | None = None

    def left(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()

    def cap(self, timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
        """`timeout` shortened to what is left; `expired` raised when nothing is."""
        left = self.left()
        if left is None:
            return timeout
        if left <= 0:
            raise expired("the request's deadline has passed")
        return left if timeout is None else min(timeout, left)


class _CappedStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner, self._deadline = inner, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.cap(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.cap(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        timeout = self._deadline.cap(timeout, httpcore.ConnectTimeout)
        return _CappedStream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _CappedBackend(httpcore.NetworkBackend):
    """httpcore's own blocking backend, with every timeout capped by `deadline`."""

    def __init__(self, deadline: Deadline) -> None:
        self._inner, self._deadline = httpcore.SyncBackend(), deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, self._deadline.cap(timeout, httpcore.ConnectTimeout),
                                         local_address, socket_options)
        return _CappedStream(stream, self._deadline)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(path, self._deadline.cap(timeout, httpcore.ConnectTimeout),
                                                 socket_options)
        return _CappedStream(stream, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_transport(deadline: Deadline) -> httpx.HTTPTransport:
    """An HTTP/1.1 transport (no proxy, default limits and TLS) whose socket waits end by `deadline`."""
    transport = httpx.HTTPTransport(trust_env=False)
    limits = httpx.Limits()
    pool = getattr(transport, "_pool", None)
    if not isinstance(pool, httpcore.ConnectionPool):
        raise RuntimeError("this httpx has no connection pool to bound (karma_dagster/ingest/feed/bounded.py)")
    transport._pool = httpcore.ConnectionPool(  # type: ignore[attr-defined]
        ssl_context=httpx.create_ssl_context(trust_env=False), max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=_CappedBackend(deadline))
    return transport


class TooLarge(Exception):
    """The answer passed its size bound (`announced`: its Content-Length said so before a byte was read)."""

    def __init__(self, size: int, *, announced: bool) -> None:
        super().__init__(size)
        self.size, self.announced = size, announced


@dataclass(frozen=True)
class FeedResponse:
    """A whole answer, read within its bounds: what the feed's readers use of httpx.Response."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    encoding: str

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode(self.encoding or "utf-8", errors="replace")


def read_bounded(response: httpx.Response, max_bytes: int) -> FeedResponse:
    """The streamed `response` read whole, or TooLarge as soon as more than `max_bytes` (decoded) have arrived."""
    announced = response.headers.get("Content-Length", "").strip()
    if announced.isdigit() and int(announced) > max_bytes:
        raise TooLarge(int(announced), announced=True)
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise TooLarge(len(body), announced=False)
    return FeedResponse(response.status_code, response.headers, bytes(body), response.encoding or "utf-8")
