"""Bounded network input (issue 46): what a feed service sends cannot grow the fetch without end. An endless body
stops at `max_response_mb` with the process's memory flat; a body or header block that drips a byte at a time
stops at `request_deadline_s` of wall clock (the per-read timeout never fires); retries and pauses stop at the
fetch's `max_fetch_s`; a paging answer that never ends stops at `max_pages`, a day of too many records at
`max_day_records`. Each refusal is one line naming the bound, its setting and the URL (never the API key), and
the days fetched before it stay written and recorded, the refused one absent.

Every server is a loopback one (tests/feed_server.py), every bound small so that each test takes seconds.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from feed_server import Fault, FeedServer, Paper, corpus_papers, drip, endless
from karma_dagster.ingest.feed.fetch import fetch_days
from karma_dagster.ingest.feed.settings import FeedError, FeedSettings
from karma_dagster.ingest.feed.state import Cursor

REPO = Path(__file__).resolve().parents[2]
DAY1, DAY2 = dt.date(2024, 3, 4), dt.date(2024, 3, 5)
QUERY = "aspirin AND fever"
KEY = "boundstest-SECRET-77c2e0"
_REAL = corpus_papers(4)
PAPERS = [Paper(*_REAL[0], day=DAY1), Paper(*_REAL[1], day=DAY1), Paper(*_REAL[2], day=DAY2),
          Paper(*_REAL[3], day=DAY2)]


@pytest.fixture(scope="module")
def server() -> Iterator[FeedServer]:
    with FeedServer(PAPERS) as srv:
        yield srv


@pytest.fixture
def srv(server: FeedServer, monkeypatch: pytest.MonkeyPatch) -> FeedServer:
    server.reset()
    monkeypatch.delenv("NCBI_API_KEY", raising=False)
    return server


def settings(srv: FeedServer, source: str = "pubmed", **kw: object) -> dict[str, object]:
    return {"query": QUERY, "source": source, "eutils_url": srv.eutils_url, "europepmc_url": srv.europepmc_url,
            "email": "bounds-tests@example.org", "backoff_s": 0.01, **kw}


def refusal(feed_settings: dict[str, object], days: list[dt.date], tmp_path: Path) -> tuple[str, float]:
    """The one-line FeedError of fetching `days`, and how long it took."""
    feed = FeedSettings(**feed_settings).resolved()  # type: ignore[arg-type]
    start = time.monotonic()
    with pytest.raises(FeedError) as err:
        fetch_days(feed, days, tmp_path / "inbox", tmp_path / "data")
    message = str(err.value)
    assert "\n" not in message
    return message, time.monotonic() - start


def on_esearch_of(day: dt.date, fault: Fault):  # noqa: ANN201 - a FeedServer.trap
    return lambda path, params: fault if path.endswith("esearch.fcgi") and params.get("mindate") == \
        day.strftime("%Y/%m/%d") else None


# ---------------------------------------------------------------- size
_CHILD = """
import datetime as dt, json, resource, sys, time
from pathlib import Path
from karma_dagster.ingest.feed.fetch import fetch_days
from karma_dagster.ingest.feed.settings import FeedError, FeedSettings
spec = json.loads(sys.argv[1])
feed = FeedSettings(**spec["settings"]).resolved()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
try:
    fetch_days(feed, [dt.date.fromisoformat(spec["day"])], Path(spec["inbox"]), Path(spec["data"]))
    message = None
except FeedError as exc:
    message = str(exc)
