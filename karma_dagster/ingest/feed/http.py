"""The feed's HTTP client: one request at a time within the service's rate, retried with exponential backoff on
429, 5xx and connection errors, and a message that names the query and the URL without the API key when it gives up.

Why the spacing counts from the end of the previous request: a service counts requests as they arrive, and a
request can arrive late (a slow network, a busy machine); a pause of 1/rate seconds after each response keeps
any rate-long window at the server to at most `rate` requests, whatever the delays. The API key travels only
in the query string of the request itself: the URLs this module shows drop it, and httpx's own request log
line (INFO, logger "httpx") is filtered to mask it.

Every answer is bounded (bounded.py): at most `max_response_bytes`, counted while it streams in, and whole within
`request_deadline_s` of wall clock (every socket wait is cut to what is left), and no request, retry or backoff
goes past the fetch's own deadline (`fetch_deadline_s` from the client's creation). A bound that is hit is not
retried (the same server would do it again): it is one FeedError line naming the query, the bound and its
setting, and the URL without the key.
"""

from __future__ import annotations

import email.utils
import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

from karma_dagster.ingest.feed.bounded import Deadline, FeedResponse, TooLarge, deadline_transport, read_bounded
from karma_dagster.ingest.feed.settings import FeedError

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
SECRET_PARAMS = ("api_key",)
USER_AGENT = "karma-dagster-feed"
_SECRET_IN_URL = re.compile(r"((?:^|[?&;\s])(?:%s)=)[^&\s\"'<>]*" % "|".join(SECRET_PARAMS))
log = logging.getLogger(__name__)


def mask_secrets(text: str, params: Mapping[str, Any] | None = None) -> str:
    """`text` with the value of every `api_key=` query parameter replaced by ***, and the secret values of
    `params` wherever they stand (a server may echo the key in its error body)."""
    for name in SECRET_PARAMS:
        value = str((params or {}).get(name) or "")
        if value:
            text = text.replace(value, "***")
    return _SECRET_IN_URL.sub(r"\1***", text)


