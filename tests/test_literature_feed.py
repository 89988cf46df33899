"""The live feed (issue 29): a saved PubMed or Europe PMC query, fetched day by day from a loopback server that
answers in the services' real formats (tests/feed_server.py), dropped into the inbox, registered and run.

Nothing reaches the network: every base URL is 127.0.0.1. Rates are checked from the server's own log of
arrival times (requests per one-second window), not from the test's clock.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import socket
from pathlib import Path

import pytest

from feed_server import Fault, FeedServer, Paper, corpus_papers, max_per_window
from partition_views import partitions_of
from karma_dagster.runtime.date_range import today
from karma_dagster.ingest.feed import writer
from karma_dagster.ingest.feed.fetch import days_between, fetch_days
from karma_dagster.ingest.feed.settings import FeedError, FeedSettings
from karma_dagster.ingest.feed.state import Cursor
from karma_dagster.ingest.inbox import list_inbox
from karma_dagster.ingest.parse import parse_file
from karma_dagster.ingest.sidecar import read_sidecar

TODAY = today()
DAY1, DAY2 = TODAY - dt.timedelta(days=2), TODAY - dt.timedelta(days=1)  # what the sensor fetches (since DAY1)
DAY0 = TODAY - dt.timedelta(days=3)  # three papers: pages of 2
DAYX = TODAY - dt.timedelta(days=4)  # a paper and a record without abstract
KEY = "feedtest-SECRET-4f9a1c"  # a stand-in NCBI API key
QUERY = 'diabetes AND "case report"'

_REAL = corpus_papers(9)  # the shortest real abstracts among the first of BioRED's training set
PAPERS = ([Paper(*p, day=DAY1) for p in _REAL[0:2]] + [Paper(*p, day=DAY2) for p in _REAL[2:4]]
          + [Paper(*p, day=DAY0) for p in _REAL[4:7]] + [Paper(*_REAL[7], day=DAYX)]
          + [Paper(*_REAL[8], day=DAYX, has_abstract=False)])


@pytest.fixture(autouse=True)
def _the_sensors_day_is_the_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The papers' days count back from TODAY, read when the module loads; a suite that runs past midnight UTC
    must not move the sensor's "today" under them (CI's full run: 23:49 -> 01:01)."""
    import karma_dagster.sensors.literature_feed as sensor

    monkeypatch.setattr(sensor, "today", lambda: TODAY)


@pytest.fixture(scope="module")
def server():
    with FeedServer(PAPERS) as srv:
        yield srv


@pytest.fixture
def srv(server, monkeypatch):
    server.reset()
    monkeypatch.delenv("NCBI_API_KEY", raising=False)
    for name in ("KARMA_FEED_QUERY", "KARMA_FEED_SOURCE", "KARMA_FEED_SINCE", "KARMA_EUTILS_URL",
                 "KARMA_EUROPEPMC_URL"):
        monkeypatch.delenv(name, raising=False)
    return server


def settings(srv: FeedServer, source: str = "pubmed", **kw) -> FeedSettings:
    return FeedSettings(query=QUERY, source=source, eutils_url=srv.eutils_url, europepmc_url=srv.europepmc_url,
                        email="feed-tests@example.org", backoff_s=0.01, **kw)


def pmids(day: dt.date) -> list[str]:
    return sorted((p.pmid for p in PAPERS if p.day == day and p.has_abstract), key=int)


# ---------------------------------------------------------------- E-utilities
def test_eutils_pages_esearch_and_batches_efetch_within_3_requests_a_second(srv, tmp_path):
    feed = settings(srv, esearch_page=2, efetch_batch=2).resolved()
    assert feed.rate == 3.0  # no key: NCBI's 3 requests/s
    report = fetch_days(feed, [DAY0, DAY1], tmp_path / "inbox", tmp_path / "data")

    searches, fetches = srv.hits("esearch.fcgi"), srv.hits("efetch.fcgi")
    assert [(h.params["mindate"], h.params["retstart"]) for h in searches] == [
        (DAY0.strftime("%Y/%m/%d"), "0"), (DAY0.strftime("%Y/%m/%d"), "2"), (DAY1.strftime("%Y/%m/%d"), "0")]
    assert all(h.params["maxdate"] == h.params["mindate"] and h.params["datetype"] == "pdat"
               and h.params["term"] == QUERY and h.params["retmax"] == "2" for h in searches)
    assert [h.params["id"].split(",") for h in fetches] == [pmids(DAY0)[:2], pmids(DAY0)[2:], pmids(DAY1)]
    assert all(h.params["rettype"] == "abstract" and h.params["retmode"] == "xml" for h in fetches)
    assert all(h.params["tool"] == "karma-dagster" and h.params["email"] == "feed-tests@example.org"
               and h.params["db"] == "pubmed" and "api_key" not in h.params for h in srv.log)
    assert max_per_window([h.at for h in srv.log]) <= 3, "more than 3 requests within one second at the server"
    assert report.requests == len(srv.log) == 6

    day0 = tmp_path / "inbox" / "feed" / "pubmed" / feed.query_slug / f"{DAY0}.xml"
    xml = day0.read_bytes()
    assert xml.count(b"<PubmedArticleSet>") == 1 and xml.count(b"<PubmedArticle>") == 3  # two batches, one set
    assert b"<!DOCTYPE PubmedArticleSet" in xml
    docs = parse_file(day0, tmp_path / "inbox")
    assert sorted((d.pmid for d in docs), key=int) == pmids(DAY0) and {d.pub_date for d in docs} == {DAY0}
    assert Cursor(tmp_path / "data").state(feed).days[DAY0.isoformat()].hits == 3


