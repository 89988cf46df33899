"""Corruption of a store the project owns is detected when it is opened or read, and named with its file (issue 11).

Every store of a real run (KG, entity index, catalog, LLM reply cache, cost ledger, controller history, stage
tables) is damaged in the ways disks and people damage files: truncated, zero-filled, overwritten with random
bytes, a zeroed block inside an otherwise valid file, or replaced by a valid file of another kind. Opening and
reading it must raise StoreCorrupt naming the store and the file, and leave the file byte for byte as it was.
Derived caches (lexicon, relation model) are moved aside and rebuilt with a warning instead. `karma run`,
`karma status` and a Dagster materialization show the message, not a traceback.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from karma_dagster import runner
from karma_dagster.runtime import services

JATS = ("PMC4686705.xml", "PMC4686705.json")
NS = "local"
FAULTS = ("truncated", "zero_filled", "random_garbage", "zeroed_block", "wrong_kind")


# ---------------------------------------------------------------- one real data dir, built once
@pytest.fixture(scope="module")
def module_run(make_module_pipeline):  # noqa: ANN201
    """A real `karma run` over one paper (seed KG, index, catalog, stage tables, ledger)."""
    p = make_module_pipeline(inbox_files=JATS)
    outcome = runner.run_main(p.defs, p.instance, log=lambda _m: None)
    assert not outcome.failed, outcome.failed
    return p


@pytest.fixture(scope="module")
def pristine(module_run) -> Path:
    """The run's data dir, plus an LLM reply cache and a controller history with a row each (the local backbone
    writes neither). Tests damage copies of it (`data`), never it."""
    from karma_dagster.backbones.llm.cache import ResponseCache
    from karma_dagster.scheduling.controller import Decision, DispatchHistory

    p = module_run
    root = p.storage.paths().root
    ResponseCache(root / "llm_cache" / "llm_responses.sqlite").put(
        "k" * 64, model="m", prompt_id="p", output_model="o", response='{"a": 1}')
    DispatchHistory(root / "controller.sqlite").record(
        [Decision.model_construct(doc_key=key, tau="new", score=1.0, priority=1) for key in runner.document_states(
            p.defs, p.instance)[NS].registered])
    services.clear()
    return root


@pytest.fixture
def data(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of the pristine data dir for one test to damage."""
    services.clear()
    copy = tmp_path / "karma"
    shutil.copytree(pristine, copy, ignore=shutil.ignore_patterns("*.lock"))
    return copy


# ---------------------------------------------------------------- the stores and how each is opened and read
def _stage_file(root: Path) -> Path:
    return next((root / "stages" / NS / "evaluated").glob("*.parquet"))


def _read_kg(root: Path) -> object:
    from karma_dagster.kg.store import KGStore

    return KGStore(root / "kg.duckdb").snapshot_counts(namespace=NS)


def _read_index(root: Path) -> object:
    from karma_dagster.kg.entity_index import EntityIndex

    return EntityIndex(root / "entity_index.lance").search(["breast cancer"], ["Disease"], namespace=NS)


def _read_catalog(root: Path) -> object:
    from karma_dagster.ingest.catalog import Catalog

    return Catalog(root / "catalog.sqlite").all_keys()


def _read_llm_cache(root: Path) -> object:
    from karma_dagster.backbones.llm.cache import ResponseCache

    return ResponseCache(root / "llm_cache" / "llm_responses.sqlite").get("k" * 64)


def _read_ledger(root: Path) -> object:
    from karma_dagster.runtime.ledger import Ledger

    return Ledger(root / "ledger.sqlite").rows()


def _read_controller(root: Path) -> object:
    from karma_dagster.scheduling.controller import DispatchHistory

    return DispatchHistory(root / "controller.sqlite").counts()


def _read_stage(root: Path) -> object:
    from karma_dagster.runtime.stage_store import StageStore

    return StageStore(root / "stages").read(NS, "evaluated", _stage_file(root).stem)


def _index_data_file(root: Path) -> Path:
    return max((root / "entity_index.lance" / "entities.lance" / "data").glob("*.lance"), key=os.path.getsize)


@dataclass(frozen=True)
class Store:
    kind: str  # the words the message names the store with
    file: Callable[[Path], Path]  # the file damaged (the message names it, or for the index its folder)
    read: Callable[[Path], object]  # open the store and read from it
    foreign: Callable[[Path], Path]  # a valid file of another kind, put in its place
    sqlite: bool = False


