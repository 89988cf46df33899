"""Plain UTF-8 text files, and the text repairs that every parser shares.

A .txt is read as UTF-8 only: a file in another encoding is refused with the byte that failed, instead of
guessing latin-1 and silently turning "µg" into "Âµg" in what later becomes a KG fact.
Paragraphs are blank-line separated; a heading is a short line of its own (ALL CAPS, numbered, or a standard
section name such as "Methods"). `Key: value` header lines (Title, DOI, PMID, PMCID, Authors, Journal,
Published, License) are read as metadata wherever they stand in the header block (the lines before the first
blank line) and in paragraphs of them right after the title (text_header.py); they are no part of the text.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterable
from pathlib import Path

from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.headings import heading_depth, heading_kind
from karma_dagster.ingest.text_header import Line, TextHeader, header_only
from karma_dagster.schemas.records import ParsedDocument, RawSection, SectionKind

DOI_RE = re.compile(r"\b(10\.\d{4,9}/[^\s\"<>]+)", re.IGNORECASE)
PMID_RE = re.compile(r"\bPMID\s*[:=]?\s*(\d{5,9})\b")
PMCID_RE = re.compile(r"\b(PMC\d{5,9})\b")
_WORD_RE = re.compile(r"[^\W\d_][\w]*(?:-[\w]+)*", re.UNICODE)
_SUFFIX_FRAGMENT = re.compile(
    r"^(ments?|ings?|ed|tions?|sions?|ness|ity|ities|ly|ances?|ences?|able|ible|al|ally|ous|ive|ives|ers?|est|ism|"
    r"ists?|i[sz]e[ds]?|i[sz]ation|ations?|ated|ates|ating|ures?|ants?|ents?|ful|less|ship|ic|ical|ics|ia|ies|um|us)$")
_BROKEN_WORD = re.compile(r"[^\W\d_]+[-\u00ad](\s*\n\s*[^\W\d_]+|\s*$)")
_LINEBREAK_HYPHEN = re.compile(r"([^\W\d_]+)[-\u00ad]\s*\n\s*([a-z][^\W\d_]*)")
log = logging.getLogger(__name__)


def clean_doi(raw: str) -> str:
    """A DOI as found in running text, without trailing punctuation; lowercased (DOIs are case-insensitive)."""
    doi = raw.strip().rstrip(".,;:)]}'\"")
    if doi.count("(") < doi.count(")"):
        doi = doi.rstrip(")")
    return doi.lower()


def find_doi(text: str) -> str | None:
    m = DOI_RE.search(text)
    return clean_doi(m.group(1)) if m else None


def word_vocabulary(texts: Iterable[str]) -> set[str]:
    """Lowercased words (hyphenated compounds kept whole) seen in a document: evidence for de-hyphenation."""
    vocab: set[str] = set()
    for text in texts:
        text = _BROKEN_WORD.sub(" ", text)  # fragments of words broken at a line end are no evidence
        for w in _WORD_RE.findall(text):
            vocab.add(w.lower())
            if "-" in w:
                vocab.update(p.lower() for p in w.split("-") if p)
    return vocab


def join_hyphenated(left: str, right: str, vocab: set[str]) -> str:
    """'ciproﬂoxa' + 'cin' -> 'ciprofloxacin', 'drug' + 'induced' -> 'drug-induced', on the document's own evidence.

    A word the document spells elsewhere decides; otherwise a bare suffix ('-ment', '-ing') is joined, two real
    words keep it (a compound broken at its hyphen: 'drug-induced'), and anything else is a
    typesetter's break and is joined.
    """
    joined, hyphenated = f"{left}{right}", f"{left}-{right}"
    if joined.lower() in vocab:
        return joined
    if hyphenated.lower() in vocab:
        return hyphenated
    if _SUFFIX_FRAGMENT.match(right.lower()):
        return joined
    if len(left) >= 3 and len(right) >= 3 and left.lower() in vocab and right.lower() in vocab:
        return hyphenated
    return joined


def dehyphenate(text: str, vocab: set[str] | None = None) -> str:
    """Undo hyphenation at line breaks ('-\\n' or soft hyphen + newline) inside `text`."""
    if vocab is None:
        vocab = word_vocabulary([text])
    return _LINEBREAK_HYPHEN.sub(lambda m: join_hyphenated(m.group(1), m.group(2), vocab), text)


def join_lines(lines: list[str], vocab: set[str]) -> str:
    """Lines of one paragraph -> one line; a trailing hyphen joins across the break."""
    out = ""
    for line in (ln.strip() for ln in lines):
        if not line:
            continue
        if not out:
            out = line
            continue
        m_left = re.search(r"([^\W\d_]+)[-\u00ad]$", out)
        m_right = re.match(r"([a-z][^\W\d_]*)", line)
        if m_left and m_right:
            joined = join_hyphenated(m_left.group(1), m_right.group(1), vocab)
            out = out[: m_left.start()] + joined + line[m_right.end():]
        elif out.endswith(("-", "/", "\u2013")) and not out.endswith(" -"):
            out += line  # a break after a dash or slash inside a token: "5-" + "10", "and/" + "or"
        else:
            out += " " + line
    return out


# ---------------------------------------------------------------- the .txt parser

def _is_heading(line: str) -> bool:
    if "\n" in line or len(line) > 80 or not re.search(r"[A-Za-z]{3}", line) or line.rstrip().endswith((".", ",", ";")):
        return False
    if heading_kind(line) is not None:
        return True
    letters = [c for c in line if c.isalpha()]
    if letters and all(c.isupper() for c in letters) and len(letters) >= 3:
        return True
    return bool(re.match(r"^\d+(\.\d+)*\.?\s+[A-Z]", line)) and len(line.split()) <= 10


def parse_printed_date(value: str) -> dt.date | None:
    """A date as articles print it, in any case: '14 January 2016', 'JANUARY 14, 2016', 'Jan. 14 2016',
    '14 Sept 2016', '2016-01-14'; None when it is none of these."""
    value = re.sub(r"\s+", " ", re.sub(r"[,.]", " ", value)).strip()
    value = re.sub(r"\bsept\w*", "sep", value, flags=re.I)
    for fmt in ("%Y-%m-%d", "%d %B %Y", "%d %b %Y", "%B %d %Y", "%b %d %Y"):
        try:
            return dt.datetime.strptime(value, fmt).date()
        except ValueError:
            continue
    return None



def decode_utf8(data: bytes, rel: str) -> str:
    if b"\x00" in data[:4096]:
        raise IngestError(rel, "binary data (NUL bytes), not a text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start]
        raise IngestError(
            rel,
            f"not UTF-8 text: byte 0x{bad:02x} at offset {exc.start} ({exc.reason}); re-save the file as UTF-8 "
            "(no other encoding is guessed, so that no text is silently garbled)",
        ) from exc


def _blocks(raw: str) -> list[list[Line]]:
    """The paragraphs of `raw` (split at blank or whitespace-only lines) as their lines with line numbers."""
    blocks: list[list[Line]] = []
    current: list[Line] = []
    for number, text in enumerate(raw.split("\n"), start=1):
        if text.strip():
            current.append((number, text))
        elif current:
            blocks.append(current)
            current = []
    return blocks + ([current] if current else [])


def parse_text(path: Path, rel: str) -> ParsedDocument:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IngestError(rel, f"cannot read file ({exc.strerror or exc})") from exc
    raw = decode_utf8(data, rel).replace("\r\n", "\n").replace("\r", "\n")
    if not raw.strip():
        raise IngestError(rel, "empty text file")
    blocks = _blocks(raw)
    vocab = word_vocabulary("\n".join(text for _, text in block) for block in blocks)
    header = TextHeader()
    title = ""
    sections: list[RawSection] = []
    heading, kind, parent_kind, buffer = "", "body", "body", []  # type: ignore[var-annotated]

    def flush() -> None:
        if buffer:
            sections.append(RawSection(heading=heading, kind=kind, text="\n\n".join(buffer)))
            buffer.clear()

    for i, block in enumerate(blocks):
        # the header block (its header lines wherever they stand; the rest is read as before), or a paragraph of
        # header lines alone right after it (the feed's layout: title, blank line, identifier lines)
        if i == 0 or (not buffer and all(s.kind == "title" for s in sections) and header_only(block)):
            block = header.take(block)
            if not title and (given := header.get("title")):
                title = given
                sections.append(RawSection(heading="Title", kind="title", text=title))
            if not block:
                continue
        lines = [text for _, text in block]
        one_line = " ".join(ln.strip() for ln in lines)
        if i == 0 and not title and len(lines) <= 3 and len(one_line) < 300 and not _is_heading(one_line) \
                and not one_line.endswith("."):
            title = one_line
            sections.append(RawSection(heading="Title", kind="title", text=title))
            continue
        if len(lines) == 1 and _is_heading(one_line):
            flush()
            heading = one_line.strip()
            found: SectionKind | None = heading_kind(heading)
            if found is not None:
                kind = found
            elif heading_depth(heading) > 1:
                kind = parent_kind  # a numbered subsection belongs to its section
            else:
                kind = "body"
            if heading_depth(heading) == 1:
                parent_kind = kind
            continue
        buffer.append(join_lines(lines, vocab))
    flush()
    if not any(s.kind != "title" for s in sections):
        raise IngestError(rel, "no text besides a title line")

    if header.lines:
        log.info("%s: header lines read: %s", rel, header.summary())
    meta = {key: found.value for key, found in header.lines.items()}
    authors = [a.strip() for a in re.split(r";|,\s*(?=[A-Z])| and ", meta.get("author", "")) if a.strip()]
    pub_date = parse_printed_date(meta.get("published") or meta.get("date") or "")
    return ParsedDocument(
        source_path=rel,
        source_format="text",
        title=title,
        authors=authors,
        journal=meta.get("journal"),
        pub_date=pub_date,
        pub_date_source=header.source_of("published", "date") if pub_date else None,
        doi=find_doi(meta["doi"]) if "doi" in meta else None,
        pmid=(m.group(0) if (m := re.search(r"\d{5,9}", meta.get("pmid", ""))) else None),
        pmcid=(m.group(1).upper() if (m := re.search(r"(pmc\d{5,9})", meta.get("pmcid", ""), re.I)) else None),
        license=meta.get("license"),
        sections=sections,
    )
