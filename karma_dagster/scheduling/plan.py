"""The controller's view of real pending documents: features from the catalog + KG, decisions, the dispatch history.

Before a paper is ingested only its catalog row is known (date, title), so novelty and the task type come
from its title: every 1-5 word n-gram is looked up in the dictionary lexicon (KG + MeSH + Hetionet +
training-corpus terms, the EEA's own filter), and a matched name the KG does not hold yet counts as novel.
Plain dictionary look-ups: ~1 s to load the lexicon table once per process, microseconds per title (the
spaCy PhraseMatcher the stages use would take ~13 s to load in a sensor's process).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from karma_dagster import services
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.paths import DataPaths
from karma_dagster.scheduling.controller import (
    ControllerParams,
    Decision,
    DispatchHistory,
    candidates_from_titles,
    order,
)

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-]*")


@dataclass(frozen=True)
class Match:
    text: str
    type: str


class TitleMatcher:
    """Longest-first n-gram look-up of a text's terms in the lexicon (non-overlapping, left to right)."""

    def __init__(self, lexicon, max_words: int = 5) -> None:
        self.lexicon, self.max_words = lexicon, max_words

    def recognize(self, text: str) -> list[Match]:
        words = [m.group(0) for m in _TOKEN.finditer(text)]
        out, i = [], 0
        while i < len(words):
            for n in range(min(self.max_words, len(words) - i), 0, -1):
                phrase = " ".join(words[i:i + n])
                entry = self.lexicon.lookup(phrase)
                if entry is not None and entry.type and (n > 1 or len(phrase) > 2):
                    out.append(Match(phrase, entry.type))
                    i += n
                    break
            else:
                i += 1
        return out


def _matcher_and_names(data: DataPaths, namespace: str) -> tuple[TitleMatcher, set[str]]:
    """Built once per process, KG seed and KG file state (services owns the cache)."""
    from karma_dagster.dictionary.lexicon import Lexicon
    from karma_dagster.kg.store import KGStore

    def build() -> tuple[TitleMatcher, set[str]]:
        lexicon = Lexicon.build(services.seed_lexicon_rows(data), cache_dir=data.cache() / "lexicon")
        names: set[str] = set()
        if data.kg.exists():
            for row in KGStore(data.kg).lexicon_rows(namespace=namespace):
                names.add(row.name.lower())
                names.update(s.lower() for s in row.synonyms)
        return TitleMatcher(lexicon), names

    stamp = data.kg.stat().st_mtime_ns if data.kg.exists() else 0
    key = ("title_matcher", str(data.cache()), str(data.kg), namespace, services.seed_fingerprint(data), stamp)
    return services.cached(key, build)


def decide(
    keys: list[str], data: DataPaths, namespace: str = "local",
    params: ControllerParams = ControllerParams(), today: dt.date | None = None, record: bool = True,
) -> list[Decision]:
    """The controller's order of `keys` (pending documents), counting what it dispatched before; the decisions
    are recorded in the dispatch history (n_tau, t of the next call) unless `record` is False."""
    if not keys:
        return []
    matcher, kg_names = _matcher_and_names(data, namespace)
    catalog = Catalog(data.catalog)
    rows = []
    for key in keys:
        entry = catalog.lookup(key)
        if entry is None:
            raise KeyError(f"controller: document {key!r} is not in the catalog")
        rows.append((key, entry.date, entry.title or ""))
    candidates = candidates_from_titles(rows, matcher, kg_names, today or dt.date.today(), params)
    history = DispatchHistory(data.controller)
    decisions = order(candidates, params, history.counts())
    if record:
        history.record(decisions)
    return decisions
