"""Content identity (issue 11, item 4): a file replaced by another paper makes a new document; the old one keeps
its key, date, results and KG evidence until `karma remove <doc_key>` removes them, and the catalog maps each
identifier to its own paper. A revised file of the same paper stays the same document."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from reliability_helpers import REPO, SAMPLE_INBOX, kg_query

from karma_dagster import cli, runner
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.inbox import load_document, scan_inbox
from karma_dagster.ingest.keys import date_of_document_key

ARRIVAL = dt.date(2026, 1, 2)
SHARED_PAPERS = Path(os.environ.get("KARMA_SHARED_DATA", REPO.parent / "shared" / "data")) / "papers"
OLD_KEY = "2015-12-08_pmc4686705"  # data/inbox/PMC4686705.xml (SNAP25)


def _note(title: str, pmid: str | None, body: str) -> str:
    meta = f"PMID: {pmid}\n\n" if pmid else ""
    return f"{title}\n\n{meta}RESULTS\n\n{body}\n"


def _ids(catalog: Catalog, kind: str, value: str) -> list[str]:
    with sqlite3.connect(catalog.path) as con:
        return [r[0] for r in con.execute("SELECT doc_key FROM identifiers WHERE kind=? AND value=?", (kind, value))]


def test_a_file_replaced_by_another_paper_is_a_new_document(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    catalog = Catalog(tmp_path / "catalog.sqlite")
    note = inbox / "note.txt"
    note.write_text(_note("Visfatin in hypothyroidism", "11111111", "Visfatin was raised in the patients."), "utf-8")
    first = scan_inbox(inbox, catalog, ARRIVAL)
    (old,) = first.new_keys

    # a revision of the same paper (same PMID, text changed): the same document, requested again
    note.write_text(_note("Visfatin in hypothyroidism", "11111111", "Visfatin was clearly raised."), "utf-8")
    revised = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=1))
    assert revised.changed_keys == [old] and not revised.new_keys

    # another paper in the same file (another PMID): a new key; the old one stays registered, unread from here
    note.write_text(_note("Cisplatin nephrotoxicity in rats", "22222222", "Cisplatin injured the kidney."), "utf-8")
    replaced = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=2))
    (new,) = replaced.new_keys
    assert new != old and not replaced.changed_keys
    assert catalog.all_keys() == sorted([old, new])
    assert _ids(catalog, "pmid", "22222222") == [new] and _ids(catalog, "pmid", "11111111") == [old]
    assert catalog.file_record("note.txt").doc_keys == [new]
    entry = catalog.lookup(old)
    assert entry.pmid == "11111111" and entry.title == "Visfatin in hypothyroidism" and entry.sources == []
    assert [(r.source_path, r.by_doc_key) for r in entry.replaced] == [("note.txt", new)]
    assert catalog.lookup(new).pmid == "22222222"
    with pytest.raises(IngestError, match=rf"note.txt now holds another paper \({new}.*karma remove {old}"):
        load_document(old, inbox, catalog)  # never the new paper's text under the old key
    assert load_document(new, inbox, catalog).pmid == "22222222"

    # the old paper back in the file: its own key again, and now the other one is the replaced document
    note.write_text(_note("Visfatin in hypothyroidism", "11111111", "Visfatin was clearly raised."), "utf-8")
    back = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=3))
    assert back.changed_keys == [old] and not back.new_keys
    assert catalog.lookup(old).replaced == [] and load_document(old, inbox, catalog).pmid == "11111111"
    assert [r.by_doc_key for r in catalog.lookup(new).replaced] == [old]


def test_without_identifiers_the_title_tells_a_revision_from_another_paper(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    catalog = Catalog(tmp_path / "catalog.sqlite")
    shutil.copy(SAMPLE_INBOX / "visfatin-hypothyroidism-note.txt", inbox / "note.txt")
    (old,) = scan_inbox(inbox, catalog, ARRIVAL).new_keys
    text = (inbox / "note.txt").read_text("utf-8")
    (inbox / "note.txt").write_text(text.replace("(a reading note)", "(a reading notes)") + "\nAdded.\n", "utf-8")
    typo = scan_inbox(inbox, catalog, ARRIVAL)
    assert typo.changed_keys == [old] and not typo.new_keys  # a corrected title: the same note
    (inbox / "note.txt").write_text("Levofloxacin and tendon rupture in the elderly\n\nRESULTS\n\n"
                                    "Levofloxacin caused tendinopathy in two patients.\n", "utf-8")
    other = scan_inbox(inbox, catalog, ARRIVAL)
    assert len(other.new_keys) == 1 and not other.changed_keys
    assert [r.by_doc_key for r in catalog.lookup(old).replaced] == other.new_keys


@pytest.mark.skipif(not (SHARED_PAPERS / "PMC4739229" / "fulltext.xml").is_file(),
                    reason="needs ../shared/data/papers/PMC4739229 (or KARMA_SHARED_DATA)")
def test_replaced_paper_keeps_its_evidence_and_karma_remove_removes_it(make_pipeline, monkeypatch, capsys) -> None:
    p = make_pipeline()
    shutil.copy(SAMPLE_INBOX / "PMC4686705.xml", p.inbox / "paper.xml")
    first = runner.run_main(p.defs, p.instance, log=lambda _m: None)
    assert not first.failed, first.failed
    kg = p.storage.kg_path()
    old_rows = kg_query(kg, "SELECT date, triple_id, head_id, relation, tail_id, score FROM evidence "
                            "WHERE doc_key = ? ORDER BY ALL", [OLD_KEY])
    assert old_rows, "the first paper's evidence is in the KG"

    # the user saves another paper (PMC4739229) over paper.xml
    shutil.copy(SHARED_PAPERS / "PMC4739229" / "fulltext.xml", p.inbox / "paper.xml")
    second = runner.run_main(p.defs, p.instance, log=lambda _m: None)
    assert not second.failed, second.failed
    catalog = Catalog(p.storage.catalog_path())
    (new_key,) = [k for k in catalog.all_keys() if k != OLD_KEY]
    assert new_key.endswith("_pmc4739229")
    assert _ids(catalog, "pmcid", "PMC4739229") == [new_key] and _ids(catalog, "pmcid", "PMC4686705") == [OLD_KEY]
    # the old paper's evidence untouched (key, date, rows); the new paper's under its own key and date
    assert kg_query(kg, "SELECT date, triple_id, head_id, relation, tail_id, score FROM evidence "
                        "WHERE doc_key = ? ORDER BY ALL", [OLD_KEY]) == old_rows
    new_dates = kg_query(kg, "SELECT DISTINCT date::VARCHAR FROM evidence WHERE doc_key = ?", [new_key])
    assert new_dates == [(date_of_document_key(new_key),)]
    old_doc = p.storage.stage_store().read("local", "documents", OLD_KEY).iloc[0]
    assert old_doc["pmcid"] == "PMC4686705"  # its stage tables were not rewritten with the other paper

    monkeypatch.setattr(runner, "instance", lambda: p.instance)
    where = ["--data-dir", p.storage.data_dir, "--inbox", str(p.inbox)]
    edges_before = dict(((h, r, t), n) for h, r, t, n in kg_query(
        kg, "SELECT head_id, relation, tail_id, n_evidence FROM kg_edges('local')"))
    by_edge: dict[tuple[str, str, str], int] = {}
    for _d, _t, h, r, t, _s in old_rows:
        by_edge[(h, r, t)] = by_edge.get((h, r, t), 0) + 1

    # --dry-run says what would go and removes nothing
    assert cli.main(["remove", OLD_KEY, "--dry-run", *where]) == 0
    out = capsys.readouterr().out
    assert f"would remove {OLD_KEY}" in out and f"{len(old_rows)} evidence row(s)" in out
    assert kg_query(kg, "SELECT count(*) FROM evidence WHERE doc_key = ?", [OLD_KEY])[0][0] == len(old_rows)

    assert cli.main(["remove", OLD_KEY, *where]) == 0
    assert f"removed {OLD_KEY}" in capsys.readouterr().out
    assert kg_query(kg, "SELECT count(*) FROM evidence WHERE doc_key = ?", [OLD_KEY])[0][0] == 0
    assert kg_query(kg, "SELECT count(*) FROM extracted_nodes WHERE doc_key = ?", [OLD_KEY])[0][0] == 0
    assert kg_query(kg, "SELECT count(*) FROM merged_documents WHERE doc_key = ?", [OLD_KEY])[0][0] == 0
    edges_after = dict(((h, r, t), n) for h, r, t, n in kg_query(
        kg, "SELECT head_id, relation, tail_id, n_evidence FROM kg_edges('local')"))
    for edge, n in by_edge.items():  # supported by it alone: gone; reinforced: its support subtracted
        remaining = edges_before[edge] - n
        assert edges_after.get(edge, 0) == remaining or (remaining == 0 and edges_after.get(edge) == 0)
    assert not p.storage.stage_store().partition_files(OLD_KEY)
    assert catalog.lookup(OLD_KEY) is None and catalog.lookup(new_key) is not None
    assert not p.instance.has_dynamic_partition("documents", OLD_KEY)

    # an unknown key (or the same one again): a clear error, exit 2
    assert cli.main(["remove", OLD_KEY, *where]) == 2
    assert "unknown document key" in capsys.readouterr().err
    # the next run neither brings the removed paper back nor fails
    third = runner.run_main(p.defs, p.instance, log=lambda _m: None)
    assert not third.failed and OLD_KEY not in catalog.all_keys()


def test_a_removal_that_stops_midway_is_completed_by_its_rerun(make_pipeline, monkeypatch, capsys) -> None:
    p = make_pipeline()
    shutil.copy(SAMPLE_INBOX / "PMC4686705.xml", p.inbox / "paper.xml")
    assert not runner.run_main(p.defs, p.instance, log=lambda _m: None).failed
    monkeypatch.setattr(runner, "instance", lambda: p.instance)
    where = ["--data-dir", p.storage.data_dir]

    def crash(self, doc_key):  # noqa: ANN001 - the process dies after the KG and the stage tables
        raise KeyboardInterrupt

    monkeypatch.setattr(Catalog, "remove_document", crash)
    assert cli.main(["remove", OLD_KEY, *where]) == 130  # `karma` says "interrupted" in one line
    kg = p.storage.kg_path()
    assert kg_query(kg, "SELECT count(*) FROM evidence WHERE doc_key = ?", [OLD_KEY])[0][0] == 0
    assert Catalog(p.storage.catalog_path()).lookup(OLD_KEY) is not None
    monkeypatch.undo()
    monkeypatch.setattr(runner, "instance", lambda: p.instance)
    assert cli.main(["remove", OLD_KEY, *where]) == 0
    capsys.readouterr()
    assert Catalog(p.storage.catalog_path()).lookup(OLD_KEY) is None
    assert cli.main(["remove", OLD_KEY, *where]) == 2
