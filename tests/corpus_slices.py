"""The first abstracts of a shipped (gzipped) PubTator training file, written out as a small corpus: enough for a
model to learn from in a test, quick to train."""

from __future__ import annotations

import gzip
from pathlib import Path


def first_abstracts(src: Path, n: int, dest: Path) -> Path:
    """Write the first `n` documents of `src` (PubTator, .gz) to `dest`; return `dest`."""
    lines, docs = [], 0
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        for line in fh:
            lines.append(line)
            if not line.strip():
                docs += 1
                if docs == n:
                    break
    dest.write_text("".join(lines), encoding="utf-8")
    return dest
