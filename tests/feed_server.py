"""A loopback stand-in for NCBI E-utilities and the Europe PMC REST API, for the literature feed's tests.

Importable helper (not a test module). It answers in the services' own formats: esearch JSON (`esearchresult`
with string `count`/`retmax`/`retstart`, `idlist`, `querytranslation`), efetch's
PubmedArticleSet XML (DOCTYPE, MedlineCitation/Article/Journal/PubDate, Abstract, ArticleDate, PubmedData
History/ArticleIdList), and Europe PMC's search JSON (`hitCount`, `nextCursorMark` that stops moving at the end,
`resultList.result[]` of resultType=core records shaped like tests/fixtures/eupmc). The papers are real PubMed
abstracts from the shipped corpora (PMID, title, abstract); their publication days and the journal are the
test's. Every request is logged with its arrival time (monotonic clock), parameters and status, so tests count
requests per window from the server's side. Scripted faults (status, headers) answer the next requests; a `trap`
picks a fault by path and parameters (one day's search, say). A fault with a `stream` writes its body (or, `raw`,
its whole answer from the status line on) chunk by chunk as the generator yields it: an endless body, a drip.
`paging_forever` makes the searches page on and on (a cursor that keeps moving, one new record a page).
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse
from xml.sax.saxutils import escape

CORPORA = Path(__file__).resolve().parent.parent / "data" / "corpora"
EUTILS_PATH = "/entrez/eutils"
EUROPEPMC_PATH = "/europepmc/webservices/rest"
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


@dataclass
class Paper:
    pmid: str
    title: str
    abstract: str
    day: dt.date
    has_abstract: bool = True


def corpus_papers(n: int, corpus: str = "biored-train", skip: int = 0) -> list[tuple[str, str, str]]:
    """The first `n` (PMID, title, abstract) of a shipped PubTator corpus, shortest abstracts first among the
    first 60 (a handful of short real abstracts keeps the chain's runs quick)."""
    found: dict[str, dict[str, str]] = {}
    with gzip.open(CORPORA / f"{corpus}.pubtator.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            m = re.match(r"^(\d+)\|([ta])\|(.*)$", line.rstrip("\n"))
            if m:
                found.setdefault(m.group(1), {})[m.group(2)] = m.group(3)
            if len(found) > 60:
                break
    whole = [(pmid, d["t"], d["a"]) for pmid, d in found.items() if d.get("t") and d.get("a")][:60]
    return sorted(whole, key=lambda p: len(p[2]))[skip:skip + n]


@dataclass
class Fault:
    status: int  # 0: close the connection without an answer
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    stream: Callable[[], Iterator[bytes]] | None = None  # the body, written as it yields (no Content-Length)
    raw: bool = False  # the stream is the whole answer, status line and headers included


def endless(chunk: bytes = b"x" * (1 << 20), until: int = 1 << 30) -> Callable[[], Iterator[bytes]]:
    """A body that does not end (it stops at `until` bytes, so that a client without a bound survives it)."""
    def body() -> Iterator[bytes]:
        sent = 0
        while sent < until:
            yield chunk
            sent += len(chunk)
    return body


def drip(data: bytes, every_s: float, for_s: float = 30.0) -> Callable[[], Iterator[bytes]]:
    """`data` one byte every `every_s` seconds (repeated; for at most `for_s` seconds)."""
    def body() -> Iterator[bytes]:
        start = time.monotonic()
        while time.monotonic() - start < for_s:
            for byte in data:
                yield bytes([byte])
                time.sleep(every_s)
    return body


@dataclass
class Hit:
    at: float  # time.monotonic() when the request arrived
    path: str
    params: dict[str, str]
    status: int = 0


class FeedServer:
    """`with FeedServer(papers) as srv:` -> srv.eutils_url, srv.europepmc_url, srv.log, srv.script(...)."""

    def __init__(self, papers: list[Paper]) -> None:
        self.papers = papers
        self.log: list[Hit] = []
        self.faults: deque[Fault] = deque()
        self.always: Fault | None = None
        self.trap: Callable[[str, dict[str, str]], Fault | None] | None = None
        self.paging_forever = 0  # > 0: the searches page on for that many pages, one new record each
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ control
    def script(self, *faults: Fault) -> None:
        self.faults.extend(faults)

    def reset(self) -> None:
        with self._lock:
            self.log.clear()
            self.faults.clear()
            self.always = None
            self.trap = None
            self.paging_forever = 0

    def hits(self, endpoint: str) -> list[Hit]:
        return [h for h in self.log if h.path.endswith(endpoint)]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def eutils_url(self) -> str:
        return self.url + EUTILS_PATH

    @property
    def europepmc_url(self) -> str:
        return self.url + EUROPEPMC_PATH

    def __enter__(self) -> FeedServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                return None

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                at = time.monotonic()
                parsed = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
                hit = Hit(at, parsed.path, params)
                with server._lock:
                    server.log.append(hit)
                    fault = server.faults.popleft() if server.faults else None
                    if fault is None and server.trap is not None:
                        fault = server.trap(parsed.path, params)
                    fault = fault or server.always
                if fault is not None and fault.status == 0:
                    self.close_connection = True
                    return
                if fault is not None and fault.stream is not None:
                    hit.status = fault.status
                    self.stream(fault)
                    return
                if fault is not None:
                    error = "API rate limit exceeded" if fault.status == 429 else "Internal error"  # NCBI's JSON
                    status, ctype, headers = fault.status, "application/json", fault.headers
                    body = fault.body or json.dumps({"error": error})
                else:
                    status, ctype, body, headers = server.answer(parsed.path, params)
                hit.status = status
                data = body.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def stream(self, fault: Fault) -> None:
                self.close_connection = True  # the body ends when the connection does
                if not fault.raw:
                    self.send_response(fault.status)
                    self.send_header("Content-Type", "application/json")
                    for k, v in fault.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                try:
                    for chunk in fault.stream():  # type: ignore[misc]
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except OSError:
                    pass  # the client hung up: what a bound is for

        class Quiet(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                return None

        self._server = Quiet(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ the services
    def answer(self, path: str, params: dict[str, str]) -> tuple[int, str, str, dict[str, str]]:
        if path == f"{EUTILS_PATH}/esearch.fcgi":
            return self.esearch(params)
        if path == f"{EUTILS_PATH}/efetch.fcgi":
            return 200, "text/xml; charset=UTF-8", self.efetch(params), {}
        if path == f"{EUROPEPMC_PATH}/search":
            return 200, "application/json;charset=UTF-8", json.dumps(self.europepmc(params)), {}
        return 404, "text/plain", "not found", {}

    def _in_range(self, first: dt.date, last: dt.date) -> list[Paper]:
        return [p for p in self.papers if first <= p.day <= last]

    def esearch(self, params: dict[str, str]) -> tuple[int, str, str, dict[str, str]]:
        first = dt.datetime.strptime(params["mindate"], "%Y/%m/%d").date()
        last = dt.datetime.strptime(params["maxdate"], "%Y/%m/%d").date()
        found = sorted((p.pmid for p in self._in_range(first, last)), key=int, reverse=True)  # PubMed: newest first
        start, size = int(params.get("retstart", 0)), int(params.get("retmax", 20))
        page = found[start:start + size]
        if self.paging_forever:  # 9,999 announced, one id a page, for `paging_forever` pages
            found = ["x"] * 9999
            page = [str(900_000 + start)] if start < self.paging_forever else []
        translation = (f"{params['term']} AND {params['mindate']}:{params['maxdate']}"
                       f"[{'Date - Publication' if params.get('datetype') == 'pdat' else 'Date - Entrez'}]")
        assert params.get("retmode") == "json", "the feed asks esearch for JSON"
        body = {"header": {"type": "esearch", "version": "0.3"},
                "esearchresult": {"count": str(len(found)), "retmax": str(len(page)), "retstart": str(start),
                                  "idlist": page, "translationset": [], "querytranslation": translation}}
        return 200, "application/json; charset=UTF-8", json.dumps(body), {}

    def efetch(self, params: dict[str, str]) -> str:
        by_pmid = {p.pmid: p for p in self.papers}
        articles = [pubmed_article(by_pmid[i]) for i in params["id"].split(",") if i in by_pmid]
        return ('<?xml version="1.0" ?>\n<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January '
                '2025//EN" "https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">\n<PubmedArticleSet>\n'
                + "".join(articles) + "</PubmedArticleSet>\n")

    def europepmc(self, params: dict[str, str]) -> dict[str, Any]:
        m = re.search(r"FIRST_PDATE:\[(\d{4}-\d{2}-\d{2}) TO (\d{4}-\d{2}-\d{2})\]", params["query"])
        assert m, params["query"]
        found = sorted(self._in_range(dt.date.fromisoformat(m.group(1)), dt.date.fromisoformat(m.group(2))),
                       key=lambda p: int(p.pmid))
        mark = params.get("cursorMark", "*")
        start = 0 if mark == "*" else int(base64.b64decode(mark[5:]).decode())
        size = int(params.get("pageSize", 25))
        page = found[start:start + size]
        end = min(start + size, len(found))
        next_mark = mark if start >= len(found) else "AoIIP" + base64.b64encode(str(end).encode()).decode()
        if self.paging_forever:  # 5,000 announced, one new record a page, the cursor moving on (then it stops)
            _, title, abstract = corpus_papers(1)[0]
            page = [Paper(str(900_000 + start), title, abstract, dt.date.fromisoformat(m.group(1)))]
            found = page * 5000
            more = start + 1 < self.paging_forever
            next_mark = "AoIIP" + base64.b64encode(str(start + 1).encode()).decode() if more else mark
        return {"version": "6.9", "hitCount": len(found), "nextCursorMark": next_mark,
                "request": {"queryString": params["query"], "resultType": params.get("resultType", "lite"),
                            "cursorMark": mark, "pageSize": size, "sort": "", "synonym": False},
                "resultList": {"result": [europepmc_record(p) for p in page]}}


def _date_xml(tag: str, day: dt.date, attrs: str = "", month_name: bool = False) -> str:
    month = MONTHS[day.month - 1] if month_name else f"{day.month:02d}"
    return f"<{tag}{attrs}><Year>{day.year}</Year><Month>{month}</Month><Day>{day.day:02d}</Day></{tag}>"


def pubmed_article(p: Paper) -> str:
    """One PubmedArticle as efetch rettype=abstract retmode=xml writes it."""
    abstract = f"<Abstract><AbstractText>{escape(p.abstract)}</AbstractText></Abstract>" if p.has_abstract else ""
    article_date = _date_xml("ArticleDate", p.day, ' DateType="Electronic"')
    history = (_date_xml("PubMedPubDate", p.day, ' PubStatus="pubmed"')
               + _date_xml("PubMedPubDate", p.day, ' PubStatus="entrez"'))
    return (
        '<PubmedArticle><MedlineCitation Status="PubMed-not-MEDLINE" Owner="NLM">'
        f'<PMID Version="1">{p.pmid}</PMID>{_date_xml("DateRevised", p.day)}'
        '<Article PubModel="Electronic"><Journal><ISSN IssnType="Electronic">2949-0000</ISSN>'
        f'<JournalIssue CitedMedium="Internet"><Volume>1</Volume>{_date_xml("PubDate", p.day, month_name=True)}'
        "</JournalIssue><Title>Journal of loopback tests</Title><ISOAbbreviation>J Loopback Tests</ISOAbbreviation>"
        f"</Journal><ArticleTitle>{escape(p.title)}</ArticleTitle>{abstract}<Language>eng</Language>"
        '<PublicationTypeList><PublicationType UI="D016428">Journal Article</PublicationType></PublicationTypeList>'
        f"{article_date}</Article>"
        "<MedlineJournalInfo><Country>England</Country><MedlineTA>J Loopback Tests</MedlineTA>"
        "<NlmUniqueID>9999999</NlmUniqueID><ISSNLinking>2949-0000</ISSNLinking></MedlineJournalInfo>"
        f"</MedlineCitation><PubmedData><History>{history}</History><PublicationStatus>epublish</PublicationStatus>"
        f'<ArticleIdList><ArticleId IdType="pubmed">{p.pmid}</ArticleId></ArticleIdList></PubmedData>'
        "</PubmedArticle>\n")


def europepmc_record(p: Paper) -> dict[str, Any]:
    """One resultType=core record in the REST shape (plain values; see tests/fixtures/eupmc/README.md)."""
    record: dict[str, Any] = {
        # Europe PMC's titles end with one full stop
        "id": p.pmid, "source": "MED", "pmid": p.pmid, "title": p.title.rstrip(".") + ".",
        "authorString": "Loopback A, Tests B.",
        "authorList": {"author": [{"fullName": "Loopback A", "firstName": "Ada", "lastName": "Loopback",
                                   "initials": "A"},
                                  {"fullName": "Tests B", "firstName": "Ben", "lastName": "Tests", "initials": "B"}]},
        "journalInfo": {"volume": "1", "journalIssueId": 1,
                        "dateOfPublication": f"{p.day.year} {MONTHS[p.day.month - 1]}",
                        "monthOfPublication": p.day.month, "yearOfPublication": p.day.year,
                        "printPublicationDate": p.day.isoformat(),
                        "journal": {"title": "Journal of loopback tests", "medlineAbbreviation": "J Loopback Tests",
                                    "essn": "2949-0000", "isoabbreviation": "J Loopback Tests", "nlmid": "9999999"}},
        "pubYear": str(p.day.year), "language": "eng", "pubModel": "Electronic",
        "pubTypeList": {"pubType": ["Journal Article"]}, "isOpenAccess": "N", "inEPMC": "N", "inPMC": "N",
        "hasPDF": "N", "hasBook": "N", "citedByCount": 0, "hasReferences": "N", "hasTextMinedTerms": "Y",
        "firstIndexDate": p.day.isoformat(), "firstPublicationDate": p.day.isoformat(),
        "electronicPublicationDate": p.day.isoformat(),
    }
    if p.has_abstract:
        record["abstractText"] = p.abstract
    return record


def max_per_window(times: list[float], window: float = 1.0) -> int:
    """The most requests that arrived within any `window` seconds (half-open), from the server's log."""
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best
