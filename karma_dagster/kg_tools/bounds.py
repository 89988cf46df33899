"""What a tool call may ask for and write: the one set of bounds every entry to the KG tools obeys (the tool API
in session.py, the function-calling schemas in schemas.py, the MCP server), so a limit is never only a hint in a
schema that another client skips.

Writes obey the chain's rules: labels and types are KG names (kg/names.py: one clean line, bounded, no control,
format or bidi character), a comment may be longer but is held to the same rules, evidence is bounded, and a
document key follows the catalog's key rule (ingest/keys.py) and must lie in the KG's date range (date_range.py),
or its statements could never be merged into an increment. Reads are bounded in size (k, limit, text length),
so a call cannot ask the index or the KG for everything. A value out of bounds is refused with a message naming
the argument, the value and the bound: the caller's model reads it and calls again.
"""

from __future__ import annotations

from karma_dagster.runtime import date_range
from karma_dagster.ingest.keys import check_document_key
from karma_dagster.kg import names as kg_names
from karma_dagster.kg_tools.results import Refused

SEARCH_K_MAX = 25  # search_instance / search_class / search_property: results per call
NEIGHBOURS_LIMIT_MAX = 200  # neighbours: edges per call
SEARCH_TEXT_MAX_CHARS = kg_names.NAME_MAX_CHARS  # a search is for a name: no longer than a name can be
COMMENT_MAX_CHARS = 1000  # a create call's comment: a sentence or two for a curator
EVIDENCE_MAX_CHARS = kg_names.EVIDENCE_MAX_CHARS  # the sentence that states a statement (the chain's bound)
CONTEXT_BUDGET_MIN, CONTEXT_BUDGET_MAX, CONTEXT_BUDGET_DEFAULT = 64, 32_000, 1_000  # kg_context: tokens of context
QUESTION_MAX_CHARS = 2000  # a question, however detailed; planning and BM25 time grow with its length


def count(value: object, what: str, maximum: int) -> int:
    """A k / limit: an integer in [1, maximum] (a bool or a float is no count)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refused(f"{what} must be a whole number from 1 to {maximum}, got {value!r}")
    if not 1 <= value <= maximum:
        raise Refused(f"{what}={value} is out of bounds: ask for 1 to {maximum} at a time")
    return value


def name(value: object, what: str, max_chars: int = kg_names.NAME_MAX_CHARS) -> str:
    """A label, type or search text, cleaned by the chain's name rules (refused when they reject it)."""
    if not isinstance(value, str):
        raise Refused(f"{what} must be a string, got {type(value).__name__}")
    try:
        return kg_names.checked(value, what, max_chars)
    except kg_names.NameRejected as exc:
        raise Refused(str(exc)) from exc


def identifier(value: object, what: str, max_chars: int = kg_names.ID_MAX_CHARS) -> str:
    """An id or label looked up as it is (not cleaned: that would change what it names): a string, bounded."""
    if not isinstance(value, str):
        raise Refused(f"{what} must be a string, got {type(value).__name__}")
    if len(value) > max_chars:
        raise Refused(f"{what} is too long ({len(value)} > {max_chars} chars) to be an id: {kg_names.preview(value)}")
    return value


def comment(value: object) -> str:
    """A comment: the name rules (no control or format character, one line), at most COMMENT_MAX_CHARS."""
    if not isinstance(value, str) or not value.strip():
        raise Refused("comment is empty: say in a sentence what it is (a curator reads it)")
    return name(value, "comment", COMMENT_MAX_CHARS)


def evidence(value: object) -> str:
    """Evidence text as the KG stores it (cleaned like the chain's), refused when empty or over the bound rather
    than cut: a tool's caller can send the sentence itself."""
    if not isinstance(value, str) or not kg_names.clean_text(value, len(value) + 1):
        raise Refused("evidence is empty: quote the sentence of the document that states it")
    text = kg_names.clean_text(value, len(value) + 1)
    if len(text) > EVIDENCE_MAX_CHARS:
        raise Refused(f"evidence is too long ({len(text)} > {EVIDENCE_MAX_CHARS} chars): quote the sentence "
                      "that states it, not the passage")
    return text


def document_key(value: object) -> str:
    """A document key a write names: the catalog's key rule, and a date inside the KG's date range."""
    try:
        key = check_document_key(value)
        date_range.check_document(key)
    except ValueError as exc:
        raise Refused(str(exc)) from exc
    return key