def test_retries_after_429_5xx_and_a_dropped_connection_then_writes_the_day(srv, tmp_path):
    srv.script(Fault(429, {"Retry-After": "0"}), Fault(500), Fault(0), Fault(503))
    feed = settings(srv).resolved()
    report = fetch_days(feed, [DAY1], tmp_path / "inbox", tmp_path / "data")
    assert [h.status for h in srv.log] == [429, 500, 0, 503, 200, 200]  # esearch 4 times, then efetch
    assert report.days[0].hits == 2 and report.requests == 6
    assert max_per_window([h.at for h in srv.log]) <= 3  # retries wait their turn too
    assert (tmp_path / "inbox" / report.days[0].written[0].path).is_file()


def test_gives_up_with_the_query_and_url_and_records_nothing(srv, tmp_path):
    srv.always = Fault(503)
    feed = settings(srv, retries=2).resolved()
    with pytest.raises(FeedError) as err:
        fetch_days(feed, [DAY1, DAY2], tmp_path / "inbox", tmp_path / "data")
    message = str(err.value)
    assert f"PubMed query {QUERY!r}" in message and DAY1.isoformat() in message
    assert "gave up after 3 attempt(s)" in message and "HTTP 503" in message
    assert f"{srv.eutils_url}/esearch.fcgi?" in message and "term=diabetes" in message
    assert len(srv.log) == 3
    assert not (tmp_path / "inbox").exists() and not Cursor(tmp_path / "data").state(feed).days

    srv.reset()
    srv.script(Fault(400, body='{"error":"Invalid query syntax"}'))  # a refusal is not retried
    with pytest.raises(FeedError, match="HTTP 400: .*Invalid query syntax"):
        fetch_days(feed, [DAY1], tmp_path / "inbox", tmp_path / "data")
    assert len(srv.log) == 1


def test_the_api_key_raises_the_rate_and_never_leaves_the_request(srv, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("NCBI_API_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.INFO, logger="httpx")  # importing litellm (other tests) sets it to WARNING
    monkeypatch.setattr(logging.getLogger("httpx"), "filters", [])  # and adds its own redaction: ours is tested
    feed = settings(srv, esearch_page=2, efetch_batch=2).resolved()
    assert feed.rate == 10.0 and settings(srv, requests_per_s=50).resolved().rate == 10.0  # never above NCBI's
    fetch_days(feed, [DAY0, DAY1, DAY2], tmp_path / "inbox", tmp_path / "data")
    assert srv.log and all(h.params.get("api_key") == KEY for h in srv.log)  # sent with every request
    assert max_per_window([h.at for h in srv.log]) <= 10

    srv.always = Fault(500, body=f'{{"error": "bad key {KEY}"}}')  # even a server that echoes it
    with pytest.raises(FeedError) as err:
        fetch_days(settings(srv, retries=1).resolved(), [DAY1], tmp_path / "inbox", tmp_path / "data")
    assert "esearch.fcgi?" in str(err.value) and KEY not in str(err.value) and "api_key" not in str(err.value)

    assert "api_key=***" in caplog.text  # httpx's own request line is there, masked
    assert KEY not in caplog.text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path.relative_to(tmp_path)


def test_a_file_is_whole_or_absent_while_the_scanner_looks(srv, tmp_path, monkeypatch):
    inbox = tmp_path / "inbox"
    target = inbox / "feed" / "day.xml"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"<old/>")
    real_replace = os.replace
    seen: list[list[str]] = []

    def replace_while_looking(src, dst):  # noqa: ANN001
        # the new bytes are complete in a hidden file the inbox scan does not list; the old file is untouched
        seen.append([p.name for p in list_inbox(inbox).sources + list_inbox(inbox).skipped])
        assert Path(src).name.startswith(".") and Path(src).read_bytes() == b"<new/>"
        assert Path(dst).read_bytes() == b"<old/>"
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_while_looking)
    assert writer.atomic_write(target, b"<new/>") == "updated"
    assert seen == [["day.xml"]] and target.read_bytes() == b"<new/>"
    assert writer.atomic_write(target, b"<new/>") == "unchanged" and len(seen) == 1  # same bytes: not rewritten

    def failing_replace(src, dst):  # noqa: ANN001
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        writer.atomic_write(target, b"<newer/>")
    assert target.read_bytes() == b"<new/>" and sorted(p.name for p in target.parent.iterdir()) == ["day.xml"]


