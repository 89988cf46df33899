"""PubMed/MEDLINE and BioC files in their official layouts, built from the shipped corpora's PMIDs and texts.

The PMIDs, titles, abstracts and gold annotations are real (data/corpora/*.pubtator.gz). Everything else written
here is TEST DATA, chosen to cover each form PubMed writes a date in (PubDate Year/Month/Day with month names and
numbers, Season, MedlineDate, the electronic ArticleDate), revisions and deletions: the dates, DateRevised values,
journals, authors, DOIs and PMCIDs are not the citations' real metadata.

Used by tests/test_literature_formats.py and bench/pubmed_register.py.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO / "data" / "corpora"
HEADER = ('<?xml version="1.0" ?>\n<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2025//EN"'
          ' "https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">\n<PubmedArticleSet>\n')
FOOTER = "</PubmedArticleSet>\n"
_LABEL = re.compile(r"(?:^|(?<=\s))([A-Z][A-Z ,&/-]{2,}[A-Z]): ")


@lru_cache(maxsize=4)
def corpus(name: str = "biored-train") -> tuple[PubTatorDoc, ...]:
    """The documents of a shipped PubTator corpus (`data/corpora/<name>.pubtator.gz`)."""
    return tuple(read_pubtator(CORPORA / f"{name}.pubtator.gz"))


@dataclass
class Citation:
    """One `<PubmedArticle>` to write: a corpus abstract with test metadata (see the module docstring)."""

    doc: PubTatorDoc
    pub_date: dict[str, str] = field(default_factory=lambda: {"Year": "2016", "Month": "Jan", "Day": "14"})
    article_date: str | None = None  # "YYYY-MM-DD": <ArticleDate DateType="Electronic">
    revised: str = "2020-01-01"  # <DateRevised>
    doi: str | None = None
    pmcid: str | None = None
    abstract: str | None = None  # another abstract text (a revision); default the corpus's
    pmid: str | None = None  # another PMID (the bench repeats the corpora under new PMIDs)
    title: str | None = None  # another title (a repeated abstract must not be the same text as its original)

    @property
    def id(self) -> str:
        return self.pmid or self.doc.pmid


def _date_elements(tag: str, parts: dict[str, str], indent: str) -> str:
    inner = "".join(f"{indent}  <{k}>{escape(v)}</{k}>\n" for k, v in parts.items())
    return f"{indent}<{tag}>\n{inner}{indent}</{tag}>\n"


def _ymd(iso: str) -> dict[str, str]:
    y, m, d = iso.split("-")
    return {"Year": y, "Month": m, "Day": d}


def abstract_parts(text: str) -> list[tuple[str | None, str]]:
    """A PubTator abstract split at its 'BACKGROUND: ' style labels (a structured abstract), else one part."""
    marks = list(_LABEL.finditer(text))
    if not marks or marks[0].start() != 0:
        return [(None, text)]
    return [(m.group(1), text[m.end(): marks[i + 1].start() if i + 1 < len(marks) else len(text)].strip())
            for i, m in enumerate(marks)]


def article_xml(c: Citation) -> str:
    """The `<PubmedArticle>` block of a citation, in the layout and indentation of PubMed's own files."""
    abstract = c.doc.abstract if c.abstract is None else c.abstract
    parts = "".join(
        f"        <AbstractText{' Label=' + quoteattr(label) + ' NlmCategory=' + quoteattr(label) if label else ''}>"
        f"{escape(text)}</AbstractText>\n" for label, text in abstract_parts(abstract))
    eloc = (f'      <ELocationID EIdType="doi" ValidYN="Y">{escape(c.doi)}</ELocationID>\n' if c.doi else "")
    article_date = (f'      <ArticleDate DateType="Electronic">\n'
                    + "".join(f"        <{k}>{v}</{k}>\n" for k, v in _ymd(c.article_date).items())
                    + "      </ArticleDate>\n") if c.article_date else ""
    ids = f'      <ArticleId IdType="pubmed">{c.id}</ArticleId>\n'
    ids += f'      <ArticleId IdType="doi">{escape(c.doi)}</ArticleId>\n' if c.doi else ""
    ids += f'      <ArticleId IdType="pmc">{escape(c.pmcid)}</ArticleId>\n' if c.pmcid else ""
    return (
        "<PubmedArticle>\n"
        '  <MedlineCitation Status="MEDLINE" Owner="NLM">\n'
        f'    <PMID Version="1">{c.id}</PMID>\n'
        + _date_elements("DateRevised", _ymd(c.revised), "    ")
        + '    <Article PubModel="Print-Electronic">\n'
        "      <Journal>\n"
        '        <ISSN IssnType="Electronic">1234-5678</ISSN>\n'
        '        <JournalIssue CitedMedium="Internet">\n'
        "          <Volume>12</Volume>\n"
        "          <Issue>3</Issue>\n"
        + _date_elements("PubDate", c.pub_date, "          ")
        + "        </JournalIssue>\n"
        "        <Title>Journal of Test Data</Title>\n"
        "        <ISOAbbreviation>J Test Data</ISOAbbreviation>\n"
        "      </Journal>\n"
        f"      <ArticleTitle>{escape(c.title or c.doc.title)}</ArticleTitle>\n"
        "      <Pagination>\n        <MedlinePgn>1-10</MedlinePgn>\n      </Pagination>\n"
        + eloc
        + "      <Abstract>\n" + parts
        + "        <CopyrightInformation>Test data.</CopyrightInformation>\n"
        "      </Abstract>\n"
        '      <AuthorList CompleteYN="Y">\n'
        '        <Author ValidYN="Y">\n          <LastName>Rivera</LastName>\n          <ForeName>Ana M</ForeName>\n'
        "          <Initials>AM</Initials>\n          <AffiliationInfo>\n"
        "            <Affiliation>Department of Tests, Example University.</Affiliation>\n"
        "          </AffiliationInfo>\n        </Author>\n"
        '        <Author ValidYN="Y">\n          <CollectiveName>Test Data Consortium</CollectiveName>\n'
        "        </Author>\n"
        "      </AuthorList>\n"
        "      <Language>eng</Language>\n"
        "      <PublicationTypeList>\n"
        '        <PublicationType UI="D016428">Journal Article</PublicationType>\n'
        "      </PublicationTypeList>\n"
        + article_date
        + "    </Article>\n"
        "    <MedlineJournalInfo>\n      <Country>United States</Country>\n      <MedlineTA>J Test Data</MedlineTA>\n"
        "    </MedlineJournalInfo>\n"
        '    <CommentsCorrectionsList>\n      <CommentsCorrections RefType="CommentIn">\n'
        "        <RefSource>J Test Data. 2017;13:1.</RefSource>\n"
        '        <PMID Version="1">99999999</PMID>\n'
        "      </CommentsCorrections>\n    </CommentsCorrectionsList>\n"
        "  </MedlineCitation>\n"
        "  <PubmedData>\n"
        "    <History>\n"
        '      <PubMedPubDate PubStatus="entrez">\n        <Year>2024</Year>\n        <Month>1</Month>\n'
        "        <Day>2</Day>\n      </PubMedPubDate>\n"
        "    </History>\n"
        "    <PublicationStatus>ppublish</PublicationStatus>\n"
        "    <ArticleIdList>\n" + ids + "    </ArticleIdList>\n"
        "    <ReferenceList>\n      <Reference>\n        <Citation>A cited paper.</Citation>\n"
        '        <ArticleIdList>\n          <ArticleId IdType="pubmed">11111111</ArticleId>\n'
        '          <ArticleId IdType="doi">10.9999/cited</ArticleId>\n        </ArticleIdList>\n'
        "      </Reference>\n    </ReferenceList>\n"
        "  </PubmedData>\n"
        "</PubmedArticle>\n"
    )