class _MaskSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report
            return True
        masked = mask_secrets(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


_MASK = _MaskSecrets()


def _mask_httpx_log() -> None:
    """httpx logs each request's full URL at INFO: mask the key there (idempotent)."""
    for name in ("httpx", "httpcore"):
        logger = logging.getLogger(name)
        if _MASK not in logger.filters:
            logger.addFilter(_MASK)


class RateLimiter:
    """At most `per_second` requests in any one-second window at the server (see the module's docstring)."""

    def __init__(self, per_second: float) -> None:
        if per_second <= 0:
            raise ValueError(f"request rate must be positive, not {per_second}")
        self.interval = 1.0 / per_second
        self._lock = threading.Lock()
        self._ready_at = 0.0

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Wait for the next free slot, hold it for the request, and start the pause when the request ends."""
        with self._lock:
            wait = self._ready_at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                yield
            finally:
                self._ready_at = time.monotonic() + self.interval


_limiters: dict[tuple[str, float], RateLimiter] = {}
_limiters_lock = threading.Lock()


def limiter_for(base_url: str, per_second: float) -> RateLimiter:
    """One limiter per service (host and port) and rate in this process: two feeds of one service share its rate."""
    url = httpx.URL(base_url)
    key = (f"{url.host}:{url.port or ''}", per_second)
    with _limiters_lock:
        return _limiters.setdefault(key, RateLimiter(per_second))


def shown_url(url: str, params: Mapping[str, Any]) -> str:
    """The request's URL as messages show it: every parameter but the secret ones."""
    return str(httpx.URL(url, params={k: v for k, v in params.items() if k not in SECRET_PARAMS}))


def _retry_after(response: FeedResponse) -> float | None:
    raw = response.headers.get("Retry-After", "").strip()
    if not raw:
        return None
    if raw.isdigit():
        return float(raw)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class FeedClient:
    """GET requests to one service within its rate, with retries and bounds (see the module's docstring)."""

    def __init__(self, base_url: str, *, rate: float, retries: int = 5, backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0, timeout_s: float = 60.0, max_response_bytes: int = 64_000_000,
                 request_deadline_s: float = 300.0, fetch_deadline_s: float = 3600.0) -> None:
        _mask_httpx_log()
        self.base_url = base_url.rstrip("/")
        self.limiter = limiter_for(self.base_url, rate)
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self.max_response_bytes, self.request_deadline_s = max_response_bytes, request_deadline_s
        self.fetch_deadline_s = fetch_deadline_s
        self.fetch_ends = time.monotonic() + fetch_deadline_s
        self.requests = 0  # attempts sent, retries included
        self._deadline = Deadline()
        self._client = httpx.Client(timeout=timeout_s, headers={"User-Agent": USER_AGENT}, follow_redirects=True,
                                    transport=deadline_transport(self._deadline),
                                    trust_env=False)  # no proxy from the environment: a loopback URL stays loopback

    def __enter__(self) -> FeedClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def url(self, path: str, params: Mapping[str, Any]) -> str:
        """The URL of GET base_url/path?params as messages show it (without the key)."""
        return shown_url(f"{self.base_url}/{path.lstrip('/')}", params)

    def get(self, path: str, params: Mapping[str, Any], *, what: str) -> FeedResponse:
        """The 2xx response to GET base_url/path?params; FeedError naming `what` (the query) and the URL without
        its key when the service refuses (4xx but 429), keeps failing after the retries, or passes a bound."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        problem = ""
        refused: FeedResponse | None = None  # the last retryable answer (its Retry-After sets the pause)
        for attempt in range(self.retries + 1):
            if attempt:
                self._pause(self._delay(attempt, refused), what, url, params)
            refused = None
            with self.limiter.slot():
                self._check_fetch_deadline(what, url, params)
                self.requests += 1
                try:
                    response = self._send(url, params, what)
                except httpx.RequestError as exc:  # no answer: a connection error or timeout is retried
                    problem = f"{type(exc).__name__}: {mask_secrets(str(exc), params) or 'connection failed'}"
                    if not isinstance(exc, httpx.TransportError):  # too many redirects, an undecodable body
                        raise FeedError(f"{what}: {problem}; URL: {shown_url(url, params)}") from None
                    log.info("%s: attempt %d failed (%s); %s", what, attempt + 1, problem, shown_url(url, params))
                    continue
            if response.is_success:
                return response
            excerpt = mask_secrets(" ".join(response.text[:300].split()), params)
            problem = f"HTTP {response.status_code}" + (f": {excerpt}" if excerpt else "")
            if response.status_code not in RETRY_STATUS:
                raise FeedError(f"{what}: {problem} from {shown_url(url, params)}")
            refused = response
            log.info("%s: attempt %d got %s; %s", what, attempt + 1, problem, shown_url(url, params))
        raise FeedError(f"{what}: gave up after {self.retries + 1} attempt(s), last: {problem}; "
                        f"URL: {shown_url(url, params)}")

    def _send(self, url: str, params: Mapping[str, Any], what: str) -> FeedResponse:
        """One attempt, read whole within the size bound and the earlier of the request's and the fetch's
        deadlines; a bound that is hit is a FeedError (not retried)."""
        start = time.monotonic()
        request_ends = start + self.request_deadline_s
        self._deadline.at = min(request_ends, self.fetch_ends)
        try:
            with self._client.stream("GET", url, params=dict(params)) as streamed:
                return read_bounded(streamed, self.max_response_bytes)
        except TooLarge as exc:
            size = (f"announces {exc.size:,} bytes" if exc.announced
                    else f"passed {self.max_response_bytes:,} bytes while it streamed in")
            raise FeedError(f"{what}: the answer {size}, over the bound max_response_mb="
                            f"{self.max_response_bytes / 1e6:g} MB (feed setting): refused, nothing of it kept; "
                            f"URL: {shown_url(url, params)}") from None
        except httpx.TimeoutException:
            if (self._deadline.left() or 0.0) > 0:
                raise  # a per-read timeout (timeout_s): retried
            bound = (f"request_deadline_s={self.request_deadline_s:g} s" if request_ends <= self.fetch_ends
                     else f"max_fetch_s={self.fetch_deadline_s:g} s (the whole fetch)")
            raise FeedError(f"{what}: no whole answer within {time.monotonic() - start:.1f} s, the bound {bound} "
                            f"of wall clock (feed setting): given up, nothing of it kept; "
                            f"URL: {shown_url(url, params)}") from None
        finally:
            self._deadline.at = None

    def _check_fetch_deadline(self, what: str, url: str, params: Mapping[str, Any], wait: float = 0.0) -> None:
        if time.monotonic() + wait >= self.fetch_ends:
            when = f"within the {wait:g} s pause before a retry" if wait else "before this request"
            raise FeedError(f"{what}: the fetch reaches its bound max_fetch_s={self.fetch_deadline_s:g} s of wall "
                            f"clock (feed setting) {when}: stopped (the days before are written and recorded); "
                            f"URL: {shown_url(url, params)}")

    def _pause(self, delay: float, what: str, url: str, params: Mapping[str, Any]) -> None:
        """Sleep `delay` before a retry, unless it would end past the fetch's deadline."""
        self._check_fetch_deadline(what, url, params, wait=delay)
        time.sleep(delay)

    def _delay(self, attempt: int, response: FeedResponse | None) -> float:
        """backoff_s * 2^(attempt-1), or the server's Retry-After when it gives one; at most max_backoff_s."""
        after = _retry_after(response) if response is not None else None
        delay = after if after is not None else self.backoff_s * 2 ** (attempt - 1)
        return min(delay, self.max_backoff_s)
