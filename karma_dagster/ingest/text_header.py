"""The `Key: value` header lines of a plain-text paper (Title, Authors, Journal, DOI, PMID, PMCID, Published or
Date, License, Source), with the line each came from.

Why a module of its own: the header block (the lines before the first blank line) is read line by line, so a
header line counts wherever it stands in it, after a title line too. Before, only a paragraph made of header
lines alone was read: "Some title / Published: ... / PMID: ..." lost its date and PMID, and all three lines
became one title "sentence" of evidence.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

HEADER_LINE = re.compile(
    r"^(title|authors?|journal|doi|pmid|pmcid|published|date|license|licence|source)(?:\s+online)?\s*:\s*(.+)$",
    re.I)
Line = tuple[int, str]  # (1-based line number in the file, the line's text)


class HeaderLine(BaseModel):
    key: str  # normalized: "author", "license", "published", ...
    label: str  # as the file spells it: "Authors", "Published online"
    value: str
    line: int


class TextHeader(BaseModel):
    """The header lines read so far, the first of each key winning."""

    lines: dict[str, HeaderLine] = {}

    def get(self, key: str) -> str | None:
        found = self.lines.get(key)
        return found.value if found else None

    def take(self, block: list[Line]) -> list[Line]:
        """Read the header lines of `block`; the lines that are not header lines, in order."""
        rest = []
        for number, text in block:
            m = HEADER_LINE.match(text.strip())
            if m is None:
                rest.append((number, text))
                continue
            label = text.strip()[: text.strip().index(":")].strip()
            key = m.group(1).lower().rstrip("s").replace("licence", "license")
            self.lines.setdefault(key, HeaderLine(key=key, label=label, value=m.group(2).strip(), line=number))
        return rest

    def source_of(self, *keys: str) -> str | None:
        """Where the first of `keys` present was read: "its 'Published:' line (line 2)"."""
        for key in keys:
            if key in self.lines:
                found = self.lines[key]
                return f"its '{found.label}:' line (line {found.line})"
        return None

    def summary(self) -> str:
        """What was read, in file order: "Published 2019-03-04 (line 2), PMID 12345 (line 3)"."""
        ordered = sorted(self.lines.values(), key=lambda h: h.line)
        return ", ".join(f"{h.label} {h.value[:60]!r} (line {h.line})" for h in ordered)


def header_only(block: list[Line]) -> bool:
    """Whether every line of `block` is a header line (a paragraph of them after the title: the feed's layout)."""
    return all(HEADER_LINE.match(text.strip()) for _, text in block)
