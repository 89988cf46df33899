"""The one owner of process-wide caches: dictionary NER, entity index, KG schema, seed lexicon, backbones.

Built once per process and per KG seed (a new seed import invalidates them), so the stages of a run and the
runs of one process share them. No Dagster import: the CLI, the Dagster resources, tests and benchmarks all
look things up here, and `clear()` is the one way to forget them.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from karma_dagster.runtime import paths as project_paths
from karma_dagster.backbones.base import Backbone
from karma_dagster.runtime.config import BACKBONE_KINDS, BACKBONE_MODES, BackboneSettings
from karma_dagster.kg.backends import kg_display, kg_exists, kg_store
from karma_dagster.kg.location import kg_url
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.store import EdgeFacts, KGStore
from karma_dagster.runtime.paths import DataPaths

_LOCK = threading.RLock()
_CACHE: dict[tuple, Any] = {}


def cached(key: tuple, build: Callable[[], Any]) -> Any:
    """The process-wide cache every expensive piece goes through (so `clear()` forgets them all)."""
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = build()
        return _CACHE[key]


def clear() -> None:
    """Forget every built object (after a seed import: the lexicon and the index changed). The dictionary NERs
    whose lexicon content is unchanged stay built (`_ner_for`), with the texts they read forgotten."""
    from karma_dagster.runtime import stage_store

    with _LOCK:
        _CACHE.clear()
        _FINGERPRINTS.clear()
        _BY_KG_STATE.clear()
        for ner in _NERS.values():
            ner.forget_texts()
    stage_store.forget_reads()


# Dictionary NERs by the content they were built from, kept across clear(): one is a pure function of its lexicon
# (whose fingerprint hashes every input and the lexicon's code) and of the learned NER's files, and building one
# costs ~2.5 s (the ruler's ~200,000 phrases, spaCy's tokenizer) where reading the lexicon costs ~0.3 s. A seed
# import changes the fingerprint, so a new KG gets a new NER; the last two are kept (a test suite's, a process that
# re-imported its seed once).
_NERS: OrderedDict[tuple, Any] = OrderedDict()
_NERS_KEPT = 2


def _ner_for(lexicon: Any) -> Any:  # noqa: ANN401 - a DictionaryNER (imported lazily: spaCy)
    from karma_dagster.dictionary.ner import DictionaryNER
    from karma_dagster.dictionary.ner_training import MODEL_DIR

    folder = Path(MODEL_DIR)
    learned = sorted((str(f.relative_to(folder)), st.st_size, st.st_mtime_ns)
                     for f in folder.rglob("*") if f.is_file() for st in (f.stat(),))
    key = (lexicon.fingerprint, str(folder), tuple(learned))
    with _LOCK:
        if key in _NERS:
            _NERS.move_to_end(key)
            return _NERS[key]
        ner = _NERS[key] = DictionaryNER(lexicon, learned=MODEL_DIR)
        while len(_NERS) > _NERS_KEPT:
            _NERS.popitem(last=False)
        return ner


def seed_fingerprint(data: DataPaths) -> str:
    """Changes whenever the seed KG is re-imported. Read again only when the KG file (or its WAL) changed on
    disk: the stages ask several times per document, and each read opens the DuckDB file under its lock.
    A Postgres KG is asked each time (one short query; readers take no lock there)."""
    if kg_url():
        return kg_store(data).seed_fingerprint()
    if not data.kg.exists():
        return "no-kg"
    stamp = _kg_state(data)
    with _LOCK:
        known = _FINGERPRINTS.get(str(data.kg))
        if known and known[0] == stamp:
            return known[1]
    fingerprint = KGStore(data.kg).seed_fingerprint()
    with _LOCK:
        _FINGERPRINTS[str(data.kg)] = (stamp, fingerprint)
    return fingerprint


_FINGERPRINTS: dict[str, tuple[tuple, str]] = {}


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def _kg_state(data: DataPaths) -> tuple:
    """The DuckDB KG file and its WAL as they are on disk now: any commit (here or in another process) appends to
    the WAL or rewrites the file, and so changes it."""
    return tuple((s.st_ino, s.st_mtime_ns, s.st_ctime_ns, s.st_size) if (s := _stat(p)) else None
                 for p in (data.kg, data.kg.with_name(data.kg.name + ".wal")))


_BY_KG_STATE: dict[tuple, tuple[tuple, Any]] = {}


def by_kg_state(data: DataPaths, name: tuple, read: Callable[[], Any]) -> Any:
    """`read()` (a query of the DuckDB KG) answered again only when the KG changed on disk since this process last
    asked: every stage of every document asks the same questions, and each one opens the file under its lock.
    The state is taken before the query, so a commit during it makes the next call ask again. A Postgres KG is
    asked each time (readers take no lock there)."""
    if kg_url() or not data.kg.exists():
        return read()
    state = _kg_state(data)
    key = (str(data.kg), *name)
    with _LOCK:
        known = _BY_KG_STATE.get(key)
    if known is not None and known[0] == state:
        return known[1]
    value = read()
    with _LOCK:
        _BY_KG_STATE[key] = (state, value)
    return value


@lru_cache(maxsize=1)
def kg_schema() -> KGSchema:
    return KGSchema.load()


# ---------------------------------------------------------------- the existing KG
def import_seed_kg(data: DataPaths, nodes: Path | str, edges: Path | str, fmt: str, seed_confidence: float,
                   if_grown: str = "refuse"):
    """Import node/edge tables into the KG store and (re)build the entity index from the seed's names.

    Two stores, each written in one commit: the KG first, then the index, which records the KG seed it was built
    from. Stopped between or inside them (a kill, a full disk), the next open of the index sees the mismatch and
    rebuilds it from the KG (`entity_index`, kg/index_health.py). A KG that grew is refused before the files are
    read unless `if_grown` is "replace" or "add" (kg/seed_guard.py); after the import, evidence naming no node is
    counted into the stats' `dangling` (it can only predate this import)."""
    from karma_dagster.kg import seed_guard
    from karma_dagster.kg.entity_index import EntityIndex
    from karma_dagster.kg.index_health import build_lock, build_seed
    from karma_dagster.export.kgx_import import import_kgx
    from karma_dagster.kg.seed_import import import_generic, import_hetionet

    importers = {"hetionet": import_hetionet, "generic": import_generic, "kgx": import_kgx}
    if fmt not in importers:
        raise ValueError(f"unknown KG format {fmt!r}: use {', '.join(map(repr, importers))}")
    seed_guard.check_mode(if_grown)
    store = kg_store(data)
    if if_grown == "refuse" and (grown := seed_guard.grown(store)) is not None:
        raise seed_guard.SeedImportRefused(grown.refusal())  # before reading a file that may take minutes
    data.root.mkdir(parents=True, exist_ok=True)
    importer = importers[fmt]
    stats = importer(store, nodes, edges, seed_confidence, if_grown=if_grown)
    clear()  # the KG changed: forget the old seed's caches (and fingerprint) even if the index build fails
    with build_lock(data.index):
        n_index = build_seed(EntityIndex(data.index), store, seed_fingerprint(data))
    clear()
    dangling = seed_guard.dangling_evidence(store)
    return stats.model_copy(update={"dangling": dangling.text() if dangling.n_rows else ""}), n_index