def deletion_xml(pmids: list[str]) -> str:
    return "<DeleteCitation>\n" + "".join(f'  <PMID Version="1">{p}</PMID>\n' for p in pmids) + "</DeleteCitation>\n"


def write_medline(path: Path, citations: list[Citation], deleted: list[str] = ()) -> Path:
    """A PubmedArticleSet file (gzip when the name ends in .gz), deletions after the citations as in update files."""
    text = HEADER + "".join(article_xml(c) for c in citations) + (deletion_xml(list(deleted)) if deleted else "")
    text += FOOTER
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


# ---------------------------------------------------------------- every date form PubMed writes (test data)
@dataclass(frozen=True)
class DateCase:
    pub_date: dict[str, str]
    article_date: str | None
    expected: dt.date
    precision: str
    source: str  # a piece of the expected pub_date_source


DATE_CASES: list[DateCase] = [
    # ArticleDate (electronic, a full day) inside the month: the exact day wins
    DateCase({"Year": "2016", "Month": "Jan", "Day": "14"}, "2016-01-10", dt.date(2016, 1, 10), "day", "ArticleDate"),
    # a full PubDate, month as a number, no ArticleDate
    DateCase({"Year": "2015", "Month": "12", "Day": "08"}, None, dt.date(2015, 12, 8), "day", "PubDate '2015 12 08'"),
    # year and month only: the 1st, stated
    DateCase({"Year": "2003", "Month": "Mar"}, None, dt.date(2003, 3, 1), "month", "PubDate '2003 Mar'"),
    # a season
    DateCase({"Year": "2001", "Season": "Summer"}, None, dt.date(2001, 6, 1), "season", "PubDate '2001 Summer'"),
    # year only: 1 January, stated
    DateCase({"Year": "1987"}, None, dt.date(1987, 1, 1), "year", "PubDate '1987'"),
    # MedlineDate spanning two years
    DateCase({"MedlineDate": "1998 Dec-1999 Jan"}, None, dt.date(1998, 12, 1), "month",
             "MedlineDate '1998 Dec-1999 Jan'"),
    # MedlineDate with a season
    DateCase({"MedlineDate": "2000 Spring"}, None, dt.date(2000, 3, 1), "season", "MedlineDate '2000 Spring'"),
    # MedlineDate of years only
    DateCase({"MedlineDate": "1999-2000"}, None, dt.date(1999, 1, 1), "year", "MedlineDate '1999-2000'"),
    # the issue (December) came out before the article went online (January): the date wins
    DateCase({"Year": "2015", "Month": "Dec"}, "2016-01-10", dt.date(2015, 12, 1), "month", "PubDate '2015 Dec'"),
    # a full month name and a day
    DateCase({"Year": "2010", "Month": "September", "Day": "30"}, None, dt.date(2010, 9, 30), "day", "PubDate"),
]


