"""Section kinds from headings, shared by every parser.

Each parser labels its pieces through `heading_kind`, so a PDF heading "2. Materials and Methods", a text
line "METHODS" and a JATS `<sec>` titled "Methods" end up with the same kind.
"""

from __future__ import annotations

import re

from karma_dagster.schemas.records import SectionKind

_NUMBERING = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[IVXLC]+\.|[A-Z]\.)\s+")
_KIND_PATTERNS: list[tuple[SectionKind, re.Pattern[str]]] = [
    ("abstract", re.compile(r"^(abstract|summary|synopsis)$")),
    ("references", re.compile(r"^(references?|bibliography|literature cited|works cited|reference list)$")),
    ("acknowledgements", re.compile(r"^acknowledge?ments?( and funding)?$")),
    ("conflicts", re.compile(r"^(conflicts? of interests?( statements?)?|(competing|conflicting) (financial )?interests?"
                             r"|disclosures?( statements?)?|declarations? of (competing |conflicting )?interests?"
                             r"|declarations?|author disclosures?)$")),
    ("funding", re.compile(r"^(funding( information| sources?| statement)?|financial (support|disclosure)"
                           r"|sources? of funding|grant support)$")),
    ("affiliations", re.compile(r"^(author )?affiliations?$")),
    ("introduction", re.compile(r"^introduction\b")),
    ("background", re.compile(r"^background\b")),
    ("case", re.compile(r"^(case (reports?|presentations?|descriptions?|histor(y|ies)|studies|study|series)"
                        r"|case( \d+)?|clinical (case|presentation))$")),
    ("methods", re.compile(r"^((materials?|patients?|subjects?|participants?|study design)( and| &) methods?"
                           r"|methods?( and materials?)?|methodology|experimental( procedures| section| design)?"
                           r"|study design|statistical analys[ie]s)$")),
    ("results", re.compile(r"^results?\b")),
    ("discussion", re.compile(r"^(discussion|general discussion|comment)\b")),
    ("conclusion", re.compile(r"^(conclusions?|concluding remarks|summary and conclusions?)\b")),
    ("other", re.compile(r"^(abbreviations|authors?'? contributions?|supplementary (material|data|information)"
                         r"|consent|ethic(s|al) (statement|approval)|data availability|additional (files|information))")),
]


def strip_numbering(heading: str) -> str:
    """'2.1. Cell Lines.' -> 'Cell Lines'."""
    return _NUMBERING.sub("", heading).strip().rstrip(".:").strip()


def heading_depth(heading: str) -> int:
    """1 for '2. Methods' or 'Methods', 2 for '2.1. Animals', 3 for '2.1.1 ...'."""
    m = re.match(r"^\s*(\d+(?:\.\d+)*)\.?\s", heading)
    return m.group(1).count(".") + 1 if m else 1


def heading_kind(heading: str) -> SectionKind | None:
    """The section kind a heading announces, None when it names no standard part (a topical heading)."""
    words = re.sub(r"\s+", " ", strip_numbering(heading).lower().replace("’", "'")).strip()
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(words):
            return kind
    return None