STORES = {
    "kg": Store("KG", lambda r: r / "kg.duckdb", _read_kg, lambda r: r / "catalog.sqlite"),
    "entity_index": Store("entity index", _index_data_file, _read_index, lambda r: r / "kg.duckdb"),
    "catalog": Store("catalog", lambda r: r / "catalog.sqlite", _read_catalog, lambda r: r / "ledger.sqlite", True),
    "llm_cache": Store("LLM reply cache", lambda r: r / "llm_cache" / "llm_responses.sqlite", _read_llm_cache,
                       lambda r: r / "catalog.sqlite", True),
    "ledger": Store("cost ledger", lambda r: r / "ledger.sqlite", _read_ledger, lambda r: r / "controller.sqlite", True),
    "controller": Store("controller history", lambda r: r / "controller.sqlite", _read_controller,
                        lambda r: r / "kg.duckdb", True),
    "stage_table": Store("stage table", _stage_file, _read_stage, lambda r: r / "ledger.sqlite"),
}


def damage(store: Store, root: Path, fault: str) -> Path:
    """Apply the fault to the store's file; returns that file."""
    target = store.file(root)
    size = target.stat().st_size
    if fault == "truncated":
        with open(target, "r+b") as fh:
            fh.truncate(size // 2)
    elif fault == "zero_filled":
        target.write_bytes(b"\0" * size)
    elif fault == "random_garbage":
        target.write_bytes(random.Random(11).randbytes(size))
    elif fault == "zeroed_block":  # the header intact, a block inside zeroed (SQLite: a page; Parquet: data pages)
        block = 4096 if store.sqlite else max(16, size // 8)
        start = block if store.sqlite else size // 3
        assert size >= start + block, f"{target.name} is too small for a zeroed block ({size} bytes)"
        with open(target, "r+b") as fh:
            fh.seek(start)
            fh.write(b"\0" * block)
    elif fault == "wrong_kind":
        shutil.copyfile(store.foreign(root), target)
    else:
        raise AssertionError(fault)
    return target


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


CASES = [(s, f) for s in STORES for f in FAULTS
         # a zeroed block of a DuckDB file or a Lance file is met (checksum, page decode) only by the read that
         # needs it; the whole-file faults cover those stores' open checks
         if not (f == "zeroed_block" and s in ("kg", "entity_index"))]


@pytest.mark.parametrize(("store_name", "fault"), CASES)
def test_a_damaged_store_is_named_with_its_file_and_left_as_it_was(data, store_name, fault):
    store = STORES[store_name]
    _read(store, data)  # the undamaged copy reads
    services.clear()
    target = damage(store, data, fault)
    before = _digest(target)
    siblings = sorted(p.name for p in target.parent.iterdir())

    message = store_corrupt(lambda: _read(store, data))
    assert message.startswith(f"corrupt {store.kind}"), message
    named = {"entity_index": "entity_index.lance",
             "stage_table": f"stages/{NS}/evaluated/{target.name}"}.get(store_name, target.name)
    assert f"corrupt {store.kind}: {named} (" in message, message
    assert "Nothing was written to it" in message and ("restore" in message or "move it away" in message), message
    assert str(data) not in message and "/tmp/" not in message, f"no machine path in the message: {message}"
    assert _digest(target) == before, "the damaged file must stay as it was, for inspection"
    assert sorted(p.name for p in target.parent.iterdir() if not p.name.endswith(".lock")) == [
        s for s in siblings if not s.endswith(".lock")], "no journal, WAL or new file beside it"


def _read(store: Store, root: Path) -> None:
    try:
        from karma_dagster.runtime import integrity
    except ImportError:  # the code before this check existed: nothing to reset
        pass
    else:
        integrity._quick_checked.clear()  # as in a fresh process: the first open of a SQLite file runs quick_check
    store.read(root)


def store_corrupt(read: Callable[[], object], match: str = "") -> str:
    """The message of the StoreCorrupt that `read` raises (any other outcome fails the test)."""
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the type is checked by name below
        read()
    assert "StoreCorrupt" in [c.__name__ for c in type(caught.value).__mro__], \
        f"{type(caught.value).__name__}: {caught.value}"  # or its subclass (the index's IndexCorrupt names the table)
    assert re.search(match, str(caught.value)), str(caught.value)
    return str(caught.value)


def test_a_truncated_index_manifest_is_named_not_a_panic(data):
    manifest = next((data / "entity_index.lance" / "entities.lance" / "_versions").glob("*.manifest"))
    with open(manifest, "r+b") as fh:
        fh.truncate(manifest.stat().st_size // 2)
    store_corrupt(lambda: _read_index(data), r"corrupt entity index: entity_index\.lance \(table entities: ")


def test_an_index_table_of_another_kind_is_refused(data):
    import lancedb

    uri = data / "entity_index.lance"
    shutil.rmtree(uri / "entities.lance")
    lancedb.connect(str(uri)).create_table("entities", data=[{"run_id": "r", "calls": 1}])
    store_corrupt(lambda: _read_index(data), r"entities lacks the column\(s\) \['entity_id', 'name', 'kind', 'vector'\]")


def test_a_damaged_kg_block_met_by_a_read_is_named(data):
    """DuckDB checksums every block: a KG whose table data is overwritten fails the query that reads it."""
    import duckdb

    kg = data / "kg.duckdb"
    con = duckdb.connect(str(kg), read_only=True)
    try:  # where the seed nodes' names live: overwrite the file from the middle on, keeping the header blocks
        assert con.execute("SELECT count(*) FROM seed_nodes").fetchone()[0] > 0
    finally:
        con.close()
    size = kg.stat().st_size
    with open(kg, "r+b") as fh:
        fh.seek(3 * 4096 * 64)  # past DuckDB's header blocks (its block size is 256 KiB; headers in the first)
        fh.write(random.Random(3).randbytes(size - fh.tell()))
    before = _digest(kg)

    def read_all() -> None:
        from karma_dagster.kg.store import KGStore

        store = KGStore(kg)
        store.snapshot_counts(namespace=NS)
        store.lexicon_rows(namespace=None)  # every seed name: the blocks of the node tables

    store_corrupt(read_all, r"corrupt KG: kg\.duckdb \(")
    assert _digest(kg) == before


def test_a_damaged_row_of_the_catalog_is_named_by_a_later_read(data):
    """Corruption met after the open (quick_check ran once in this process) is still named, by the read."""
    from karma_dagster.ingest.catalog import Catalog

    catalog = Catalog(data / "catalog.sqlite")  # opened and checked while intact
    keys = catalog.all_keys()
    assert keys
    path = data / "catalog.sqlite"
    size = path.stat().st_size
    with open(path, "r+b") as fh:  # every page but the header page
        fh.seek(4096)
        fh.write(b"\xff" * (size - 4096))
    store_corrupt(catalog.all_keys, r"corrupt catalog: catalog\.sqlite \(")


# ---------------------------------------------------------------- derived caches: rebuilt, with a warning
def _small_pubtator(tmp_path: Path, n: int = 40) -> Path:
    """The first n BioRED training abstracts: enough for the relation model to train in a second."""
    from karma_dagster.runtime.paths import data_file

    blocks = gzip.open(data_file("corpora", "biored-train.pubtator.gz"), "rt", encoding="utf-8").read().split("\n\n")
    out = tmp_path / "biored-small.pubtator"
    out.write_text("\n\n".join(blocks[:n]) + "\n", encoding="utf-8")
    return out


@pytest.mark.parametrize("fault", ["truncated", "random_garbage", "wrong_kind"])
def test_a_corrupt_relation_model_cache_is_moved_aside_and_retrained(tmp_path, caplog, fault):
    import joblib

    from karma_dagster.backbones.local.relations import LocalRelationModel

    small = _small_pubtator(tmp_path)
    first = LocalRelationModel(tmp_path / "relations", biored_path=small)
    reference = first.fitted
    cache = tmp_path / "relations" / f"relations-{first.cache_key}.joblib"
    assert cache.is_file() and first.loaded_from_cache is False
    if fault == "truncated":
        with open(cache, "r+b") as fh:
            fh.truncate(cache.stat().st_size // 2)
    elif fault == "random_garbage":
        cache.write_bytes(random.Random(5).randbytes(cache.stat().st_size))
    else:  # a valid joblib file of something else
        joblib.dump({"not": "a model"}, cache)
    damaged = _digest(cache)

    with caplog.at_level(logging.WARNING):
        again = LocalRelationModel(tmp_path / "relations", biored_path=small)
        fitted = again.fitted
    assert again.loaded_from_cache is False, "the damaged file was not used"
    assert fitted.n_examples == reference.n_examples
    assert again.predict_features([["between", "E1", "E2"]]) == first.predict_features([["between", "E1", "E2"]])
    aside = cache.with_name(cache.name + ".corrupt")
    assert _digest(aside) == damaged, "the damaged copy is kept beside, for inspection"
    assert any("relation model cache" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert LocalRelationModel(tmp_path / "relations", biored_path=small).fitted and cache.is_file()


@pytest.mark.parametrize("fault", ["random_garbage", "zeroed_block", "wrong_kind"])
def test_a_corrupt_lexicon_cache_is_moved_aside_and_rebuilt(pristine, shared_cache, tmp_path, caplog, fault):
    from karma_dagster.dictionary.lexicon import Lexicon

    rows = services.seed_lexicon_rows(services.DataPaths(pristine, cache_dir=shared_cache))
    fingerprint = Lexicon.build(rows, cache_dir=shared_cache / "lexicon").fingerprint  # the run built it
    original = shared_cache / "lexicon" / f"lexicon-{fingerprint}.parquet"
    cache_dir = tmp_path / "lexicon"
    cache_dir.mkdir()
    cache = cache_dir / original.name
    shutil.copyfile(original, cache)
    assert Lexicon.build(rows, cache_dir=cache_dir).fingerprint in cache.name  # the copy is the one it loads
    size = cache.stat().st_size
    if fault == "random_garbage":
        cache.write_bytes(random.Random(7).randbytes(size))
    elif fault == "zeroed_block":
        with open(cache, "r+b") as fh:
            fh.seek(size // 3)
            fh.write(b"\0" * (size // 8))
    else:  # a valid Parquet file of something else
        pd.DataFrame({"doc_key": ["x"], "accepted": [True]}).to_parquet(cache)
    damaged = _digest(cache)

    with caplog.at_level(logging.WARNING):
        rebuilt = Lexicon.build(rows, cache_dir=cache_dir)
    pd.testing.assert_frame_equal(rebuilt.table, pd.read_parquet(original).reset_index(drop=True))
    assert _digest(cache.with_name(cache.name + ".corrupt")) == damaged
    assert any("lexicon cache" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- what the user sees
def _karma(args: list[str], home: Path, data: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAGSTER_HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run([sys.executable, "-m", "karma_dagster.cli", *args, "--data-dir", str(data)],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize(("command", "store_name"), [("run", "kg"), ("status", "catalog")])
def test_karma_run_and_status_name_the_corrupt_store_and_exit_3(data, tmp_path, command, store_name):
    store = STORES[store_name]
    target = damage(store, data, "random_garbage")
    before = _digest(target)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")

    done = _karma([command, "--inbox", str(tmp_path / "inbox")], home, data)

    assert done.returncode == 3, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert f"karma {command}: corrupt {store.kind}: {target.name}" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert _digest(target) == before


def test_a_dagster_materialization_fails_with_the_message(module_run, pristine):
    """The KG increment asset over a damaged KG fails its step with StoreCorrupt's message (not a DuckDB error)."""
    from karma_dagster.ingest.keys import date_of_document_key

    p = module_run
    kg = pristine / "kg.duckdb"
    keep = kg.with_name("kg.duckdb.keep")
    shutil.copyfile(kg, keep)
    try:
        key = _registered_key(pristine)
        kg.write_bytes(random.Random(2).randbytes(kg.stat().st_size))
        services.clear()
        result = _materialize_kg(p, date_of_document_key(key))
        failures = [e for e in result.all_events if e.is_step_failure]
        assert failures, "the step must fail"
        error = failures[0].event_specific_data.error  # Dagster's "Error occurred while executing op", caused by:
        assert error.cause.cls_name == "StoreCorrupt", error.cause.cls_name
        assert error.cause.message.startswith("karma_dagster.runtime.integrity.StoreCorrupt: corrupt KG: kg.duckdb ("), \
            error.cause.message
    finally:
        shutil.move(keep, kg)
        services.clear()


def _registered_key(root: Path) -> str:
    from karma_dagster.ingest.catalog import Catalog

    return Catalog(root / "catalog.sqlite").all_keys()[0]


def _materialize_kg(p, date: str):  # noqa: ANN001, ANN202
    import dagster as dg

    job = dg.define_asset_job("kg_only", selection=dg.AssetSelection.assets(dg.AssetKey([NS, "knowledge_graph"])))
    defs = dg.Definitions(assets=list(p.defs.assets or []), resources=p.defs.resources, jobs=[job])
    return defs.resolve_job_def("kg_only").execute_in_process(partition_key=date, instance=p.instance,
                                                               raise_on_error=False)
