"""An entity index that is not the KG's is found where it is opened and rebuilt from the KG (issue 26, point 3).

The index is derived data (the KG's seed names, and each backbone's merged new entities), so its repair is a
rebuild from the KG's tables, with a warning naming the file and why. Damages tried on the index of a real run
(seed KG + one paper merged): non-finite vectors and random bytes in a data file of either table, a deleted
table, rows deleted or added behind its back, an index built from other names (another seed, or an older build
without a record), a damaged manifest. After each, the index a run opens must equal the undamaged one row for row
(vectors included). Before this check the index was used as it was: NaN vectors, missing names and all. When the
KG itself is damaged, there is nothing to rebuild from: StoreCorrupt (exit 3)."""

from __future__ import annotations

import hashlib
import logging
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import lancedb
import pytest

from karma_dagster import runner
from karma_dagster.runtime import services
from karma_dagster.runtime.paths import DataPaths

NS = "local"
JATS = ("PMC4686705.xml", "PMC4686705.json")
SEED, EXTRACTED = "entities", "extracted_entities"


@pytest.fixture(scope="module")
def pristine(make_module_pipeline) -> Path:  # noqa: ANN001
    p = make_module_pipeline(inbox_files=JATS)
    outcome = runner.run_main(p.defs, p.instance, log=lambda _m: None)
    assert not outcome.failed, outcome.failed
    services.linkable_index(p.storage.paths(), NS)  # what the next document's linking does: the merged entities in
    services.clear()
    root = p.storage.paths().root
    assert index_rows(root, EXTRACTED), "the paper's merge added entities to the index (what a rebuild must restore)"
    return root


@pytest.fixture
def data(pristine: Path, tmp_path: Path) -> Path:
    services.clear()
    copy = tmp_path / "karma"
    shutil.copytree(pristine, copy, ignore=shutil.ignore_patterns("*.lock"))
    yield copy
    services.clear()


def index_rows(root: Path, table: str) -> list[tuple]:
    """Every row of an index table, vectors as a digest of their bytes, sorted (the IVF list is the build's)."""
    db = lancedb.connect(str(root / "entity_index.lance"))
    if table not in db.table_names():
        return []
    rows = db.open_table(table).to_arrow()
    columns = [c for c in ("namespace", "entity_id", "name", "kind", "first_seen") if c in rows.column_names]
    vectors = rows.column("vector").combine_chunks().flatten().to_numpy().reshape(rows.num_rows, -1)
    keys = zip(*(rows.column(c).to_pylist() for c in columns))
    return sorted((*k, hashlib.sha1(v.tobytes()).hexdigest()) for k, v in zip(keys, vectors))


def _data_file(root: Path, table: str) -> Path:
    return max((root / "entity_index.lance" / f"{table}.lance" / "data").glob("*.lance"), key=lambda p: p.stat().st_size)


