"""Passages of ~256 tokens of the literature a backbone ingested, searched with BM25 (bm25s).

The passages come from the backbone's `documents` stage tables (the text the chain read), cut at sentence ends
into runs of at most `PASSAGE_TOKENS` words. The index is rebuilt when a documents table is added, removed or
rewritten (its file's size and mtime), and kept in memory otherwise.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from karma_dagster.cogmg.models import Passage
from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.runtime.stage_store import StageStore

PASSAGE_TOKENS = 256
_WORD = re.compile(r"\S+")
_LOCK = threading.Lock()
_INDEXES: dict[tuple, "PassageIndex"] = {}


def cut(doc_key: str, text: str, max_tokens: int = PASSAGE_TOKENS) -> list[tuple[str, str]]:
    """(passage_id, text): whole sentences packed up to max_tokens words (a longer sentence is its own passage)."""
    passages: list[tuple[str, str]] = []
    current: list[str] = []
    size = 0
    for _s, _e, sentence in split_sentences(text):
        n = len(_WORD.findall(sentence))
        if current and size + n > max_tokens:
            passages.append((f"{doc_key}#p{len(passages)}", " ".join(current)))
            current, size = [], 0
        current.append(sentence)
        size += n
    if current:
        passages.append((f"{doc_key}#p{len(passages)}", " ".join(current)))
    return passages


@dataclass
class PassageIndex:
    ids: list[str]
    doc_keys: list[str]
    texts: list[str]
    retriever: object | None  # bm25s.BM25; None when there is no passage

    def search(self, query: str, k: int = 5) -> list[Passage]:
        import bm25s

        if self.retriever is None or not query.strip():
            return []
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:
            return []
        k = min(k, len(self.ids))
        found, scores = self.retriever.retrieve(tokens, k=k, show_progress=False)  # type: ignore[attr-defined]
        return [Passage(passage_id=self.ids[i], doc_key=self.doc_keys[i], text=self.texts[i], score=float(s))
                for i, s in zip(found[0], scores[0]) if s > 0]


def _state(store: StageStore, namespace: str) -> tuple:
    folder = store.root / namespace / "documents"
    if not folder.exists():
        return ()
    return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.glob("*.parquet")))


def passage_index(data: DataPaths, namespace: str) -> PassageIndex:
    """The BM25 index over the namespace's ingested documents (cached while the documents tables are unchanged)."""
    import bm25s

    store = StageStore(data.stages_dir)
    key = (str(data.stages_dir), namespace, _state(store, namespace))
    with _LOCK:
        if key in _INDEXES:
            return _INDEXES[key]
    ids, docs, texts = [], [], []
    for doc_key in store.partitions(namespace, "documents"):
        frame = store.read(namespace, "documents", doc_key)
        for pid, text in cut(doc_key, " ".join(str(t) for t in frame["text"])):
            ids.append(pid)
            docs.append(doc_key)
            texts.append(text)
    retriever = None
    if texts:
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    index = PassageIndex(ids, docs, texts, retriever)
    with _LOCK:
        for old in [k for k in _INDEXES if k[:2] == key[:2]]:
            del _INDEXES[old]
        _INDEXES[key] = index
    return index
