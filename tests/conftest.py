"""Shared fixtures: a throwaway Dagster instance and pipeline data folder per test, one warm cache per session.

The cache holds only derived, rebuildable files (the lexicon table, the trained relation model), so sharing it
across tests saves ~30 s of building without letting one test's KG leak into another.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pg_server import pg_server  # noqa: E402,F401 - one throwaway PostgreSQL per session (tests/pg_server.py)
from pipelines import Pipeline, PipelineFactory  # noqa: E402,F401 - importable by name (two conftest modules)
from suite_order import FileSeconds, slow_files_first  # noqa: E402 - the suite's file order and per-file times

REPO = Path(__file__).resolve().parent.parent



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
    """The module's server with no script, no recorded requests and no measured speed left from the previous test
    (a script's delays are its own: an earlier test's fast answers must not lengthen this one's deadlines)."""
    from karma_dagster.backbones.llm import deadline

    server.reset()
    deadline.forget()
    return server


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The derived-files cache (lexicon, trained relation models) of the whole run, shared by the xdist workers as
    processes of a deployment share one: its files are built under a lock and written atomically, so the first
    worker to need one builds it (~80 s cold) and the other waits for it and reads it, not builds it again."""
    if worker_id == "master":  # no xdist: this process alone
        return tmp_path_factory.mktemp("karma-cache")
    path = tmp_path_factory.getbasetemp().parent / "karma-cache"  # the run's folder, above each worker's own
    path.mkdir(exist_ok=True)
    return path


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
    from karma_dagster.runtime.prompts import PromptStore, default_prompt_root

    triple = {"head_name": "lisinopril", "head_type": "Compound", "relation": "Negative_Correlation",
              "tail_name": "hypertension", "tail_type": "Disease", "evidence": "Lisinopril lowered blood pressure."}
    return PromptStore(default_prompt_root()).render("schema_alignment", domain="general biomedicine",
                                                     triple=triple, candidates=["treats", "causes"])


@pytest.hookimpl(trylast=True)  # after any plugin that reorders (pytest-randomly), so the slow files still lead
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = slow_files_first(items)


_FILE_SECONDS = FileSeconds()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _FILE_SECONDS.add(report.nodeid, report.duration)  # in the controller too, with xdist


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    """The 15 slowest files (what suite_order.SLOW_FILES should list), beside --durations' slowest tests."""
    lines = _FILE_SECONDS.slowest(15)
    if len(lines) > 1:
        terminalreporter.section("slowest files (set-up + call + tear-down, summed)")
        for line in lines:
            terminalreporter.write_line(line)
