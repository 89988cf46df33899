"""Dates never invented silently (issue 29): undated documents marked, dates supplied by the user, the `undated`
setting, and stores made before all this still opening. The end-to-end run (asset metadata, KG provenance, a
document moved to its publication date) is tests/test_dates_pipeline.py."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sqlite3
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from karma_dagster.export.snapshot import read_snapshot
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.dates import UNDATED_ENV, find_dates, parse_partial_date, parse_undated, read_dates
from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.inbox import file_hash, load_document, scan_inbox
from karma_dagster.ingest.undated import undated_summary
from karma_dagster.kg import store as kg_store_module
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import KGStore
from karma_dagster.report import RunReport, build_report
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.runtime.stage_store import StageStore
from kg_backends import kg_backend  # noqa: F401 - fixture

REPO = Path(__file__).resolve().parents[1]
INBOX = REPO / "data" / "inbox"
SEED = REPO / "data" / "seed_kg"
ARRIVAL = dt.date(2026, 1, 2)
PMIDS = ("14510914", "16867246", "27509880", "20801540", "27860185", "16838170", "6794356", "3115150", "2339463",
         "20735774")


def _inbox(tmp_path: Path, *names: str) -> Path:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name in names or tuple(p.name for p in INBOX.iterdir()):
        shutil.copy(INBOX / name, inbox / name)
    return inbox


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Catalog]:
    """The shipped sample inbox registered once (read-only for the tests that use it)."""
    tmp = tmp_path_factory.mktemp("sample")
    inbox = _inbox(tmp)
    catalog = Catalog(tmp / "catalog.sqlite")
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert not scan.failed and len(scan.new_keys) == 15
    return inbox, catalog


# ---------------------------------------------------------------- marked everywhere a user looks
def test_the_sample_inbox_says_which_documents_are_undated_and_why(sample) -> None:
    _, catalog = sample
    undated = {e.doc_key: e for e in catalog.undated()}
    assert catalog.date_counts() == {"publication": 4, "arrival": 11}
    assert {f"2026-01-02_pmid-{p}" for p in PMIDS} < set(undated)
    abstract = undated["2026-01-02_pmid-3115150"]
    assert abstract.date_source == "arrival" and abstract.date == ARRIVAL
    assert abstract.date_note == ("undated: PubTator file gives no date (no abstracts.dates.tsv lists PMID 3115150); "
                                  "dated by its arrival")
    (note,) = [e for k, e in undated.items() if "_sha-" in k]
    assert "text file gives no date" in note.date_note and "visfatin-hypothyroidism-note.json" in note.date_note
    dated = catalog.lookup("2016-01-14_pmc4738914")
    assert dated.date_source == "publication"
    assert dated.date_note == "publication date from its sidecar (Europe PMC record)"

    lines = undated_summary(catalog).lines()
    assert lines[0].startswith("Documents without a publication date: 11 of 15 (11 by arrival)")
    assert sum("PubTator file gives no date" in line for line in lines) == 10
    assert any(line.startswith("- `2026-01-02_sha-") and "text file gives no date" in line for line in lines)


def test_the_run_report_lists_the_undated_documents(sample, tmp_path: Path) -> None:
    _, catalog = sample
    report = build_report(StageStore(tmp_path / "stages"), _kg(tmp_path / "kg.duckdb"), ["local"], catalog=catalog)
    assert len(report.dates.undated) == 11 and not report.dates.skipped
    again = RunReport.model_validate(report.model_dump(mode="json"))  # as `karma run` reads it back from metadata
    text = again.markdown()
    assert "Documents without a publication date: 11 of 15" in text
    assert "`2026-01-02_pmid-6794356` (arrival): PubTator file gives no date (no abstracts.dates.tsv lists PMID " \
           "6794356); dated by its arrival" in text


# ---------------------------------------------------------------- the dates file
def test_dates_file_formats_and_conventions(tmp_path: Path) -> None:
    assert parse_partial_date("2003-10-17") == (dt.date(2003, 10, 17), "day")
    assert parse_partial_date("2003-10") == (dt.date(2003, 10, 1), "month")
    assert parse_partial_date("1987") == (dt.date(1987, 1, 1), "year")
    path = tmp_path / "a.dates.tsv"
    path.write_text("# our own look-ups\n14510914\t2003-10\n3115150\t1987\n\n2339463\t1990-05-12\n", encoding="utf-8")
    dates = read_dates(path, "a.dates.tsv")
    assert {k: (v.date, v.line, v.precision) for k, v in dates.items()} == {
        "14510914": (dt.date(2003, 10, 1), 2, "month"), "3115150": (dt.date(1987, 1, 1), 3, "year"),
        "2339463": (dt.date(1990, 5, 12), 5, "day")}
    path.write_text("PMID\tdate\n14510914\t2003-10-01\n", encoding="utf-8")  # the header is optional
    assert list(read_dates(path, "a.dates.tsv")) == ["14510914"]


def test_a_dates_file_is_parsed_once_per_content_and_an_edit_is_seen_at_once(tmp_path: Path) -> None:
    """A day's run reads each of its papers' dates file: parsed once while it is unchanged (a PubMed day's 4,000
    lines parsed for each of its 4,000 papers took 1.8 s a paper), read again for each paper so that an edit of
    the same size in the same instant is still seen, and a bad edit still fails."""
    inbox = _inbox(tmp_path, "abstracts.pubtator")
    dates_file, source = inbox / "abstracts.dates.tsv", inbox / "abstracts.pubtator"
    dates_file.write_text("pmid\tdate\n" + "".join(f"{9000 + i}\t2003-10-{1 + i % 28:02d}\n" for i in range(500)))
    first = find_dates(source, inbox)
    assert first is not None and len(first.dates) == 500 and find_dates(source, inbox) is first  # not parsed again
    stat = dates_file.stat()
    dates_file.write_text(dates_file.read_text().replace("9000\t2003-10-01", "9000\t2004-10-01"))
    os.utime(dates_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime: only the bytes differ
    edited = find_dates(source, inbox)
    assert edited is not None and edited.dates["9000"].date == dt.date(2004, 10, 1)
    dates_file.write_text(dates_file.read_text() + "9001\tOct 2003\n")
    with pytest.raises(IngestError, match="line 502: 'Oct 2003' is not a date"):
        find_dates(source, inbox)


@pytest.mark.parametrize(("body", "problem"), [
    ("14510914\t2003-10\n3115150 1987\n", "line 2: expected 'pmid<TAB>date', got 1 tab-separated column(s): '3115150 1987'"),
    ("pmid\tdate\n14510914\t2003-13-01\n", "line 2: '2003-13-01' is not a date (month must be in 1..12)"),
    ("14510914\tOct 2003\n", "line 1: 'Oct 2003' is not a date (YYYY-MM-DD, YYYY-MM or YYYY)"),
    ("PMC123\t2003\n", "line 1: PMID 'PMC123' is not a number"),
    ("14510914\t2003\n14510914\t2004\n", "line 2: PMID 14510914 is dated 2004 here and 2003-01-01 on line 1"),
])
def test_a_bad_dates_line_fails_its_file_naming_file_and_line(tmp_path: Path, body: str, problem: str) -> None:
    inbox = _inbox(tmp_path, "abstracts.pubtator")
    (inbox / "abstracts.dates.tsv").write_text(body, encoding="utf-8")
    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert [(f.path, f.error) for f in scan.failed] == [("abstracts.pubtator", f"abstracts.dates.tsv: {problem}")]
    assert catalog.all_keys() == []  # nothing of the file registered
    with pytest.raises(IngestError, match="line"):
        read_dates(inbox / "abstracts.dates.tsv", "abstracts.dates.tsv")


def test_dates_file_dates_its_abstracts_and_a_correction_moves_them(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path, "abstracts.pubtator")
    catalog = Catalog(tmp_path / "catalog.sqlite")
    first = scan_inbox(inbox, catalog, ARRIVAL)
    assert len(first.new_keys) == 10 and not first.rekeyed
    digest = file_hash(inbox / "abstracts.pubtator", inbox)

    (inbox / "abstracts.dates.tsv").write_text("pmid\tdate\n14510914\t2003-10\n3115150\t1987-09\n", encoding="utf-8")
    assert file_hash(inbox / "abstracts.pubtator", inbox) != digest  # the dates file counts like a sidecar
    second = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=1))
    assert second.rekeyed == {"2026-01-02_pmid-14510914": "2003-10-01_pmid-14510914",
                              "2026-01-02_pmid-3115150": "1987-09-01_pmid-3115150"}
    assert set(second.rekeyed.values()) <= set(second.keys_to_run)
    assert catalog.lookup("2026-01-02_pmid-14510914") is None
    moved = catalog.lookup("2003-10-01_pmid-14510914")
    assert (moved.date_source, moved.date_note) == (
        "publication", "publication date from abstracts.dates.tsv line 2 (month only: dated its 1st)")
    assert load_document("2003-10-01_pmid-14510914", inbox, catalog).pub_date == dt.date(2003, 10, 1)
    assert {k for _, k, _ in catalog.requests_after(0)} >= set(second.rekeyed.values())  # in the outbox
    assert "2026-01-02_pmid-14510914" not in {k for _, k, _ in catalog.requests_after(0)}
    assert catalog.pending_rekeys() == sorted(second.rekeyed.items(), key=lambda kv: kv[0])
    assert "2003-10-01_pmid-14510914" in catalog.file_record("abstracts.pubtator").doc_keys
    assert len(catalog.undated()) == 8

    # a corrected dates file: the document moves again, from its (wrong) publication date to the right one
    (inbox / "abstracts.dates.tsv").write_text("14510914\t2003-10-17\n3115150\t1987-09\n", encoding="utf-8")
    third = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=2))
    assert third.rekeyed == {"2003-10-01_pmid-14510914": "2003-10-17_pmid-14510914"}
    assert catalog.lookup("1987-09-01_pmid-3115150") is not None  # unchanged date: same key
    assert sorted(k for k in catalog.all_keys() if "14510914" in k) == ["2003-10-17_pmid-14510914"]


def test_a_dated_copy_of_an_undated_paper_moves_it_to_its_publication_date(tmp_path: Path) -> None:
    """A PubTator abstract registered by arrival; later its PubMed record (a one-abstract file with a sidecar
    date) arrives: same PMID, so the same paper, now dated."""
    inbox = _inbox(tmp_path, "abstracts.pubtator")
    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan_inbox(inbox, catalog, ARRIVAL)
    block = (INBOX / "abstracts.pubtator").read_text(encoding="utf-8").split("\n\n")
    one = next(b for b in block if b.startswith("2339463|t|"))
    (inbox / "sinus.pubtator").write_text(one + "\n", encoding="utf-8")
    (inbox / "sinus.json").write_text('{"pmid": "2339463", "firstPublicationDate": "1990-05-01"}', encoding="utf-8")
    scan = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=3))
    assert scan.rekeyed == {"2026-01-02_pmid-2339463": "1990-05-01_pmid-2339463"}
    entry = catalog.lookup("1990-05-01_pmid-2339463")
    assert {s.source_path for s in entry.sources} == {"abstracts.pubtator", "sinus.pubtator"}


# ---------------------------------------------------------------- the `undated` setting
def test_undated_skip_registers_nothing_and_reports_it(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path, "abstracts.pubtator", "visfatin-hypothyroidism-note.txt", "PMC4738914.pdf",
                   "PMC4738914.json")
    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan = scan_inbox(inbox, catalog, ARRIVAL, undated=parse_undated("skip"))
    assert catalog.all_keys() == ["2016-01-14_pmc4738914"]  # the dated paper only
    assert sorted((s.source_path, s.member) for s in scan.skipped_undated) == sorted(
        [("abstracts.pubtator", p) for p in PMIDS] + [("visfatin-hypothyroidism-note.txt", "0")])
    summary = undated_summary(catalog)
    assert not summary.undated and len(summary.skipped) == 11
    assert "Skipped-undated (storage setting `undated: skip`; not registered): 11" in summary.lines()
    assert not scan_inbox(inbox, catalog, ARRIVAL, undated=parse_undated("skip")).new_keys  # nothing changed

    later = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=1))  # back to arrival: they register now
    assert len(later.new_keys) == 11 and not catalog.skipped_undated()
    assert all(k.startswith("2026-01-03_") for k in later.new_keys)


def test_undated_fixed_date_dates_them_as_configured(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path, "abstracts.pubtator", "PMC4738914.pdf", "PMC4738914.json")
    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan_inbox(inbox, catalog, ARRIVAL, undated=parse_undated("1999-12-31"))
    assert sorted(catalog.all_keys()) == sorted(["2016-01-14_pmc4738914", *(f"1999-12-31_pmid-{p}" for p in PMIDS)])
    entry = catalog.lookup("1999-12-31_pmid-6794356")
    assert entry.date_source == "configured"
    assert entry.date_note.endswith("dated by the storage setting undated=1999-12-31")
    assert "(configured)" in "\n".join(undated_summary(catalog).lines())


def test_undated_arrival_is_the_default_and_bad_values_name_the_setting(monkeypatch) -> None:
    monkeypatch.delenv(UNDATED_ENV, raising=False)
    assert str(KarmaStorageResource().undated_policy()) == "arrival"
    assert str(KarmaStorageResource(undated="skip").undated_policy()) == "skip"
    assert str(KarmaStorageResource(undated="2001-02-03").undated_policy()) == "2001-02-03"
    with pytest.raises(Exception, match=r"storage setting undated='sometimes': expected 'arrival'"):
        KarmaStorageResource(undated="sometimes")
    with pytest.raises(Exception, match="undated='2001-02-30'"):
        KarmaStorageResource(undated="2001-02-30")
    monkeypatch.setenv(UNDATED_ENV, "skip")
    assert str(KarmaStorageResource().undated_policy()) == "skip"
    monkeypatch.setenv(UNDATED_ENV, "later")
    with pytest.raises(ValueError, match=r"storage setting \$KARMA_UNDATED='later'"):
        KarmaStorageResource().undated_policy()


# ---------------------------------------------------------------- stores made before still open
def test_a_catalog_without_the_date_note_column_still_opens(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path, "abstracts.pubtator")
    path = tmp_path / "catalog.sqlite"
    scan_inbox(inbox, Catalog(path), ARRIVAL)
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE documents DROP COLUMN date_note")  # as a catalog made before issue 29
    con.execute("DROP TABLE skipped_undated")
    con.execute("DROP TABLE rekeyed")
    con.commit()
    con.close()
    catalog = Catalog(path)
    assert catalog.lookup("2026-01-02_pmid-6794356").date_note is None
    assert undated_summary(catalog).undated[0].note == "no publication date (registered before date notes were kept)"
    (inbox / "abstracts.dates.tsv").write_text("6794356\t1981\n", encoding="utf-8")
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert scan.rekeyed == {"2026-01-02_pmid-6794356": "1981-01-01_pmid-6794356"}


def _kg(path: Path | KGStore) -> KGStore:
    store = path if not isinstance(path, Path) else KGStore(path)
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz",
                    node_filter={"Compound::DB00331", "Disease::DOID:9352"})
    return store


def _triple(doc: str) -> dict:
    return {"doc_key": doc, "triple_id": "t1", "head_id": "Compound::DB00331", "relation": "Negative_Correlation",
            "kg_relation": "treats", "tail_id": "Disease::DOID:9352", "metaedge": None, "score": 0.7,
            "segment_id": f"{doc}#s1", "accepted": True, "evidence": "Metformin improved type 2 diabetes."}


def test_each_evidence_row_knows_its_date_source_and_exports_it(kg_backend) -> None:
    store = _kg(kg_backend.new("dates"))  # the DuckDB file and PostgreSQL alike
    day, arrived, published = dt.date(2026, 1, 2), "2026-01-02_pmid-1", "2026-01-02_pmc2"
    docs = {arrived: ([_triple(arrived)], []), published: ([_triple(published)], [])}
    merge_increment(store, day, "local", docs, "run-1",
                    date_sources={arrived: "arrival", published: "publication"})
    rows = store.edge_evidence("Compound::DB00331", "treats", "Disease::DOID:9352")
    assert {(r["doc_key"], r["date_source"]) for r in rows} == {(arrived, "arrival"), (published, "publication")}
    merge_increment(store, day, "local", docs, "run-2")  # a re-merge without the catalog keeps what they were
    rows = store.edge_evidence("Compound::DB00331", "treats", "Disease::DOID:9352")
    assert {(r["doc_key"], r["date_source"]) for r in rows} == {(arrived, "arrival"), (published, "publication")}
    snap = read_snapshot(store, "local", None)
    assert {(e.doc_key, e.date_source) for e in snap.evidence} == {(arrived, "arrival"), (published, "publication")}


def test_a_kg_without_the_date_source_column_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "kg.duckdb"
    store = _kg(path)
    doc = "2026-01-02_pmid-1"
    merge_increment(store, dt.date(2026, 1, 2), "local", {doc: ([_triple(doc)], [])}, "run-1")
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE evidence DROP COLUMN date_source")  # as a KG made before issue 29
    con.close()
    kg_store_module._CHECKED.clear()  # this process checked the file before: forget it, as a new process would
    old = KGStore(path)
    (row,) = old.edge_evidence("Compound::DB00331", "treats", "Disease::DOID:9352")
    assert row["date_source"] is None  # merged before it was recorded: unknown, not invented
    merge_increment(old, dt.date(2026, 1, 2), "local", {doc: ([_triple(doc)], [])}, "run-2",
                    date_sources={doc: "arrival"})
    (row,) = old.edge_evidence("Compound::DB00331", "treats", "Disease::DOID:9352")
    assert row["date_source"] == "arrival"


def test_the_sensor_requests_a_moved_document_and_deletes_its_old_partition(make_pipeline) -> None:
    from sensor_ticks import tick

    from karma_dagster.partitioning.definitions import documents_partitions

    from partition_views import BY_DATE, partition_of

    from karma_dagster.ingest.catalog import Catalog

    p = make_pipeline(inbox_files=("abstracts.pubtator",))
    first = tick(p, "new_papers")
    old = next(k for k in Catalog(p.storage.catalog_path()).all_keys() if k.endswith("_pmid-6794356"))
    assert partition_of(old) in {r.partition_key for r in first.run_requests}
    for request in first.dynamic_partitions_requests:  # what the daemon does with the requests
        p.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    (p.inbox / "abstracts.dates.tsv").write_text("6794356\t1981-11\n", encoding="utf-8")
    second = tick(p, "new_papers", first.cursor)
    requested = {r.partition_key for r in second.run_requests}
    moved = "1981-11-01_pmid-6794356"
    assert partition_of(moved) in requested and old not in requested
    if BY_DATE:  # the old day is run again for the papers it keeps (the rescanned file's; LLM calls hit the cache)
        (again,) = [r for r in second.run_requests if r.partition_key == partition_of(old)]
        kept = Catalog(p.storage.catalog_path()).documents_of_day(partition_of(old))
        assert old not in kept and again.tags["karma/documents"] == str(len(kept))
    deletes = [r for r in second.dynamic_partitions_requests if isinstance(r, dg.DeleteDynamicPartitionsRequest)]
    assert [(r.partitions_def_name, list(r.partition_keys)) for r in deletes] == (
        [] if BY_DATE else [(documents_partitions.name, [old])])
    adds = {k for r in second.dynamic_partitions_requests if isinstance(r, dg.AddDynamicPartitionsRequest)
            for k in r.partition_keys}
    assert {partition_of(moved), "1981-11-01"} <= adds
