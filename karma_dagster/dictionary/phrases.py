"""Token-sequence lookup for the dictionary NER: which lexicon rows a document's token n-grams are.

Why not spaCy's PhraseMatcher: it needs a `Doc` per pattern, and making 200k pattern Docs creates a lexeme (with
its shape, number and URL flags) for every new word: 7 s per process on 2 cores, paid again by every Dagster run
process. The lexicon already holds each row's tokens, so a dict from token tuples to rows is built in well under a
second and matches the same spans (scanned n-grams with a prefix set to stop early; an abstract is a few thousand
lookups).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


class PhraseTable:
    """Token tuples -> the rows (ints) they name; `matches` yields every (row, start, end) in a token list."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, ...], list[int]] = {}
        self._prefixes: set[tuple[str, ...]] = set()
        self._max_len = 0

    def add(self, row: int, words: Sequence[str]) -> None:
        if not words:
            raise ValueError(f"phrase table: row {row} has no tokens")
        key = tuple(words)
        rows = self._rows.setdefault(key, [])
        if row not in rows:
            rows.append(row)
        for k in range(1, len(key)):
            self._prefixes.add(key[:k])
        self._max_len = max(self._max_len, len(key))

    def __len__(self) -> int:
        return len(self._rows)

    def matches(self, words: Sequence[str]) -> Iterator[tuple[int, int, int]]:
        """(row, start, end) of every token span that is a phrase, by start, then end, then row."""
        n = len(words)
        for start in range(n):
            for end in range(start + 1, min(n, start + self._max_len) + 1):
                key = tuple(words[start:end])
                rows = self._rows.get(key)
                if rows:
                    for row in sorted(rows):
                        yield row, start, end
                if key not in self._prefixes:
                    break
