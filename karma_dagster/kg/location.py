"""Where the KG lives: the DuckDB file under the data folder (default), or the PostgreSQL database $KARMA_KG_URL;
and how the URLs of shared stores are shown without their credentials.

Why an environment variable: every process of a deployment (webserver, daemon, workers on other machines) must
open the same KG, and the URL may carry a password, so it is configured like a secret, never written to a file,
log or run metadata. A store URL can hold a credential in several places: the user name and password, any query
value (`?password=`, `?sslpassword=`, a token), a fragment; and a URL with a character it should have encoded
(`/`, `?`, `#`, `@`, `[` in a password, or a bad `%zz`) is split differently by urllib and by libpq, so a password
can land in what either calls the host, port or database, which the driver then echoes in its errors.

Hence one rule, `redacted`: only the scheme, the host part after the last `@` and the path are shown, and query
keys without their values (but for a few harmless ones: sslmode, connect_timeout...); anything that is ambiguous is hidden whole. `scrub` removes every credential fragment
of the configured URLs (and of every URL a store was opened with) from any text: the driver's messages, exception
chains (`scrub_exception`), and, as a last net, every log record and uncaught traceback of the process
(`install_scrubber`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from urllib.parse import unquote

KG_URL_ENV = "KARMA_KG_URL"
URL_SCHEMES = ("postgresql", "postgres")
URL_FORM = "postgresql://user[:password]@host[:port]/database"
MASK = "***"
# URLs that may carry credentials, besides the ones stores are opened with (shared_storage's and the lock's)
SECRET_URL_ENVS = (KG_URL_ENV, "KARMA_STORAGE_URL", "KARMA_LOCK_URL")
# passed to LanceDB's object store (shared_storage); the literature feed's NCBI key (ingest/feed/settings.py)
SECRET_ENVS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "NCBI_API_KEY")

# query keys whose values say how to connect, not who connects: shown, and not scrubbed from messages
HARMLESS_KEYS = frozenset({"sslmode", "connect_timeout", "target_session_attrs", "gssencmode", "channel_binding",
                           "load_balance_hosts", "host", "hostaddr", "port", "dbname", "client_encoding"})
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_KEYWORD = re.compile(r"""(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)""")  # libpq's key=value conninfo form


class KGLocationError(ValueError):
    """$KARMA_KG_URL is set but is not a PostgreSQL URL naming a database."""


def _split(url: str) -> tuple[str, str | None, str, list[str]]:
    """(scheme://, the credential part or None, host and path, query items) of a URL; an ambiguous credential part
    (holding `/`, `?` or `#`, so that the parsers disagree where it ends) swallows the rest: nothing is shown."""
    m = _SCHEME.match(url)
    assert m is not None
    head, rest = m.group(0), url[m.end():]
    secret: str | None = None
    if "@" in rest:
        secret, rest = rest.rsplit("@", 1)
        if any(c in secret for c in "?#"):  # the @ may sit in a query value or fragment: hide everything
            return head, secret + "@" + rest, "", []
    rest, _, fragment = rest.partition("#")
    hostpath, _, query = rest.partition("?")
    items = [item for item in query.split("&") if item] if query else []
    if fragment:
        items.append("#" + fragment)
    return head, secret, hostpath, items


def redacted(url: str) -> str:
    """The URL as messages, reprs, cache keys and metadata may show it: user name, password, every query value and
    any fragment masked (a value that is no URL: the values of its key=value pairs masked)."""
    url = str(url)
    if not _SCHEME.match(url):
        return _KEYWORD.sub(lambda m: f"{m.group(1)}={MASK}", url)
    head, secret, hostpath, items = _split(url)
    if secret is not None and not hostpath and not items:
        return f"{head}{MASK}"
    shown = head + (f"{MASK}@" if secret is not None else "") + hostpath
    query = [item if _harmless(item) else f"{item.split('=', 1)[0]}={MASK}" if "=" in item else MASK
             for item in items if not item.startswith("#")]
    return shown + ("?" + "&".join(query) if query else "") + (f"#{MASK}" if items and items[-1][:1] == "#" else "")


def _harmless(item: str) -> bool:
    return "=" in item and not item.startswith("#") and item.split("=", 1)[0].lower() in HARMLESS_KEYS


_ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,15}")  # a user name like this is a role, not a token: shown


def secret_parts(url: str) -> set[str]:
    """Every piece of `url` that may be a credential, as written and percent-decoded, split where either urllib or
    libpq might split it (so an echo of any part of a password is caught). The user name counts unless it looks
    like a role name (lowercase, at most 16 characters: `karma`, `postgres`), which drivers' messages may name."""
    url = str(url)
    raw: set[str] = set()
    if not _SCHEME.match(url):
        raw = {m.group(2).strip("'") for m in _KEYWORD.finditer(url) if m.group(1).lower() not in HARMLESS_KEYS
               and not (m.group(1).lower() == "user" and _ROLE_NAME.fullmatch(m.group(2).strip("'")))}
    else:
        _, secret, _, items = _split(url)
        if secret:
            user, colon, password = secret.partition(":")
            raw |= {password} if colon else set()
            if not _ROLE_NAME.fullmatch(unquote(user)):
                raw.add(user)
        raw |= {item[1:] if item.startswith("#") else item.split("=", 1)[-1] for item in items if not _harmless(item)}
    parts: set[str] = set()
    for piece in raw:
        for text in (piece, unquote(piece)):
            parts.add(text)
            parts |= set(re.split(r"[:@/?#&=]", text))
    return {p for p in parts if p.strip()}


_remembered: set[str] = set()
_lock = threading.Lock()
_configured: dict[tuple[str, ...], frozenset[str]] = {}


def remember(url: str) -> None:
    """Add the credential parts of a URL a store was opened with to what `scrub` removes from every text."""
    parts = secret_parts(url)
    with _lock:
        _remembered.update(parts)


def _env_urls() -> tuple[str, ...]:
    return tuple(os.environ.get(v, "").strip() for v in (*SECRET_URL_ENVS, *SECRET_ENVS))


def _secrets(urls: tuple[str, ...]) -> list[str]:
    """The parts to scrub, longest first (the environment's are parsed once per distinct value)."""
    env = _env_urls()
    if env not in _configured:
        found = set().union(*(secret_parts(u) for u in env[:len(SECRET_URL_ENVS)] if u))
        _configured.clear()
        _configured[env] = frozenset(found | {v for v in env[len(SECRET_URL_ENVS):] if v})
    found = set(_configured[env]) | _remembered
    for url in urls:
        found |= secret_parts(url) if url else set()
    return sorted(found, key=len, reverse=True)


def scrub(text: str, *urls: str) -> str:
    """`text` with every credential part of `urls`, of the configured store URLs and of every remembered URL
    replaced by *** (whole URLs first by their `redacted` form). A part is replaced where it stands as a token of
    its own (not inside a longer word or file name), so a password `kg` does not turn `kg.duckdb` into `***.duckdb`."""
    text = str(text)
    for url in (*urls, *_env_urls()[:len(SECRET_URL_ENVS)]):
        if url and url in text:
            text = text.replace(url, redacted(url))
    for part in _secrets(urls):
        if part in text:
            text = re.sub(rf"(?<![\w.-]){re.escape(part)}(?![\w-]|\.\w)", MASK, text)
    return text


def scrub_exception(exc: BaseException, *urls: str) -> BaseException:
    """Scrub the messages of `exc` and of its whole cause/context chain in place (same types, so callers that
    catch a driver's exception class still do); returns `exc`."""
    seen: set[int] = set()
    current: BaseException | None = exc
    stack = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.args = tuple(scrub(a, *urls) if isinstance(a, str) else a for a in current.args)
        notes = getattr(current, "__notes__", None)
        if notes:
            current.__notes__ = [scrub(n, *urls) for n in notes]
        stack += [current.__cause__, current.__context__]
    return exc


class _ScrubbingFactory:
    """The log record factory that scrubs each record's message (any logger: ours, Dagster's, the libraries')."""

    def __init__(self, inner) -> None:  # noqa: ANN001 - logging's factory type
        self.inner = inner

    def __call__(self, *args, **kwargs) -> logging.LogRecord:  # noqa: ANN002, ANN003
        record = self.inner(*args, **kwargs)
        if not _secrets(()):
            return record
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report, not ours
            return record
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            scrub_exception(record.exc_info[1])
        return record


_installed = False


def install_scrubber() -> None:
    """The process-wide net: every log record and every uncaught exception's traceback is scrubbed before it is
    written (idempotent; costs nothing while no URL with a credential is configured or remembered)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    logging.setLogRecordFactory(_ScrubbingFactory(logging.getLogRecordFactory()))
    previous = sys.excepthook

    def hook(kind, value, tb) -> None:  # noqa: ANN001
        if value is not None:
            scrub_exception(value)
        previous(kind, value, tb)

    sys.excepthook = hook


def _scheme(location: str) -> str:
    m = _SCHEME.match(location)
    return m.group(1).lower() if m else ""


def is_pg_url(location: object) -> bool:
    """True for a postgresql:// (or postgres://) URL: the location of a Postgres KG store."""
    return isinstance(location, str) and _scheme(location) in URL_SCHEMES


def kg_url() -> str | None:
    """$KARMA_KG_URL checked (None when unset or empty: the KG is the DuckDB file of the data folder)."""
    url = os.environ.get(KG_URL_ENV, "").strip()
    if not url:
        return None
    remember(url)
    if not is_pg_url(url):
        raise KGLocationError(f"{KG_URL_ENV}={redacted(url)!r}: not a PostgreSQL URL; expected {URL_FORM} "
                              f"(or unset it to keep the KG in the data folder's kg.duckdb)")
    _, secret, hostpath, items = _split(url)
    host, _, database = hostpath.partition("/")
    ambiguous = secret is not None and not hostpath and not items
    if not ambiguous and (not host.strip() or not database.strip("/")) and not any(
            item.startswith(("host=", "dbname=")) for item in items):
        raise KGLocationError(f"{KG_URL_ENV}={redacted(url)!r}: names no host or no database; expected {URL_FORM}")
    return url