def date_citations(docs: list[PubTatorDoc] | tuple[PubTatorDoc, ...] | None = None) -> list[Citation]:
    """One citation per date case, on consecutive corpus abstracts."""
    docs = docs or corpus()
    return [Citation(doc=docs[i], pub_date=case.pub_date, article_date=case.article_date,
                     doi=f"10.9999/test.{docs[i].pmid}", pmcid=f"PMC{9000000 + i}" if i == 0 else None)
            for i, case in enumerate(DATE_CASES)]


# ---------------------------------------------------------------- two update files: a deletion and a revision
@dataclass
class UpdateFiles:
    first: Path
    second: Path
    kept: list[Citation]  # in the first file, untouched by the second
    deleted: Citation  # in the first file, withdrawn by the second
    revised: Citation  # in the first file; the second holds its revision
    revision: Citation
    added: Citation  # new in the second file


def update_files(folder: Path, docs: list[PubTatorDoc] | None = None, n_kept: int = 1) -> UpdateFiles:
    """`pubmed25n1301.xml` (n_kept + 2 citations) and `pubmed25n1302.xml.gz` (a DeleteCitation of one of them, a
    revision of another with new text and a later DateRevised, one new citation), dated on different days."""
    docs = docs or list(corpus()[20:20 + n_kept + 3])
    folder.mkdir(parents=True, exist_ok=True)
    kept = [Citation(doc=d, pub_date={"Year": "2016", "Month": "Jan", "Day": f"{10 + i:02d}"})
            for i, d in enumerate(docs[:n_kept])]
    deleted = Citation(doc=docs[n_kept], pub_date={"Year": "2016", "Month": "Feb", "Day": "03"})
    revised = Citation(doc=docs[n_kept + 1], pub_date={"MedlineDate": "2015 Nov-Dec"}, revised="2020-01-01")
    revision = replace(revised, revised="2024-06-30",
                       abstract=revised.doc.abstract + " Erratum in: J Test Data. 2024;20:5 (the revised text).")
    added = Citation(doc=docs[n_kept + 2], pub_date={"Year": "2016", "Month": "Mar"},
                     article_date="2016-02-20")
    first = write_medline(folder / "pubmed25n1301.xml", [*kept, deleted, revised])
    second = write_medline(folder / "pubmed25n1302.xml.gz", [revision, added], deleted=[deleted.id])
    return UpdateFiles(first, second, kept, deleted, revised, revision, added)


