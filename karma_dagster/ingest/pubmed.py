"""PubMed/MEDLINE XML (`<PubmedArticleSet>`): the baseline and daily update files, and E-utilities efetch answers.

Public entry points, kept stable (the E-utilities fetcher in ingest/feed/ writes efetch's XML into the inbox and
relies on them):

- `parse_pubmed(path, rel)`: the items of a file (plain or gzip) one at a time, in file order: a `PubMedCitation`
  per `<PubmedArticle>` / `<PubmedBookArticle>` (its `ParsedDocument`, byte span, line and DateRevised) and a
  `PubMedDeletion` per `<DeleteCitation>` (the PMIDs it deletes). Raises `IngestError` naming the file, the line
  and the PMID of a malformed citation.
- `parse_pubmed_stream(stream, rel)`: the same items from an open binary stream (decompressed), read as they come.
- `parse_pubmed_bytes(data, rel)`: the same items from bytes in memory (an efetch answer before it is saved).
- `read_pubmed_member(path, rel, pmid, span)`: one citation read back from its recorded byte span.
- `citation_date(element)`: the publication date of one `<PubmedArticle>`, with its precision and origin;
  `date_of_text(raw, source)` the same rule for a date written as text ('2012 Mar 19', '2000 Spring').
- `is_pubmed(root)`: whether an XML root element's name is PubMed's.

Memory stays bounded whatever the file's length: the bytes are scanned for `<PubmedArticle>...</PubmedArticle>`
blocks and each block is parsed on its own (never the whole tree); offsets of a .gz file count in its
decompressed bytes, as for PubTator files. A block parsed alone has no DOCTYPE: no DTD is fetched, no entity
beyond XML's five is expanded.

Dates. MedKGent grows the KG day by day by publication date, so a citation is dated by its first publication:
the electronic `ArticleDate` (always a full day), unless the journal issue's date (`PubDate` Year/Month/Day or
Season, or `MedlineDate` such as "1998 Dec-1999 Jan" or "2000 Spring") is a period that ends before it (an issue
out before the article went online), then the issue's date. An issue date that gives only a month, a season or
a year is dated the first day of that period (Winter = January, Spring = March, Summer = June, Fall/Autumn =
September; a year: 1 January) and says so: `pub_date_precision` is "month", "season" or "year", and
`pub_date_source` names the element and its text. PubMed's History dates (received, entrez, ...) record its own
processing, not publication, and are not used.
"""

from __future__ import annotations

import calendar
import datetime as dt
import gzip
import logging
import re
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Literal

from pydantic import BaseModel, ConfigDict

from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.sniff import GZIP_MAGIC, HEAD_BYTES, root_of
from karma_dagster.ingest.text import clean_doi
from karma_dagster.schemas.records import ParsedDocument, RawSection

log = logging.getLogger(__name__)

ROOT = "PubmedArticleSet"
MAX_BLOCK_BYTES = 8_000_000  # one citation; the largest real ones (long author lists) are ~1 MB
_CHUNK = 1 << 20
_OPEN = re.compile(rb"<(PubmedArticle|PubmedBookArticle|DeleteCitation)(?=[\s>])")
_END_OF_SET = b"</PubmedArticleSet>"
_PMID_IN_BLOCK = re.compile(rb"<PMID[^>]*>\s*(\d+)\s*</PMID>")
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_SEASONS = {"winter": 1, "spring": 3, "summer": 6, "fall": 9, "autumn": 9}
Precision = Literal["day", "month", "season", "year"]


class PubDate(BaseModel):
    """A publication date as PubMed wrote it: its first day, its last (a month, season or year is a period)."""

    model_config = ConfigDict(frozen=True)
    date: dt.date
    end: dt.date
    precision: Precision
    source: str  # e.g. "PubMed PubDate '2000 Spring'"


class PubMedCitation(BaseModel):
    """One `<PubmedArticle>` (or `<PubmedBookArticle>`): the document, where its bytes lie, its revision date."""

    kind: Literal["citation"] = "citation"
    document: ParsedDocument
    start: int  # byte offsets of the block (in the decompressed bytes of a .gz)
    end: int
    line: int  # line of its opening tag
    revised: dt.date | None = None  # MedlineCitation/DateRevised: a later one is a revision of the citation


