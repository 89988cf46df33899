"""The strings a mention may be: every run of one to six words of the text, for grammar-constrained decoding.

Why: the entity agent's rule is that a mention is copied from the text (a string that is not there is discarded).
A grammar-constrained server (llama.cpp) can hold a small model to that rule while it writes, when the allowed
strings travel as the schema's enum; a 135M model otherwise copies the prompt's examples or whole sentences.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\w(?:[\w'/+.,:-]*\w)?")
# a mention neither starts nor ends with a function word ("of the", "in")
_FUNCTION = frozenset(
    "a an the of in and or to with by for on at from as is was were be been being that this these those it its "
    "their we our which than not but also after before during between into through under over via vs versus".split())


# a mention does not run across a clause (", " "; " ". "), a line, or a quotation mark; quotes and backslashes also
# break llama-cpp-python's grammar conversion, which then takes the whole server down
_CROSSES = re.compile(r'[,;:.]\s|["\\\n\r\t\x00-\x1f]')


def text_spans(text: str, max_words: int = 6, limit: int = 3000) -> list[str]:
    """Distinct word runs of `text` (1..max_words words, not starting or ending with a function word, not bare
    numbers), in order of first appearance; at most `limit` of them (the shortest runs come first when cut)."""
    words = list(_WORD.finditer(text))
    by_length: list[list[str]] = [[] for _ in range(max_words)]
    for i, first in enumerate(words):
        if first.group().lower() in _FUNCTION:
            continue
        for j in range(i, min(i + max_words, len(words))):
            last = words[j]
            if last.group().lower() in _FUNCTION:
                continue
            span = text[first.start():last.end()]
            if _CROSSES.search(span) or span.replace(".", "").replace(",", "").isdigit():
                continue
            by_length[j - i].append(span)
    out: list[str] = []
    seen: set[str] = set()
    for group in by_length:
        for span in group:
            if span not in seen:
                seen.add(span)
                out.append(span)
                if len(out) >= limit:
                    return out
    return out
