"""What the feed asks, of which service, where, and how fast: settings with their environment fallbacks.

An empty field means "the environment variable, else the default", read when the feed runs (never at import), so
the same settings serve the sensor's resource (editable in the launchpad) and `karma fetch`. The NCBI API key is
not a setting: it is read from $NCBI_API_KEY at the moment of use and lives only in the request it is sent with.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from karma_dagster.ingest.keys import slug

Source = Literal["pubmed", "europepmc"]
SOURCES: tuple[str, ...] = ("pubmed", "europepmc")

API_KEY_ENV = "NCBI_API_KEY"
ENV = {  # field -> the environment variable an empty field falls back to
    "query": "KARMA_FEED_QUERY",
    "source": "KARMA_FEED_SOURCE",
    "since": "KARMA_FEED_SINCE",
    "email": "KARMA_FEED_EMAIL",
    "eutils_url": "KARMA_EUTILS_URL",
    "europepmc_url": "KARMA_EUROPEPMC_URL",
}
EUTILS_URL = "https://eutils.ncbi.nlm.nih.gov/entrez/eutils"
EUROPEPMC_URL = "https://www.ebi.ac.uk/europepmc/webservices/rest"
# NCBI: "no more than 3 requests per second" without an API key, 10 with one (E-utilities usage guidelines).
NCBI_RATE, NCBI_RATE_WITH_KEY = 3.0, 10.0
# Europe PMC publishes no fixed limit; this is karma's own polite default.
EUROPEPMC_RATE = 5.0


class FeedError(RuntimeError):
    """The feed cannot go on: bad settings, a service that keeps failing or answers something unreadable. The
    message names the query and the URL (never the API key)."""


class FeedSettings(BaseModel):
    """The saved query and how to run it. Empty strings fall back to the environment (see ENV)."""

    query: str = Field("", description="the saved query (PubMed or Europe PMC syntax); empty = $KARMA_FEED_QUERY")
    source: str = Field("", description="'pubmed' (NCBI E-utilities) or 'europepmc'; empty = $KARMA_FEED_SOURCE, "
                                        "else pubmed")
    since: str = Field("", description="first publication date (YYYY-MM-DD) the sensor fetches when it has no "
                                       "cursor yet; empty = $KARMA_FEED_SINCE, else yesterday")
    date_type: Literal["pdat", "edat"] = Field("pdat", description="E-utilities date the days are of: pdat "
                                               "(publication) or edat (Entrez, the day PubMed added it)")
    email: str = Field("", description="contact address sent as `email` (NCBI asks for one); empty = "
                                       "$KARMA_FEED_EMAIL")
    tool: str = Field("karma-dagster", description="the `tool` name sent to NCBI")
    eutils_url: str = Field("", description=f"E-utilities base URL; empty = $KARMA_EUTILS_URL, else {EUTILS_URL}")
    europepmc_url: str = Field("", description=f"Europe PMC REST base URL; empty = $KARMA_EUROPEPMC_URL, else "
                                               f"{EUROPEPMC_URL}")
    requests_per_s: float = Field(0.0, ge=0, description="request rate; 0 = the service's limit (NCBI: 3/s, 10/s "
                                  "with $NCBI_API_KEY; Europe PMC: 5/s); never above NCBI's")
    esearch_page: int = Field(500, ge=1, le=9999, description="ids per esearch page (retmax)")
    efetch_batch: int = Field(200, ge=1, le=200, description="ids per efetch request (NCBI: at most 200 by GET)")
    europepmc_page: int = Field(1000, ge=1, le=1000, description="records per Europe PMC page (pageSize)")
    retries: int = Field(5, ge=0, le=20, description="retries of a request after 429, 5xx or a connection error")
    backoff_s: float = Field(1.0, ge=0, description="first retry delay; doubled each retry (Retry-After wins)")
    max_backoff_s: float = Field(60.0, ge=0, description="longest retry delay")
    timeout_s: float = Field(60.0, gt=0, description="seconds to wait for a response")
    refetch_days: int = Field(0, ge=0, le=60, description="days before the cursor the sensor fetches again (for "
                                                          "citations indexed late; a re-fetch duplicates nothing)")
    max_tick_s: float = Field(40.0, gt=0, description="the sensor's time budget per tick; days left over are "
                                                      "fetched at the next tick")
    # bounds on what a service can make the feed do (issue 46): each refusal names its URL and the setting
    max_response_mb: float = Field(64.0, gt=0, description="largest answer read (MB, counted while it streams in; "
                                   "an efetch batch of 200 abstracts is ~1 MB, a Europe PMC page of 1000 ~10 MB)")
    request_deadline_s: float = Field(300.0, gt=0, description="wall-clock seconds one request may take, from "
                                      "sending it to its last byte (timeout_s bounds each wait for data)")
    max_fetch_s: float = Field(3600.0, gt=0, description="wall-clock seconds one fetch (`karma fetch`, a sensor "
                               "tick) may take, retries and pauses included; the days fetched before stay recorded")
    max_pages: int = Field(100, ge=1, description="pages of one day's search followed at most (esearch retstart, "
                           "Europe PMC cursorMark)")
    max_day_records: int = Field(10_000, ge=1, description="records (PMIDs, Europe PMC hits) one day may bring; "
                                 "more is refused (narrow the query)")

    @property
    def max_response_bytes(self) -> int:
        return int(self.max_response_mb * 1_000_000)

    def resolved(self) -> ResolvedFeed:
        """The settings with the environment applied and checked; FeedError naming the field when one is wrong."""
        def pick(name: str) -> str:
            return (getattr(self, name) or os.environ.get(ENV[name], "")).strip()

        query, source = pick("query"), (pick("source") or "pubmed").lower()
        if not query:
            raise FeedError(f"no feed query: set the literature_feed resource's `query` or ${ENV['query']}")
        if source not in SOURCES:
            raise FeedError(f"feed source {source!r} unknown: expected one of {', '.join(SOURCES)} "
                            f"(resource field `source` or ${ENV['source']})")
        since = pick("since")
        try:
            first = dt.date.fromisoformat(since) if since else None
        except ValueError:
            raise FeedError(f"feed since={since!r} is not a date (YYYY-MM-DD; resource field `since` or "
                            f"${ENV['since']})") from None
        key_set = bool(os.environ.get(API_KEY_ENV, "").strip())
        if source == "pubmed":
            limit = NCBI_RATE_WITH_KEY if key_set else NCBI_RATE
            base = pick("eutils_url") or EUTILS_URL
        else:
            limit = EUROPEPMC_RATE
            base = pick("europepmc_url") or EUROPEPMC_URL
        rate = self.requests_per_s or limit
        if source == "pubmed":
            rate = min(rate, limit)  # NCBI's limit is a rule, not a default
        if not base.startswith(("http://", "https://")):
            raise FeedError(f"feed base URL {base!r} is not an http(s) URL")
        return ResolvedFeed(settings=self, query=query, source=source,  # type: ignore[arg-type]
                            since=first, email=pick("email"), base_url=base.rstrip("/"), rate=rate)


@dataclass(frozen=True)
class ResolvedFeed:
    """FeedSettings with the environment applied: what a fetch runs with."""

    settings: FeedSettings
    query: str
    source: Source
    since: dt.date | None
    email: str
    base_url: str
    rate: float

    @property
    def query_slug(self) -> str:
        """A folder name for the query: readable, and unique (a hash of the exact text, since two queries can
        slug alike)."""
        digest = hashlib.sha256(self.query.encode("utf-8")).hexdigest()[:8]
        return f"{slug(self.query)[:60].rstrip('-._') or 'query'}-{digest}"

    @property
    def feed_id(self) -> str:
        """The cursor's key: source and query slug."""
        return f"{self.source}/{self.query_slug}"

    def describe(self) -> str:
        return f"{'PubMed' if self.source == 'pubmed' else 'Europe PMC'} query {self.query!r}"


def api_key() -> str | None:
    """$NCBI_API_KEY at the moment of use (None when unset): never stored in settings, files or logs."""
    return os.environ.get(API_KEY_ENV, "").strip() or None