# ---------------------------------------------------------------- a big generated file (bench, streaming test)
def generated_citations(n: int, first_pmid: int = 90_000_000) -> Iterator[str]:
    """`n` citation blocks: the shipped corpora's abstracts over and over, each time under a new PMID and with its
    number after the title (the catalog knows a paper by its text too: a repeated text would be the same paper)."""
    docs = [d for name in ("biored-train", "bc5cdr-train", "ncbi-disease-train") for d in corpus(name)]
    for i in range(n):
        d = docs[i % len(docs)]
        case = DATE_CASES[i % len(DATE_CASES)]
        yield article_xml(Citation(doc=d, pmid=str(first_pmid + i), pub_date=case.pub_date, title=f"{d.title} [{i}]",
                                   article_date=case.article_date, doi=f"10.9999/gen.{first_pmid + i}"))


class GeneratedStream(io.RawIOBase):
    """A PubmedArticleSet of `n` generated citations as a binary stream, produced as it is read (never whole);
    `produced` counts the citations written so far."""

    def __init__(self, n: int) -> None:
        self._blocks = generated_citations(n)
        self._pending = HEADER.encode()
        self._done = False
        self.produced = 0
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while not self._done and (size < 0 or len(self._pending) < size):
            block = next(self._blocks, None)
            if block is None:
                self._pending += FOOTER.encode()
                self._done = True
            else:
                self._pending += block.encode()
                self.produced += 1
        size = len(self._pending) if size < 0 else size
        out, self._pending = self._pending[:size], self._pending[size:]
        self.bytes_read += len(out)
        return out


