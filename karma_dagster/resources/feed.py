"""The literature feed's settings as a Dagster resource: FeedSettings mirrored, editable in the launchpad.

Empty fields fall back to environment variables when the sensor ticks (KARMA_FEED_QUERY, KARMA_FEED_SOURCE,
KARMA_FEED_SINCE, KARMA_FEED_EMAIL, KARMA_EUTILS_URL, KARMA_EUROPEPMC_URL); the NCBI API key is never a field:
it is read from $NCBI_API_KEY when a request is sent.
"""

from __future__ import annotations

from karma_dagster.ingest.feed.settings import FeedSettings, ResolvedFeed
from karma_dagster.resources.mirror import mirror
from karma_dagster.resources.strict import StrictResource


class LiteratureFeedResource(mirror(FeedSettings, StrictResource, "LiteratureFeedSettings")):  # type: ignore[misc]
    """Every field, default and bound is FeedSettings' (ingest/feed/settings.py); this only makes them config."""

    def feed(self) -> ResolvedFeed:
        """The settings with the environment applied; FeedError naming the field when one is wrong or missing."""
        return FeedSettings.model_validate(self.model_dump()).resolved()
