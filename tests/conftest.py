"""Shared fixtures: a throwaway Dagster instance and pipeline data folder per test, one warm cache per session.

The cache holds only derived, rebuildable files (the lexicon table, the trained relation model), so sharing it
across tests saves ~30 s of building without letting one test's KG leak into another.
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from karma_dagster import services  # noqa: E402
from karma_dagster.definitions import build_definitions  # noqa: E402
from karma_dagster.kg.store import KGStore  # noqa: E402
from karma_dagster.resources.backbones import BackboneConfig  # noqa: E402
from karma_dagster.resources.storage import KarmaStorageResource  # noqa: E402
from pg_server import pg_server  # noqa: E402,F401 - one throwaway PostgreSQL per session (tests/pg_server.py)

REPO = Path(__file__).resolve().parent.parent
SAMPLE_INBOX = REPO / "data" / "inbox"


@pytest.fixture(scope="session")
def count_hits():
    """A dictionary hit counter over MeSH disease/chemical names and Hetionet gene/compound/disease names."""
    from karma_dagster.dictionary.cues import lexicon_hit_counter

    names: set[str] = set()
    with gzip.open(REPO / "data" / "vocab" / "mesh-tree-numbers.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        names |= {line.split("\t")[1] for line in fh if line.split("\t")[2][:1] in "CD"}
    with gzip.open(REPO / "data" / "vocab" / "hetionet-nodes.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        names |= {line.split("\t")[1] for line in fh if line.rstrip("\n").split("\t")[2] in {"Gene", "Compound", "Disease"}}
    return lexicon_hit_counter(names)



@pytest.fixture(scope="module")
def server() -> Iterator:
    """A scripted OpenAI-compatible server on 127.0.0.1 (tests/fake_openai_server.py), one per test module."""
    from fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def fresh_server(server):
    """The module's server with no script and no recorded requests left from the previous test."""
    server.reset()
    return server


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("karma-cache")


@dataclass
class Pipeline:
    """One isolated deployment: inbox, data folder, definitions and a temporary Dagster instance."""

    root: Path
    inbox: Path
    storage: KarmaStorageResource
    defs: dg.Definitions
    instance: dg.DagsterInstance

    @property
    def kg(self) -> KGStore:
        return KGStore(self.storage.kg_path())

    def add_to_inbox(self, *names: str) -> None:
        for name in names:
            shutil.copy(SAMPLE_INBOX / name, self.inbox / name)


class PipelineFactory:
    def __init__(self, tmp_path: Path, shared_cache: Path) -> None:
        self.tmp_path, self.shared_cache, self.instances = tmp_path, shared_cache, []

    def __call__(
        self, backbones: dict[str, BackboneConfig] | None = None, inbox_files: tuple[str, ...] = (),
        prompts_dir: str = "",
    ) -> Pipeline:
        tmp_path, shared_cache = self.tmp_path, self.shared_cache
        services.clear()
        inbox = tmp_path / "inbox"
        inbox.mkdir(exist_ok=True)
        storage = KarmaStorageResource(
            data_dir=str(tmp_path / "karma"), inbox=str(inbox), cache_dir=str(shared_cache)
        )
        defs = build_definitions(backbones=backbones or {"local": BackboneConfig()}, storage=storage,
                                 prompts_dir=prompts_dir)
        (tmp_path / "dagster_home").mkdir(exist_ok=True)
        ctx = dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home"))
        instance = ctx.__enter__()
        self.instances.append(ctx)
        pipeline = Pipeline(tmp_path / "karma", inbox, storage, defs, instance)
        pipeline.add_to_inbox(*inbox_files)
        return pipeline

    def close(self) -> None:
        # Last entered, first exited: each instance's __enter__ sets Dagster's current DefsStateStorage (a
        # ContextVar) and its __exit__ restores the one before. Exited first-to-last, the first instance's
        # storage was left current after it was disposed, and a later test in the same worker that built a
        # repository outside an instance failed ('undefined DagsterInstance weakref'; CI on 68a7257).
        for ctx in reversed(self.instances):
            ctx.__exit__(None, None, None)
        services.clear()


@pytest.fixture
def make_pipeline(tmp_path: Path, shared_cache: Path) -> Iterator[PipelineFactory]:
    factory = PipelineFactory(tmp_path, shared_cache)
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def make_module_pipeline(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Iterator[PipelineFactory]:
    """For tests that share one expensive run (then only read it, or restore what they change)."""
    factory = PipelineFactory(tmp_path_factory.mktemp("pipeline"), shared_cache)
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def rendered():
    """One real rendered prompt (schema alignment of a plain triple) for the LLM client's tests."""
    from karma_dagster.prompts import PromptStore, default_prompt_root

    triple = {"head_name": "lisinopril", "head_type": "Compound", "relation": "Negative_Correlation",
              "tail_name": "hypertension", "tail_type": "Disease", "evidence": "Lisinopril lowered blood pressure."}
    return PromptStore(default_prompt_root()).render("schema_alignment", domain="general biomedicine",
                                                     triple=triple, candidates=["treats", "causes"])
