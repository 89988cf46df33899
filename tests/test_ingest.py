"""Parsers on the shipped sample inbox, PDF text against the JATS gold of the same article, and bad inputs."""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from bad_files import encrypted_pdf, image_only_pdf, zero_page_pdf

from karma_dagster.agents.ingestion import build_document_row, sections_of
from karma_dagster.backbones.local.cleanup import clean_document, clean_text
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import load_document, scan_inbox
from karma_dagster.ingest.headings import heading_kind
from karma_dagster.ingest.parse import IngestError, parse_file
from karma_dagster.ingest.pdf import parse_pdf
from karma_dagster.schemas.records import DocumentRow, ParsedDocument

REPO = Path(__file__).resolve().parents[1]
INBOX = REPO / "data" / "inbox"
# The real corpora (PDF + JATS of the same articles) live beside the repo on the dev machines, not in it.
SHARED = Path(os.environ.get("KARMA_SHARED_DATA", REPO.parent / "shared" / "data"))
PAPERS = SHARED / "papers"


def _kinds(doc: ParsedDocument) -> set[str]:
    return {s.kind for s in doc.sections}


def _text(doc: ParsedDocument, kinds: set[str]) -> str:
    return " ".join(s.text for s in doc.sections if s.kind in kinds)


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


# ---------------------------------------------------------------- the shipped sample
def test_pdf_sections_metadata_and_cleanup_of_layout_noise() -> None:
    doc = parse_pdf(INBOX / "PMC4737013.pdf", "PMC4737013.pdf")
    assert doc.source_format == "pdf" and doc.source_path == "PMC4737013.pdf"
    assert doc.doi == "10.1155/2016/2087525"
    assert "Ipilimumab Induced Graves" in doc.title and not doc.title.startswith("Case Report")
    assert doc.authors[0] == "Umal Azmat" and "Fadi Nabhan" in doc.authors
    assert "Creative Commons Attribution" in (doc.license or "")
    assert {"title", "affiliations", "abstract", "introduction", "case", "discussion", "references",
            "conflicts", "acknowledgements", "table", "figure"} <= _kinds(doc)
    body = _text(doc, {"introduction", "case", "discussion"})
    # running headers and page numbers removed; hyphenation at line ends undone
    assert "Case Reports in Endocrinology" not in body
    assert "radioactive" in body and "radioac-" not in body and "radioac " not in body
    assert "Graves’ disease" in _text(doc, {"abstract"})
    refs = _text(doc, {"references"})
    assert refs.startswith("[1]") and "ipilimumab" in refs.lower()


@pytest.mark.skipif(not PAPERS.is_dir(), reason="shared corpus with PDF + JATS pairs not present")
@pytest.mark.parametrize("pmcid", ["PMC4707348", "PMC4738914", "PMC4736776"])
def test_pdf_text_matches_the_jats_gold(pmcid: str) -> None:
    pdf = parse_file(PAPERS / pmcid / "fulltext.pdf", PAPERS / pmcid, use_sidecar=False)[0]
    jats = parse_file(PAPERS / pmcid / "fulltext.xml", PAPERS / pmcid, use_sidecar=False)[0]
    assert pdf.doi == jats.doi
    abstract = difflib.SequenceMatcher(None, _tokens(_text(pdf, {"abstract"})), _tokens(_text(jats, {"abstract"})),
                                       autojunk=False).ratio()
    assert abstract > 0.95
    content = {"introduction", "methods", "results", "discussion", "conclusion", "case", "body"}
    body = difflib.SequenceMatcher(None, _tokens(_text(pdf, content)), _tokens(_text(jats, content)), autojunk=False)
    assert body.ratio() > 0.95
    assert "references" in _kinds(pdf)
    # the same sections, by kind and in order, as the gold
    order = [s.kind for s in jats.sections if s.kind in content]
    assert [k for k in dict.fromkeys(s.kind for s in pdf.sections if s.kind in content)] == list(dict.fromkeys(order))
    if pmcid == "PMC4707348":
        assert {"introduction", "methods", "results", "discussion"} <= _kinds(pdf)


def test_jats_metadata_sections_and_sidecar() -> None:
    doc = parse_file(INBOX / "PMC4686705.xml", INBOX)[0]
    assert doc.source_format == "jats" and doc.source_path == "PMC4686705.xml"
    assert doc.pmcid == "PMC4686705" and doc.doi == "10.1155/2016/8943092"
    assert doc.pmid == "26779543"  # only the Europe PMC sidecar knows it
    assert str(doc.pub_date) == "2015-12-08"
    assert doc.authors[0] == "Nasser M. Al-Daghri" and len(doc.authors) == 8
    assert doc.journal == "Journal of Diabetes Research"
    assert "Creative Commons Attribution License" in (doc.license or "")
    assert {"title", "abstract", "introduction", "methods", "results", "conclusion", "references",
            "acknowledgements", "conflicts", "table", "affiliations"} <= _kinds(doc)
    tables = [s for s in doc.sections if s.kind == "table"]
    assert tables[0].heading == "Table 1" and "T2DM" in tables[0].text
    assert "rs363050" in _text(doc, {"abstract"})


