"""PubTator files: many abstracts per file, each with optional gold mentions and relations.

Format: `PMID|t|title`, `PMID|a|abstract`, tab-separated mention lines `PMID start end text type id`
and relation lines `PMID relation id1 id2 [Novel]`; a blank line ends a document. Offsets index into
`title + " " + abstract`. `parse_pubtator` turns each abstract into a `ParsedDocument` for the inbox.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

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


def parse_pubtator_lines(lines: Iterator[str] | list[str], source: str = "<text>") -> Iterator[PubTatorDoc]:
    doc: PubTatorDoc | None = None
    for lineno, raw in enumerate(lines, start=1):
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
                doc.mentions.append(
                    GoldMention(start=int(cols[1]), end=int(cols[2]), text=cols[3], type=cols[4], identifier=cols[5])
                )
            elif len(cols) >= 4 and not cols[1].isdigit():
                doc.relations.append(
                    GoldRelation(relation=cols[1], id1=cols[2], id2=cols[3], novel=cols[4] if len(cols) > 4 else None)
                )
            elif len(cols) == 5 and cols[1].isdigit():  # a mention without an identifier (NCBI disease style)
                doc.mentions.append(
                    GoldMention(start=int(cols[1]), end=int(cols[2]), text=cols[3], type=cols[4], identifier="")
                )
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


def parse_pubtator(path: Path, rel: str) -> list[ParsedDocument]:
    """Each abstract of a PubTator file becomes its own document; gold annotations travel with it."""
    try:
        items = read_pubtator(path)
    except PubTatorError as exc:
        raise IngestError(rel, f"malformed PubTator file: {str(exc).split(': ', 1)[-1]}") from exc
    except (OSError, EOFError) as exc:  # unreadable or a damaged .gz
        raise IngestError(rel, f"cannot read PubTator file ({exc})") from exc
    if not items:
        raise IngestError(rel, "no PubTator documents found (expected 'PMID|t|title' lines)")
    docs = []
    for item in items:
        sections = [RawSection(heading="Title", kind="title", text=item.title)] if item.title else []
        if item.abstract:
            sections.append(RawSection(heading="Abstract", kind="abstract", text=item.abstract))
        if not sections:
            raise IngestError(rel, f"PubTator document {item.pmid} has neither title nor abstract")
        docs.append(ParsedDocument(
            source_path=rel, source_format="pubtator", title=item.title, pmid=item.pmid,
            sections=sections, gold_mentions=item.mentions, gold_relations=item.relations,
        ))
    return docs