def write_generated(path: Path, n: int) -> Path:
    """A MEDLINE-layout file of `n` generated citations (gzip when the name ends in .gz), written block by block."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as fh:  # type: ignore[operator]
        fh.write(HEADER)
        for block in generated_citations(n):
            fh.write(block)
        fh.write(FOOTER)
    return path


# ---------------------------------------------------------------- BioC XML and JSON of PubTator documents
def _cited(day: dt.date) -> str:
    return f"{day.year} {day.strftime('%b')} {day.day}"


def _bioc_parts(doc: PubTatorDoc, day: dt.date) -> tuple[list[dict], list[dict]]:
    """Passages (title at offset 0, abstract at len(title) + 1, PubTator3's layout) with their annotations (document
    offsets), and relations; the mentions go to the passage that holds them. `day`: test data (module docstring)."""
    passages = [{"infons": {"type": "title", "section_type": "TITLE",
                            "journal": f"J Test Data. {_cited(day)};12(3):1-10. doi: 10.9999/bioc.{doc.pmid}",
                            "year": str(day.year), "authors": "Rivera AM, Test Data Consortium"},
                 "offset": 0, "text": doc.title, "annotations": []}]
    if doc.abstract:
        passages.append({"infons": {"type": "abstract", "section_type": "ABSTRACT"}, "offset": len(doc.title) + 1,
                         "text": doc.abstract, "annotations": []})
    for i, m in enumerate(doc.mentions):
        target = passages[1] if len(passages) > 1 and m.start >= passages[1]["offset"] else passages[0]
        infons = {"type": m.type}
        if m.identifier:
            infons["identifier"] = m.identifier
        target["annotations"].append({"id": f"T{i}", "infons": infons, "text": m.text,
                                      "locations": [{"offset": m.start, "length": m.end - m.start}]})
    relations = []
    for i, r in enumerate(doc.relations):
        infons = {"type": r.relation, "role1": {"identifier": r.id1}, "role2": {"identifier": r.id2}}
        if r.novel is not None:
            infons["novel"] = r.novel
        relations.append({"id": f"R{i}", "infons": infons, "nodes": []})
    return passages, relations


def _days(docs: list[PubTatorDoc], days: list[dt.date] | None) -> list[dt.date]:
    return days or [dt.date(2016, 1, 14)] * len(docs)


def bioc_json(docs: list[PubTatorDoc], path: Path, style: str = "pubtator3", days: list[dt.date] | None = None) -> Path:
    """BioC JSON: PubTator3's export (`{"PubTator3": [...]}`, relations with role1/role2, its `date` field) or a
    BioC collection (`{"source": ..., "documents": [...]}`); `days`: each document's date (test data)."""
    out = []
    for d, day in zip(docs, _days(docs, days), strict=True):
        passages, relations = _bioc_parts(d, day)
        entry = {"_id": f"{d.pmid}|None", "id": d.pmid, "infons": {}, "passages": passages, "relations": relations}
        if style == "pubtator3":
            entry.update({"pmid": int(d.pmid), "pmcid": None, "journal": "J Test Data",
                          "date": f"{day.isoformat()}T00:00:00Z", "authors": ["Rivera AM", "Test Data Consortium"]})
        out.append(entry)
    body = {"PubTator3": out} if style == "pubtator3" else {"source": "PubTator", "date": "20260101",
                                                             "key": "BioC.key", "infons": {}, "documents": out}
    path.write_text(json.dumps(body, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def bioc_xml(docs: list[PubTatorDoc], path: Path, days: list[dt.date] | None = None) -> Path:
    """A BioC XML collection; relations as BioRED writes them (entity1/entity2 infons); each document dated by
    its title passage's journal citation string (`days`: test data)."""
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<!DOCTYPE collection SYSTEM \"BioC.dtd\">", "<collection>",
             "  <source>PubTator</source>", "  <date>20260101</date>", "  <key>BioC.key</key>"]
    for d, day in zip(docs, _days(docs, days), strict=True):
        passages, relations = _bioc_parts(d, day)
        lines += ["  <document>", f"    <id>{d.pmid}</id>"]
        for p in passages:
            lines.append("    <passage>")
            lines += [f"      <infon key={quoteattr(k)}>{escape(v)}</infon>" for k, v in p["infons"].items()]
            lines += [f"      <offset>{p['offset']}</offset>", f"      <text>{escape(p['text'])}</text>"]
            for a in p["annotations"]:
                lines.append(f"      <annotation id={quoteattr(a['id'])}>")
                lines += [f"        <infon key={quoteattr(k)}>{escape(v)}</infon>" for k, v in a["infons"].items()]
                lines += [f"        <location offset=\"{loc['offset']}\" length=\"{loc['length']}\"/>"
                          for loc in a["locations"]]
                lines += [f"        <text>{escape(a['text'])}</text>", "      </annotation>"]
            lines.append("    </passage>")
        for r in relations:
            lines.append(f"    <relation id={quoteattr(r['id'])}>")
            inf = r["infons"]
            lines += [f"      <infon key=\"entity1\">{escape(inf['role1']['identifier'])}</infon>",
                      f"      <infon key=\"entity2\">{escape(inf['role2']['identifier'])}</infon>",
                      f"      <infon key=\"type\">{escape(inf['type'])}</infon>"]
            if "novel" in inf:
                lines.append(f"      <infon key=\"novel\">{escape(inf['novel'])}</infon>")
            lines.append("    </relation>")
        lines.append("  </document>")
    lines.append("</collection>")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
