"""IA clean-up without a model: repairs of extraction noise that never change what the text says.

Ligatures, soft hyphens, words broken at line ends, zero-width and control characters, spacing accents left
apart by TeX fonts ("Universit`a"), and Unicode compatibility forms (math italic 𝛽 -> β, NBSP -> space).
NFKC is applied per character and skipped for superscripts, subscripts and vulgar fractions, because folding
"10⁹/L" into "109/L" would change a number. Missing identifiers are filled from the text.
"""

from __future__ import annotations

import re
import unicodedata

from karma_dagster.ingest.text import DOI_RE, PMCID_RE, PMID_RE, clean_doi, dehyphenate, word_vocabulary
from karma_dagster.schemas.records import ParsedDocument, RawSection

_UNSAFE_COMPAT = ("<super>", "<sub>", "<fraction>")
_LIGATURES = {"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl", "\ufb05": "st",
              "\ufb06": "st", "\u0132": "IJ", "\u0133": "ij", "\u0152": "OE", "\u0153": "oe"}
_INVISIBLE = re.compile(r"[\u00ad\u200b\u200e\u200f\u2060\ufeff\ufffe]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SPACING_ACCENTS = {"`": "\u0300", "\u00b4": "\u0301", "\u00a8": "\u0308", "\u02c6": "\u0302", "\u02dc": "\u0303",
                    "\u02c7": "\u030c", "\u00b8": "\u0327"}
_LOOSE_ACCENT = re.compile(r"(?<=[^\W\d_])([`\u00b4\u00a8\u02c6\u02dc\u02c7])([aeiouyAEIOUYnNcCszSZ])")
_compat_cache: dict[str, str] = {}


def _fold_char(ch: str) -> str:
    if ch.isascii():
        return ch
    out = _compat_cache.get(ch)
    if out is None:
        decomposition = unicodedata.decomposition(ch)
        out = ch if decomposition.startswith(_UNSAFE_COMPAT) else unicodedata.normalize("NFKC", ch)
        _compat_cache[ch] = out
    return out


def safe_nfkc(text: str) -> str:
    """NFKC for everything but superscripts, subscripts and fractions, then NFC."""
    return unicodedata.normalize("NFC", "".join(_fold_char(c) for c in text))


def _compose_accents(text: str) -> str:
    def compose(m: re.Match[str]) -> str:
        composed = unicodedata.normalize("NFC", m.group(2) + _SPACING_ACCENTS[m.group(1)])
        return composed if len(composed) == 1 else m.group(0)

    return _LOOSE_ACCENT.sub(compose, text)


def clean_text(text: str, vocab: set[str] | None = None) -> str:
    """The repairs, in an order where each sees the previous one's output."""
    for lig, rep in _LIGATURES.items():
        text = text.replace(lig, rep)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"\u00ad\s*\n\s*", "", text)  # soft hyphen at a line break: the word continues
    text = _INVISIBLE.sub("", text)
    text = _CONTROL.sub(" ", text)
    text = _compose_accents(text)
    text = safe_nfkc(text)
    text = dehyphenate(text, vocab)
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def _fill_identifiers(doc: ParsedDocument, sections: list[RawSection]) -> dict[str, str]:
    head = "\n".join(s.text for s in sections if s.kind not in ("references",))[:20000]
    update: dict[str, str] = {}
    if doc.doi is None and (m := DOI_RE.search(head)):
        update["doi"] = clean_doi(m.group(1))
    if doc.pmid is None and (m := PMID_RE.search(head)):
        update["pmid"] = m.group(1)
    if doc.pmcid is None and (m := PMCID_RE.search(head)):
        update["pmcid"] = m.group(1).upper()
    return update


def clean_document(doc: ParsedDocument) -> ParsedDocument:
    """A cleaned copy: same sections, same kinds, repaired text; empty sections dropped; metadata filled."""
    if doc.source_format in ("pubtator", "bioc"):  # curated text whose gold offsets must keep pointing at the same characters
        return doc.model_copy(update=_fill_identifiers(doc, doc.sections))
    vocab = word_vocabulary(s.text for s in doc.sections)
    sections = []
    for s in doc.sections:
        text = clean_text(s.text, vocab)
        if text:
            sections.append(RawSection(heading=clean_text(s.heading, vocab), kind=s.kind, text=text))
    update: dict = {
        "sections": sections,
        "title": clean_text(doc.title, vocab).replace("\n", " "),
        "authors": [a for a in (clean_text(a).replace("\n", " ") for a in doc.authors) if a],
    }
    if doc.journal:
        update["journal"] = clean_text(doc.journal)
    if not update["title"]:
        update["title"] = next((s.text.replace("\n", " ") for s in sections if s.kind == "title"), "")
    update.update(_fill_identifiers(doc, sections))
    return doc.model_copy(update=update)