def test_pubtator_one_document_per_abstract_with_gold() -> None:
    docs = parse_file(INBOX / "abstracts.pubtator", INBOX)
    assert len(docs) == 10 and len({d.pmid for d in docs}) == 10
    for doc in docs:
        assert [s.kind for s in doc.sections] == ["title", "abstract"]
        assert doc.gold_mentions
        full = f"{doc.sections[0].text} {doc.sections[1].text}"
        for m in doc.gold_mentions:
            assert full[m.start:m.end] == m.text
    assert sum(len(d.gold_relations) for d in docs) > 20


def test_text_file_headings_and_paragraphs() -> None:
    doc = parse_file(INBOX / "visfatin-hypothyroidism-note.txt", INBOX)[0]
    assert doc.source_format == "text"
    assert doc.title.startswith("Visfatin in autoimmune")
    assert [s.kind for s in doc.sections] == ["title", "background", "methods", "results", "conclusion"]
    assert "antithyroperoxidase antibodies" in _text(doc, {"results"})


def test_text_parser_joins_lines_and_reads_metadata(tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_text(
        "A title line\n\nDOI: 10.1000/xyz.123\nPMID: 12345678\n\n1. Introduction\n\nCiprofloxa-\ncin was given;"
        " ciprofloxacin helped.\nA drug-\ninduced effect, drug-induced again.\n\n2. Methods\n\nWe measured.\n",
        encoding="utf-8")
    doc = parse_file(tmp_path / "n.txt", tmp_path)[0]
    assert doc.doi == "10.1000/xyz.123" and doc.pmid == "12345678"
    intro = _text(doc, {"introduction"})
    assert "Ciprofloxacin was given" in intro and "A drug-induced effect" in intro
    assert "methods" in _kinds(doc)


# ---------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    ("name", "make", "problem"),
    [
        ("corrupt.pdf", lambda p: p.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40 + b"\n%%EOF\n"), "corrupt"),
        ("truncated.pdf", lambda p: p.write_bytes((INBOX / "PMC4738914.pdf").read_bytes()[:200_000]), "truncated"),
        ("encrypted.pdf", encrypted_pdf, "encrypted"),
        ("empty-pages.pdf", lambda p: p.write_bytes(zero_page_pdf()), "zero pages"),
        ("scan.pdf", image_only_pdf, "no text layer"),
        ("page.pdf", lambda p: p.write_text("<html><body>Not found</body></html>"), "not a PDF"),
        ("nothing.pdf", lambda p: p.write_bytes(b""), "empty file"),
    ],
)
def test_bad_pdfs_raise_ingest_error_naming_the_file(tmp_path: Path, name: str, make, problem: str) -> None:
    sub = tmp_path / "inbox" / "incoming"
    sub.mkdir(parents=True)
    make(sub / name)
    with pytest.raises(IngestError) as info:
        parse_file(sub / name, tmp_path / "inbox")
    message = str(info.value)
    assert message.startswith(f"incoming/{name}: ") and problem in message
    assert str(tmp_path) not in message  # relative names only


def test_page_limit_is_a_clear_refusal(tmp_path: Path) -> None:
    shutil.copy(INBOX / "PMC4738914.pdf", tmp_path / "long.pdf")
    with pytest.raises(IngestError, match=r"long\.pdf: too long: 3 pages, over the limit of 2 pages"):
        parse_file(tmp_path / "long.pdf", tmp_path, max_pdf_pages=2)


def test_non_utf8_text_is_refused_not_guessed(tmp_path: Path) -> None:
    (tmp_path / "latin.txt").write_bytes("Title\n\nResults\n\n10 µg of caffeine\n".encode("latin-1"))
    with pytest.raises(IngestError, match=r"^latin\.txt: not UTF-8 text: byte 0xb5 at offset \d+"):
        parse_file(tmp_path / "latin.txt", tmp_path)


def test_malformed_pubtator_line_names_file_and_line(tmp_path: Path) -> None:
    lines = (INBOX / "abstracts.pubtator").read_text(encoding="utf-8").split("\n")[:5]
    lines.insert(3, "14510914\tnot-a-number\tfoo")
    (tmp_path / "broken.pubtator").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(IngestError, match=r"^broken\.pubtator: malformed PubTator file: .*4"):
        parse_file(tmp_path / "broken.pubtator", tmp_path)


