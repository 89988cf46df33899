"""BioC XML (`<collection>`) and BioC JSON (PubTator3's export, BioC collections): documents with their gold.

Public entry points: `parse_bioc(path, rel)` (every document of a file, XML or JSON told by its first byte),
`read_bioc_gold(path)` and `gold_document(doc)` (documents as `PubTatorDoc`s, what `karma gold-eval` scores).

Each BioC `<document>` is one document: its passages become sections (the title passage the title, abstract
passages the abstract, others by their `section_type`/`type` infon), its PMID the document's `pmid` (PubTator3),
its `<id>` when numeric, or an `article-id_pmid` infon. Metadata where present: PubTator3's `journal`, `authors`
and `date` fields, the title passage's infons (`journal` citation string "J Name. 2012 Mar 19;14(2):R50. doi: ...",
`year`, `authors`, `article-id_*`). The date: PubTator3's `date` (a day), else the citation string's date, else
`year` (1 January), with its precision stated as PubMed's are (pubmed.date_of_text).

Gold: annotations (infon `type` and `identifier`, each location an offset and length into the document) become
gold mentions and relations (infons `type`/`relation` with `entity1`/`entity2` as BioRED writes them, `role1`/
`role2` as PubTator3 does, `Chemical`/`Disease` as BC5CDR does, or nodes referring to annotations) gold relations.
BioC offsets count in the document; the gold is carried into PubTator's convention, offsets into the passages'
texts joined by one space (title + " " + abstract), so a corpus scores the same from its PubTator file and its
BioC export. The texts are kept exactly as written (the offsets depend on it).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.headings import heading_kind
from karma_dagster.ingest.pubmed import PubDate, date_of_text
from karma_dagster.ingest.pubtator import PubTatorDoc
from karma_dagster.ingest.sniff import head
from karma_dagster.ingest.text import DOI_RE, clean_doi
from karma_dagster.schemas.records import GoldMention, GoldRelation, ParsedDocument, RawSection, SectionKind

_SECTION_TYPE: dict[str, SectionKind] = {
    "TITLE": "title", "ABSTRACT": "abstract", "INTRO": "introduction", "METHODS": "methods", "RESULTS": "results",
    "DISCUSS": "discussion", "CONCL": "conclusion", "CASE": "case", "REF": "references", "ACK_FUND": "acknowledgements",
    "TABLE": "table", "FIG": "figure", "COMP_INT": "conflicts", "AUTH_CONT": "other", "SUPPL": "other",
    "ABBR": "other", "APPENDIX": "other", "REVIEW_INFO": "other", "KEYWORD": "other",
}
_TITLE_TYPES = {"title", "front", "t"}
_ABSTRACT_TYPES = {"abstract", "a", "abstract_title_1"}
_ID_KEYS = ("identifier", "Identifier", "NCBI Gene", "NCBI_Gene", "MESH", "MeSH", "normalized_id")
_CITED_DATE = re.compile(r"\.\s+(\d{4}(?:\s+[A-Za-z]{3,9}\.?(?:\s+\d{1,2}\b)?)?)")


class _Annotation(BaseModel):
    id: str = ""
    infons: dict[str, Any] = {}
    text: str = ""
    locations: list[tuple[int, int]] = []  # (offset, length) in the document


class _Passage(BaseModel):
    infons: dict[str, Any] = {}
    offset: int = 0
    text: str = ""
    annotations: list[_Annotation] = []


class _Relation(BaseModel):
    id: str = ""
    infons: dict[str, Any] = {}
    nodes: list[str] = []  # the annotations it refers to (refid)


class _Document(BaseModel):
    id: str = ""
    fields: dict[str, Any] = {}  # PubTator3's top-level pmid, pmcid, journal, authors, date
    infons: dict[str, Any] = {}
    passages: list[_Passage] = []
    relations: list[_Relation] = []


# ---------------------------------------------------------------- BioC XML
def _infons(el: ET.Element) -> dict[str, Any]:
    return {i.get("key", ""): i.text or "" for i in el.findall("infon")}


def _xml_passage(el: ET.Element) -> tuple[_Passage, list[_Relation]]:
    text = el.findtext("text")
    if text is None:  # sentences instead of the passage's text: each at its offset
        base = int(el.findtext("offset") or 0)
        parts: list[str] = []
        for s in el.findall("sentence"):
            at = int(s.findtext("offset") or 0) - base
            parts.append(" " * max(0, at - len("".join(parts))) + (s.findtext("text") or ""))
        text = "".join(parts)
    annotations = [_Annotation(id=a.get("id", ""), infons=_infons(a), text=a.findtext("text") or "",
                               locations=[(int(loc.get("offset", "0")), int(loc.get("length", "0")))
                                          for loc in a.findall("location")])
                   for a in el.iter("annotation")]
    return (_Passage(infons=_infons(el), offset=int(el.findtext("offset") or 0), text=text, annotations=annotations),
            [_xml_relation(r) for r in el.iter("relation")])


def _xml_relation(el: ET.Element) -> _Relation:
    return _Relation(id=el.get("id", ""), infons=_infons(el), nodes=[n.get("refid", "") for n in el.findall("node")])


def _xml_documents(path: Path, rel: str) -> Iterator[_Document]:
    """Each `<document>` of a BioC XML file, parsed one at a time (cleared once read)."""
    try:
        depth = 0
        for event, el in ET.iterparse(path, events=("start", "end")):
            if event == "start":
                depth += 1
                if depth == 1 and el.tag != "collection":
                    raise IngestError(rel, f"not a BioC file (root element <{el.tag}>, expected <collection>)")
                continue
            depth -= 1
            if el.tag == "document" and depth == 1:
                passages, relations = [], [_xml_relation(r) for r in el.findall("relation")]
                for p in el.findall("passage"):
                    passage, inner = _xml_passage(p)
                    passages.append(passage)
                    relations += inner
                yield _Document(id=(el.findtext("id") or "").strip(), infons=_infons(el), passages=passages,
                                relations=relations)
                el.clear()
    except ET.ParseError as exc:
        raise IngestError(rel, f"not well-formed BioC XML ({exc})") from exc
    except ValueError as exc:
        raise IngestError(rel, f"malformed BioC XML: an offset or length is not a number ({exc})") from exc


# ---------------------------------------------------------------- BioC JSON
def _json_documents(path: Path, rel: str) -> Iterator[_Document]:
    """The documents of BioC JSON: a collection, PubTator3's {"PubTator3": [...]}, a list, one document, or one
    document per line (JSON Lines)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(rel, f"BioC JSON is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        raw: Any = json.loads(text)
        items = raw.get("PubTator3") or raw.get("documents") if isinstance(raw, dict) else raw
        if isinstance(raw, dict) and items is None and "passages" in raw:
            items = [raw]
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise IngestError(rel, f"not valid JSON (line {exc.lineno}: {exc.msg})") from exc
        items = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise IngestError(rel, f"not valid JSON Lines (line {lineno}: {err.msg})") from err
    if not isinstance(items, list):
        raise IngestError(rel, "not BioC JSON (expected a collection's \"documents\", PubTator3's \"PubTator3\" "
                               "or a list of documents)")
    for i, d in enumerate(items):
        if not isinstance(d, dict) or not isinstance(d.get("passages"), list):
            raise IngestError(rel, f"BioC document {i + 1}: not an object with \"passages\"")
        try:
            yield _json_document(d)
        except (TypeError, ValueError, AttributeError) as exc:
            raise IngestError(rel, f"BioC document {i + 1} ({d.get('id', '?')}): malformed ({exc})") from exc


def _json_document(d: dict) -> _Document:
    passages, relations = [], [_json_relation(r) for r in d.get("relations") or []]
    for p in d["passages"]:
        anns = [_Annotation(id=str(a.get("id", "")), infons=a.get("infons") or {}, text=a.get("text") or "",
                            locations=[(int(loc["offset"]), int(loc["length"])) for loc in a.get("locations") or []])
                for a in p.get("annotations") or []]
        passages.append(_Passage(infons=p.get("infons") or {}, offset=int(p.get("offset") or 0),
                                 text=p.get("text") or "", annotations=anns))
        relations += [_json_relation(r) for r in p.get("relations") or []]
    fields = {k: d[k] for k in ("pmid", "pmcid", "journal", "authors", "date") if d.get(k) not in (None, "", [])}
    return _Document(id=str(d.get("id") or ""), fields=fields, infons=d.get("infons") or {}, passages=passages,
                     relations=relations)


def _json_relation(r: dict) -> _Relation:
    return _Relation(id=str(r.get("id", "")), infons=r.get("infons") or {},
                     nodes=[str(n.get("refid", "")) for n in r.get("nodes") or []])


# ---------------------------------------------------------------- one document
def _kind(p: _Passage) -> SectionKind:
    ptype = str(p.infons.get("type", "")).lower()
    stype = str(p.infons.get("section_type", "")).upper()
    if ptype in _TITLE_TYPES or stype == "TITLE":
        return "title"
    if ptype in _ABSTRACT_TYPES or stype == "ABSTRACT":
        return "abstract"
    if stype in _SECTION_TYPE:
        return _SECTION_TYPE[stype]
    return heading_kind(ptype.replace("_", " ")) or ("figure" if "fig" in ptype else "table" if "table" in ptype
                                                     else "references" if ptype == "ref" else "body")


def _identifier(infons: dict[str, Any]) -> str:
    for key in _ID_KEYS:
        value = infons.get(key)
        if value not in (None, ""):
            return str(value)  # as written ("-" included: PubTator's gold writes it for "no identifier")
    return ""


def _role_id(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("identifier") or value.get("accession") or "")
    return str(value or "")


def _relation(r: _Relation, by_id: dict[str, str]) -> GoldRelation | None:
    inf = r.infons
    label = str(inf.get("type") or inf.get("relation") or "")
    pairs = [("entity1", "entity2"), ("role1", "role2"), ("Chemical", "Disease"), ("Gene1", "Gene2")]
    ids = next(((_role_id(inf[a]), _role_id(inf[b])) for a, b in pairs if a in inf and b in inf), None)
    if ids is None and len(r.nodes) >= 2:
        ids = (by_id.get(r.nodes[0], ""), by_id.get(r.nodes[1], ""))
    if not label or ids is None or not all(ids):
        return None
    novel = inf.get("novel")
    return GoldRelation(relation=label, id1=ids[0], id2=ids[1], novel=str(novel) if novel is not None else None)


def _gold(doc: _Document, parts: list[_Passage]) -> tuple[list[GoldMention], list[GoldRelation]]:
    """Annotations and relations in PubTator's convention: offsets into the passages' texts joined by one space."""
    bases, at = [], 0
    for p in parts:
        bases.append(at)
        at += len(p.text) + 1
    mentions: list[GoldMention] = []
    by_id: dict[str, str] = {}
    for p in doc.passages:
        for a in p.annotations:
            identifier = _identifier(a.infons)
            by_id[a.id] = identifier
            for offset, length in a.locations:
                home = next(((q, b) for q, b in zip(parts, bases, strict=True)
                             if q.offset <= offset and offset + length <= q.offset + len(q.text)), None)
                if home is None:
                    continue  # a location outside every passage's text (a broken file): no gold to place
                q, base = home
                start = base + offset - q.offset
                at = offset - q.offset
                text = a.text if len(a.locations) == 1 and a.text else q.text[at: at + length]
                mentions.append(GoldMention(start=start, end=start + length, text=text,
                                            type=str(a.infons.get("type", "")), identifier=identifier))
    mentions.sort(key=lambda m: (m.start, m.end))
    relations = [g for r in doc.relations if (g := _relation(r, by_id)) is not None]
    return mentions, relations


def _first(*values: Any) -> str | None:
    return next((str(v).strip() for v in values if v not in (None, "", [], "None") and str(v).strip()), None)


def _metadata(doc: _Document, title_infons: dict[str, Any]) -> dict[str, Any]:
    f, inf = doc.fields, {**doc.infons, **title_infons}
    pmid = _first(f.get("pmid"), inf.get("article-id_pmid"), doc.id if doc.id.isdigit() else None)
    pmcid = _first(f.get("pmcid"), inf.get("article-id_pmc"), doc.id if doc.id.upper().startswith("PMC") else None)
    cited = str(inf.get("journal") or "")
    doi = _first(inf.get("article-id_doi")) or (m.group(1) if (m := DOI_RE.search(cited)) else None)
    journal = _first(f.get("journal")) or (re.split(r"\.\s+\d{4}", cited, maxsplit=1)[0].strip() or None)
    authors = f.get("authors") or [a.strip() for a in str(inf.get("authors") or "").split(",") if a.strip()]
    return {"pmid": pmid if pmid and pmid.isdigit() else None,
            "pmcid": (pmcid.upper() if pmcid.upper().startswith("PMC") else f"PMC{pmcid}") if pmcid else None,
            "doi": clean_doi(doi) if doi else None, "journal": journal, "authors": [str(a) for a in authors]}


def _date(doc: _Document, title_infons: dict[str, Any]) -> PubDate | None:
    """PubTator3's `date` (a day), else the citation string's date, else `year` (1 January)."""
    raw = str(doc.fields.get("date") or "")
    if m := re.match(r"(\d{4})-(\d{2})-(\d{2})", raw):
        try:
            day = dt.date(int(m[1]), int(m[2]), int(m[3]))
            return PubDate(date=day, end=day, precision="day", source=f"BioC date '{raw}'")
        except ValueError:
            pass  # not a date: the citation string's or the year
    cited = str(title_infons.get("journal") or "")
    if m := _CITED_DATE.search(cited):
        return date_of_text(m.group(1), f"BioC journal citation '{m.group(1)}'")
    year = str(title_infons.get("year") or doc.infons.get("year") or "").strip()
    return date_of_text(year, f"BioC year '{year}'") if year.isdigit() else None


def _parsed(doc: _Document, rel: str, n: int) -> ParsedDocument:
    parts = [p for p in doc.passages if p.text.strip()]
    if not parts:
        raise IngestError(rel, f"BioC document {doc.id or n} has no passage text")
    sections, title, title_infons = [], "", {}
    for p in parts:
        kind = _kind(p)
        if kind == "title" and not title:
            title, title_infons = p.text, p.infons
            sections.append(RawSection(heading="Title", kind="title", text=p.text))
            continue
        heading = "Abstract" if kind == "abstract" else str(p.infons.get("section_type") or p.infons.get("type") or "")
        sections.append(RawSection(heading=heading, kind=kind, text=p.text))
    if title and parts[0].text != title:  # the gold text leads with the title (PubTator's title + " " + abstract)
        parts = [next(p for p in parts if p.text == title), *[p for p in parts if p.text != title]]
    mentions, relations = _gold(doc, parts)
    date = _date(doc, title_infons)
    return ParsedDocument(
        source_path=rel, source_format="bioc", title=title, sections=sections, gold_mentions=mentions,
        gold_relations=relations, pub_date=date.date if date else None,
        pub_date_precision=date.precision if date else None, pub_date_source=date.source if date else None,
        **_metadata(doc, title_infons))


def _documents(path: Path, rel: str) -> Iterator[_Document]:
    first = head(path, 4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    return _xml_documents(path, rel) if first == b"<" else _json_documents(path, rel)


def parse_bioc(path: Path, rel: str) -> list[ParsedDocument]:
    """Every document of a BioC XML or JSON file; an IngestError names the file and the document at fault."""
    docs = [_parsed(d, rel, n) for n, d in enumerate(_documents(path, rel), start=1)]
    if not docs:
        raise IngestError(rel, "no BioC documents found")
    return docs


def gold_document(doc: ParsedDocument) -> PubTatorDoc:
    """A parsed BioC document as the gold `karma gold-eval` scores: its title, the other passages joined by one
    space as the abstract, its gold mentions (offsets into title + ' ' + abstract) and relations."""
    rest = [s.text for s in doc.sections if not (s.kind == "title" and s.text == doc.title)]
    return PubTatorDoc(pmid=doc.pmid or doc.pmcid or "", title=doc.title, abstract=" ".join(rest),
                       mentions=doc.gold_mentions, relations=doc.gold_relations)


def read_bioc_gold(path: Path) -> list[PubTatorDoc]:
    """The documents of a BioC file as `karma gold-eval` reads a PubTator file (`gold_document`)."""
    return [gold_document(doc) for doc in parse_bioc(path, path.name)]
