"""What a file holds, from its first bytes: the root element of an XML file, whether a JSON file is BioC.

Why: `.xml` is JATS, PubMed/MEDLINE (`<PubmedArticleSet>`) or BioC (`<collection>`), and `.json` is a Europe PMC
sidecar or a BioC export; the name alone cannot tell. At most `HEAD_BYTES` are read (decompressed for `.gz`), so a
scan of thousands of files stays cheap, and nothing here fetches a DTD or expands an entity beyond XML's own.
"""

from __future__ import annotations

import gzip
import re
import xml.etree.ElementTree as ET
from pathlib import Path

HEAD_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
_BIOC_JSON_HEAD = re.compile(rb'^\s*(\[\s*\{|\{\s*"(PubTator3|documents|source|date|key|infons|id|_id|pmid)"\s*:)')
_PASSAGES = re.compile(rb'"passages"\s*:')


def is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first `n` bytes of the file (of its decompressed content when it is gzip); b"" when unreadable."""
    try:
        if is_gzip(path):
            with gzip.open(path, "rb") as fh:
                return fh.read(n)
        with path.open("rb") as fh:
            return fh.read(n)
    except (OSError, EOFError):
        return b""


def root_of(data: bytes) -> str | None:
    """The local name of the first element in `data` (the start of an XML document), None when there is none
    in it or the bytes before it are not well-formed XML."""
    parser = ET.XMLPullParser(events=("start",))
    try:
        for i in range(0, len(data), 4096):
            parser.feed(data[i:i + 4096])
            for _, el in parser.read_events():
                return el.tag.rsplit("}", 1)[-1]
    except ET.ParseError:
        return None
    return None


def xml_root(path: Path) -> str | None:
    """The root element's local name of an XML file (plain or gzip), from its first bytes only."""
    return root_of(head(path))


def looks_like_bioc_json(data: bytes) -> bool:
    """BioC JSON (a collection, PubTator3's `{"PubTator3": [...]}`, a list or a line of documents) has "passages"
    near its start; a Europe PMC record never does."""
    return bool(_BIOC_JSON_HEAD.match(data)) and bool(_PASSAGES.search(data))