class PubMedDeletion(BaseModel):
    """One `<DeleteCitation>`: these PMIDs are withdrawn from PubMed."""

    kind: Literal["deletion"] = "deletion"
    pmids: list[str]
    line: int


PubMedItem = PubMedCitation | PubMedDeletion


def is_pubmed(root: str | None) -> bool:
    return root == ROOT


# ---------------------------------------------------------------- text and small readers
def _text(el: ET.Element | None) -> str:
    """All text inside an element (inline <i>, <sup>, MathML included), whitespace collapsed."""
    return " ".join("".join(el.itertext()).split()) if el is not None else ""


def _int(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def _month(text: str | None) -> int | None:
    """A month as PubMed writes it: 'Jan', 'January' or '01'."""
    text = (text or "").strip().lower()
    if text.isdigit():
        return int(text) if 1 <= int(text) <= 12 else None
    return _MONTHS.get(text[:3])


def _period(year: int, month: int | None, day: int | None, season: int | None) -> tuple[dt.date, dt.date, Precision]:
    """(first day, last day, precision) of a date PubMed gave to the day, month, season or year."""
    if month and day:
        date = dt.date(year, month, day)
        return date, date, "day"
    if month:
        return dt.date(year, month, 1), dt.date(year, month, calendar.monthrange(year, month)[1]), "month"
    if season:
        last = min(season + 2, 12)
        return dt.date(year, season, 1), dt.date(year, last, calendar.monthrange(year, last)[1]), "season"
    return dt.date(year, 1, 1), dt.date(year, 12, 31), "year"


def _medline_date(raw: str) -> tuple[int, int | None, int | None, int | None] | None:
    """(year, month, day, season month) of a MedlineDate: its first year, and the month or season and day right
    after it ('1998 Dec-1999 Jan' -> 1998 Dec; '2000 Spring'; '1999-2000' -> 1999; '2000 Nov 15-Dec 1')."""
    m = re.match(r"\s*(\d{4})(?:\s+([A-Za-z]+)\.?(?:\s+(\d{1,2})\b)?)?", raw)
    if not m:
        return None
    word = (m.group(2) or "").lower()
    season = _SEASONS.get(word)
    month = None if season else _month(word) if word else None
    return int(m.group(1)), month, _int(m.group(3)) if month else None, season


def date_of_text(raw: str, source: str) -> PubDate | None:
    """A date written as PubMed's citations write it ('2012 Mar 19', '1998 Dec-1999 Jan', '2000 Spring', '1999'),
    dated the first day of what it gives (other readers share this rule: BioC's journal citation strings)."""
    parts = _medline_date(raw)
    if parts is None:
        return None
    try:
        first, last, precision = _period(*parts)
    except ValueError:
        return None
    return PubDate(date=first, end=last, precision=precision, source=source)


def _issue_date(pub: ET.Element | None, what: str) -> PubDate | None:
    """The journal issue's date: `PubDate` Year/Month/Day, Year/Season, or MedlineDate."""
    if pub is None:
        return None
    medline = pub.findtext("MedlineDate")
    if medline:
        parts = _medline_date(medline)
        label = f"PubMed MedlineDate '{' '.join(medline.split())}'"
    else:
        year = _int(pub.findtext("Year"))
        if year is None:
            return None
        season_text = (pub.findtext("Season") or "").strip()
        parts = (year, _month(pub.findtext("Month")), _int(pub.findtext("Day")), _SEASONS.get(season_text.lower()))
        shown = " ".join(t.strip() for t in (pub.findtext("Year"), pub.findtext("Month"), pub.findtext("Day"),
                                             season_text) if t and t.strip())
        label = f"PubMed {what} '{shown}'"
    if parts is None:
        return None
    year, month, day, season = parts
    try:
        first, last, precision = _period(year, month, day, season)
    except ValueError:  # a day the month does not have: keep the month
        try:
            first, last, precision = _period(year, month, None, season)
        except ValueError:
            return None
    return PubDate(date=first, end=last, precision=precision, source=label)


def _article_date(article: ET.Element | None) -> PubDate | None:
    """The electronic publication date (`ArticleDate DateType="Electronic"`, a full day), when valid."""
    for el in article.findall("ArticleDate") if article is not None else []:
        if el.get("DateType", "Electronic") != "Electronic":
            continue
        year, month, day = _int(el.findtext("Year")), _month(el.findtext("Month")), _int(el.findtext("Day"))
        if year and month and day:
            try:
                date = dt.date(year, month, day)
            except ValueError:
                continue
            return PubDate(date=date, end=date, precision="day",
                           source=f"PubMed ArticleDate (Electronic) '{date.isoformat()}'")
    return None


def citation_date(citation: ET.Element) -> PubDate | None:
    """The publication date of a `<PubmedArticle>` or `<PubmedBookArticle>` element (module docstring: which wins)."""
    medline = citation.find("MedlineCitation")
    if medline is not None:
        article = medline.find("Article")
        issue = _issue_date(article.find("Journal/JournalIssue/PubDate") if article is not None else None, "PubDate")
    else:  # a book or book chapter (NCBI Bookshelf)
        article = citation.find("BookDocument")
        issue = _issue_date(article.find("Book/PubDate") if article is not None else None, "Book PubDate")
    electronic = _article_date(article)
    if electronic is None:
        return issue
    if issue is not None and issue.end < electronic.date:
        return issue
    return electronic


def _revised(medline: ET.Element | None) -> dt.date | None:
    el = medline.find("DateRevised") if medline is not None else None
    if el is None:
        return None
    try:
        return dt.date(int(el.findtext("Year") or 0), _month(el.findtext("Month")) or 0, _int(el.findtext("Day")) or 0)
    except ValueError:
        return None


def _authors(author_list: ET.Element | None) -> list[str]:
    names = []
    for a in author_list.findall("Author") if author_list is not None else []:
        if a.get("ValidYN", "Y") == "N":
            continue
        name = " ".join(t for t in (_text(a.find("ForeName")) or _text(a.find("Initials")), _text(a.find("LastName")))
                        if t) or _text(a.find("CollectiveName"))
        if name:
            names.append(name)
    return names


def _abstract_sections(abstract: ET.Element | None) -> list[RawSection]:
    """One section per `<AbstractText>`: a structured abstract keeps its parts, headed by their Label."""
    sections = []
    for part in abstract.findall("AbstractText") if abstract is not None else []:
        text = _text(part)
        if text:
            sections.append(RawSection(heading=(part.get("Label") or "Abstract").strip(), kind="abstract", text=text))
    return sections


def _ids(id_list: ET.Element | None) -> dict[str, str]:
    return {a.get("IdType", ""): _text(a) for a in (id_list.findall("ArticleId") if id_list is not None else [])}


def _doi(article: ET.Element | None, ids: dict[str, str]) -> str | None:
    for loc in article.findall("ELocationID") if article is not None else []:
        if loc.get("EIdType") == "doi" and loc.get("ValidYN", "Y") != "N" and _text(loc):
            return clean_doi(_text(loc))
    return clean_doi(ids["doi"]) if ids.get("doi") else None


def _pmcid(ids: dict[str, str]) -> str | None:
    pmc = ids.get("pmc", "").strip()
    return (pmc.upper() if pmc.upper().startswith("PMC") else f"PMC{pmc}") if pmc else None


# ---------------------------------------------------------------- one citation
def _document(el: ET.Element, rel: str, line: int) -> tuple[ParsedDocument | None, dt.date | None]:
    """The document of one parsed block, and its DateRevised; (None, _) for a citation without any text."""
    medline = el.find("MedlineCitation")
    if medline is not None:
        pmid = _text(medline.find("PMID"))
        article = medline.find("Article")
        journal_el = article.find("Journal") if article is not None else None
        journal = _text(journal_el.find("Title")) if journal_el is not None else ""
        journal = journal or _text(medline.find("MedlineJournalInfo/MedlineTA"))
        ids = _ids(el.find("PubmedData/ArticleIdList"))  # not ReferenceList's: those are the cited papers' ids
    else:
        book = el.find("BookDocument")
        if book is None:
            raise IngestError(rel, f"line {line}: <{el.tag}> without <MedlineCitation> or <BookDocument>")
        pmid = _text(book.find("PMID"))
        article = book
        journal = _text(book.find("Book/BookTitle"))
        ids = {**_ids(book.find("ArticleIdList")), **_ids(el.find("PubmedBookData/ArticleIdList"))}
    if not pmid.isdigit():
        raise IngestError(rel, f"line {line}: citation without a numeric <PMID> ({pmid!r})")
    title = _text(article.find("ArticleTitle")) if article is not None else ""
    if not title and article is not None:
        title = _text(article.find("VernacularTitle")) or _text(article.find("Book/BookTitle"))
    sections = [RawSection(heading="Title", kind="title", text=title)] if title else []
    sections += _abstract_sections(article.find("Abstract") if article is not None else None)
    revised = _revised(medline)
    if not sections:
        log.warning("%s: line %d: PubMed citation %s has neither title nor abstract: left out", rel, line, pmid)
        return None, revised
    date = citation_date(el)
    return ParsedDocument(
        source_path=rel, source_format="pubmed", title=title, pmid=pmid,
        authors=_authors(article.find("AuthorList") if article is not None else None),
        journal=journal or None, doi=_doi(article, ids), pmcid=_pmcid(ids),
        pub_date=date.date if date else None, pub_date_precision=date.precision if date else None,
        pub_date_source=date.source if date else None, sections=sections,
    ), revised


def _parse_block(block: bytes, rel: str, start: int, line: int) -> PubMedItem | None:
    """One `<PubmedArticle>`/`<PubmedBookArticle>`/`<DeleteCitation>` block; IngestError naming its line and PMID."""
    try:
        el = ET.fromstring(block)
    except ET.ParseError as exc:
        m = _PMID_IN_BLOCK.search(block)
        where = f"line {line + exc.position[0] - 1}" + (f", PMID {m.group(1).decode()}" if m else "")
        problem = re.sub(r": line \d+, column \d+$", "", str(exc))
        raise IngestError(rel, f"malformed PubMed citation ({where}): {problem}") from exc
    if el.tag == "DeleteCitation":
        pmids = [_text(p) for p in el.findall("PMID")]
        if not pmids or not all(p.isdigit() for p in pmids):
            raise IngestError(rel, f"line {line}: <DeleteCitation> without numeric PMIDs ({pmids!r})")
        return PubMedDeletion(pmids=pmids, line=line)
    try:
        doc, revised = _document(el, rel, line)
    except IngestError:
        raise
    except (ValueError, TypeError) as exc:
        m = _PMID_IN_BLOCK.search(block)
        raise IngestError(rel, f"malformed PubMed citation (line {line}"
                               f"{', PMID ' + m.group(1).decode() if m else ''}): {exc}") from exc
    if doc is None:
        return None
    return PubMedCitation(document=doc, start=start, end=start + len(block), line=line, revised=revised)


# ---------------------------------------------------------------- streaming
def _open_binary(path: Path) -> BinaryIO:
    with path.open("rb") as fh:
        gz = fh.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if gz else path.open("rb")  # type: ignore[return-value]


def _blocks(fh: BinaryIO, rel: str) -> Iterator[tuple[bytes, int, int]]:
    """(bytes, byte start, line) of each citation or deletion block, reading `_CHUNK` bytes at a time: the buffer
    holds one block and a chunk at most. Raises IngestError when the file ends inside a block or before
    `</PubmedArticleSet>` (a truncated download)."""
    buf = bytearray()
    base = 0  # stream offset of buf[0]
    line = 1  # line number at buf[0]
    scan = 0
    tail_seen = False
    eof = False
    while True:
        m = _OPEN.search(buf, scan)
        if m is None:
            if _END_OF_SET in buf:
                tail_seen = True
            if eof:
                break
            keep = max(0, len(buf) - 64)  # a tag may be cut at the chunk's end
            line += buf.count(b"\n", 0, keep)
            del buf[:keep]
            base += keep
            scan = 0
            chunk = fh.read(_CHUNK)
            eof = not chunk
            buf += chunk
            continue
        close = b"</" + m.group(1) + b">"
        j = buf.find(close, m.end())
        while j < 0 and not eof:
            if len(buf) - m.start() > MAX_BLOCK_BYTES:
                at = line + buf.count(b"\n", 0, m.start())
                raise IngestError(rel, f"line {at}: <{m.group(1).decode()}> longer than {MAX_BLOCK_BYTES:,} bytes: "
                                       "refused (not a real citation)")
            chunk = fh.read(_CHUNK)
            eof = not chunk
            buf += chunk
            j = buf.find(close, m.end())
        start_line = line + buf.count(b"\n", 0, m.start())
        if j < 0:
            pmid = _PMID_IN_BLOCK.search(buf, m.start())
            raise IngestError(rel, f"line {start_line}: <{m.group(1).decode()}>"
                                   f"{' (PMID ' + pmid.group(1).decode() + ')' if pmid else ''} is never closed: "
                                   "the file ends inside it (truncated?)")
        end = j + len(close)
        yield bytes(buf[m.start():end]), base + m.start(), start_line
        line = start_line + buf.count(b"\n", m.start(), end)
        del buf[:end]
        base += end
        scan = 0
        tail_seen = False
    if not tail_seen:
        raise IngestError(rel, f"the file ends before </{ROOT}> (truncated?)")


def _check_root(data: bytes, rel: str) -> None:
    root = root_of(data)
    if not is_pubmed(root):
        raise IngestError(rel, f"not a PubMed file (root element <{root or '?'}>, expected <{ROOT}>)")


def parse_pubmed_stream(fh: BinaryIO, rel: str) -> Iterator[PubMedItem]:
    """Each citation and deletion of PubMed XML read from an open binary stream (not gzip), one at a time: a
    block is yielded as soon as its bytes are read, never after the whole stream. Errors as `parse_pubmed`."""
    first = fh.read(HEAD_BYTES)
    _check_root(first, rel)
    prefixed = _Prefixed(first, fh)
    for block, start, line in _blocks(prefixed, rel):  # type: ignore[arg-type]
        item = _parse_block(block, rel, start, line)
        if item is not None:
            yield item


class _Prefixed:
    """A binary stream with bytes already read put back in front."""

    def __init__(self, prefix: bytes, fh: BinaryIO) -> None:
        self.prefix, self.fh = prefix, fh

    def read(self, n: int) -> bytes:
        if self.prefix:
            out, self.prefix = self.prefix[:n], self.prefix[n:]
            return out
        return self.fh.read(n)


def parse_pubmed(path: Path, rel: str) -> Iterator[PubMedItem]:
    """Each citation and deletion of a PubMed XML file (plain or gzip), one at a time, with its byte span.

    Never holds more than one citation (and a read chunk). An unreadable file, a damaged .gz, a file that is not
    a `<PubmedArticleSet>`, a malformed citation (named by line and PMID) or a truncated file raises IngestError."""
    try:
        with _open_binary(path) as fh:
            yield from parse_pubmed_stream(fh, rel)
    except IngestError:
        raise
    except (OSError, EOFError, zlib.error) as exc:  # unreadable, or a damaged or cut .gz
        raise IngestError(rel, f"cannot read PubMed file ({exc})") from exc


def parse_pubmed_bytes(data: bytes, rel: str = "<efetch>") -> list[PubMedItem]:
    """The citations and deletions of PubMed XML held in memory (e.g. one efetch answer), as `parse_pubmed`."""
    import io

    if data[:2] == GZIP_MAGIC:
        data = gzip.decompress(data)
    return list(parse_pubmed_stream(io.BytesIO(data), rel))


def read_pubmed_member(path: Path, rel: str, pmid: str, span: tuple[int, int] | None) -> ParsedDocument | None:
    """Citation `pmid` of a PubMed file: read from its recorded byte span when that still holds it, else found by
    streaming the file (its last citation of that PMID: a file may list a revision after the original);
    None when the file no longer holds it."""
    if span is not None:
        start, end = span
        try:
            with _open_binary(path) as fh:
                fh.seek(start)  # in a .gz: decompresses up to `start` without keeping it
                block = fh.read(max(0, end - start))
            if _OPEN.match(block):
                item = _parse_block(block, rel, start, 0)
                if isinstance(item, PubMedCitation) and item.document.pmid == pmid:
                    return item.document
        except (IngestError, OSError, EOFError, zlib.error):
            pass  # the file changed since it was scanned: look for the citation the slow way
    found = None
    for item in parse_pubmed(path, rel):
        if isinstance(item, PubMedCitation) and item.document.pmid == pmid:
            found = item.document
    return found
