"""The chain's plumbing that is remembered per process: stage tables built and read, the KG's answers per state.

Each remembered answer must be what asking again would give: a table rewritten or damaged is read again, a KG
changed by another process is asked again.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from typing import Literal

import pandas as pd
import pytest
from pydantic import BaseModel

from karma_dagster.runtime import services
from karma_dagster.runtime.integrity import StoreCorrupt
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.schemas.frames import _dtype, frame_to_records, records_to_frame
from karma_dagster.runtime.stage_store import StageStore


class _Row(BaseModel):  # every kind of column a stage row has
    key: str
    n: int
    share: float | None
    kept: bool
    day: dt.date
    status: Literal["linked", "new"]
    note: str | None = None


ROWS = [_Row(key="a", n=1, share=0.5, kept=True, day=dt.date(2020, 1, 2), status="linked", note="x"),
        _Row(key="b", n=2, share=None, kept=False, day=dt.date(2021, 3, 4), status="new")]


def _record_by_record(records: list[BaseModel], model: type[BaseModel]) -> pd.DataFrame:
    """The frame as a record-by-record build gives it (pandas from model_dump dicts, then each column's dtype)."""
    frame = pd.DataFrame([r.model_dump() for r in records], columns=list(model.model_fields))
    for name, field in model.model_fields.items():
        dtype = _dtype(field.annotation)
        if dtype == "object":
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
        else:
            frame[name] = frame[name].astype(dtype) if dtype != "datetime64[ns]" else pd.to_datetime(frame[name])
    return frame


@pytest.mark.parametrize("rows", [ROWS, ROWS[:1], []], ids=["two", "one", "empty"])
def test_a_table_built_column_wise_equals_one_built_record_by_record(rows):
    frame = records_to_frame(rows, _Row)
    expected = _record_by_record(rows, _Row)
    pd.testing.assert_frame_equal(frame, expected)
    assert list(frame.dtypes) == list(expected.dtypes)
    assert frame_to_records(frame, _Row) == rows


def test_a_stage_table_rewritten_or_damaged_after_a_read_is_read_again(tmp_path):
    store = StageStore(tmp_path / "stages")
    store.write("local", "entities", "doc1", records_to_frame(ROWS, _Row))
    first = store.read("local", "entities", "doc1")
    first.loc[0, "key"] = "changed by the caller"
    assert list(store.read("local", "entities", "doc1")["key"]) == ["a", "b"], "a reader's frame is its own copy"

    store.write("local", "entities", "doc1", records_to_frame(ROWS[1:], _Row))
    assert list(store.read("local", "entities", "doc1")["key"]) == ["b"], "the rewritten table, not the old one"

    path = store.path("local", "entities", "doc1")
    path.write_bytes(b"\0" * path.stat().st_size)  # in place, same file and size: only its change time tells
    with pytest.raises(StoreCorrupt, match="stage table"):
        store.read("local", "entities", "doc1")


_OTHER_PROCESS = textwrap.dedent("""
    import sys
    from karma_dagster.kg.store import KGStore
    with KGStore(sys.argv[1]).connect() as con:
        con.execute("INSERT INTO seed_nodes VALUES ('Gene::2', 'TP53', 'Gene', NULL)")
""")


def test_the_kgs_answers_are_asked_again_after_any_write(tmp_path):
    data = DataPaths(tmp_path / "data")
    services.clear()
    with KGStore(data.kg).connect() as con:
        con.execute("INSERT INTO seed_nodes VALUES ('Gene::1', 'SNAP25', 'Gene', NULL)")
    assert services.kg_kind_lookup(data)("Gene::1") == "Gene"
    assert services.kg_kind_lookup(data)("Gene::2") is None

    subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(data.kg)], check=True)  # another process writes
    assert services.kg_kind_lookup(data)("Gene::2") == "Gene"

    with KGStore(data.kg).connect() as con:  # and this one
        con.execute("UPDATE seed_nodes SET kind = 'Compound' WHERE id = 'Gene::1'")
    assert services.kg_kind_lookup(data)("Gene::1") == "Compound"
    services.clear()
