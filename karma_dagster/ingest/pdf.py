"""PDF articles through pymupdf: text blocks, fonts and positions turned into labelled sections.

No model is needed here, so every backbone shares this parse. The layout carries the structure: the body
font size is the most common one; section headings are short bold or larger lines (numbered "2.1." ones
are subsections of their parent); the title is the largest font on page 1; running headers, page numbers,
text inside figures (small or rotated) are removed; words hyphenated at line ends are joined on the
document's own evidence. Damaged, encrypted, empty, image-only and over-long files raise `IngestError`.
Page-1 front matter is metadata, not findings: the licence block becomes `license`, the author line and the
correspondence address join the affiliations; back matter keeps its kind (references, acknowledgements, ...),
which keeps it out of the document text.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pymupdf

from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.headings import heading_depth, heading_kind
from karma_dagster.ingest.text import PMCID_RE, PMID_RE, find_doi, join_lines, parse_printed_date, word_vocabulary
from karma_dagster.schemas.records import ParsedDocument, RawSection, SectionKind

DEFAULT_MAX_PAGES = 300
_TEXT_FLAGS = pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_MEDIABOX_CLIP  # ligatures expanded by MuPDF
_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi", re.I)
_CAPTION = re.compile(r"^(fig(?:ure)?\.?|table|scheme|chart|box)\s*(S?\d+[A-Za-z]?)\s*[:.|\-–—]?", re.I)
_RUN_IN = re.compile(r"^\d+(\.\d+)+\.?\s")
_FRONT_OTHER = re.compile(r"^(correspondence|received|accepted|revised|published|academic editor|edited by|"
                          r"copyright|©|keywords?|key words|citation|how to cite|open access)", re.I)
_INSTITUTION = re.compile(r"\b(universit|department|institut|hospital|college|school|faculty|cent(er|re)|"
                          r"laborator|division|clinics?\b|foundation|ministry)", re.I)
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
# "Published 14 January 2016", "PUBLISHED: Jan. 14, 2016", "published online 2016-01-14": journals print all three
_PUBLISHED = re.compile(rf"\bpublished(?:\s+online)?(?:\s+on)?\s*[:.]?\s*(\d{{1,2}}\s+{_MONTH}\s*,?\s+\d{{4}}"
                        rf"|{_MONTH}\s+\d{{1,2}}\s*,?\s+\d{{4}}|\d{{4}}-\d{{2}}-\d{{2}})", re.I)
_LICENSE_BLOCK = re.compile(r"creative commons|licen[cs]e|this is an open access|copyright|©", re.I)
_CORRESPONDENCE = re.compile(r"^correspond", re.I)


@dataclass
class _Line:
    text: str
    size: float
    bold: bool
    italic: bool
    bbox: tuple[float, float, float, float]
    spans: list[dict]


@dataclass
class _Block:
    page: int
    bbox: tuple[float, float, float, float]
    lines: list[_Line] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(ln.text for ln in self.lines).strip()

    @property
    def size(self) -> float:
        sizes: Counter[float] = Counter()
        for ln in self.lines:
            sizes[ln.size] += len(ln.text)
        return sizes.most_common(1)[0][0] if sizes else 0.0

    @property
    def bold(self) -> bool:
        return all(ln.bold for ln in self.lines)


def _span_bold(span: dict) -> bool:
    return bool(span["flags"] & 16) or bool(_BOLD_FONT.search(span["font"]))


def _line_of(raw: dict) -> _Line | None:
    spans = [s for s in raw["spans"] if s["text"]]
    parts: list[str] = []
    for prev, span in zip([None, *spans], spans):
        # a visible gap between two spans is a space the PDF did not write as a character
        if (prev is not None and not prev["text"].endswith(" ") and not span["text"].startswith(" ")
                and span["bbox"][0] - prev["bbox"][2] > 0.15 * min(prev["size"], span["size"])):
            parts.append(" ")
        parts.append(span["text"])
    text = re.sub(r"\s+", " ", "".join(parts)).strip()
    if not text:
        return None
    weights: Counter[float] = Counter()
    for s in spans:
        weights[round(s["size"] * 2) / 2] += len(s["text"].strip()) or 0
    size = weights.most_common(1)[0][0]
    main = [s for s in spans if s["text"].strip() and not s["flags"] & 1] or spans
    return _Line(
        text=text,
        size=size,
        bold=all(_span_bold(s) for s in main if s["text"].strip()),
        italic=all(bool(s["flags"] & 2) for s in main if s["text"].strip()),
        bbox=tuple(raw["bbox"]),  # type: ignore[arg-type]
        spans=spans,
    )


def _open(path: Path, rel: str, max_pages: int) -> pymupdf.Document:
    try:
        with path.open("rb") as fh:
            head = fh.read(1024)
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 2048))
            tail = fh.read()
    except OSError as exc:
        raise IngestError(rel, f"cannot read file ({exc.strerror or exc})") from exc
    if size == 0:
        raise IngestError(rel, "empty file (0 bytes), not a PDF")
    if b"%PDF-" not in head:
        start = head.lstrip()[:12]
        what = ("an HTML/XML document" if start.startswith(b"<") else "a ZIP archive" if start.startswith(b"PK")
                else f"data starting with {start[:8]!r}")
        raise IngestError(rel, f"not a PDF: no %PDF- header, the file is {what}")
    if b"%%EOF" not in tail:
        raise IngestError(rel, "truncated or damaged PDF: no %%EOF end marker (the file was cut short?)")
    try:
        doc = pymupdf.open(path, filetype="pdf")
    except Exception as exc:  # mupdf raises FileDataError / RuntimeError subclasses
        detail = str(exc).replace(str(path), rel)  # never leak an absolute machine path into stored messages
        raise IngestError(rel, f"corrupt PDF, mupdf cannot open it ({detail})") from exc
    if doc.needs_pass:
        doc.close()
        raise IngestError(rel, "encrypted PDF: a password is needed to read it")
    if doc.page_count == 0:
        repaired = doc.is_repaired
        doc.close()
        if repaired:
            raise IngestError(rel, "damaged PDF: its cross-reference table had to be rebuilt and no page was "
                                   "found (truncated or corrupt file)")
        raise IngestError(rel, "PDF with zero pages")
    if doc.page_count > max_pages:
        n = doc.page_count
        doc.close()
        raise IngestError(rel, f"too long: {n} pages, over the limit of {max_pages} pages (max_pdf_pages)")
    return doc


def _read_pages(doc: pymupdf.Document, rel: str) -> tuple[list[_Block], list[float], list[int]]:
    blocks: list[_Block] = []
    heights: list[float] = []
    image_only: list[int] = []
    for pno in range(doc.page_count):
        try:
            page = doc[pno]
            data = page.get_text("dict", flags=_TEXT_FLAGS)
            n_images = len(page.get_images(full=False))
        except Exception as exc:
            raise IngestError(rel, f"corrupt PDF: page {pno + 1} cannot be read ({exc})") from exc
        heights.append(page.rect.height)
        n_chars = 0
        for raw in data["blocks"]:
            if raw.get("type", 0) != 0:
                continue
            block = _Block(page=pno, bbox=tuple(raw["bbox"]))  # type: ignore[arg-type]
            for raw_line in raw["lines"]:
                if abs(raw_line["dir"][1]) > 0.2:  # rotated text: axis labels inside figures
                    continue
                line = _line_of(raw_line)
                if line is not None:
                    block.lines.append(line)
                    n_chars += len(line.text)
            if block.lines:
                blocks.append(block)
        if n_chars < 20 and n_images:
            image_only.append(pno)
    return blocks, heights, image_only


def _norm_key(text: str) -> str:
    return re.sub(r"\d+", "#", text.lower()).strip()


def _drop_running_lines(blocks: list[_Block], heights: list[float]) -> None:
    """Remove running headers/footers (repeated in the page margins) and bare page numbers."""
    def in_margin(b: _Block, ln: _Line) -> bool:
        h = heights[b.page]
        return ln.bbox[3] < 0.1 * h or ln.bbox[1] > 0.9 * h

    pages_of: dict[str, set[int]] = {}
    for b in blocks:
        for ln in b.lines:
            if in_margin(b, ln):
                pages_of.setdefault(_norm_key(ln.text), set()).add(b.page)
    n_pages = len(heights)
    repeated = {k for k, pages in pages_of.items() if len(pages) >= max(2, int(0.3 * n_pages))}
    for b in blocks:
        b.lines = [ln for ln in b.lines if not (in_margin(b, ln) and (
            _norm_key(ln.text) in repeated or re.fullmatch(r"(page\s*)?\d{1,4}(\s*(of|/)\s*\d+)?", ln.text.lower())))]
    blocks[:] = [b for b in blocks if b.lines]


def _body_size(blocks: list[_Block]) -> float:
    sizes: Counter[float] = Counter()
    for b in blocks:
        for ln in b.lines:
            sizes[ln.size] += len(ln.text)
    return sizes.most_common(1)[0][0]


def _is_heading(b: _Block, body: float) -> bool:
    text = b.text
    if len(b.lines) > 3 or len(text) > 150 or not re.search(r"[A-Za-z]{3}", text) or _CAPTION.match(text):
        return False
    if len(b.lines) == 1 and heading_kind(text) is not None and len(text) < 60 and not text.endswith(","):
        return b.bold or b.size >= body or text.isupper() or heading_kind(text) in ("references", "acknowledgements")
    if re.search(r"[.,;:]$", text) and not re.match(r"^\d+(\.\d+)*\.?\s", text):
        return False
    return (b.bold and b.size >= body - 0.5) or b.size >= body + 1.0


def _title_of(blocks: list[_Block]) -> tuple[int, str]:
    """Index of the block holding the largest font on page 1, and the title text (article-type labels removed)."""
    first = [i for i, b in enumerate(blocks) if b.page == 0]
    if not first:
        return -1, ""
    best = max(first, key=lambda i: (max(ln.size for ln in blocks[i].lines), -i))
    top = max(ln.size for ln in blocks[best].lines)
    lines = [ln for ln in blocks[best].lines if ln.size >= top - 0.5]
    fonts: Counter[str] = Counter()
    for ln in lines:
        for s in ln.spans:
            fonts[s["font"]] += len(s["text"])
    main_font = fonts.most_common(1)[0][0]
    kept = [ln.text for ln in lines if any(s["font"] == main_font for s in ln.spans)]
    return best, " ".join(kept).strip()


def _authors_of(b: _Block) -> list[str]:
    text = "".join(s["text"] if not s["flags"] & 1 else " " for ln in b.lines for s in ln.spans + [{"text": " ", "flags": 0}])
    text = re.sub(r"[\d*†‡§¶]+(,[\d*†‡§¶]+)*", " ", text)
    parts = re.split(r",|\band\b|;", text)
    names = [re.sub(r"\s+", " ", p).strip(" ,") for p in parts]
    return [n for n in names if n and len(n.split()) <= 6 and re.search(r"[A-Za-z]", n)]


def _license_of(text: str) -> str | None:
    sentences = re.split(r"(?<=\.)\s+", text)
    keep = [s for s in sentences if re.search(r"creative commons|licen[cs]e|open access", s, re.I)]
    return " ".join(keep) or None


def _pdf_title(meta: dict) -> str:
    title = (meta or {}).get("title") or ""
    return title if len(title.split()) >= 3 and not re.search(r"\.(dvi|docx?|tex|pdf|indd)$", title, re.I) else ""


@dataclass
class _Layout:
    """What the phases after reading share: the cleaned blocks and where title, headings and body start."""

    blocks: list[_Block]
    body: float  # the body font size
    vocab: set[str]  # the document's own words, to undo line-end hyphenation
    title_idx: int
    title: str
    headings: list[int]
    first_heading: int  # index of the block that starts the body
    front: list[int]  # front-matter block indices, ascending

    def text_of(self, i: int) -> str:
        return join_lines([ln.text for ln in self.blocks[i].lines], self.vocab)


@dataclass
class _Front:
    """Page-1 blocks sorted by role; `candidates` are the unclaimed ones, where an unlabelled abstract hides."""

    authors: list[str] = field(default_factory=list)
    license: str | None = None
    others: list[str] = field(default_factory=list)
    affiliations: list[str] = field(default_factory=list)
    abstract_parts: list[str] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)


@dataclass
class _Float:
    heading: str
    kind: SectionKind
    lines: list[str]


def _read_pdf(path: Path, rel: str, max_pages: int) -> tuple[dict, list[_Block], list[float]]:
    """Info dictionary, text blocks and page heights; the file is closed before any layout work."""
    doc = _open(path, rel, max_pages)
    try:
        meta = dict(doc.metadata or {})
        blocks, heights, image_only = _read_pages(doc, rel)
        n_pages = doc.page_count
    finally:
        doc.close()
    _refuse_scans(blocks, image_only, n_pages, rel)
    return meta, blocks, heights


def _refuse_scans(blocks: list[_Block], image_only: list[int], n_pages: int, rel: str) -> None:
    """Scanned pages need OCR, which is not done here: say so instead of returning a near-empty document."""
    if sum(len(b.text) for b in blocks) < 50:
        what = "its pages hold only images (a scan?)" if image_only else "its pages hold no text"
        raise IngestError(rel, f"no text layer: {what}; OCR is not done here ({n_pages} page(s))")
    if len(image_only) * 2 > n_pages:
        raise IngestError(rel, f"{len(image_only)} of {n_pages} pages have no text layer, only images (scanned "
                               "pages?); OCR is not done here")


def _first_heading(blocks: list[_Block], headings: list[int], title_idx: int) -> int:
    """Where the body starts: the first structural heading after the title (bold author lines are not headings)."""
    after_title = [i for i in headings if i > title_idx]
    structural = [i for i in after_title if heading_kind(blocks[i].text) or re.match(r"^\d+\.?\s", blocks[i].text)]
    first = next(iter(structural or after_title), len(blocks))
    if first != len(blocks) and blocks[first].page > 1:
        return title_idx + 1  # no structure on the first pages: only the title is front matter
    return first


def _front_indices(blocks: list[_Block], title_idx: int, first_heading: int) -> list[int]:
    """Page-1 blocks before the first heading, plus page-1 blocks printed above the title (journal banners)."""
    title_top = blocks[title_idx].bbox[1] if title_idx >= 0 else 0.0
    front = [i for i in range(first_heading) if blocks[i].page == 0]
    front += [i for i, b in enumerate(blocks) if i >= first_heading and b.page == 0 and b.bbox[3] <= title_top]
    return sorted(front)


def _layout(blocks: list[_Block]) -> _Layout:
    """Body font, title, headings and the front/body boundary: the structure the font sizes reveal."""
    body = _body_size(blocks)
    vocab = word_vocabulary("\n".join(ln.text for ln in b.lines) for b in blocks)
    title_idx, title = _title_of(blocks)
    headings = [i for i, b in enumerate(blocks) if i != title_idx and _is_heading(b, body)]
    first_heading = _first_heading(blocks, headings, title_idx)
    return _Layout(blocks=blocks, body=body, vocab=vocab, title_idx=title_idx, title=title, headings=headings,
                   first_heading=first_heading, front=_front_indices(blocks, title_idx, first_heading))


def _sort_front(lay: _Layout) -> _Front:
    """Tell abstract, notes and licence, the author line and affiliations apart among the front-matter blocks."""
    front = _Front()
    for i in lay.front:
        b = lay.blocks[i]
        text = lay.text_of(i)
        if i == lay.title_idx:
            rest = [ln.text for ln in b.lines if ln.text not in lay.title]
            if rest:
                front.others.append(" ".join(rest))
            continue
        if re.match(r"^abstract\b", text, re.I):
            front.abstract_parts.append(re.sub(r"^abstract[\s.:—-]*", "", text, flags=re.I))
        elif _FRONT_OTHER.match(text) or re.search(r"creative commons|this is an open access", text, re.I):
            if _LICENSE_BLOCK.search(text):  # kept as the document's licence, not as text to read
                front.license = front.license or _license_of(text)
            elif _CORRESPONDENCE.match(text):  # an author's address: with the affiliations
                front.affiliations.append(text)
            else:
                front.others.append(text)
        elif (not front.authors and i > lay.title_idx and b.size >= lay.body and b.bold and len(text) < 600
              and not re.search(r"\.\s+[A-Z][a-z]+\s+[a-z]+", text)):
            front.authors = _authors_of(b)
            front.affiliations.append(text)  # the author line: who wrote it is metadata, not findings
        elif _INSTITUTION.search(text[:80]) and len(re.findall(r"\.\s+[A-Z][a-z]", text)) < 3 and len(text) < 1500:
            front.affiliations.append(text)
        else:
            front.candidates.append(i)
    return front


def _front_sections(lay: _Layout, front: _Front) -> list[RawSection]:
    """Title, affiliations, other front matter and abstract; without an 'Abstract' label the longest
    unclaimed block of 40+ words is taken for it (many case reports print the abstract unlabelled)."""
    if not front.abstract_parts and front.candidates:
        best = max(front.candidates, key=lambda i: len(lay.blocks[i].text))
        if len(lay.blocks[best].text.split()) >= 40:
            front.abstract_parts.append(lay.text_of(best))
            front.candidates.remove(best)
    others = front.others + [lay.text_of(i) for i in front.candidates]
    sections: list[RawSection] = []
    if lay.title:
        sections.append(RawSection(heading="Title", kind="title", text=lay.title))
    if front.affiliations:
        sections.append(RawSection(heading="Affiliations", kind="affiliations", text="\n".join(front.affiliations)))
    if others:
        sections.append(RawSection(heading="Front matter", kind="other", text="\n".join(others)))
    if front.abstract_parts:
        sections.append(RawSection(heading="Abstract", kind="abstract", text="\n\n".join(front.abstract_parts)))
    return sections


def _run_in_lead(b: _Block, text: str) -> str | None:
    """The bold or italic lead of a paragraph opening with '2.1.': a run-in subsection heading."""
    first = b.lines[0].spans
    if not (_RUN_IN.match(text) and first and (first[0]["flags"] & 2 or _span_bold(first[0]))):
        return None
    style = (first[0]["flags"] & 2, _span_bold(first[0]))
    lead = ""
    for ln in b.lines:
        for s in ln.spans:
            if (s["flags"] & 2, _span_bold(s)) != style:
                break
            lead += s["text"]
        else:
            lead += " "
            continue
        break
    lead = re.sub(r"\s+", " ", lead).strip()
    return lead if 3 <= len(lead) <= 150 else None


class _BodyWriter:
    """Collects body paragraphs under the current heading; figures and tables wait until the section ends,
    so the running text stays unbroken."""

    def __init__(self, vocab: set[str], body: float) -> None:
        self.vocab = vocab
        self.body = body
        self.heading = ""
        self.kind: SectionKind = "body"
        self.parent_kind: SectionKind = "body"
        self.paragraphs: list[str] = []
        self.floats: list[RawSection] = []
        self.open_float: _Float | None = None
        self.sections: list[RawSection] = []

    def flush(self) -> None:
        """End the current section: its paragraphs, then the figures and tables met inside it."""
        if self.paragraphs:
            self.sections.append(RawSection(heading=self.heading, kind=self.kind, text="\n\n".join(self.paragraphs)))
            self.paragraphs.clear()
        self.sections.extend(self.floats)
        self.floats.clear()
        self.open_float = None

    def close_float(self) -> None:
        if self.open_float is not None:
            fl = self.open_float
            self.floats.append(RawSection(heading=fl.heading, kind=fl.kind, text="\n".join(fl.lines)))
            self.open_float = None

    def start_section(self, b: _Block, top_size: float) -> None:
        """A heading block; an unnumbered heading smaller than the top-level ones is a subsection."""
        self.close_float()
        self.flush()
        self.heading = re.sub(r"\s+", " ", b.text)
        found = heading_kind(self.heading)
        depth = heading_depth(self.heading)
        if depth == 1 and b.size < top_size - 0.5 and not re.match(r"^\d", self.heading):
            depth = 2
        self.kind = found or (self.parent_kind if depth > 1 else "body")
        if depth == 1:
            self.parent_kind = self.kind

    def add_block(self, b: _Block, text: str) -> None:
        """A non-heading block: a caption opens a float, small text under a table is its rows, the rest is prose."""
        cap = _CAPTION.match(text)
        if cap and self.kind != "references":
            self.close_float()
            fkind: SectionKind = "table" if cap.group(1).lower().startswith("tab") else "figure"
            self.open_float = _Float(f"{cap.group(1).rstrip('.').capitalize()} {cap.group(2)}", fkind, [text])
            return
        if self.open_float is not None and self.open_float.kind == "table" and b.size < self.body - 0.25:
            self.open_float.lines.append(" | ".join(ln.text for ln in b.lines))
            return
        self.close_float()
        if self.kind != "references" and b.size < self.body - 1.5:
            return  # labels and legends inside figures
        prose = self._after_run_in_heading(b, text)
        if prose is not None:
            self._add_paragraph(prose)

    def _after_run_in_heading(self, b: _Block, text: str) -> str | None:
        """Start a subsection at a run-in heading; the text after it, None when the heading stands alone."""
        lead = _run_in_lead(b, text)
        if lead is None:
            return text
        self.flush()
        self.heading = lead.rstrip(".")
        self.kind = heading_kind(self.heading) or self.parent_kind
        rest = text[len(lead):].strip() if text.startswith(lead) else text.split(lead, 1)[-1].strip()
        return rest or None

    def _add_paragraph(self, text: str) -> None:
        """A block continues the last paragraph when it starts in lower case or that one did not end a sentence
        (paragraphs split across columns and pages)."""
        if self.paragraphs and (re.match(r"^[a-z(]", text) or not re.search(r"[.!?:)\]\"”]$", self.paragraphs[-1])):
            self.paragraphs[-1] = join_lines([self.paragraphs[-1], text], self.vocab)
        else:
            self.paragraphs.append(text)


def _body_sections(lay: _Layout) -> list[RawSection]:
    """The blocks after the front matter as sections under their headings, figures and tables after each."""
    top_size = max((lay.blocks[i].size for i in lay.headings if i >= lay.first_heading), default=lay.body + 2)
    writer = _BodyWriter(lay.vocab, lay.body)
    front = set(lay.front)
    for i, b in enumerate(lay.blocks):
        if i in front:
            continue
        if i in lay.headings and i >= lay.first_heading:
            writer.start_section(b, top_size)
        else:
            writer.add_block(b, lay.text_of(i))
    writer.close_float()
    writer.flush()
    return writer.sections


def _published_date(page0_text: str) -> dt.date | None:
    """The date after 'Published' (any case, 'published online' too) in day-month-year, month-day-year or ISO order."""
    published = _PUBLISHED.search(page0_text)
    return parse_printed_date(published.group(1)) if published else None


def _document(rel: str, meta: dict, lay: _Layout, front: _Front, sections: list[RawSection]) -> ParsedDocument:
    """Identifiers printed on page 1 win; the PDF info dictionary only fills a missing title or author list."""
    page0_text = "\n".join(b.text for b in lay.blocks if b.page == 0)
    pmid = PMID_RE.search(page0_text)
    pmcid = PMCID_RE.search(page0_text)
    return ParsedDocument(
        source_path=rel,
        source_format="pdf",
        title=lay.title or _pdf_title(meta),
        authors=front.authors or [a.strip() for a in re.split(r";|,", meta.get("author") or "") if a.strip()],
        doi=find_doi(page0_text),
        pmid=pmid.group(1) if pmid else None,
        pmcid=pmcid.group(1) if pmcid else None,
        pub_date=_published_date(page0_text),
        license=front.license,
        sections=sections,
    )


def parse_pdf(path: Path, rel: str, *, max_pages: int = DEFAULT_MAX_PAGES) -> ParsedDocument:
    """One PDF article as labelled sections: read, strip page furniture, find the layout, then front and body."""
    meta, blocks, heights = _read_pdf(path, rel, max_pages)
    _drop_running_lines(blocks, heights)
    lay = _layout(blocks)
    front = _sort_front(lay)
    sections = _front_sections(lay, front) + _body_sections(lay)
    if not any(s.kind not in ("title", "other", "affiliations") for s in sections):
        raise IngestError(rel, "no body text found in the PDF")
    return _document(rel, meta, lay, front, sections)
