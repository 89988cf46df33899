"""The feed's HTTP client: one request at a time within the service's rate, retried with exponential backoff on
429, 5xx and connection errors, and a message that names the query and the URL without the API key when it gives up.

Why the spacing counts from the end of the previous request: a service counts requests as they arrive, and a
request can arrive late (a slow network, a busy machine); a pause of 1/rate seconds after each response keeps
any rate-long window at the server to at most `rate` requests, whatever the delays. The API key travels only
in the query string of the request itself: the URLs this module shows drop it, and httpx's own request log
line (INFO, logger "httpx") is filtered to mask it.
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


def _retry_after(response: httpx.Response) -> float | None:
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
    """GET requests to one service within its rate, with retries (see the module's docstring)."""

    def __init__(self, base_url: str, *, rate: float, retries: int = 5, backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0, timeout_s: float = 60.0) -> None:
        _mask_httpx_log()
        self.base_url = base_url.rstrip("/")
        self.limiter = limiter_for(self.base_url, rate)
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self.requests = 0  # attempts sent, retries included
        self._client = httpx.Client(timeout=timeout_s, headers={"User-Agent": USER_AGENT}, follow_redirects=True,
                                    trust_env=False)  # no proxy from the environment: a loopback URL stays loopback

    def __enter__(self) -> FeedClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def get(self, path: str, params: Mapping[str, Any], *, what: str) -> httpx.Response:
        """The 2xx response to GET base_url/path?params; FeedError naming `what` (the query) and the URL without
        its key when the service refuses (4xx but 429) or keeps failing after the retries."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        problem = ""
        refused: httpx.Response | None = None  # the last retryable answer (its Retry-After sets the pause)
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, refused))
            refused = None
            with self.limiter.slot():
                self.requests += 1
                try:
                    response = self._client.get(url, params=dict(params))
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

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        """backoff_s * 2^(attempt-1), or the server's Retry-After when it gives one; at most max_backoff_s."""
        after = _retry_after(response) if response is not None else None
        delay = after if after is not None else self.backoff_s * 2 ** (attempt - 1)
        return min(delay, self.max_backoff_s)
