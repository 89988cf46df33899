"""MeSH tree numbers of the shipped vocabulary: which entity of a document is a broader term of another.

BC5CDR annotates chemical-induced disease at the most specific disease only (a relation to the hypernym
"cardiovascular diseases" is skipped when "ventricular tachycardia" is there), so the document-level relation
model asks, per entity, whether another entity of the same document lies under it or above it in MeSH.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from karma_dagster.dictionary.lexicon import read_tsv_gz
from karma_dagster.runtime.paths import data_file

TREE_FILE = ("vocab", "mesh-tree-numbers.tsv.gz")


def tree_path() -> Path:
    return data_file(*TREE_FILE)


@lru_cache(maxsize=2)
def tree_numbers(path: Path | None = None) -> Mapping[str, tuple[str, ...]]:
    """Bare MeSH id (D003409) -> its tree numbers (C19.297, ...), from the shipped vocabulary file."""
    path = Path(path) if path else tree_path()
    if not path.is_file():
        raise FileNotFoundError(f"MeSH tree numbers {path.name} not found (the shipped vocabulary)")
    trees: dict[str, list[str]] = {}
    for mesh_id, _name, tree_number in (row[:3] for row in read_tsv_gz(path, 3)):
        if mesh_id and tree_number:
            trees.setdefault(mesh_id, []).append(tree_number)
    return {k: tuple(sorted(v)) for k, v in trees.items()}


def _under(child: Sequence[str], parent: Sequence[str]) -> bool:
    return any(c != p and c.startswith(p + ".") for c in child for p in parent)


def hierarchy_flags(ids: Sequence[frozenset[str]], trees: Mapping[str, tuple[str, ...]]
                    ) -> list[tuple[bool, bool]]:
    """Per entity (its bare ids): (another entity of the list lies under it, it lies under another entity)."""
    tns = [tuple(t for i in sorted(e) for t in trees.get(i, ())) for e in ids]
    out = []
    for k, mine in enumerate(tns):
        broader = any(_under(other, mine) for m, other in enumerate(tns) if m != k and other and mine)
        narrower = any(_under(mine, other) for m, other in enumerate(tns) if m != k and other and mine)
        out.append((broader, narrower))
    return out
