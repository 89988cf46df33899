"""`split_sentences` and `count_tokens` remembered per text, for the agents of the chain.

Why: the reader, the summarizer, the relation agent and the evaluator each split the same segment again, a spaCy
pass each time. Both are pure functions of the text, so a text is split once per process. Kept apart from
sentences.py because the relation models' cache keys hash that file's bytes (a change there retrains them).
"""

from __future__ import annotations

from functools import lru_cache

from karma_dagster.dictionary import sentences

MEMO_TEXTS = 4096  # a few hundred papers' segments, summaries and evidence sentences


def split_sentences(text: str) -> list[tuple[int, int, str]]:
    """sentences.split_sentences (a new list each call: callers may change theirs)."""
    if not isinstance(text, str):
        return sentences.split_sentences(text)  # its TypeError, naming the input
    return list(_split(text))


@lru_cache(maxsize=MEMO_TEXTS)
def _split(text: str) -> tuple[tuple[int, int, str], ...]:
    return tuple(sentences.split_sentences(text))


def count_tokens(text: str) -> int:
    """sentences.count_tokens."""
    if not isinstance(text, str):
        return sentences.count_tokens(text)
    return _count(text)


@lru_cache(maxsize=MEMO_TEXTS)
def _count(text: str) -> int:
    return sentences.count_tokens(text)
