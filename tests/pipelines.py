"""One isolated deployment for a test (inbox, data folder, definitions, a temporary Dagster instance) and the factory
the `make_pipeline` fixtures hand out (tests/conftest.py). A module of its own so a test can import the factory by
name: `from conftest import ...` resolves to whichever of the two conftest modules loaded last."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from karma_dagster.runtime import services
from karma_dagster.definitions import build_definitions
from karma_dagster.kg.store import KGStore
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource

SAMPLE_INBOX = Path(__file__).resolve().parent.parent / "data" / "inbox"


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


# The instance class the shipped dagster.yaml names (Dagster's SQLite files, each one's engine kept), so the chain
# tests run on the storage users get; the rest of instance_for_test's config stays Dagster's test defaults.
KARMA_INSTANCE = {"instance_class": {"module": "karma_dagster.runtime.dagster_instance", "class": "KarmaInstance"}}


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
        ctx = dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home"), overrides=KARMA_INSTANCE)
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