def _overwrite_middle(path: Path, payload: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek((path.stat().st_size // 2) & ~3)  # float32-aligned, inside the vector column (most of the file)
        fh.write(payload)


NAN = b"\x00\x00\xc0\x7f" * 512  # 512 float32 NaNs
GARBAGE = random.Random(26).randbytes(4096)


def _delete_rows(root: Path) -> None:
    table = lancedb.connect(str(root / "entity_index.lance")).open_table(SEED)
    some = table.search().select(["entity_id"]).limit(5).to_arrow().column("entity_id").to_pylist()
    table.delete("entity_id IN (" + ",".join(f"'{i}'" for i in some) + ")")


def _add_rows(root: Path) -> None:
    from karma_dagster.kg.entity_index import EntityIndex, KGEntity

    EntityIndex(root / "entity_index.lance").add([KGEntity(id="Gene::0", name="not in the KG", kind="Gene")])


def _other_names(root: Path) -> None:
    """An index built from other names: a subset (another seed), by a build that records nothing."""
    from karma_dagster.kg.entity_index import EntityIndex, KGEntity
    from karma_dagster.kg.store import KGStore

    rows = KGStore(root / "kg.duckdb").lexicon_rows(namespace=None)[:100]
    EntityIndex(root / "entity_index.lance").build(KGEntity(id=r.id, name=r.name, kind=r.kind) for r in rows)


def _truncate_manifest(root: Path) -> None:
    manifest = max((root / "entity_index.lance" / f"{SEED}.lance" / "_versions").glob("*.manifest"),
                   key=lambda p: p.stat().st_mtime_ns)
    with open(manifest, "r+b") as fh:
        fh.truncate(manifest.stat().st_size // 2)


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "nan-in-seed-vectors": (lambda r: _overwrite_middle(_data_file(r, SEED), NAN), r"entities: \d+ vector\(s\) not"),
    "random-bytes-in-seed-data": (lambda r: _overwrite_middle(_data_file(r, SEED), GARBAGE), r"entities"),
    "nan-in-extracted-vectors": (lambda r: _overwrite_middle(_data_file(r, EXTRACTED), NAN),
                                 r"extracted_entities: \d+ vector\(s\) not"),
    "seed-table-deleted": (lambda r: shutil.rmtree(r / "entity_index.lance" / f"{SEED}.lance"), "no seed table"),
    "whole-index-deleted": (lambda r: shutil.rmtree(r / "entity_index.lance"), "no seed table"),
    "seed-rows-deleted": (_delete_rows, r"holds \d+ name rows, its build wrote \d+"),
    "seed-rows-added": (_add_rows, r"holds \d+ name rows, its build wrote \d+"),
    "built-from-other-names": (_other_names, "no record of the KG seed"),
    "truncated-manifest": (_truncate_manifest, r"table entities: "),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_index_is_rebuilt_from_the_kg_with_a_warning(damage: str, data: Path, pristine: Path,
                                                               shared_cache: Path, caplog: pytest.LogCaptureFixture):
    apply, why = DAMAGES[damage]
    apply(data)
    with caplog.at_level(logging.WARNING):
        index = services.entity_index(DataPaths(data, cache_dir=shared_cache))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(m.startswith("entity index entity_index.lance: ") and "rebuilding it from the KG" in m
               for m in warnings), warnings
    import re

    assert any(re.search(why, m) for m in warnings), (why, warnings)
    assert str(data) not in " ".join(warnings), "no machine path in the warning"
    assert index_rows(data, SEED) == index_rows(pristine, SEED), "the rebuilt seed table differs from the original"
    assert index_rows(data, EXTRACTED) == index_rows(pristine, EXTRACTED), "the namespace's entities were not restored"
    hit = index.search(["metformin"], ["Chemical"], namespace=NS)[0]
    assert hit and hit[0].distance == 0.0, hit
    caplog.clear()
    services.clear()
    with caplog.at_level(logging.WARNING):  # repaired once: the next open finds nothing to do
        services.entity_index(DataPaths(data, cache_dir=shared_cache))
    assert not [r for r in caplog.records if "entity index" in r.getMessage()]


def test_a_deleted_extracted_table_is_restored_from_the_kg(data: Path, pristine: Path, shared_cache: Path):
    shutil.rmtree(data / "entity_index.lance" / f"{EXTRACTED}.lance")
    view = services.linkable_index(DataPaths(data, cache_dir=shared_cache), NS)
    assert view.count_extracted() == len({r[1] for r in index_rows(pristine, EXTRACTED)})
    assert index_rows(data, EXTRACTED) == index_rows(pristine, EXTRACTED)


def test_an_index_over_a_damaged_kg_is_reported_not_rebuilt_from_it(data: Path, shared_cache: Path):
    """Nothing to rebuild from: the KG's damage is named (StoreCorrupt: `karma` exits 3), not an empty index."""
    shutil.rmtree(data / "entity_index.lance" / f"{SEED}.lance")
    kg = data / "kg.duckdb"
    with open(kg, "r+b") as fh:  # every block but DuckDB's header blocks
        fh.seek(3 * 4096)
        fh.write(random.Random(4).randbytes(kg.stat().st_size - 3 * 4096))
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the type is checked by name
        services.entity_index(DataPaths(data, cache_dir=shared_cache))
    assert type(caught.value).__name__ == "StoreCorrupt", repr(caught.value)
    assert str(caught.value).startswith("corrupt KG: kg.duckdb ("), str(caught.value)
