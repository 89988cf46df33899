"""Header lines anywhere in a text file's header block (issue 46): `Published:`, `PMID:`, `DOI:`, `Title:`,
`Authors:`, `Journal:` lines are read wherever they stand before the first blank line, after a title line too,
and are no part of the text; the catalog's date note and the reader's log say what was read.

Before, only a paragraph of header lines alone was read: after a title line they were ignored, the date note said
the file had no 'Published:' line, the PMID was lost, and title, date and PMID became one evidence sentence.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest

from karma_dagster.agents.reader import segment_text
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import scan_inbox
from karma_dagster.ingest.parse import parse_file

ARRIVAL = dt.date(2026, 1, 2)
BODY = ("Aspirin reduced fever in the treated patients. Ibuprofen did not change the course of the disease.\n\n"
        "RESULTS\n\nFever fell within two days in most of the patients who took aspirin.\n")


def parsed(tmp_path: Path, text: str, name: str = "paper.txt"):  # noqa: ANN201 - the one ParsedDocument
    inbox = tmp_path / "inbox"
    inbox.mkdir(exist_ok=True)
    (inbox / name).write_text(text, encoding="utf-8")
    (doc,) = parse_file(inbox / name, inbox)
    return doc


def sentences(doc) -> list[str]:  # noqa: ANN001
    return [seg for s in doc.sections for seg in segment_text(s.text, max_sentences=1)]


def test_header_lines_after_the_title_line_are_read_and_left_out_of_the_text(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="karma_dagster.ingest.text")
    doc = parsed(tmp_path, "Some title\nPublished: 2019-03-04\nPMID: 12345\n\n" + BODY)
    assert doc.title == "Some title"
    assert (doc.pub_date, doc.pmid) == (dt.date(2019, 3, 4), "12345")
    assert doc.pub_date_source == "its 'Published:' line (line 2)"
    said = sentences(doc)
    assert "Some title" in said and not [s for s in said if "Published" in s or "12345" in s], said
    assert "paper.txt: header lines read: Published '2019-03-04' (line 2), PMID '12345' (line 3)" in caplog.text

    catalog = Catalog(tmp_path / "catalog.sqlite")
    (key,) = scan_inbox(tmp_path / "inbox", catalog, ARRIVAL).new_keys
    entry = catalog.lookup(key)
    assert entry is not None and entry.date == dt.date(2019, 3, 4) and entry.date_source == "publication"
    assert entry.pmid == "12345"
    assert entry.date_note == "publication date from its 'Published:' line (line 2)"


def test_header_lines_before_between_and_after_the_title_line(tmp_path: Path) -> None:
    doc = parsed(tmp_path, "PMID: 12345678\nAspirin and fever in adults\nDOI: 10.1000/Test.1\n"
                           "Published online: 4 March 2019\n\n" + BODY)
    assert doc.title == "Aspirin and fever in adults"
    assert (doc.pmid, doc.doi, doc.pub_date) == ("12345678", "10.1000/test.1", dt.date(2019, 3, 4))
    assert not [s for s in sentences(doc) if "PMID" in s or "10.1000" in s or "2019" in s]


def test_a_title_line_and_every_other_header_the_reader_knows(tmp_path: Path) -> None:
    doc = parsed(tmp_path, "Title: Aspirin and fever in adults\nAuthors: Ada Smith; Ben Jones\nJournal: J Test\n"
                           "PMCID: PMC1234567\nLicense: CC BY 4.0\nDate: January 14, 2016\n\n" + BODY)
    assert doc.title == "Aspirin and fever in adults" and doc.sections[0].kind == "title"
    assert doc.authors == ["Ada Smith", "Ben Jones"] and doc.journal == "J Test"
    assert (doc.pmcid, doc.license, doc.pub_date) == ("PMC1234567", "CC BY 4.0", dt.date(2016, 1, 14))
    assert doc.pub_date_source == "its 'Date:' line (line 6)"
    assert not [s for s in sentences(doc) if ":" in s]


def test_the_layouts_read_before_still_read_alike(tmp_path: Path) -> None:
    """Header lines leading the file, and a paragraph of them after the title (the feed's layout)."""
    leading = parsed(tmp_path, "Published: 2016-01-05\nPMID: 12345\n\n" + BODY, "a.txt")
    after = parsed(tmp_path, "Some title\n\nPMID: 12345\nPublished: 2016-01-05\n\n" + BODY, "b.txt")
    for doc in (leading, after):
        assert (doc.pmid, doc.pub_date) == ("12345", dt.date(2016, 1, 5))
    assert (leading.title, [s.kind for s in leading.sections]) == ("", ["body", "results"])
    assert (after.title, [s.kind for s in after.sections]) == ("Some title", ["title", "body", "results"])
    assert leading.pub_date_source == "its 'Published:' line (line 1)"
    assert after.pub_date_source == "its 'Published:' line (line 4)"
    plain = parsed(tmp_path, "Some title\n\n" + BODY, "c.txt")
    assert plain.pub_date is None and plain.pub_date_source is None and plain.pmid is None
    assert [s.text for s in plain.sections] == [s.text for s in after.sections]
