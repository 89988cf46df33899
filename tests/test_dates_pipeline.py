"""Dates never invented silently, end to end on the local backbone: two sample abstracts run undated (marked in the
document asset's metadata, `karma status` and each KG evidence row), then a dates file gives one its publication
date and it moves: its old key's evidence, tables and partition go, it runs again under its publication date."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from partition_views import document_metadata
from karma_dagster import cli, runner
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.partitioning.definitions import documents_partitions
from karma_dagster.runtime.paths import data_file

SAMPLE_INBOX = data_file("inbox")

PMIDS = ("16867246", "20735774")  # DRD2 / chlorpromazine, paracetamol / liver failure: both state relations


def _evidence(p, doc_key: str) -> list[dict]:
    with p.kg.connect(read_only=True) as con:
        rows = con.execute("SELECT doc_key, date, date_source FROM evidence WHERE namespace = 'local' AND doc_key = ?",
                           [doc_key]).fetchall()
    return [{"doc_key": r[0], "date": r[1], "date_source": r[2]} for r in rows]


def _run(p, keys: list[str]) -> None:
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    dates = sorted({date_of_document_key(k) for k in Catalog(p.storage.catalog_path()).all_keys()})
    assert all(runner.run_increments(p.defs, p.instance, "local", dates).values())


@pytest.fixture(scope="module")
def undated_run(make_module_pipeline):
    p = make_module_pipeline()
    blocks = (SAMPLE_INBOX / "abstracts.pubtator").read_text(encoding="utf-8").split("\n\n")
    (p.inbox / "two.pubtator").write_text("\n\n".join(b for b in blocks if b.split("|", 1)[0] in PMIDS) + "\n",
                                          encoding="utf-8")
    assert runner.import_kg(p.defs, p.instance)
    keys, failed = runner.register_inbox(p.defs, p.instance)
    assert not failed and len(keys) == 2
    _run(p, keys)
    return p, sorted(keys)


def test_undated_documents_are_marked_in_metadata_status_and_kg(undated_run, monkeypatch, capsys) -> None:
    p, keys = undated_run
    today = dt.date.today().isoformat()
    assert all(k.startswith(f"{today}_pmid-") for k in keys)
    for key in keys:
        meta = document_metadata(p, dg.AssetKey(["local", "documents"]), key)
        assert meta["date"] == today and meta["date_source"] == "arrival" and meta["undated"] is True
        assert meta["date_note"].startswith("undated: PubTator file gives no date (no two.dates.tsv lists PMID ")
        evidence = _evidence(p, key)
        assert evidence and {e["date_source"] for e in evidence} == {"arrival"}

    (record,) = p.instance.fetch_materializations(dg.AssetKey(["local", "knowledge_graph"]), limit=1).records
    meta = record.asset_materialization.metadata
    assert meta["documents_undated_count"].value == 2
    assert meta["documents_undated"].value == {k: "arrival" for k in keys}

    monkeypatch.setattr(cli, "_defs", lambda _args: p.defs)
    monkeypatch.setattr(runner, "instance", lambda: p.instance)
    capsys.readouterr()
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "Documents without a publication date: 2 of 2 (2 by arrival)" in out
    assert f"- `{keys[0]}` (arrival): PubTator file gives no date" in out


def test_a_dates_file_moves_a_document_to_its_publication_date(undated_run) -> None:
    p, keys = undated_run
    old = next(k for k in keys if k.endswith("16867246"))
    (p.inbox / "two.dates.tsv").write_text("pmid\tdate\n16867246\t2006-08\n", encoding="utf-8")
    new_keys, failed = runner.register_inbox(p.defs, p.instance)
    assert not failed and "2006-08-01_pmid-16867246" in new_keys
    catalog = Catalog(p.storage.catalog_path())
    assert catalog.lookup(old) is None and not catalog.pending_rekeys()
    assert not _evidence(p, old)  # the old key's KG evidence retired
    assert not p.storage.stage_store().exists("local", "documents", old)
    assert not p.instance.has_dynamic_partition(documents_partitions.name, old)

    _run(p, ["2006-08-01_pmid-16867246"])
    moved = _evidence(p, "2006-08-01_pmid-16867246")
    assert moved and {(str(e["date"])[:10], e["date_source"]) for e in moved} == {("2006-08-01", "publication")}
    (other,) = [k for k in keys if k != old]
    assert {e["date_source"] for e in _evidence(p, other)} == {"arrival"}  # its date's increment merged again
    states = runner.document_states(p.defs, p.instance)["local"]
    assert not states.unmerged and not states.pending and not states.failed
