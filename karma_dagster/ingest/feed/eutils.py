"""NCBI E-utilities: the PMIDs a saved query finds for one day (esearch, paged by retstart), then their citations
(efetch rettype=abstract retmode=xml, at most 200 ids a request) as one PubmedArticleSet.

The day's file keeps NCBI's bytes: one batch is written as efetch returned it; several are joined under one
PubmedArticleSet (their articles in PMID order, the first batch's XML declaration and DOCTYPE), and the result is
parsed once to check it is whole XML. PubMed's esearch reaches only the first 9,999 hits of a query: a day with
more is an error naming the query and the day (narrow the query), never a silent cut.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from karma_dagster.ingest.feed.http import FeedClient
from karma_dagster.ingest.feed.paging import check_pages, check_records
from karma_dagster.ingest.feed.settings import FeedError, ResolvedFeed, api_key

ESEARCH, EFETCH = "esearch.fcgi", "efetch.fcgi"
ESEARCH_MAX = 9999  # PubMed: "ESearch can only retrieve the first 10,000 records matching the query"
ARTICLE_TAGS = ("PubmedArticle", "PubmedBookArticle", "DeleteCitation")
_SET_OPEN = re.compile(rb"<PubmedArticleSet(\s[^>]*)?>")
_SET_CLOSE = b"</PubmedArticleSet>"
_EMPTY_SET = re.compile(rb"<PubmedArticleSet(\s[^>]*)?/>")


@dataclass
class DayCitations:
    day: dt.date
    pmids: list[str]  # what esearch found, in PMID order
    xml: bytes | None  # the PubmedArticleSet (None when the day has no hit)
    articles: int  # citations in the XML


def common_params(feed: ResolvedFeed) -> dict[str, str]:
    params = {"db": "pubmed", "tool": feed.settings.tool}
    if feed.email:
        params["email"] = feed.email
    key = api_key()
    if key:
        params["api_key"] = key
    return params


def _ncbi_date(day: dt.date) -> str:
    return day.strftime("%Y/%m/%d")


def search_day(client: FeedClient, feed: ResolvedFeed, day: dt.date) -> list[str]:
    """Every PMID the query finds for `day` (by feed.settings.date_type), paged `esearch_page` at a time."""
    what = f"{feed.describe()} ({day.isoformat()}, esearch)"
    params = {**common_params(feed), "term": feed.query, "datetype": feed.settings.date_type,
              "mindate": _ncbi_date(day), "maxdate": _ncbi_date(day), "retmode": "json",
              "retmax": str(feed.settings.esearch_page)}
    ids: list[str] = []
    retstart, count = 0, None
    pages = 0
    while count is None or retstart < count:
        pages += 1
        url = client.url(ESEARCH, {**params, "retstart": str(retstart)})
        check_pages(pages, feed, what, url)
        response = client.get(ESEARCH, {**params, "retstart": str(retstart)}, what=what)
        result = _esearch_result(response.text, what)
        count = int(result.get("count", 0))
        if count > ESEARCH_MAX:
            raise FeedError(f"{what}: {count} hits in one day, more than the {ESEARCH_MAX} esearch returns; narrow "
                            "the query")
        check_records(count, feed, what, url, announced=True)
        page = [str(i) for i in result.get("idlist", [])]
        ids += page
        check_records(len(ids), feed, what, url)
        if not page:
            break  # fewer than announced (the set shrank while paging): what there is
        retstart += len(page)
    return sorted(dict.fromkeys(ids), key=int)


def _esearch_result(text: str, what: str) -> dict:
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        raise FeedError(f"{what}: the answer is not esearch JSON (starts {text[:80]!r})") from None
    result = body.get("esearchresult") if isinstance(body, dict) else None
    if not isinstance(result, dict):
        raise FeedError(f"{what}: the answer has no 'esearchresult' (starts {text[:80]!r})")
    if result.get("ERROR"):
        raise FeedError(f"{what}: E-utilities says: {result['ERROR']}")
    if not str(result.get("count", "")).isdigit():
        raise FeedError(f"{what}: esearch count {result.get('count')!r} is not a number")
    return result


def fetch_citations(client: FeedClient, feed: ResolvedFeed, day: dt.date, pmids: list[str]) -> DayCitations:
    """The citations of `pmids` as one PubmedArticleSet, `efetch_batch` ids per request."""
    what = f"{feed.describe()} ({day.isoformat()}, efetch)"
    if not pmids:
        return DayCitations(day, [], None, 0)
    batch = feed.settings.efetch_batch
    bodies = []
    for i in range(0, len(pmids), batch):
        params = {**common_params(feed), "id": ",".join(pmids[i:i + batch]), "rettype": "abstract", "retmode": "xml"}
        body = client.get(EFETCH, params, what=what).content
        _article_count(body, what)
        bodies.append(body)
    xml = bodies[0] if len(bodies) == 1 else _joined(bodies)
    return DayCitations(day, pmids, xml, _article_count(xml, what))


def _article_count(body: bytes, what: str) -> int:
    """The citations in `body` when it is whole PubmedArticleSet XML, else FeedError."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise FeedError(f"{what}: the answer is not whole XML ({exc}; starts {body[:80]!r})") from None
    if root.tag != "PubmedArticleSet":
        error = root.findtext(".//ERROR") or ""
        raise FeedError(f"{what}: expected a PubmedArticleSet, got <{root.tag}>" + (f": {error}" if error else ""))
    return sum(1 for child in root if child.tag in ARTICLE_TAGS)


def _joined(bodies: list[bytes]) -> bytes:
    """Several efetch answers as one PubmedArticleSet: the first's prologue, every answer's articles."""
    head = _SET_OPEN.search(bodies[0]) or _EMPTY_SET.search(bodies[0])
    assert head is not None  # _article_count saw the root
    parts = [bodies[0][:head.start()], b"<PubmedArticleSet>"]
    for body in bodies:
        if _EMPTY_SET.search(body):
            continue
        start, end = _SET_OPEN.search(body), body.rfind(_SET_CLOSE)  # type: ignore[union-attr]
        parts.append(body[start.end():end])  # type: ignore[union-attr]
    parts.append(_SET_CLOSE + b"\n")
    return b"".join(parts)


def day_citations(client: FeedClient, feed: ResolvedFeed, day: dt.date) -> DayCitations:
    return fetch_citations(client, feed, day, search_day(client, feed, day))
