"""Entity spans in evidence text, so the page can mark them (<mark>) without trusting any HTML in the text."""

from __future__ import annotations

import re
from collections.abc import Iterable

from markupsafe import Markup, escape

from karma_dagster.review.models import Span


def find_spans(text: str, names: Iterable[tuple[str, str]]) -> list[Span]:
    """Non-overlapping case-insensitive occurrences of each (name, label), longest names first."""
    taken: list[Span] = []
    for name, label in sorted({(n.strip(), lab) for n, lab in names if n and n.strip()}, key=lambda x: -len(x[0])):
        for m in re.finditer(re.escape(name), text, flags=re.IGNORECASE):
            if all(m.end() <= s.start or m.start() >= s.end for s in taken):
                taken.append(Span(start=m.start(), end=m.end(), label=label))
    return sorted(taken, key=lambda s: s.start)


def marked_html(text: str, spans: Iterable[Span]) -> Markup:
    """The text HTML-escaped, each span wrapped in <mark class="<label>">."""
    out, pos = [], 0
    for s in sorted(spans, key=lambda s: s.start):
        if s.start < pos or s.end > len(text) or s.end <= s.start:
            continue  # overlapping or out of range: left unmarked rather than garbled
        out.append(escape(text[pos:s.start]))
        out.append(Markup('<mark class="{}">{}</mark>').format(s.label, text[s.start:s.end]))
        pos = s.end
    out.append(escape(text[pos:]))
    return Markup("").join(out)
