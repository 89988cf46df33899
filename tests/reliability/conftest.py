"""Reliability suite fixtures: the parent tests/conftest.py fixtures (make_pipeline, shared_cache) plus a way to
build a second isolated pipeline in the same test, and the tests/ folder on sys.path for fake_openai_server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

TESTS = Path(__file__).resolve().parent.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture
def another_pipeline(make_pipeline: Any, tmp_path: Path, shared_cache: Path) -> Iterator[Callable[..., Any]]:
    """`another_pipeline("name", backbones=..., inbox_files=...)`: one more isolated deployment (own inbox, data
    folder, instance) in a sub-folder of the test's tmp_path, for comparing a faulty run with a clean one."""
    factories: list[Any] = []

    def make(name: str, **kwargs: Any) -> Any:
        factory = type(make_pipeline)(tmp_path / name, shared_cache)  # tests/pipelines.PipelineFactory
        (tmp_path / name).mkdir(exist_ok=True)
        factories.append(factory)
        return factory(**kwargs)

    yield make
    for factory in factories:
        factory.close()
