"""The controller's view of real pending documents: Eq. 4's inputs from the catalog, KG and ledger, decisions, history.

Before a paper is ingested only its catalog entry is known (date, title, arrival time, source file):
- novelty and the task type come from its title: every 1-5 word n-gram is looked up in the dictionary lexicon
  (KG + MeSH + Hetionet + training-corpus terms, the EEA's own filter), a matched name the KG lacks is novel.
  Plain look-ups: ~1 s to load the lexicon table once per process, microseconds per title (the spaCy
  PhraseMatcher the stages use would take ~13 s to load in a sensor's process);
- U: the `controller:` LLM's estimate when backbones.yaml names one (llm_utility.py), else the rule U;
- urgency: the hours since the catalog first registered it;
- cost: the ledger's mean tokens per document (all backbones) scaled by the paper's share of source bytes
  (a file's bytes split over the documents of it in the batch) relative to the batch's mean: a long paper is
  estimated dearer, the local backbone (no tokens) costs 0. A rough proxy (PDF bytes overstate text), honest
  about being one: the tags show the estimate.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass

from karma_dagster.runtime import services
from karma_dagster.ingest.catalog import Catalog, DocumentEntry
from karma_dagster.runtime.ledger import Ledger, ledger_path
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.scheduling.controller import (
    RULE,
    Candidate,
    ControllerParams,
    Decision,
    DispatchHistory,
    cost_fraction,
    order,
    recency,
    title_features,
    urgency,
)
from karma_dagster.scheduling.llm_utility import UtilityItem, UtilityModel, controller_utility

log = logging.getLogger(__name__)
FROM_FILE = "backbones.yaml"  # decide()'s default utility model: the `controller:` of backbones.yaml

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
    from karma_dagster.kg.backends import kg_display, kg_exists, kg_store
    from karma_dagster.kg.location import kg_url

    def build() -> tuple[TitleMatcher, set[str]]:
        lexicon = Lexicon.build(services.seed_lexicon_rows(data), cache_dir=data.cache() / "lexicon")
        names: set[str] = set()
        if kg_exists(data):
            for row in kg_store(data).lexicon_rows(namespace=namespace):
                names.add(row.name.lower())
                names.update(s.lower() for s in row.synonyms)
        return TitleMatcher(lexicon), names

    if kg_url():  # no file to stat: what the namespace merged stands for the KG's state
        stamp = hash(frozenset(kg_store(data).merged_documents(namespace).items()))
    else:
        stamp = data.kg.stat().st_mtime_ns if data.kg.exists() else 0
    key = ("title_matcher", str(data.cache()), kg_display(data), namespace, services.seed_fingerprint(data), stamp)
    return services.cached(key, build)


def estimated_tokens(entries: list[DocumentEntry], data: DataPaths) -> dict[str, float]:
    """Tokens the chain of each document is expected to spend (all backbones): the ledger's mean per document,
    scaled by the document's share of source bytes relative to the batch's mean. 0 when the ledger has no
    tokens yet (nothing processed, or local backbones only)."""
    path = ledger_path(data.root)
    per_doc = Ledger(path).tokens_per_document()[0] if path.exists() else 0.0
    if per_doc <= 0:
        return {e.doc_key: 0.0 for e in entries}
    by_file: dict[str, int] = {}
    for e in entries:
        by_file[e.preferred_source.source_path] = by_file.get(e.preferred_source.source_path, 0) + 1
    sizes: dict[str, float] = {}
    for e in entries:
        f = data.inbox / e.preferred_source.source_path
        if f.is_file():
            sizes[e.doc_key] = f.stat().st_size / by_file[e.preferred_source.source_path]
    mean = sum(sizes.values()) / len(sizes) if sizes else 0.0
    return {e.doc_key: per_doc * (sizes[e.doc_key] / mean if mean and e.doc_key in sizes else 1.0) for e in entries}


def llm_utilities(entries: list[DocumentEntry], features: dict, model: UtilityModel | None,
                  why_not: str = "") -> tuple[dict[str, float], str]:
    """({doc_key: U} from the controller LLM, the utility_source of the documents left on the rule U)."""
    if model is None:
        return {}, f"{RULE} ({why_not})" if why_not else RULE
    items = [UtilityItem(doc=i, title=e.title or "", date=e.date.isoformat(), entity_type=features[e.doc_key].tau,
                         known_entities=features[e.doc_key].known[:10], new_entities=features[e.doc_key].new[:10])
             for i, e in enumerate(entries)]
    try:
        got = model.estimate(items)
    except Exception as exc:  # noqa: BLE001 - ordering is an optimisation: the rule U orders them instead
        log.warning("controller utility %s failed, the rule utility orders these documents: %s", model.source, exc)
        return {}, f"{RULE} ({model.source} failed: {type(exc).__name__})"
    return {entries[i].doc_key: u for i, u in got.items() if 0 <= i < len(entries)}, f"{RULE} ({model.source} gave no answer)"


def candidates(
    keys: list[str], data: DataPaths, namespace: str = "local", params: ControllerParams = ControllerParams(),
    now: dt.datetime | None = None, utility_model: UtilityModel | None | str = FROM_FILE,
) -> list[Candidate]:
    """Eq. 4's inputs for each pending document (module docstring)."""
    matcher, kg_names = _matcher_and_names(data, namespace)
    catalog = Catalog(data.catalog)
    known = catalog.lookup_many(keys)
    missing = [key for key in keys if key not in known]
    if missing:
        raise KeyError(f"controller: document {missing[0]!r} is not in the catalog"
                       + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    entries = [known[key] for key in keys]
    now = now or dt.datetime.now(dt.timezone.utc)
    features = {e.doc_key: title_features(e.title or "", matcher, kg_names) for e in entries}
    model, why_not = controller_utility(data) if utility_model == FROM_FILE else (utility_model, "")
    llm, rule_source = llm_utilities(entries, features, model, why_not)  # type: ignore[arg-type]
    tokens = estimated_tokens(entries, data)
    out = []
    for e in entries:
        arrived = dt.datetime.fromisoformat(e.first_registered)
        arrived = arrived if arrived.tzinfo else arrived.replace(tzinfo=dt.timezone.utc)
        wait = max((now - arrived).total_seconds() / 3600.0, 0.0)
        f = features[e.doc_key]
        out.append(Candidate(
            doc_key=e.doc_key, tau=f.tau, novelty=f.novelty,
            recency=recency(e.date, now.date(), params.recency_half_life_days),
            llm_utility=llm.get(e.doc_key), utility_source=model.source if e.doc_key in llm else rule_source,  # type: ignore[union-attr]
            wait_hours=wait, urgency=urgency(wait, params.urgency_half_life_hours),
            cost_tokens=tokens[e.doc_key], cost=cost_fraction(tokens[e.doc_key], params.cost_reference_tokens),
        ))
    return out


def decide(
    keys: list[str], data: DataPaths, namespace: str = "local",
    params: ControllerParams = ControllerParams(), today: dt.date | None = None, record: bool = True,
    utility_model: UtilityModel | None | str = FROM_FILE, now: dt.datetime | None = None,
) -> list[Decision]:
    """The controller's order of `keys` (pending documents), counting what it dispatched before; the decisions
    are recorded in the dispatch history (n_tau, t of the next call) unless `record` is False.
    `utility_model`: who estimates U; default the `controller:` of backbones.yaml, None = the rule U.
    `today` (legacy) sets the clock to that day's midnight UTC when `now` is not given."""
    if not keys:
        return []
    if now is None and today is not None:
        now = dt.datetime.combine(today, dt.time(), tzinfo=dt.timezone.utc)
    found = candidates(keys, data, namespace, params, now, utility_model)
    history = DispatchHistory(data.controller)
    decisions = order(found, params, history.counts())
    if record:
        history.record(decisions)
    return decisions