def dangling_evidence(data: DataPaths) -> str:
    """The invariant "every evidence row names a node of the KG", checked where a command opens the KG: "" when it
    holds, else a line naming the violations' count and examples (kg/seed_guard.py)."""
    from karma_dagster.kg import seed_guard

    if not kg_exists(data):
        return ""
    found = seed_guard.dangling_evidence(kg_store(data))
    return found.text() if found.n_rows else ""


def seed_present(data: DataPaths) -> bool:
    return kg_exists(data) and kg_store(data).seed_counts().n_nodes > 0


def check_kg(data: DataPaths) -> None:
    """The KG file read through once (every column of every table: DuckDB checks each block's checksum), so damage
    anywhere in it is StoreCorrupt now, before any chain runs, not when a merge meets it. A Postgres KG is the
    server's to check."""
    if not kg_url() and data.kg.exists():
        KGStore(data.kg).check_integrity()


def seed_lexicon_rows(data: DataPaths) -> list[dict]:
    def build() -> list[dict]:
        if not kg_exists(data):
            return []
        return [r.model_dump() for r in kg_store(data).lexicon_rows(namespace=None)]

    return cached(("seed_rows", kg_display(data), seed_fingerprint(data)), build)


def dictionary(data: DataPaths):
    """The dictionary NER over the KG's names + MeSH + Hetionet vocabularies + training-corpus terms."""
    from karma_dagster.dictionary.lexicon import Lexicon

    def build():
        return _ner_for(Lexicon.build(seed_lexicon_rows(data), cache_dir=data.cache() / "lexicon"))

    return cached(("dictionary", str(data.cache()), kg_display(data), seed_fingerprint(data)), build)