grew_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"message": message, "grew_mb": grew_kb / 1024, "seconds": time.monotonic() - start}))
"""


def test_an_endless_body_stops_at_the_size_bound_with_memory_flat(srv: FeedServer, tmp_path: Path) -> None:
    """In a process of its own, so that its peak resident memory (ru_maxrss) is the fetch's own; the server stops
    at 1 GB (an unbounded client buffers all of it, more than twice over)."""
    srv.always = Fault(200, stream=endless(until=1 << 30))
    spec = {"settings": settings(srv, max_response_mb=2), "day": DAY1.isoformat(),
            "inbox": str(tmp_path / "inbox"), "data": str(tmp_path / "data")}
    env = {**os.environ, "NCBI_API_KEY": KEY, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    message = out["message"]
    assert message is not None, "the endless body was taken for an answer"
    assert "passed 2,000,000 bytes while it streamed in" in message and "max_response_mb=2 MB" in message, message
    assert f"{srv.eutils_url}/esearch.fcgi?" in message and "term=aspirin" in message
    assert KEY not in message and "api_key" not in message  # the key went with the request, not into the line
    assert out["grew_mb"] < 500, f"the fetch's memory grew by {out['grew_mb']:.0f} MB"
    assert out["seconds"] < 20
    assert srv.log and all(h.params.get("api_key") == KEY for h in srv.log)
    assert not (tmp_path / "inbox").exists() and not Cursor(tmp_path / "data").path.exists()


def test_an_announced_size_over_the_bound_is_refused_before_reading(srv: FeedServer, tmp_path: Path) -> None:
    srv.always = Fault(200, headers={"Content-Length": str(10 ** 10)}, stream=endless(until=1 << 26))
    message, took = refusal(settings(srv, max_response_mb=1), [DAY1], tmp_path)
    assert "the answer announces 10,000,000,000 bytes, over the bound max_response_mb=1 MB" in message, message
    assert took < 5 and len(srv.log) == 1  # not retried: the same server would say it again


# ---------------------------------------------------------------- time
def test_a_dripping_body_stops_at_the_request_deadline(srv: FeedServer, tmp_path: Path) -> None:
    """A byte every 0.3 s: each read returns well within timeout_s (60 s), so only a wall-clock bound ends it."""
    srv.always = Fault(200, stream=drip(b'{"esearchresult": {"count": "1", "idlist": ["1"]}}', 0.3, for_s=40))
    message, took = refusal(settings(srv, request_deadline_s=2, timeout_s=60), [DAY1], tmp_path)
    assert "the bound request_deadline_s=2 s of wall clock" in message, message
    assert f"{srv.eutils_url}/esearch.fcgi?" in message
    assert 1.9 < took < 4, took
    assert len(srv.log) == 1


def test_dripping_headers_stop_at_the_request_deadline(srv: FeedServer, tmp_path: Path) -> None:
    """The deadline holds before the answer's headers are complete too (the status line arrives, then a header
    a byte at a time)."""
    head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
    srv.always = Fault(200, raw=True, stream=lambda: iter([head, *drip(b"X-Slow: " + b"a" * 500, 0.3, 40)()]))
    message, took = refusal(settings(srv, request_deadline_s=2, timeout_s=60), [DAY1], tmp_path)
    assert "request_deadline_s=2 s" in message and "esearch.fcgi?" in message, message
    assert 1.9 < took < 4, took


def test_the_fetch_deadline_bounds_a_request_and_the_retries_and_pauses(srv: FeedServer, tmp_path: Path) -> None:
    srv.always = Fault(200, stream=drip(b"{}", 0.3, for_s=40))
    message, took = refusal(settings(srv, request_deadline_s=30, max_fetch_s=2, timeout_s=60), [DAY1], tmp_path)
    assert "max_fetch_s=2 s (the whole fetch)" in message and "esearch.fcgi?" in message, message
    assert 1.9 < took < 4, took

    srv.reset()
    srv.always = Fault(503)  # retried with pauses 0.5, 1, 2, 4, 8 s: 15.5 s without the fetch's bound
    message, took = refusal(settings(srv, retries=5, backoff_s=0.5, max_fetch_s=2), [DAY1], tmp_path)
    assert "the fetch reaches its bound max_fetch_s=2 s of wall clock (feed setting) within the" in message, message
    assert "esearch.fcgi?" in message and took < 3, took


# ---------------------------------------------------------------- pages and records
def test_an_endless_europepmc_paging_stops_at_the_page_cap(srv: FeedServer, tmp_path: Path) -> None:
    """A cursor that keeps moving, one new record a page (the server gives up after 200 pages)."""
    srv.paging_forever = 200
    message, _ = refusal(settings(srv, "europepmc", requests_per_s=100, max_pages=5), [DAY1], tmp_path)
    assert "goes on past 5 pages, the bound max_pages=5" in message, message
    assert f"next page's URL: {srv.europepmc_url}/search?" in message and "cursorMark=" in message
    assert len(srv.log) == 5
    assert not (tmp_path / "inbox").exists() and not Cursor(tmp_path / "data").path.exists()


def test_an_endless_esearch_paging_stops_at_the_page_cap(srv: FeedServer, tmp_path: Path) -> None:
    """9,999 ids announced, one a page (the server stops after 12 pages)."""
    srv.paging_forever = 12
    message, _ = refusal(settings(srv, max_pages=3), [DAY1], tmp_path)
    assert "goes on past 3 pages, the bound max_pages=3" in message and "retstart=3" in message, message
    assert len(srv.log) == 3


def test_a_day_over_the_record_cap_is_refused(srv: FeedServer, tmp_path: Path) -> None:
    message, _ = refusal(settings(srv, "europepmc", requests_per_s=100, max_day_records=1), [DAY1], tmp_path)
    assert "the service announces 2 records for one day, over the bound max_day_records=1" in message, message
    assert f"{srv.europepmc_url}/search?" in message
    message, _ = refusal(settings(srv, max_day_records=1), [DAY1], tmp_path)
    assert "max_day_records=1" in message and "esearch.fcgi?" in message, message


# ---------------------------------------------------------------- nothing stored is lost
def test_a_refused_day_leaves_the_days_before_whole_and_itself_absent(srv: FeedServer, tmp_path: Path) -> None:
    srv.trap = on_esearch_of(DAY2, Fault(200, stream=endless(until=1 << 26)))
    feed = FeedSettings(**settings(srv, max_response_mb=1)).resolved()  # type: ignore[arg-type]
    with pytest.raises(FeedError, match=r"max_response_mb=1 MB .*esearch\.fcgi\?.*maxdate=2024.{1,3}03.{1,3}05"):
        fetch_days(feed, [DAY1, DAY2], tmp_path / "inbox", tmp_path / "data")
    folder = tmp_path / "inbox" / "feed" / "pubmed" / feed.query_slug
    assert sorted(p.name for p in folder.iterdir()) == [f"{DAY1}.xml"]  # no DAY2 file, no temporary file
    assert (folder / f"{DAY1}.xml").read_bytes().count(b"<PubmedArticle>") == 2
    assert list(Cursor(tmp_path / "data").state(feed).days) == [DAY1.isoformat()]


def test_karma_fetch_says_the_bound_in_one_line(srv: FeedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from karma_dagster.cli import main

    monkeypatch.setenv("KARMA_EUTILS_URL", srv.eutils_url)
    monkeypatch.setenv("NCBI_API_KEY", KEY)
    srv.always = Fault(503)
    argv = ["fetch", "--query", QUERY, "--since", DAY1.isoformat(), "--until", DAY2.isoformat(), "--inbox",
            str(tmp_path / "inbox"), "--data-dir", str(tmp_path / "data"), "--max-fetch-s", "1.5"]
    start = time.monotonic()
    assert main(argv) == 1
    assert time.monotonic() - start < 3
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"karma fetch: PubMed query {QUERY!r} ({DAY1}, esearch)"), err
    assert "max_fetch_s=1.5 s" in err and f"{srv.eutils_url}/esearch.fcgi?" in err and KEY not in err
