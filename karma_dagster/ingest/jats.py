"""PMC JATS XML (the gold-standard text of an article): metadata from <front>, sections from <sec>.

The stdlib parser is enough: PMC files carry only numeric character references, and it never fetches the
external DTD named in the DOCTYPE (no network, no XXE). Figures and tables become their own `figure`/`table`
sections, placed after the section that cites them, so the running text stays unbroken.
"""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.headings import heading_kind
from karma_dagster.ingest.text import clean_doi
from karma_dagster.schemas.records import ParsedDocument, RawSection, SectionKind

MAX_XML_DEPTH = 200  # elements nested inside each other; see _parse_bounded
_FLOATS = {"fig", "table-wrap", "fig-group", "table-wrap-group", "boxed-text", "supplementary-material"}
_SKIP_IN_TEXT = _FLOATS | {"alternatives", "graphic", "inline-graphic", "media", "object-id", "label"}
_SEC_TYPE_KIND: dict[str, SectionKind] = {
    "intro": "introduction", "introduction": "introduction", "background": "background",
    "methods": "methods", "materials|methods": "methods", "materials": "methods", "subjects": "methods",
    "results": "results", "discussion": "discussion", "results|discussion": "results",
    "conclusions": "conclusion", "conclusion": "conclusion", "cases": "case", "case-report": "case",
    "supplementary-material": "other", "COI-statement": "conflicts", "funding-information": "funding",
    "acknowledgment": "acknowledgements", "acknowledgement": "acknowledgements",
}


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _ws(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _text(el: ET.Element | None, skip: set[str] = _SKIP_IN_TEXT) -> str:
    """Text of an element without the floats and labels nested in it.

    Walked with an explicit stack, not recursion, so that no nesting depth turns into a RecursionError.
    """
    if el is None:
        return ""
    parts: list[str] = []
    stack: list[ET.Element | str] = [el]  # an element to visit, or a tail string to emit
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
            continue
        if item.text:
            parts.append(item.text)
        for child in reversed(item):
            if child.tail:
                stack.append(child.tail)
            if _local(child.tag) not in skip:
                stack.append(child)
    return _ws("".join(parts))


def _child(el: ET.Element | None, name: str) -> ET.Element | None:
    if el is None:
        return None
    for child in el:
        if _local(child.tag) == name:
            return child
    return None


def _children(el: ET.Element | None, name: str) -> list[ET.Element]:
    return [] if el is None else [c for c in el if _local(c.tag) == name]


def _pub_date(meta: ET.Element) -> dt.date | None:
    """The most precise of the epub / ppub / collection dates; year-only dates are not guessed into a day."""
    best: tuple[int, int, dt.date] | None = None
    preference = {"epub": 3, "electronic": 3, "pub": 2, "ppub": 1, "print": 1, "collection": 0}
    for el in _children(meta, "pub-date"):
        kind = el.get("pub-type") or el.get("publication-format") or el.get("date-type") or ""
        try:
            year = int(_text(_child(el, "year")))
            month = int(_text(_child(el, "month")) or 0)
            day = int(_text(_child(el, "day")) or 0)
            if not month:
                continue
            date = dt.date(year, month, day or 1)
        except ValueError:
            continue
        rank = (2 if day else 1, preference.get(kind, 0), date)
        if best is None or rank[:2] > best[:2]:
            best = rank
    return best[2] if best else None


def _authors(meta: ET.Element) -> list[str]:
    names: list[str] = []
    for group in _children(meta, "contrib-group"):
        for contrib in _children(group, "contrib"):
            if contrib.get("contrib-type", "author") != "author":
                continue
            name = _child(contrib, "name")
            if name is not None:
                given, surname = _text(_child(name, "given-names")), _text(_child(name, "surname"))
                names.append(_ws(f"{given} {surname}"))
            elif (collab := _child(contrib, "collab")) is not None:
                names.append(_text(collab))
    return [n for n in names if n]


def _license(meta: ET.Element) -> str | None:
    permissions = _child(meta, "permissions")
    lic = _child(permissions, "license")
    if lic is None:
        return None
    text = _text(lic)
    href = next((v for k, v in lic.attrib.items() if k.endswith("href")), None)
    if href and href not in text:
        text = f"{text} ({href})" if text else href
    return text or None


def _float_section(el: ET.Element) -> list[RawSection]:
    name = _local(el.tag)
    if name in ("fig-group", "table-wrap-group"):
        return [s for child in el if _local(child.tag) in _FLOATS for s in _float_section(child)]
    kind: SectionKind = "table" if name == "table-wrap" else "figure" if name == "fig" else "other"
    label = _text(_child(el, "label"))
    caption = _text(_child(el, "caption"))
    lines = [caption] if caption else []
    if kind == "table":
        for row in el.iter():
            if _local(row.tag) == "tr":
                cells = [_text(c) for c in row if _local(c.tag) in ("td", "th")]
                if any(cells):
                    lines.append(" | ".join(cells))
        foot = _child(el, "table-wrap-foot")
        if foot is not None:
            lines.append(_text(foot))
    text = "\n".join(line for line in lines if line)
    return [RawSection(heading=label or name, kind=kind, text=text)] if text else []


def _floats_within(el: ET.Element) -> list[ET.Element]:
    """Floats inside a section's own paragraphs (not inside its subsections)."""
    found: list[ET.Element] = []

    def walk(node: ET.Element) -> None:
        for child in node:
            name = _local(child.tag)
            if name in _FLOATS:
                found.append(child)
            elif name != "sec":
                walk(child)

    walk(el)
    return found


def _sec_kind(sec: ET.Element, title: str, parent: SectionKind | None) -> SectionKind:
    sec_type = sec.get("sec-type", "")
    if sec_type in _SEC_TYPE_KIND:
        return _SEC_TYPE_KIND[sec_type]
    found = heading_kind(title) if title else None
    if found is not None:
        return found
    return parent if parent is not None else "body"


def _sections_of(sec: ET.Element, parent: SectionKind | None, out: list[RawSection]) -> None:
    title = _text(_child(sec, "title"))
    kind = _sec_kind(sec, title, parent)
    paragraphs = []
    for child in sec:
        name = _local(child.tag)
        if name in ("title", "label", "sec") or name in _FLOATS:
            continue
        if name == "ref-list":
            _ref_list(child, out)
            continue
        text = _text(child)
        if text:
            paragraphs.append(text)
    if paragraphs:
        out.append(RawSection(heading=title, kind=kind, text="\n\n".join(paragraphs)))
    for fl in _floats_within(sec):
        out.extend(_float_section(fl))
    for sub in _children(sec, "sec"):
        _sections_of(sub, kind, out)


def _ref_list(el: ET.Element, out: list[RawSection]) -> None:
    refs = []
    for ref in el.iter():
        if _local(ref.tag) == "ref":
            label = _text(_child(ref, "label"))
            body = _text(ref, skip={"label"})
            refs.append(f"[{label}] {body}" if label and not body.startswith(label) else body)
    if refs:
        out.append(RawSection(heading=_text(_child(el, "title")) or "References", kind="references", text="\n".join(refs)))


def _parse_bounded(path: Path, rel: str) -> ET.Element:
    """The parsed tree, refused past MAX_XML_DEPTH levels of nesting.

    Real JATS (MathML included) nests a few dozen levels; a file nested thousands deep is broken or hostile
    and would exhaust the recursion of the section walkers, so it is refused while parsing, before any walk.
    """
    depth = 0
    events = ET.iterparse(path, events=("start", "end"))
    for event, _ in events:
        if event == "start":
            depth += 1
            if depth > MAX_XML_DEPTH:
                raise IngestError(rel, f"XML nested more than {MAX_XML_DEPTH} elements deep: refused "
                                       "(real JATS articles nest a few dozen levels)")
        else:
            depth -= 1
    root = events.root  # type: ignore[attr-defined]  # set once the whole file is parsed
    assert root is not None
    return root


def _read_article(path: Path, rel: str) -> tuple[ET.Element, ET.Element | None, ET.Element]:
    """The root <article>, its <front> and <article-meta>: without them there is no JATS article to read."""
    try:
        root = _parse_bounded(path, rel)
    except ET.ParseError as exc:
        raise IngestError(rel, f"not well-formed XML ({exc})") from exc
    except OSError as exc:
        raise IngestError(rel, f"cannot read file ({exc.strerror or exc})") from exc
    if _local(root.tag) != "article":
        raise IngestError(rel, f"not a JATS article (root element <{_local(root.tag)}>, expected <article>)")
    front = _child(root, "front")
    meta = _child(front, "article-meta")
    if meta is None:
        raise IngestError(rel, "JATS article without <front>/<article-meta>")
    return root, front, meta


def _pmcid(ids: dict[str, str]) -> str | None:
    """PMC files write the PMCID with or without its 'PMC' prefix; the catalog wants it with."""
    pmcid = ids.get("pmcid") or ids.get("pmc")
    if pmcid:
        pmcid = pmcid.upper() if pmcid.upper().startswith("PMC") else f"PMC{pmcid}"
    return pmcid or None


def _journal(front: ET.Element | None) -> str | None:
    journal_meta = _child(front, "journal-meta")
    return _text(_child(_child(journal_meta, "journal-title-group"), "journal-title")) or _text(
        _child(journal_meta, "journal-title")) or None


def _text_after_title(el: ET.Element) -> str:
    """Text of an element's children except its title and label (those become the section heading)."""
    return " ".join(_text(c) for c in el if _local(c.tag) not in ("title", "label"))


def _abstract_text(abstract: ET.Element) -> str:
    """A structured abstract's parts ('Background. ...') as paragraphs."""
    parts = []
    for child in abstract:
        name = _local(child.tag)
        if name == "sec":
            sub_title = _text(_child(child, "title"))
            body = _text_after_title(child)
            parts.append(f"{sub_title}. {body}".strip() if sub_title else body)
        elif name not in ("title", "label"):
            parts.append(_text(child))
    return "\n\n".join(p for p in parts if p)


def _front_sections(meta: ET.Element, title: str) -> list[RawSection]:
    """Title, affiliations and abstracts; graphical abstracts, teasers and highlights are not the abstract."""
    sections: list[RawSection] = []
    if title:
        sections.append(RawSection(heading="Title", kind="title", text=title))
    affs = [_text(a, skip={"label", "sup"}) for a in meta.iter() if _local(a.tag) == "aff"]
    if affs:
        sections.append(RawSection(heading="Affiliations", kind="affiliations", text="\n".join(affs)))
    for abstract in _children(meta, "abstract"):
        if abstract.get("abstract-type") in ("graphical", "teaser", "toc", "author-highlights"):
            continue
        text = _abstract_text(abstract)
        if text:
            sections.append(RawSection(heading="Abstract", kind="abstract", text=text))
    return sections


def _body_sections(body: ET.Element | None) -> list[RawSection]:
    """Text outside any <sec> first, then the floats it cites, then the sections in order."""
    out: list[RawSection] = []
    if body is None:
        return out
    loose = [_text(c) for c in body if _local(c.tag) not in ("sec",) and _local(c.tag) not in _FLOATS]
    if any(loose):
        out.append(RawSection(heading="", kind="body", text="\n\n".join(t for t in loose if t)))
    for fl in _floats_within(body):
        out.extend(_float_section(fl))
    for sec in _children(body, "sec"):
        _sections_of(sec, None, out)
    return out


def _footnote_sections(fn_group: ET.Element) -> list[RawSection]:
    """Back-matter footnotes: conflicts and funding statements often live here rather than in a <sec>."""
    out: list[RawSection] = []
    for fn in _children(fn_group, "fn"):
        fn_title = _text(_child(fn, "title"))
        fn_kind: SectionKind = {"conflict": "conflicts", "COI-statement": "conflicts",
                                "financial-disclosure": "funding"}.get(fn.get("fn-type", ""), "other")
        if fn_kind == "other" and fn_title:
            fn_kind = heading_kind(fn_title) or "other"
        text = _text(fn, skip=_SKIP_IN_TEXT | {"title"})
        if text:
            out.append(RawSection(heading=fn_title, kind=fn_kind, text=text))
    return out


def _back_sections(back: ET.Element | None) -> list[RawSection]:
    """References, acknowledgements, back-matter sections and footnotes, in document order."""
    out: list[RawSection] = []
    for child in back if back is not None else []:
        name = _local(child.tag)
        if name == "ref-list":
            _ref_list(child, out)
        elif name == "ack":
            text = _text_after_title(child)
            if text:
                out.append(RawSection(heading=_text(_child(child, "title")) or "Acknowledgments",
                                      kind="acknowledgements", text=_ws(text)))
        elif name == "sec":
            _sections_of(child, None, out)
        elif name == "fn-group":
            out.extend(_footnote_sections(child))
    return out


def _floats_group_sections(floats_group: ET.Element | None) -> list[RawSection]:
    """Floats PMC moved out of the text into a trailing <floats-group>."""
    if floats_group is None:
        return []
    return [s for fl in floats_group if _local(fl.tag) in _FLOATS for s in _float_section(fl)]


def parse_jats(path: Path, rel: str) -> ParsedDocument:
    """One JATS article: metadata from <article-meta>, sections from front, body, back and floats in that order."""
    root, front, meta = _read_article(path, rel)
    ids = {a.get("pub-id-type", ""): _text(a) for a in _children(meta, "article-id")}
    title = _text(_child(_child(meta, "title-group"), "article-title"))
    sections = (_front_sections(meta, title) + _body_sections(_child(root, "body"))
                + _back_sections(_child(root, "back")) + _floats_group_sections(_child(root, "floats-group")))
    if not any(s.kind not in ("title", "affiliations") for s in sections):
        raise IngestError(rel, "JATS article with neither abstract nor body text")
    doi = ids.get("doi")
    return ParsedDocument(
        source_path=rel,
        source_format="jats",
        title=title,
        authors=_authors(meta),
        journal=_journal(front),
        pub_date=_pub_date(meta),
        doi=clean_doi(doi) if doi else None,
        pmid=ids.get("pmid") or None,
        pmcid=_pmcid(ids),
        license=_license(meta),
        sections=sections,
    )