def entity_index(data: DataPaths):
    """The process's handle on the LanceDB entity index (seed names + every namespace's merged entities), checked
    against the KG when opened and rebuilt from it when it is not the KG's index (kg/index_health.py).
    A namespace's entities in it are only as fresh as its last sync: link through `linkable_index`."""
    from karma_dagster.kg.entity_index import EntityIndex
    from karma_dagster.kg.index_health import checked_index

    def build() -> EntityIndex:
        if not seed_present(data):  # before the first import: nothing to check it against
            return EntityIndex(data.index)
        return checked_index(data.index, kg_store(data), lambda: seed_fingerprint(data), data.root)

    return cached(("index", str(data.index), seed_fingerprint(data)), build)


def linkable_index(data: DataPaths, namespace: str, before: dt.date | None = None):
    """What a document of `namespace` dated `before` links its mentions against: the seed's names plus the
    entities the namespace's increments merged before that date (an IndexView).

    State-driven, so the cached index never goes stale: every call compares a fingerprint of the KG's
    extracted nodes of the namespace with the one this process last synced (one small query) and, when they
    differ — a merge here or in another process, a re-merge that dropped an entity, a crash between a merge and
    the index update — syncs the namespace's index rows to the KG first."""
    index = entity_index(data)
    if kg_exists(data):
        fingerprint, entities = _extracted_entities(data, namespace, known=index.synced_fingerprint(namespace))
        if entities is not None:
            index.sync_namespace(namespace, entities, fingerprint)
    return index.view(namespace, before)


def identity_index(data: DataPaths, namespace: str | None = None, before: dt.date | None = None):
    """Who a mention is (kg/identity.py): the seed's nodes by id, cross-reference and exact name (cached per seed),
    plus, for `namespace`, the entities its increments merged (cached per KG state of them, one small query per
    call), as a document dated `before` sees them (merged before that date)."""
    from karma_dagster.kg.identity import Crosswalk, IdentityIndex, Node

    def seed() -> IdentityIndex:
        from karma_dagster.export.kgx_import import seed_xrefs

        rows = seed_lexicon_rows(data)
        crosswalk = Crosswalk.load()
        if kg_exists(data) and (own := seed_xrefs(kg_store(data))):  # a KGX import's xref column
            crosswalk = crosswalk.with_xrefs(own)
        return IdentityIndex((Node(r["id"], r["name"], r["kind"], tuple(r["synonyms"])) for r in rows), crosswalk)

    base = cached(("identity", kg_display(data), seed_fingerprint(data)), seed)
    if namespace is None or not kg_exists(data):
        return base.as_of(before)
    key = ("identity_extracted", kg_display(data), seed_fingerprint(data), namespace)
    with _LOCK:
        known = _CACHE.get(key)
    fingerprint, entities = _extracted_entities(data, namespace, known=known[0] if known else None)
    if entities is not None or known is None:
        layer = base.with_nodes(Node(e["id"], e["name"], e["kind"], tuple(e["synonyms"]), source="extracted",
                                     first_seen=e["first_seen"]) for e in entities or [])
        known = (fingerprint, layer)
        with _LOCK:
            _CACHE[key] = known
    return known[1].as_of(before)


def _extracted_entities(data: DataPaths, namespace: str, known: str | None) -> tuple[str, list[dict] | None]:
    """KGStore.extracted_entities, read once per state of the KG file (by_kg_state): (fingerprint, entities), the
    entities None when the fingerprint is `known`."""
    if kg_url():  # asked each time: the entities only when they changed
        return kg_store(data).extracted_entities(namespace, known=known)
    fingerprint, entities = by_kg_state(data, ("extracted_entities", namespace),
                                        lambda: kg_store(data).extracted_entities(namespace))
    return fingerprint, None if fingerprint == known else entities


def kg_kind_lookup(data: DataPaths) -> Callable[[str], str | None]:
    """id -> KG node kind, loaded once per state of the KG (one query instead of one per triple)."""
    return by_kg_state(data, ("node_kinds",), lambda: kg_store(data).node_kinds()).get


