"""What a name, label or type must be to enter the KG: one clean line of text of bounded length.

Names come from paper text and from model answers, so they can hold anything: line breaks, terminal escape
sequences (ESC [31m ...), invisible format characters, or a whole paragraph. A name is *cleaned* when that keeps
its meaning (Unicode NFC, so "cafe" + combining acute and "café" are one name; every run of whitespace, line
breaks and tabs included, one space; ends stripped; invisible line-break hints such as soft hyphens removed)
and *rejected* otherwise (a control, format, private-use, surrogate or unassigned character left after that; empty;
over the length limit). Dagster-free: the agents clean what they form, the merge refuses what would not pass.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from pydantic import BaseModel, ConfigDict

NAME_MAX_CHARS = 200  # an entity name: the longest KG/MeSH names are ~150 characters; more is a phrase or garbage
LABEL_MAX_CHARS = 64  # a relation label ("Positive_Correlation", "treats", "upregulates")
TYPE_MAX_CHARS = 64  # an entity type or node kind ("ChemicalEntity", "Biological Process")
ID_MAX_CHARS = 300  # an entity or vocabulary id; a new entity's is "NEW:{type}:{normalized name}"
EVIDENCE_MAX_CHARS = 4000  # an evidence sentence; longer is a table or a run-on extraction, cut with an ellipsis
EXAMPLE_CHARS = 60  # how much of a rejected name metadata shows (escaped): a 10,000-character name stays one line
MAX_EXAMPLES = 5

Code = Literal["empty", "too_long", "control_character", "not_clean"]
_SPACE = re.compile(r"[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")  # CSI, OSC, 2-byte ESC
# invisible hints of where a line may (not) break, never part of a name: soft hyphen, zero-width space, word
# joiner, zero-width no-break space (BOM); PDF and PMC XML text carry them inside words ("IL-\u200b6")
_REMOVED = re.compile("[\u00ad\u200b\u2060\ufeff]")
_REJECTED_CATEGORIES = {"Cc": "control character", "Cf": "format character", "Cs": "surrogate character",
                        "Co": "private-use character", "Cn": "unassigned character"}


class Rejection(BaseModel):
    """Why a name cannot enter the KG: a fixed `code` (what metadata counts) and a short `reason` that says more."""

    model_config = ConfigDict(frozen=True)
    code: Code
    reason: str  # "empty", "too long (10000 > 200 chars)", "control character U+001B"


class NameRejected(ValueError):
    """A name, label, type or id that cannot enter the KG; the message names where it came from and why."""

    def __init__(self, where: str, value: str, rejection: Rejection) -> None:
        super().__init__(f"{where}: {rejection.reason} in {preview(value)}")
        self.rejection = rejection


def preview(value: str, limit: int = EXAMPLE_CHARS) -> str:
    """The value as a short one-line repr: escapes shown (\\x1b, \\n), cut at `limit` characters with its length."""
    shown = repr(value[:limit])
    return shown if len(value) <= limit else f"{shown}... ({len(value)} chars)"


def clean_name(raw: str, max_chars: int = NAME_MAX_CHARS) -> str | Rejection:
    """The clean name (NFC, whitespace runs one space, stripped), or why it is rejected."""
    if not isinstance(raw, str):
        raise TypeError(f"clean_name needs a str, got {type(raw).__name__}")
    if len(raw) > 20 * max_chars:  # do not normalize a megabyte to learn it is too long
        return Rejection(code="too_long", reason=f"too long ({len(raw)} > {max_chars} chars)")
    name = _SPACE.sub(" ", _REMOVED.sub("", unicodedata.normalize("NFC", raw))).strip()
    if not name:
        return Rejection(code="empty", reason="empty")
    for ch in "" if name.isprintable() else name:  # isprintable: no C* category (nor other spaces) at all
        category = unicodedata.category(ch)
        if category in _REJECTED_CATEGORIES:
            return Rejection(code="control_character", reason=f"{_REJECTED_CATEGORIES[category]} U+{ord(ch):04X}")
    if len(name) > max_chars:
        return Rejection(code="too_long", reason=f"too long ({len(name)} > {max_chars} chars)")
    return name


def checked(raw: str, where: str, max_chars: int = NAME_MAX_CHARS) -> str:
    """`clean_name`, raising NameRejected (naming `where`) instead of returning a rejection."""
    out = clean_name(raw, max_chars)
    if isinstance(out, Rejection):
        raise NameRejected(where, raw, out)
    return out


def exact(raw: str, where: str, max_chars: int = ID_MAX_CHARS) -> str:
    """An identifier must already be clean: cleaning it would change what it identifies. Raises NameRejected."""
    out = checked(raw, where, max_chars)
    if out != raw:
        raise NameRejected(where, raw, Rejection(code="not_clean", reason="not in clean form (NFC, single "
                                                 "spaces, no leading or trailing space)"))
    return out


class RejectedNames(BaseModel):
    """The names a stage turned away: counts per code and a few examples (reason and escaped preview)."""

    counts: dict[str, int] = {}
    examples: list[dict[str, str]] = []

    def add(self, field: str, raw: str, rejection: Rejection) -> None:
        self.counts[rejection.code] = self.counts.get(rejection.code, 0) + 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append({"field": field, "reason": rejection.reason, "name": preview(raw)})

    def figures(self) -> dict[str, object]:
        """Stage metadata: how many, how many per reason, and the first few (never the whole name)."""
        return {"names_rejected": sum(self.counts.values()),
                "names_rejected_by_reason": dict(sorted(self.counts.items())),
                "names_rejected_examples": list(self.examples)}


def clean_text(raw: str, max_chars: int = EVIDENCE_MAX_CHARS) -> str:
    """Evidence text as the KG stores it: NFC, terminal escape sequences and other control / format characters
    removed, whitespace runs one space, at most `max_chars` characters. A sentence is evidence whatever stray
    bytes it carried, so it is cleaned, never rejected (a name is rejected: it would be a different entity)."""
    text = _ANSI.sub("", _REMOVED.sub("", unicodedata.normalize("NFC", raw)))
    text = _SPACE.sub(" ", text)
    if not text.isprintable():
        text = "".join(ch for ch in text if unicodedata.category(ch) not in _REJECTED_CATEGORIES)
    text = text.strip()
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"