def test_bad_sidecar_and_unknown_suffix(tmp_path: Path) -> None:
    shutil.copy(INBOX / "PMC4686705.xml", tmp_path / "paper.xml")
    (tmp_path / "paper.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(IngestError, match=r"^paper\.json: sidecar is not valid JSON"):
        parse_file(tmp_path / "paper.xml", tmp_path)
    (tmp_path / "notes.docx").write_bytes(b"PK\x03\x04")
    with pytest.raises(IngestError, match=r"notes\.docx: unsupported file type"):
        parse_file(tmp_path / "notes.docx", tmp_path)
    (tmp_path / "other.xml").write_text("<html><p>x</p></html>", encoding="utf-8")
    with pytest.raises(IngestError, match=r"other\.xml: not a JATS article"):
        parse_file(tmp_path / "other.xml", tmp_path)


# ---------------------------------------------------------------- clean-up and the document row
def test_cleanup_repairs_noise_without_changing_meaning() -> None:
    raw = "The ﬁrst eﬀect of 𝛽-blockers\u00ad\ning was 10⁹/L ½ dose,\x07 Universit`a  di  Milano\u200b."
    out = clean_text(raw)
    assert out == "The first effect of β-blockersing was 10⁹/L ½ dose, Università di Milano."
    assert clean_text("ciproﬂoxa-\ncin and ciprofloxacin") == "ciprofloxacin and ciprofloxacin"


def test_cleanup_fills_doi_and_keeps_pubtator_offsets() -> None:
    doc = ParsedDocument(source_path="x.txt", source_format="text",
                         sections=[{"kind": "body", "text": "See https://doi.org/10.1155/2016/2860645."}])
    assert clean_document(doc).doi == "10.1155/2016/2860645"
    abstracts = parse_file(INBOX / "abstracts.pubtator", INBOX)
    assert all(clean_document(d).sections == d.sections for d in abstracts)


class _LocalCleanup:
    """The part of the local backbone this stage calls (the full backbone class is assembled elsewhere)."""

    name = "local"

    def clean_document(self, doc: ParsedDocument) -> ParsedDocument:
        return clean_document(doc)


def test_build_document_row_from_the_inbox(tmp_path: Path) -> None:
    import datetime as dt

    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan = scan_inbox(INBOX, catalog, dt.date(2026, 1, 2))
    assert not scan.failed
    key = "2016-01-14_pmc4738914"
    entry = catalog.lookup(key)
    parsed = load_document(key, INBOX, catalog)
    row = build_document_row(key, parsed, entry, _LocalCleanup())  # type: ignore[arg-type]
    assert isinstance(row, DocumentRow)
    assert row.date.isoformat() == "2016-01-14" and row.date_source == "publication"
    assert row.pmid == "26884767" and row.pmcid == "PMC4738914" and row.source_format == "pdf"
    assert row.n_chars == len(row.text) > 10_000
    sections = sections_of(row)
    assert len(sections) == row.n_sections and {"case", "references", "figure"} <= {s.kind for s in sections}
    assert json.loads(row.sections_json)[0]["kind"] == "title"
    assert "levofloxacin-induced thrombocytopenia" in row.text.lower()


def test_heading_kinds() -> None:
    assert heading_kind("2. Materials and Methods") == "methods"
    assert heading_kind("3. Results and Discussion") == "results"
    assert heading_kind("Conflict of Interests") == "conflicts"
    assert heading_kind("Authors’ Contribution") == "other"
    assert heading_kind("2. Case Report") == "case"
    assert heading_kind("A Role for Notch") is None
    assert heading_kind("DECLARATION OF CONFLICTING INTERESTS") == "conflicts"
    assert heading_kind("Conflict of Interest Statement") == "conflicts"
    assert heading_kind("Acknowledgments and Funding") == "acknowledgements"


def test_an_unexpected_scan_failure_logs_its_traceback_once_per_process(tmp_path, monkeypatch, caplog):
    """Issue 31's quiet log: the new_papers sensor scans every 15 s; a file that fails in an unexpected way (here
    the catalog's database locked) is reported as failed on every scan, its traceback logged once."""
    import datetime as dt
    import logging
    import sqlite3

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(REPO / "data" / "inbox" / "PMC4686705.xml", inbox / "PMC4686705.xml")
    catalog = Catalog(tmp_path / "catalog.sqlite")

    def locked(*_args, **_kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(Catalog, "register_batch", locked)
    with caplog.at_level(logging.DEBUG, logger="karma_dagster.ingest.inbox"):
        scans = [scan_inbox(inbox, catalog, arrival_date=dt.date(2026, 12, 2)) for _ in range(3)]
    assert all([f.path for f in s.failed] == ["PMC4686705.xml"] for s in scans)
    assert "database is locked" in scans[2].failed[0].error
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "PMC4686705.xml" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].exc_info
    assert sum("failed again" in r.getMessage() for r in caplog.records) == 2
