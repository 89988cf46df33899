"""The live feed: a saved PubMed (NCBI E-utilities) or Europe PMC query, run day by day over publication dates,
its results dropped into the inbox where the `new_papers` sensor registers them.

One module per concern: `settings` (what to ask and where; base URLs overridable so tests use 127.0.0.1),
`http` (the rate-limited client with retries; the API key kept out of every URL it shows), `eutils` and
`europepmc` (each service's paging), `writer` (atomic files in the inbox), `state` (the cursor of fetched
publication dates under the data folder), `fetch` (a date range, day by day), `cli_fetch` (`karma fetch`).
Dagster-free: the sensor (sensors/literature_feed.py) and the CLI share it.
"""
