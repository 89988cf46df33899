"""Where the KG lives: the DuckDB file under the data folder (default), or the PostgreSQL database $KARMA_KG_URL.

Why an environment variable: every process of a deployment (webserver, daemon, workers on other machines) must
open the same KG, and the URL may carry a password, so it is configured like a secret, never written to a file,
log or run metadata (only `redacted` forms are shown).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

KG_URL_ENV = "KARMA_KG_URL"
URL_SCHEMES = ("postgresql", "postgres")
URL_FORM = "postgresql://user[:password]@host[:port]/database"


class KGLocationError(ValueError):
    """$KARMA_KG_URL is set but is not a PostgreSQL URL naming a database."""


def is_pg_url(location: object) -> bool:
    """True for a postgresql:// (or postgres://) URL: the location of a Postgres KG store."""
    return isinstance(location, str) and urlsplit(location).scheme in URL_SCHEMES


def redacted(url: str) -> str:
    """The URL without its password: what messages, reprs and metadata show."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def kg_url() -> str | None:
    """$KARMA_KG_URL checked (None when unset or empty: the KG is the DuckDB file of the data folder)."""
    url = os.environ.get(KG_URL_ENV, "").strip()
    if not url:
        return None
    if not is_pg_url(url):
        raise KGLocationError(f"{KG_URL_ENV}={redacted(url)!r}: not a PostgreSQL URL; expected {URL_FORM} "
                              f"(or unset it to keep the KG in the data folder's kg.duckdb)")
    parts = urlsplit(url)
    if not parts.hostname or not parts.path.strip("/"):
        raise KGLocationError(f"{KG_URL_ENV}={redacted(url)!r}: names no host or no database; expected {URL_FORM}")
    return url