def existing_relations_lookup(
    data: DataPaths, namespace: str, as_of: dt.date | None = None
) -> Callable[[Sequence[tuple[str, str]]], dict[tuple[str, str], list[EdgeFacts]]]:
    """(head, tail) pairs -> the namespace's KG edges head -> tail with their support as of `as_of` (seed + evidence
    dated <= as_of, minus edges superseded by then; None = everything): one query per call, for the conflict agent."""
    store = kg_store(data)

    def lookup(pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], list[EdgeFacts]]:
        return store.edges_between(pairs, namespace=namespace, as_of=as_of)

    return lookup


def edge_sentences_lookup(
    data: DataPaths, namespace: str, as_of: dt.date | None = None
) -> Callable[[Sequence[tuple[str, str, str]]], dict[tuple[str, str, str], list[str]]]:
    """KG edges -> their evidence sentences as of `as_of`, newest first: the debate's KG side (one query a call)."""
    store = kg_store(data)

    def lookup(edges: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], list[str]]:
        return store.edge_sentences(edges, namespace=namespace, as_of=as_of)

    return lookup


def kg_context(data: DataPaths, text: str, limit: int = 40) -> list[str]:
    """Names of KG entities the paper mentions, most frequent first: what relevance is judged against."""
    names = cached(
        ("kg_names", kg_display(data), seed_fingerprint(data)),
        lambda: {r["name"].lower(): r["name"] for r in seed_lexicon_rows(data)},
    )
    ner = dictionary(data)
    counts = Counter(names[m.text.lower()] for m in ner.recognize(text) if m.text.lower() in names)
    return [n for n, _ in counts.most_common(limit)]


# ---------------------------------------------------------------- backbones
def _local_backbone(data: DataPaths) -> Backbone:
    from karma_dagster.backbones.local import LocalBackbone
    from karma_dagster.backbones.local.judge import LocalJudge
    from karma_dagster.backbones.local.relations import LocalRelationModel

    return LocalBackbone(ner=dictionary(data), relations=LocalRelationModel(data.cache() / "relations"),
                         judge=LocalJudge(kg_schema()))


def _llm_backbone(name: str, settings: BackboneSettings, data: DataPaths, prompts_root: Path,
                  required_prompts: Sequence[str]) -> Backbone:
    from karma_dagster.backbones.llm import make_llm_backbone

    if not settings.model:
        raise ValueError(f"backbone {name!r}: kind litellm needs a model string (e.g. openai/gpt-4o)")
    return make_llm_backbone(name, settings, prompt_root=prompts_root,
                             cache_path=data.llm_cache / "llm_responses.sqlite", required_prompts=required_prompts,
                             calibration_dir=data.calibration_dir)


def _calibration_stamp(data: DataPaths, name: str) -> str | None:
    from karma_dagster.backbones.llm.calibration import stamp

    return stamp(data.calibration_dir, name)


def backbone(name: str, settings: BackboneSettings, data: DataPaths, prompts_root: Path | str | None = None,
             required_prompts: Sequence[str] = ()) -> Backbone:
    """The named backbone, built once per process and settings: the local one loads a lexicon and a trained
    classifier once, an LLM one keeps its response cache and concurrency limit across the stages of a run.
    `required_prompts` (the stage registry's) must exist for an LLM backbone: it fails when built, not mid-run."""
    root = Path(prompts_root) if prompts_root else project_paths.prompts_dir()
    if settings.kind not in BACKBONE_KINDS:
        raise ValueError(f"backbone {name!r}: unknown kind {settings.kind!r} (use 'local' or 'litellm')")
    if settings.mode not in BACKBONE_MODES:
        raise ValueError(f"backbone {name!r}: unknown mode {settings.mode!r} (use one of {list(BACKBONE_MODES)})")

    def build() -> Backbone:
        if settings.kind == "local":  # stateless: every local chain (ablations, baseline) shares one model in memory
            built = cached(("local_backbone", str(data.root), str(data.cache())), lambda: _local_backbone(data))
        else:
            built = _llm_backbone(name, settings, data, root, required_prompts)
        if settings.mode != "multi_agent":
            from karma_dagster.backbones.single_agent import wrap_mode

            built = wrap_mode(name, settings.mode, built)
        return built

    # an LLM backbone's evaluator calibration is read when it is built: a new `karma calibrate` builds it anew
    key = ("backbone", name, settings.model_dump_json(), str(data.root), str(data.cache()), str(root),
           _calibration_stamp(data, name) if settings.kind == "litellm" else None)
    return cached(key, build)
