"""Europe PMC's record beside `fulltext.pdf` (getpapers / bulk-download layout: a folder per paper) completes the
metadata of the PDF: PMID, PMCID, DOI, title, journal, publication date, authors; in both JSON shapes."""

from __future__ import annotations

import copy
import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.inbox import file_hash, scan_inbox
from karma_dagster.ingest.parse import parse_file
from karma_dagster.ingest.sidecar import read_sidecar

REPO = Path(__file__).resolve().parents[1]
INBOX = REPO / "data" / "inbox"
CORE = Path(__file__).resolve().parent / "fixtures" / "eupmc" / "core_search_PMC4738914.json"
TITLE = "Probable Levofloxacin-Induced Thrombocytopenia in a Patient Previously on Ciprofloxacin: A Case Report and " \
        "Literature Review"


def _paper_folder(inbox: Path, record: Path | dict | None) -> Path:
    """inbox/PMC4738914/fulltext.pdf, with `record` as the folder's eupmc_result.json."""
    folder = inbox / "PMC4738914"
    folder.mkdir(parents=True)
    shutil.copy(INBOX / "PMC4738914.pdf", folder / "fulltext.pdf")
    if isinstance(record, Path):
        shutil.copy(record, folder / "eupmc_result.json")
    elif record is not None:
        (folder / "eupmc_result.json").write_text(json.dumps(record), encoding="utf-8")
    return folder / "fulltext.pdf"


def _core_record() -> dict:
    return json.loads(CORE.read_text(encoding="utf-8"))["resultList"]["result"][0]


def _assert_record_metadata(doc) -> None:
    assert (doc.pmid, doc.pmcid, doc.doi) == ("26884767", "PMC4738914", "10.1155/2016/2860645")
    assert doc.pub_date == dt.date(2016, 1, 14)
    assert doc.journal == "Case reports in medicine"
    assert doc.title == TITLE
    assert doc.authors == ["A Justine Landi", "Robert Burkes"]


def test_pdf_in_a_getpapers_folder_gets_its_identifiers_and_publication_date(tmp_path: Path) -> None:
    """The record getpapers saved (every value in a one-element list), shipped as data/inbox/PMC4738914.json."""
    pdf = _paper_folder(tmp_path, INBOX / "PMC4738914.json")
    doc = parse_file(pdf, tmp_path)[0]
    _assert_record_metadata(doc)
    assert doc.source_path == "PMC4738914/fulltext.pdf"
    assert "Creative Commons Attribution" in (doc.license or "")  # the article's own licence text is kept

    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan = scan_inbox(tmp_path, catalog, dt.date(2026, 11, 30))
    assert not scan.failed and scan.new_keys == ["2016-01-14_pmc4738914"]  # dated by publication, not arrival
    assert catalog.lookup("2016-01-14_pmc4738914").date_source == "publication"


def test_rest_core_record_beside_the_pdf(tmp_path: Path) -> None:
    """The REST API's `resultType=core` shape: plain values, a whole search response with one hit."""
    record = read_sidecar(CORE)
    assert record.license == "cc by" and record.pub_date == dt.date(2016, 1, 14)
    doc = parse_file(_paper_folder(tmp_path, CORE), tmp_path)[0]
    _assert_record_metadata(doc)


def test_without_a_day_date_the_record_dates_by_issue_month_or_year(tmp_path: Path) -> None:
    record = _core_record()
    for key in ("firstPublicationDate", "electronicPublicationDate"):
        record.pop(key)
    record["journalInfo"].pop("printPublicationDate")
    side = tmp_path / "r.json"
    side.write_text(json.dumps(record), encoding="utf-8")
    assert read_sidecar(side).pub_date == dt.date(2016, 1, 1)  # year only: 1 January, as Europe PMC dates it
    record["journalInfo"]["monthOfPublication"] = 3
    side.write_text(json.dumps(record), encoding="utf-8")
    assert read_sidecar(side).pub_date == dt.date(2016, 3, 1)
    bare = {k: v for k, v in record.items() if k not in ("journalInfo", "pmid")}
    bare["title"] = "<i>Levofloxacin</i>-induced thrombocytopenia &amp; ciprofloxacin."
    side.write_text(json.dumps(bare), encoding="utf-8")
    got = read_sidecar(side)
    assert got.pub_date == dt.date(2016, 1, 1) and got.pmid == "26884767"  # a MED record's id is its PMID
    assert got.title == "Levofloxacin-induced thrombocytopenia & ciprofloxacin"


def test_folder_record_describes_only_the_papers_full_text(tmp_path: Path) -> None:
    pdf = _paper_folder(tmp_path, CORE)
    other = pdf.with_name("supplement.pdf")
    shutil.copy(INBOX / "PMC4737013.pdf", other)  # another PDF in the folder is not the record's paper
    assert parse_file(other, tmp_path)[0].pmid is None
    own = copy.deepcopy(_core_record())
    own["pmid"], own["firstPublicationDate"] = "11111111", "2015-05-05"
    pdf.with_name("fulltext.json").write_text(json.dumps(own), encoding="utf-8")  # its own <stem>.json wins
    doc = parse_file(pdf, tmp_path)[0]
    assert (doc.pmid, doc.pub_date) == ("11111111", dt.date(2015, 5, 5))


def test_a_corrected_folder_record_changes_the_file_hash(tmp_path: Path) -> None:
    pdf = _paper_folder(tmp_path, CORE)
    before = file_hash(pdf, tmp_path)
    record = _core_record()
    record["firstPublicationDate"] = "2016-01-15"
    pdf.with_name("eupmc_result.json").write_text(json.dumps(record), encoding="utf-8")
    assert file_hash(pdf, tmp_path) != before


def test_a_record_file_with_many_hits_is_refused_by_name(tmp_path: Path) -> None:
    response = json.loads(CORE.read_text(encoding="utf-8"))
    response["resultList"]["result"] *= 2
    pdf = _paper_folder(tmp_path, response)
    with pytest.raises(IngestError, match=r"eupmc_result\.json: sidecar holds 2 Europe PMC records"):
        parse_file(pdf, tmp_path)
