"""PubTator files: many abstracts per file, each with optional gold mentions and relations.

Format: `PMID|t|title`, `PMID|a|abstract`, tab-separated mention lines `PMID start end text type id`
and relation lines `PMID relation id1 id2 [Novel]`; a blank line ends a document. Offsets index into
`title + " " + abstract`. `parse_pubtator` streams each abstract as a `ParsedDocument` for the inbox, with its byte span.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel

from karma_dagster.ingest.errors import IngestError
from karma_dagster.schemas.records import GoldMention, GoldRelation, ParsedDocument, RawSection


class PubTatorError(ValueError):
    """A malformed PubTator line; carries the file and the line number."""


class PubTatorDoc(BaseModel):
    pmid: str
    title: str = ""
    abstract: str = ""
    mentions: list[GoldMention] = []
    relations: list[GoldRelation] = []

    @property
    def text(self) -> str:
        return f"{self.title} {self.abstract}".strip() if self.abstract else self.title


def _open_text(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="strict") as fh:  # type: ignore[operator]
        yield from fh


def _mention(start: int, end: int, text: str, type_: str, identifier: str) -> GoldMention:
    """A mention from columns already typed here (ints checked by isdigit, the rest str): no re-validation, which
    was most of the time of scanning a large PubTator file."""
    return GoldMention.model_construct(start=start, end=end, text=text, type=type_, identifier=identifier)


def parse_pubtator_lines(lines: Iterator[str] | list[str], source: str = "<text>", first_line: int = 1,
                         annotations: bool = True) -> Iterator[PubTatorDoc]:
    """Documents of PubTator lines; `annotations=False` checks the annotation lines but keeps none (a scan
    needs the text alone, and building ~40 mention objects per abstract was most of its time)."""
    doc: PubTatorDoc | None = None
    for lineno, raw in enumerate(lines, start=first_line):
        line = raw.rstrip("\n").rstrip("\r")
        if not line.strip():
            if doc is not None:
                yield doc
                doc = None
            continue
        if "|t|" in line[:40] or "|a|" in line[:40]:
            pmid, kind, text = line.split("|", 2)
            if doc is None or doc.pmid != pmid:
                if doc is not None:
                    yield doc
                doc = PubTatorDoc(pmid=pmid)
            if kind == "t":
                doc.title = text
            else:
                doc.abstract = text
            continue
        cols = line.split("\t")
        if doc is None or cols[0] != doc.pmid:
            raise PubTatorError(f"{source}:{lineno}: annotation line outside its document: {line[:80]!r}")
        try:
            if len(cols) >= 6 and cols[1].isdigit() and cols[2].isdigit():
                mention = _mention(int(cols[1]), int(cols[2]), cols[3], cols[4], cols[5]) if annotations else None
                if mention is not None:
                    doc.mentions.append(mention)
            elif len(cols) >= 4 and not cols[1].isdigit():
                if annotations:
                    doc.relations.append(GoldRelation.model_construct(
                        relation=cols[1], id1=cols[2], id2=cols[3], novel=cols[4] if len(cols) > 4 else None))
            elif len(cols) == 5 and cols[1].isdigit():  # a mention without an identifier (NCBI disease style)
                if annotations:
                    doc.mentions.append(_mention(int(cols[1]), int(cols[2]), cols[3], cols[4], ""))
            else:
                raise ValueError("unexpected number of columns")
        except ValueError as exc:
            raise PubTatorError(f"{source}:{lineno}: malformed annotation line ({exc}): {line[:80]!r}") from exc
    if doc is not None:
        yield doc


def read_pubtator(path: Path) -> list[PubTatorDoc]:
    """All documents of a PubTator file (plain or .gz); raises PubTatorError naming file and line."""
    try:
        return list(parse_pubtator_lines(_open_text(path), source=path.name))
    except UnicodeDecodeError as exc:
        raise PubTatorError(f"{path.name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _to_parsed(item: PubTatorDoc, rel: str) -> ParsedDocument:
    sections = [RawSection(heading="Title", kind="title", text=item.title)] if item.title else []
    if item.abstract:
        sections.append(RawSection(heading="Abstract", kind="abstract", text=item.abstract))
    if not sections:
        raise IngestError(rel, f"PubTator document {item.pmid} has neither title nor abstract")
    return ParsedDocument(
        source_path=rel, source_format="pubtator", title=item.title, pmid=item.pmid,
        sections=sections, gold_mentions=item.mentions, gold_relations=item.relations,
    )


def _open_binary(path: Path) -> BinaryIO:
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")  # type: ignore[return-value]


def _blocks(fh: BinaryIO, source: str) -> Iterator[tuple[int, int, int, list[str]]]:
    """(byte start, byte end, first line number, lines) of each blank-line separated block, read line by line."""
    pos, lineno, start, first, lines = 0, 0, 0, 1, []  # type: ignore[var-annotated]
    for raw in fh:
        lineno += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PubTatorError(f"{source}: not UTF-8 text ({exc.reason} at byte {pos + exc.start})") from exc
        if line.strip():
            if not lines:
                start, first = pos, lineno
            lines.append(line)
        elif lines:
            yield start, pos, first, lines
            lines = []
        pos += len(raw)
    if lines:
        yield start, pos, first, lines


def _wrap_errors(rel: str) -> Callable[[Exception], IngestError]:
    def wrap(exc: Exception) -> IngestError:
        if isinstance(exc, PubTatorError):
            return IngestError(rel, f"malformed PubTator file: {str(exc).split(': ', 1)[-1]}")
        return IngestError(rel, f"cannot read PubTator file ({exc})")  # unreadable or a damaged .gz
    return wrap


def parse_pubtator(path: Path, rel: str, annotations: bool = True) -> Iterator[tuple[ParsedDocument, int, int]]:
    """Each abstract of a PubTator file with the byte span of its block, one at a time (never the whole file).

    The span lets `read_pubtator_member` read one abstract back without parsing the file again; offsets of a
    .gz file count in its decompressed text. `annotations=False`: the gold annotations are checked, not kept."""
    wrap = _wrap_errors(rel)
    try:
        with _open_binary(path) as fh:
            for start, end, first, lines in _blocks(fh, path.name):
                for item in parse_pubtator_lines(lines, source=path.name, first_line=first, annotations=annotations):
                    yield _to_parsed(item, rel), start, end
    except (PubTatorError, OSError, EOFError) as exc:
        raise wrap(exc) from exc


def read_pubtator_member(path: Path, rel: str, pmid: str, span: tuple[int, int] | None) -> ParsedDocument | None:
    """The abstract `pmid` of a PubTator file: read from its recorded byte span when that still holds it, else
    found by streaming the file (stopping at it); None when the file no longer holds it."""
    if span is not None:
        start, end = span
        try:
            with _open_binary(path) as fh:
                fh.seek(start)
                block = fh.read(max(0, end - start)).decode("utf-8")
            for item in parse_pubtator_lines(block.splitlines(keepends=True), source=path.name):
                if item.pmid == pmid:
                    return _to_parsed(item, rel)
        except (PubTatorError, OSError, EOFError, UnicodeDecodeError, ValueError):
            pass  # the file changed since it was scanned: look for the abstract the slow way
    for doc, _, _ in parse_pubtator(path, rel):
        if doc.pmid == pmid:
            return doc
    return None
