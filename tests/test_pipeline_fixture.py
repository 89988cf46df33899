"""The suite's own pipeline fixture leaves Dagster's context as it found it, so a test's outcome does not depend on
which test file ran before it in the same worker (CI on 68a7257: two prompt-sensor tests failed after a file whose
tests made two pipelines each)."""

from __future__ import annotations

from pathlib import Path

from dagster._core.storage.defs_state.base import DefsStateStorage

from pipelines import PipelineFactory
from karma_dagster.definitions import build_definitions
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource


def test_closed_pipelines_leave_no_disposed_instance_current(tmp_path: Path, shared_cache: Path):
    before = DefsStateStorage.get()
    factory = PipelineFactory(tmp_path, shared_cache)
    first, second = factory(), factory()
    assert DefsStateStorage.get() is second.instance.defs_state_storage
    factory.close()
    assert DefsStateStorage.get() is before
    # what failed when the first instance's storage was left current: building a repository outside an instance
    storage = KarmaStorageResource(data_dir=str(tmp_path / "other"))
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=storage)
    assert defs.resolve_sensor_def("prompt_versions") is not None
