"""Process-wide builders of the expensive pieces: lexicon/NER, entity index, relation model, backbones.

Built once per process and per KG seed (a new seed import invalidates them), so the stages of a run and
the runs of one process share them. No Dagster import: the CLI, tests and benchmarks use the same builders.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from karma_dagster.backbones.base import Backbone
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.store import KGStore

_LOCK = threading.RLock()
_CACHE: dict[tuple, object] = {}
LOCAL_CHAIN_VERSION = "local-chain-v1"


def _cached(key: tuple, build: Callable[[], object]) -> object:
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = build()
        return _CACHE[key]


def clear() -> None:
    """Forget every built object (after a seed import: the lexicon and the index changed)."""
    from karma_dagster.resources import backbones as backbones_resource

    with _LOCK:
        _CACHE.clear()
        backbones_resource.clear_built()


def seed_fingerprint(kg_path: Path) -> str:
    """Changes whenever the seed KG is re-imported (file mtime + size of the DuckDB file's seed rows)."""
    if not Path(kg_path).exists():
        return "no-kg"
    store = KGStore(kg_path)
    with store.connect(read_only=True) as con:
        n_nodes, n_edges = con.execute(
            "SELECT (SELECT count(*) FROM seed_nodes), (SELECT count(*) FROM seed_edges)"
        ).fetchone()
        digest = con.execute("SELECT coalesce(sum(hash(id)), 0)::VARCHAR FROM seed_nodes").fetchone()[0]
    return hashlib.sha256(f"{n_nodes}:{n_edges}:{digest}".encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def kg_schema() -> KGSchema:
    return KGSchema.load()


# ---------------------------------------------------------------- the existing KG
def import_seed_kg(root: Path, nodes: Path | str, edges: Path | str, fmt: str, seed_confidence: float):
    """Import node/edge tables into the KG store and (re)build the entity index from the seed's names."""
    from karma_dagster.kg.entity_index import EntityIndex, KGEntity
    from karma_dagster.kg.seed_import import import_generic, import_hetionet

    if fmt not in ("hetionet", "generic"):
        raise ValueError(f"unknown KG format {fmt!r}: use 'hetionet' or 'generic'")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    store = KGStore(root / "kg.duckdb")
    importer = import_hetionet if fmt == "hetionet" else import_generic
    stats = importer(store, nodes, edges, seed_confidence)
    rows = store.lexicon_rows(namespace=None)
    n_index = EntityIndex(root / "entity_index.lance").build(
        KGEntity(id=r.id, name=r.name, kind=r.kind, synonyms=r.synonyms) for r in rows
    )
    clear()
    return stats, n_index


def seed_lexicon_rows(kg_path: Path) -> list[dict]:
    def build() -> list[dict]:
        if not Path(kg_path).exists():
            return []
        return [r.model_dump() for r in KGStore(kg_path).lexicon_rows(namespace=None)]

    return _cached(("seed_rows", str(kg_path), seed_fingerprint(kg_path)), build)  # type: ignore[return-value]


def dictionary(cache_dir: Path, kg_path: Path):
    """The dictionary NER over the KG's names + MeSH + Hetionet vocabularies + training-corpus terms."""
    from karma_dagster.backbones.local.lexicon import Lexicon
    from karma_dagster.backbones.local.ner import LocalNER

    def build():
        lexicon = Lexicon.build(seed_lexicon_rows(kg_path), cache_dir=Path(cache_dir) / "lexicon")
        return LocalNER(lexicon)

    return _cached(("dictionary", str(cache_dir), str(kg_path), seed_fingerprint(kg_path)), build)


def entity_index(uri: Path):
    from karma_dagster.kg.entity_index import EntityIndex

    return _cached(("index", str(uri)), lambda: EntityIndex(uri))


def kg_kind_lookup(kg_path: Path) -> Callable[[str], str | None]:
    """id -> KG node kind, loaded once per call site (one query instead of one per triple)."""
    store = KGStore(kg_path)
    with store.connect(read_only=True) as con:
        kinds = dict(con.execute("SELECT id, kind FROM nodes").fetchall())
    return kinds.get


def existing_relations_lookup(kg_path: Path, namespace: str) -> Callable[[str, str], list[str]]:
    store = KGStore(kg_path)
    memo: dict[tuple[str, str], list[str]] = {}

    def lookup(head_id: str, tail_id: str) -> list[str]:
        if (head_id, tail_id) not in memo:
            memo[(head_id, tail_id)] = store.existing_relations(head_id, tail_id, namespace=namespace)
        return memo[(head_id, tail_id)]

    return lookup


def kg_context(cache_dir: Path, kg_path: Path, text: str, limit: int = 40) -> list[str]:
    """Names of KG entities the paper mentions, most frequent first: what relevance is judged against."""
    names = _cached(
        ("kg_names", str(kg_path), seed_fingerprint(kg_path)),
        lambda: {r["name"].lower(): r["name"] for r in seed_lexicon_rows(kg_path)},
    )
    ner = dictionary(cache_dir, kg_path)
    counts = Counter(names[m.text.lower()] for m in ner.recognize(text) if m.text.lower() in names)  # type: ignore[operator, index]
    return [n for n, _ in counts.most_common(limit)]


# ---------------------------------------------------------------- backbones
def local_backbone(cache_dir: Path, kg_path: Path) -> Backbone:
    from karma_dagster.backbones.local import LocalBackbone
    from karma_dagster.backbones.local.judge import LocalJudge
    from karma_dagster.backbones.local.relations import LocalRelationModel

    return LocalBackbone(
        ner=dictionary(cache_dir, kg_path),  # type: ignore[arg-type]
        relations=LocalRelationModel(Path(cache_dir) / "relations"),
        judge=LocalJudge(kg_schema()),
    )


def llm_backbone(name: str, cfg: dict, prompts_root: Path, cache_dir: Path) -> Backbone:
    """`cache_dir` holds the response cache: run data (what a model answered), not a derived file."""
    from karma_dagster.backbones.llm import make_llm_backbone

    if not cfg.get("model"):
        raise ValueError(f"backbone {name!r}: kind litellm needs a model string (e.g. openai/gpt-4o)")
    return make_llm_backbone(
        name,
        cfg["model"],
        api_base=cfg.get("api_base"),
        api_key=cfg.get("api_key"),
        domain=cfg.get("domain", "general biomedicine"),
        prompt_root=prompts_root,
        cache_path=Path(cache_dir) / "llm_responses.sqlite",
        temperature=cfg.get("temperature", 0.0),
        max_tokens=cfg.get("max_tokens", 1024),
        timeout=cfg.get("timeout", 60.0),
        max_retries=cfg.get("max_retries", 4),
        concurrency=cfg.get("concurrency", 4),
    )


AGENT_OF_STAGE = {
    "documents": "ingestion", "segments": "reader", "summaries": "summarizer", "entities": "entity_extraction",
    "relations": "relation_extraction", "aligned": "schema_alignment", "resolved": "conflict_resolution",
    "evaluated": "evaluator",
}


def prompts_of_stage(stage: str) -> list[str]:
    """The prompt files a stage's agent renders (the evaluator asks three separate questions)."""
    agent = AGENT_OF_STAGE[stage]
    return ["evaluator_confidence", "evaluator_clarity", "evaluator_relevance"] if agent == "evaluator" else [agent]


def code_version(kind: str, stage: str, prompts_root: Path | str | None = None) -> str:
    """An asset's code_version: the prompt file's hash for LLM backbones, the algorithm versions for local."""
    if kind == "litellm":
        from karma_dagster.prompts import PromptStore

        return PromptStore(prompts_root or None).code_version_for(prompts_of_stage(stage))
    return f"{LOCAL_CHAIN_VERSION}:{stage}"


def chain_version(backbone: Backbone) -> str:
    """The provenance 'prompt version' of a triple: what answered extraction and evaluation."""
    return ";".join(backbone.prompt_id(a) for a in ("entity_extraction", "relation_extraction", "evaluator"))
