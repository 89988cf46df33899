"""PDF text: back matter out of the document text, entity-bearing methods/results kept by the reader, and
publication dates printed in any case."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections import Counter
from pathlib import Path

import pymupdf
import pytest
from stub_backbones import LexiconBackbone

from karma_dagster.agents.ingestion import document_text
from karma_dagster.agents.reader import NON_CONTENT_KINDS, read_document
from karma_dagster.ingest.parse import parse_file
from karma_dagster.ingest.pdf import parse_pdf
from karma_dagster.runtime.params import KarmaParams

REPO = Path(__file__).resolve().parents[1]
INBOX = REPO / "data" / "inbox"
SAMPLE_PDFS = ["PMC4736972.pdf", "PMC4737013.pdf", "PMC4738914.pdf"]
SHARED = Path(os.environ.get("KARMA_SHARED_DATA", REPO.parent / "shared" / "data"))
PAPERS = SHARED / "papers"
needs_papers = pytest.mark.skipif(not PAPERS.is_dir(), reason="shared corpus with PDF + JATS pairs not present")


def _tokens(text: str) -> Counter[str]:
    return Counter(w.lower() for w in re.findall(r"\w+", text))


# ---------------------------------------------------------------- back matter out of the text
@pytest.mark.parametrize("name", SAMPLE_PDFS)
def test_document_text_leaves_references_thanks_affiliations_and_conflicts_out(name: str) -> None:
    doc = parse_file(INBOX / name, INBOX, use_sidecar=False)[0]
    text = document_text(doc.sections)
    back = {s.kind: s.text for s in doc.sections if s.kind in NON_CONTENT_KINDS}
    assert {"references", "affiliations", "conflicts"} <= set(back)  # still parsed, for the reader's record
    for kind, body in back.items():
        for line in body.split("\n")[:5]:
            if len(line) > 30:
                assert line[:60] not in text, (kind, line[:60])
    assert not re.search(r"^(References|Conflict of Interests|Acknowledg(e)?ments?)$", text, re.M)
    assert "Correspondence should be addressed" not in text  # the author's address went to the affiliations
    assert "Creative Commons" not in text and "Creative Commons" in (doc.license or "")  # metadata, not text
    assert doc.authors and doc.authors[0] not in text  # the author line is metadata too
    assert "Abstract" in text or doc.sections[1].kind == "abstract"


@needs_papers
def test_pdf_text_token_precision_against_the_jats_body() -> None:
    """Every paper that exists as PDF and JATS: the PDF's document text holds the JATS body and little else
    (before this change the reference lists brought micro precision down to 0.65, one paper to 0.48)."""
    shared = n_pdf = n_gold = 0
    for d in sorted(p for p in PAPERS.iterdir() if (p / "fulltext.pdf").is_file() and (p / "fulltext.xml").is_file()):
        pdf = parse_file(d / "fulltext.pdf", d, use_sidecar=False)[0]
        jats = parse_file(d / "fulltext.xml", d, use_sidecar=False)[0]
        got = _tokens(document_text(pdf.sections))
        gold = _tokens(document_text([s for s in jats.sections if s.kind not in NON_CONTENT_KINDS]))
        common = sum((got & gold).values())
        assert common / sum(got.values()) > 0.93, d.name
        assert common / sum(gold.values()) > 0.88, d.name
        shared, n_pdf, n_gold = shared + common, n_pdf + sum(got.values()), n_gold + sum(gold.values())
    assert shared / n_pdf > 0.95 and shared / n_gold > 0.97


# ---------------------------------------------------------------- the reader keeps what carries entities
def _entity_segments_dropped(pdf: Path, inbox: Path, count_hits) -> tuple[int, list[str]]:
    doc = parse_file(pdf, inbox, use_sidecar=False)[0]
    rows = read_document("d", doc.sections, LexiconBackbone(count_hits), KarmaParams())
    with_entity = [r for r in rows if r.section not in NON_CONTENT_KINDS and count_hits(r.text) > 0]
    return len(with_entity), [f"{pdf.name} {r.section} R={r.relevance:.2f} {r.text[:60]}"
                              for r in with_entity if not r.kept]


@pytest.mark.parametrize("name", SAMPLE_PDFS)
def test_reader_keeps_every_content_segment_that_names_an_entity(name: str, count_hits) -> None:
    n, dropped = _entity_segments_dropped(INBOX / name, INBOX, count_hits)
    assert n >= 8 and dropped == []


@needs_papers
def test_reader_keeps_methods_and_tables_with_entities_on_all_papers(count_hits) -> None:
    """Methods paragraphs and tables name their drugs and assays among many words: low density, but entities."""
    total, dropped = 0, []
    for d in sorted(p for p in PAPERS.iterdir() if (p / "fulltext.pdf").is_file()):
        n, lost = _entity_segments_dropped(d / "fulltext.pdf", d, count_hits)
        total, dropped = total + n, dropped + lost
    assert total > 150 and dropped == []


def test_reader_still_drops_segments_without_entities_and_back_matter(count_hits) -> None:
    doc = parse_file(INBOX / "PMC4737013.pdf", INBOX, use_sidecar=False)[0]
    rows = read_document("d", doc.sections, LexiconBackbone(count_hits), KarmaParams())
    assert all(not r.kept for r in rows if r.section in NON_CONTENT_KINDS)
    front = [r for r in rows if r.heading == "Front matter"]
    assert front and not any(r.kept for r in front)  # received/accepted/editor lines: below delta


# ---------------------------------------------------------------- publication dates in any case
@pytest.mark.parametrize(("printed", "expected"), [
    ("Published 14 January 2016", dt.date(2016, 1, 14)),
    ("PUBLISHED 14 JANUARY 2016", dt.date(2016, 1, 14)),
    ("published online 3 March 2015", dt.date(2015, 3, 3)),
    ("Published Online: Jan. 14, 2016", dt.date(2016, 1, 14)),
    ("PUBLISHED ONLINE 5 SEPT 2014", dt.date(2014, 9, 5)),
    ("Received 3 May 2015; Accepted 2 June 2015; Published 7 July 2015", dt.date(2015, 7, 7)),
    ("published online on 2016-01-14", dt.date(2016, 1, 14)),
])
def test_pdf_publication_date_in_any_case(tmp_path: Path, printed: str, expected: dt.date) -> None:
    """A one-page article whose front matter prints the date the way journals do."""
    pdf = pymupdf.open()
    page = pdf.new_page()
    y = 72
    for text, size, font in [("Metformin Lowers Glucose in Alloxan Diabetic Rats", 18, "hebo"), (printed, 8, "helv"),
                             ("1. Introduction", 11, "hebo")]:
        page.insert_text((72, y), text, fontsize=size, fontname=font)
        y += 30
    for i in range(12):
        page.insert_text((72, y), f"Metformin reduced fasting glucose in group {i} of the diabetic rats studied.",
                         fontsize=10, fontname="helv")
        y += 14
    pdf.save(tmp_path / "a.pdf")
    pdf.close()
    doc = parse_pdf(tmp_path / "a.pdf", "a.pdf")
    assert doc.pub_date == expected


def test_text_file_published_line_in_any_case(tmp_path: Path) -> None:
    from karma_dagster.ingest.text import parse_printed_date

    (tmp_path / "n.txt").write_text("A note on metformin\n\nPUBLISHED ONLINE: 14 JANUARY 2016\n\nMethods\n\n"
                                    "We measured glucose.\n", encoding="utf-8")
    assert parse_file(tmp_path / "n.txt", tmp_path)[0].pub_date == dt.date(2016, 1, 14)
    assert parse_printed_date("JAN. 14, 2016") == dt.date(2016, 1, 14)
    assert parse_printed_date("the 14th") is None
