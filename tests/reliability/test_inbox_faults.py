"""One bad file never stops the inbox, and the inbox never reads outside itself.

Each test scans a temporary inbox where a good paper from data/inbox sits next to the faulty file: the faulty
file is reported (its name and the reason) in the scan's failed list, and the good paper is registered in the
same scan. Symbolic links are followed only inside the inbox, and a file is known by its real name there, so
that its document can be read back.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest
from reliability_helpers import SAMPLE_INBOX

from karma_dagster.ingest import parse as parse_module
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import ScanResult, load_document, scan_inbox

GOOD = "PMC4686705.xml"  # JATS, published 2015-12-08
GOOD_KEY = "2015-12-08_pmc4686705"
ARRIVAL = dt.date(2026, 1, 2)


def deep_xml(depth: int) -> str:
    """A small JATS-looking article whose title nests `depth` elements: a few tens of kB."""
    return ("<article><front><article-meta><title-group><article-title>" + "<b>" * depth + "deep"
            + "</b>" * depth + "</article-title></title-group><abstract><p>An abstract.</p></abstract>"
            "</article-meta></front></article>")


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    box = tmp_path / "inbox"
    box.mkdir()
    shutil.copy(SAMPLE_INBOX / GOOD, box / GOOD)
    return box


def scan(inbox: Path) -> tuple[ScanResult, Catalog]:
    catalog = Catalog(inbox.parent / "catalog.sqlite")
    return scan_inbox(inbox, catalog, ARRIVAL), catalog


def failures(result: ScanResult) -> dict[str, str]:
    return {f.path: f.error for f in result.failed}


def test_deeply_nested_xml_is_reported_and_the_good_paper_registered(inbox: Path) -> None:
    (inbox / "incoming").mkdir()
    (inbox / "incoming" / "deep.xml").write_text(deep_xml(5000), encoding="utf-8")  # ~35 kB
    result, catalog = scan(inbox)
    assert GOOD_KEY in result.new_keys and result.new_files == [GOOD]
    error = failures(result)["incoming/deep.xml"]
    assert error.startswith("incoming/deep.xml: XML nested more than 200 elements deep")
    assert "RecursionError" not in error
    assert catalog.file_record("incoming/deep.xml").status == "failed"
    # the next scan reports it again without parsing it again, and does not re-register the good paper
    again, _ = scan(inbox)
    assert failures(again)["incoming/deep.xml"] == error and again.unchanged_files == [GOOD]


def test_nesting_within_the_bound_is_read(inbox: Path) -> None:
    (inbox / "nested.xml").write_text(deep_xml(150), encoding="utf-8")
    result, catalog = scan(inbox)
    assert result.failed == [] and sorted(result.new_files) == [GOOD, "nested.xml"]
    key = next(r.doc_key for r in result.registrations if r.source_path == "nested.xml")
    assert load_document(key, inbox, catalog).title == "deep"


def test_any_parser_exception_fails_only_its_file(inbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser bug (an exception no parser anticipated) is this file's problem, named with its type."""

    def broken_parser(path: Path, rel: str, **_options: object) -> list:
        raise KeyError("PMID")

    monkeypatch.setattr(parse_module, "parse_pubtator", broken_parser)
    shutil.copy(SAMPLE_INBOX / "abstracts.pubtator", inbox / "abstracts.pubtator")
    result, _ = scan(inbox)
    assert failures(result) == {"abstracts.pubtator": "abstracts.pubtator: could not be read: KeyError: 'PMID'"}
    assert GOOD_KEY in result.new_keys


def test_symlink_out_of_the_inbox_is_refused_unread(inbox: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(SAMPLE_INBOX / "visfatin-hypothyroidism-note.txt", outside / "private.txt")
    os.symlink(outside / "private.txt", inbox / "leak.txt")
    (inbox / "sub").mkdir()
    os.symlink("../../elsewhere/private.txt", inbox / "sub" / "leak2.txt")  # relative, in a subfolder
    os.symlink(outside, inbox / "linked-folder")  # a folder link out of the inbox
    os.symlink(tmp_path / "nothing.txt", inbox / "dangling.txt")
    result, catalog = scan(inbox)
    failed = failures(result)
    for name in ("leak.txt", "sub/leak2.txt", "linked-folder"):
        assert failed[name].startswith(f"{name}: symbolic link to ")
        assert "outside the inbox: refused, not read" in failed[name]
    assert failed["dangling.txt"] == "dangling.txt: broken symbolic link (its target does not exist)"
    assert [r.source_path for r in result.registrations] == [GOOD]
    assert catalog.all_keys() == [GOOD_KEY]


def test_symlink_inside_the_inbox_is_followed_under_its_real_name(inbox: Path) -> None:
    (inbox / "store").mkdir()
    shutil.move(inbox / GOOD, inbox / "store" / GOOD)
    shutil.copy(SAMPLE_INBOX / "PMC4686705.json", inbox / "store" / "PMC4686705.json")
    (inbox / "sub" / "deeper").mkdir(parents=True)
    os.symlink(f"../../store/{GOOD}", inbox / "sub" / "deeper" / "alias.xml")
    os.symlink("store", inbox / "shortcut")  # a folder link inside: its files are listed where they are
    result, catalog = scan(inbox)
    assert result.failed == []
    assert result.new_files == [f"store/{GOOD}"] and result.unchanged_files == []  # read once, by its real name
    assert [r.source_path for r in result.registrations] == [f"store/{GOOD}"]
    assert load_document(GOOD_KEY, inbox, catalog).pmcid == "PMC4686705"


def test_only_the_link_in_a_subfolder_remains(inbox: Path, tmp_path: Path) -> None:
    """The real file lives in a hidden folder (ignored by the scan); the link in a subfolder is what the user
    placed. It is followed, recorded under the real name, and the document reads back from it."""
    (inbox / ".store").mkdir()
    shutil.move(inbox / GOOD, inbox / ".store" / GOOD)
    (inbox / "sub").mkdir()
    os.symlink(f"../.store/{GOOD}", inbox / "sub" / "paper.xml")
    result, catalog = scan(inbox)
    assert result.failed == [] and result.new_files == [f".store/{GOOD}"]
    assert load_document(GOOD_KEY, inbox, catalog).pmcid == "PMC4686705"


def test_sidecar_linked_out_of_the_inbox_is_not_read(inbox: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "meta.json").write_text('{"pmid": "99999999", "title": "Planted"}', encoding="utf-8")
    shutil.copy(SAMPLE_INBOX / "visfatin-hypothyroidism-note.txt", inbox / "note.txt")
    os.symlink(outside / "meta.json", inbox / "note.json")
    result, _ = scan(inbox)
    assert failures(result)["note.txt"].startswith("note.json: symbolic link to ")
    assert GOOD_KEY in result.new_keys