# ---------------------------------------------------------------- Europe PMC
def test_europepmc_pages_by_cursor_and_writes_text_with_its_record_as_sidecar(srv, tmp_path):
    feed = settings(srv, "europepmc", europepmc_page=2).resolved()
    report = fetch_days(feed, [DAY0, DAYX], tmp_path / "inbox", tmp_path / "data")

    searches = srv.hits("/search")
    assert [h.params["cursorMark"] for h in searches][:2] == ["*", searches[1].params["cursorMark"]]
    assert len(searches) == 3 and searches[1].params["cursorMark"] != "*"  # DAY0: 2 pages, DAYX: 1
    assert searches[0].params["query"] == f"({QUERY}) AND (FIRST_PDATE:[{DAY0} TO {DAY0}])"
    assert all(h.params["resultType"] == "core" and h.params["format"] == "json" for h in searches)
    assert [d.hits for d in report.days] == [3, 2]
    assert report.days[1].no_abstract == [f"pmid{PAPERS[-1].pmid}"]  # a title alone is no document

    folder = tmp_path / "inbox" / "feed" / "europepmc" / feed.query_slug / DAY0.isoformat()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"pmid{i}{ext}" for i in pmids(DAY0) for ext in (".json", ".txt"))
    by_pmid = {p.pmid: p for p in PAPERS}
    for pmid in pmids(DAY0):
        record = read_sidecar(folder / f"pmid{pmid}.json")  # the inbox's own sidecar reader
        assert (record.pmid, record.pub_date, record.journal) == (pmid, DAY0, "Journal of loopback tests")
        assert record.authors == ["Ada Loopback", "Ben Tests"]
        (doc,) = parse_file(folder / f"pmid{pmid}.txt", tmp_path / "inbox")  # the text, completed by its sidecar
        assert (doc.pmid, doc.pub_date, doc.title) == (pmid, DAY0, by_pmid[pmid].title.rstrip("."))
        assert [s.kind for s in doc.sections] == ["title", "abstract"]
        assert " ".join(doc.sections[1].text.split()) == " ".join(by_pmid[pmid].abstract.split())


def test_abstract_html_becomes_sections():
    paragraphs = writer.abstract_paragraphs("<h4>Background</h4>Snap25 <i>in vitro</i> &amp; more.<h4>Methods</h4>"
                                            "We genotyped 1019 people.<br/><b>Results:</b> HbA1c rose.")
    assert paragraphs == ["Background", "Snap25 in vitro & more.", "Methods", "We genotyped 1019 people.",
                          "Results", "HbA1c rose."]


# ---------------------------------------------------------------- karma fetch
def test_karma_fetch_prints_what_it_wrote_and_one_line_for_bad_input(srv, tmp_path, monkeypatch, capsys):
    from karma_dagster.cli import main as karma

    def main(argv: list[str]) -> int:
        try:
            return karma(argv)
        except SystemExit as exc:  # argparse's own usage errors exit from inside
            return int(exc.code)

    monkeypatch.setenv("KARMA_EUTILS_URL", srv.eutils_url)
    base = ["fetch", "--query", QUERY, "--inbox", str(tmp_path / "inbox"), "--data-dir", str(tmp_path / "data")]
    assert main([*base, "--since", DAY1.isoformat(), "--until", DAY2.isoformat()]) == 0
    out = capsys.readouterr().out
    assert f"{DAY1}: 2 hit(s); wrote feed/pubmed/" in out and f"{DAY2}.xml (new)" in out
    assert "2 day(s), 4 hit(s), 2 file(s) written" in out

    assert main([*base, "--since", DAY1.isoformat(), "--until", DAY2.isoformat()]) == 0  # again: nothing new
    assert f"{DAY1}: 2 hit(s); nothing new; 1 file(s) unchanged" in capsys.readouterr().out

    for bad in (["--since", "2025-13-01"], ["--since", DAY2.isoformat(), "--until", DAY1.isoformat()]):
        assert main([*base, *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("karma fetch") and ("not a date" in err or "before" in err)

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    srv.always = Fault(0)  # a server that hangs up; then no server at all
    for url in (srv.eutils_url, f"http://127.0.0.1:{closed_port}/entrez/eutils"):
        monkeypatch.setenv("KARMA_EUTILS_URL", url)
        assert main([*base, "--since", DAY1.isoformat(), "--until", DAY1.isoformat(), "--retries", "1"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith(f"karma fetch: PubMed query {QUERY!r}")
        assert "gave up after 2 attempt(s)" in err and f"{url}/esearch.fcgi?" in err


# ---------------------------------------------------------------- the sensor, and two days through the chain
def _with_feed(p, srv: FeedServer, source: str, **kw):  # noqa: ANN001, ANN202 - a tests/conftest.py Pipeline
    from karma_dagster.definitions import build_definitions
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.feed import LiteratureFeedResource

    feed = LiteratureFeedResource(**settings(srv, source, since=DAY1.isoformat(), **kw).model_dump())
    p.defs = build_definitions(backbones={"local": BackboneConfig()}, storage=p.storage, feed=feed)
    return p


def test_sensor_is_off_by_default_fetches_the_days_since_its_cursor_and_then_waits(srv, make_pipeline):
    import dagster as dg

    from sensor_ticks import tick

    p = make_pipeline()
    assert p.defs.resolve_sensor_def("literature_feed").default_status == dg.DefaultSensorStatus.STOPPED
    assert "feed not configured" in tick(p, "literature_feed").skip_message  # no query set anywhere
    assert not srv.log

    _with_feed(p, srv, "pubmed")
    first = tick(p, "literature_feed")
    assert not first.run_requests  # the inbox is the way in: new_papers registers what it dropped
    assert json.loads(first.cursor)["through"] == DAY2.isoformat()
    assert sorted(f.name for f in (p.inbox / "feed" / "pubmed").rglob("*.xml")) == [f"{DAY1}.xml", f"{DAY2}.xml"]
    feed = p.defs.resources["literature_feed"].feed()
    assert sorted(Cursor(p.storage.root()).state(feed).days) == [DAY1.isoformat(), DAY2.isoformat()]
    n = len(srv.log)

    second = tick(p, "literature_feed", first.cursor)
    assert "fetched through" in second.skip_message and len(srv.log) == n  # today is not over: no request


@pytest.mark.parametrize("source", ["europepmc", "pubmed"])
def test_two_days_of_the_feed_are_fetched_registered_and_run_into_dated_increments(srv, make_pipeline, source):
    """Issue 29's "done when": the sensor fetches two days, `karma run`'s path registers and runs them, and the KG
    grows by one increment per publication day; fetching the days again registers nothing new."""
    from karma_dagster import runner
    from karma_dagster.ingest.catalog import Catalog

    from sensor_ticks import tick

    p = _with_feed(make_pipeline(), srv, source)
    first = tick(p, "literature_feed")
    assert json.loads(first.cursor)["through"] == DAY2.isoformat()
    keys = sorted(f"{d}_pmid-{i}" for d in (DAY1, DAY2) for i in pmids(d))
    registered = tick(p, "new_papers")  # the inbox sensor registers what the feed dropped, keyed by its day
    assert sorted(r.partition_key for r in registered.run_requests) == partitions_of(keys)

    catalog = Catalog(p.storage.catalog_path())
    assert all(catalog.lookup(k) is not None and catalog.lookup(k).date_source == "publication" for k in keys), keys
    if source == "pubmed":  # the chain once (suite time): Europe PMC lands as .txt + sidecar, run by the sample inbox
        lines: list[str] = []
        outcome = runner.run_main(p.defs, p.instance, log=lines.append)
        assert not outcome.failed, outcome.failed
        merged = next(line for line in lines if line.startswith("KG increments (local)"))
        assert re.findall(r"(\d{4}-\d{2}-\d{2}) ok", merged) == [DAY1.isoformat(), DAY2.isoformat()]
        stages = p.storage.stage_store()
        assert all(stages.exists("local", "evaluated", k) for k in keys)

    _with_feed(p, srv, source, refetch_days=2)  # the same two days again
    srv.reset()
    again = tick(p, "literature_feed")
    assert srv.log and "0 file(s) written" in again.skip_message
    assert runner.register_inbox(p.defs, p.instance)[0] == []  # no new or changed document
