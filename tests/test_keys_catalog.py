"""Document keys and the catalog: one key per paper, whatever file or copy it arrives in; change detection."""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import shutil
from pathlib import Path

import pymupdf
import pytest

from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import load_document, scan_inbox
from karma_dagster.ingest.keys import KEY_RE, content_hash, date_of_document_key, document_key, slug
from karma_dagster.ingest.parse import parse_file
from karma_dagster.schemas.records import ParsedDocument

REPO = Path(__file__).resolve().parents[1]
INBOX = REPO / "data" / "inbox"
ARRIVAL = dt.date(2026, 1, 2)


def _doc(**kw) -> ParsedDocument:
    base = {"source_path": "a.txt", "source_format": "text", "sections": [{"kind": "body", "text": "Some text."}]}
    return ParsedDocument(**{**base, **kw})


def test_key_prefers_pmcid_then_pmid_then_doi_then_hash() -> None:
    day = dt.date(2016, 2, 12)
    assert document_key(_doc(pmcid="PMC4745298", pmid="1", doi="10.1/x", pub_date=day), ARRIVAL) == \
        "2016-02-12_pmc4745298"
    assert document_key(_doc(pmid="26884767", doi="10.1/x"), ARRIVAL) == "2026-01-02_pmid-26884767"
    assert document_key(_doc(doi="10.1155/2016/2860645"), ARRIVAL) == "2026-01-02_doi-10.1155-2016-2860645"
    key = document_key(_doc(), ARRIVAL)
    assert key == f"2026-01-02_sha-{content_hash(_doc())[:12]}"
    # normalized text: layout whitespace and case do not change the hash
    assert content_hash(_doc(sections=[{"kind": "body", "text": "SOME\n  text ."}])) == content_hash(_doc())
    long = slug("10.1002/(SICI)1097-4636(199" + "x" * 200 + ")")
    assert len(long) <= 80 and KEY_RE.match(f"2016-01-01_{long}")


def test_date_of_document_key_is_the_date_part() -> None:
    assert date_of_document_key("2016-02-12_pmc4745298") == "2016-02-12"
    assert date_of_document_key("2026-01-02_doi-10.1155-2016-2860645") == "2026-01-02"
    with pytest.raises(ValueError, match="notadate"):
        date_of_document_key("notadate_pmc1")


def _catalog(tmp_path: Path) -> Catalog:
    return Catalog(tmp_path / "state" / "catalog.sqlite")


def test_same_pdf_under_two_names_gets_one_key(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(INBOX / "PMC4738914.pdf", inbox / "levofloxacin.pdf")  # no sidecar: DOI from page 1
    shutil.copy(INBOX / "PMC4738914.pdf", inbox / "copy of levofloxacin.pdf")
    shutil.copy(INBOX / "visfatin-hypothyroidism-note.txt", inbox / "note.txt")
    shutil.copy(INBOX / "visfatin-hypothyroidism-note.txt", inbox / "note (1).txt")
    catalog = _catalog(tmp_path)
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert not scan.failed
    assert sorted(scan.new_keys) == sorted(catalog.all_keys())
    assert len(catalog.all_keys()) == 2
    pdf_key = next(k for k in catalog.all_keys() if "doi-" in k)
    assert pdf_key == "2026-01-02_doi-10.1155-2016-2860645"  # no publication date in the PDF: arrival date
    assert {s.source_path for s in catalog.lookup(pdf_key).sources} == {"levofloxacin.pdf", "copy of levofloxacin.pdf"}
    text_key = next(k for k in catalog.all_keys() if "_sha-" in k)
    assert len(catalog.lookup(text_key).sources) == 2
    assert not scan.attached_keys  # both copies came in the scan that minted the keys
    shutil.copy(INBOX / "PMC4738914.pdf", inbox / "third copy.pdf")
    later = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=7))
    assert later.attached_keys == [pdf_key] and not later.new_keys and later.new_files == ["third copy.pdf"]
    assert len(catalog.lookup(pdf_key).sources) == 3


def _pdf_of(jats: ParsedDocument, path: Path) -> None:
    """A PDF rendering of an article's own text: headings in bold, the DOI line on page 1, as publishers print."""
    doc = pymupdf.open()
    page = doc.new_page()
    y = 60.0
    page.insert_text((50, 40), f"http://dx.doi.org/{jats.doi}", fontsize=8)
    for s in jats.sections:
        if s.kind not in ("title", "abstract", "introduction", "methods", "results", "references"):
            continue
        if s.kind != "title":
            page.insert_text((50, y), s.heading or s.kind.capitalize(), fontsize=12, fontname="hebo")
            y += 20
        box = pymupdf.Rect(50, y, 545, 800)
        text = s.text[:900]
        rest = page.insert_textbox(box, text, fontsize=18 if s.kind == "title" else 10)
        y += (box.height + rest) if rest < 0 else 18 * 3
        y += 16
        if y > 700:
            page = doc.new_page()
            y = 60.0
    doc.save(path)


def test_pdf_and_jats_of_the_same_pmcid_are_one_key_with_two_sources(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(INBOX / "PMC4686705.xml", inbox / "PMC4686705.xml")
    shutil.copy(INBOX / "PMC4686705.json", inbox / "PMC4686705.json")
    jats = parse_file(inbox / "PMC4686705.xml", inbox)[0]
    _pdf_of(jats, inbox / "snap25-article.pdf")
    shutil.copy(INBOX / "PMC4686705.json", inbox / "snap25-article.json")  # the PDF's sidecar names the PMCID
    catalog = _catalog(tmp_path)
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert not scan.failed and scan.new_keys == ["2015-12-08_pmc4686705"]
    entry = catalog.lookup("2015-12-08_pmc4686705")
    assert [s.source_format for s in entry.sources] == ["jats", "pdf"]  # preferred source first
    assert entry.preferred_source.source_path == "PMC4686705.xml"
    assert load_document(entry.doc_key, inbox, catalog).source_format == "jats"
    # the PDF alone (no sidecar) still finds the key through the DOI printed on its first page
    (inbox / "snap25-article.json").unlink()
    shutil.copy(inbox / "snap25-article.pdf", inbox / "renamed.pdf")
    scan = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=5))
    assert catalog.all_keys() == ["2015-12-08_pmc4686705"] and not scan.new_keys


def test_changed_unchanged_and_failed_files(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(INBOX / "visfatin-hypothyroidism-note.txt", inbox / "note.txt")
    shutil.copy(INBOX / "abstracts.pubtator", inbox / "abstracts.pubtator")
    (inbox / "bad.txt").write_bytes(b"caf\xe9 au lait\n")
    (inbox / ".hidden.txt").write_text("ignored", encoding="utf-8")
    (inbox / "README.md").write_text("not a source", encoding="utf-8")
    catalog = _catalog(tmp_path)
    first = scan_inbox(inbox, catalog, ARRIVAL)
    assert len(first.new_keys) == 11 and first.skipped == ["README.md"]
    assert [f.path for f in first.failed] == ["bad.txt"] and "not UTF-8" in first.failed[0].error
    assert catalog.file_record("bad.txt").status == "failed"
    note_key = catalog.file_record("note.txt").doc_keys[0]

    second = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=1))
    assert not second.new_keys and not second.changed_keys
    assert sorted(second.unchanged_files) == ["abstracts.pubtator", "note.txt"]
    assert [f.path for f in second.failed] == ["bad.txt"]  # still reported, not parsed again

    with (inbox / "note.txt").open("a", encoding="utf-8") as fh:
        fh.write("\nA sentence added later.\n")
    third = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=2))
    assert third.changed_files == ["note.txt"] and third.changed_keys == [note_key] and not third.new_keys
    assert "added later" in load_document(note_key, inbox, catalog).sections[-1].text

    (inbox / "bad.txt").write_text("Fixed title\n\nNow it is UTF-8: café.\n", encoding="utf-8")
    fourth = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=3))
    assert fourth.changed_files == ["bad.txt"] and len(fourth.new_keys) == 1 and not fourth.failed


def test_keys_sort_by_date_and_are_stable_across_runs(tmp_path: Path) -> None:
    runs = []
    for i, arrival in enumerate([ARRIVAL, ARRIVAL + dt.timedelta(days=30)]):
        catalog = Catalog(tmp_path / f"run{i}" / "catalog.sqlite")
        scan_inbox(INBOX, catalog, arrival)
        runs.append(catalog.all_keys())
    published = [k for k in runs[0] if not k.startswith("2026")]
    assert published == [k for k in runs[1] if not k.startswith("2026")]  # publication-dated keys: same every run
    assert published == ["2015-12-08_pmc4686705", "2016-01-10_pmc4736972", "2016-01-11_pmc4737013",
                         "2016-01-14_pmc4738914"]
    assert [k[11:] for k in runs[0]] == [k[11:] for k in runs[1]]  # the id part never depends on the run
    assert all(KEY_RE.match(k) for k in runs[0]) and runs[0] == sorted(runs[0])
    catalog = Catalog(tmp_path / "run0" / "catalog.sqlite")
    assert catalog.documents_for_dates(dt.date(2016, 1, 1), dt.date(2016, 1, 11)) == [
        "2016-01-10_pmc4736972", "2016-01-11_pmc4737013"]
    assert len(catalog.documents_for_dates(ARRIVAL, ARRIVAL)) == 11  # 10 abstracts + the note: arrival date
    entry = catalog.lookup("2016-01-11_pmc4737013")
    assert entry.date_source == "publication" and entry.pmid == "26881150"
    assert catalog.lookup("2026-01-02_pmid-6794356").date_source == "arrival"


def _register_in_process(db: str, inbox: str, out: mp.Queue) -> None:
    docs = parse_file(Path(inbox) / "PMC4686705.xml", Path(inbox))
    out.put([r.doc_key for r in Catalog(Path(db)).register(docs * 20, ARRIVAL)])


def test_concurrent_processes_never_mint_two_keys(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()
    db = tmp_path / "catalog.sqlite"
    Catalog(db)
    procs = [ctx.Process(target=_register_in_process, args=(str(db), str(INBOX), out)) for _ in range(3)]
    for p in procs:
        p.start()
    keys = [k for _ in procs for k in out.get(timeout=60)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert set(keys) == {"2015-12-08_pmc4686705"}
    assert Catalog(db).all_keys() == ["2015-12-08_pmc4686705"]


@pytest.mark.parametrize("bad", ["2016-01-01_PMC1", "2016-01-01_a b", "20160101_x", "2016-01-01_é"])
def test_key_pattern_rejects_invalid_partition_keys(bad: str) -> None:
    assert not KEY_RE.match(bad)


def test_many_entries_read_at_once_are_each_document_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller reads a backfill's documents in one go (a few queries per chunk of keys): no document may get
    another's sources, and a key the catalog does not know is left out, not an error."""
    import karma_dagster.ingest.catalog as catalog_module

    inbox = tmp_path / "inbox"
    shutil.copytree(INBOX, inbox)
    shutil.copy(INBOX / "PMC4738914.pdf", inbox / "copy.pdf")  # a document with two sources
    catalog = _catalog(tmp_path)
    assert not scan_inbox(inbox, catalog, ARRIVAL).failed
    keys = catalog.all_keys()
    alone = {k: catalog.lookup(k) for k in keys}
    monkeypatch.setattr(catalog_module, "LOOKUP_CHUNK", 4)  # several chunks, documents split across them
    many = catalog.lookup_many([*reversed(keys), "2020-01-01_pmid-1", keys[0]])
    assert len(keys) > 10 and many == alone
    assert len(many["2016-01-14_pmc4738914"].sources) == 2
    assert {s.source_format for e in many.values() for s in e.sources} >= {"pdf", "jats", "pubtator", "text"}


def _one_paper(tmp_path: Path) -> tuple[Catalog, str, Path]:
    """A catalog that registered the sample JATS paper: (catalog, its key, the inbox)."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(INBOX / "PMC4686705.xml", inbox)
    catalog = Catalog(tmp_path / "catalog.sqlite")
    (key,) = scan_inbox(inbox, catalog, ARRIVAL).new_keys
    return catalog, key, inbox


def test_the_catalog_names_a_paper_by_title_first_author_journal_and_date(tmp_path: Path) -> None:
    catalog, key, inbox = _one_paper(tmp_path)
    paper = catalog.papers([key, "2020-01-01_unknown"])[key]
    assert list(catalog.papers([key, "2020-01-01_unknown"])) == [key]
    parsed = parse_file(inbox / "PMC4686705.xml", inbox)[0]
    assert paper.title == parsed.title and paper.journal == parsed.journal and paper.journal
    assert paper.first_author == parsed.authors[0] and paper.date.isoformat() == date_of_document_key(key)
    assert paper.label() == f"{paper.title} — {paper.first_author} et al., {paper.journal}, {paper.date}"


def test_the_run_report_names_failed_and_undated_documents_by_title(tmp_path: Path) -> None:
    from karma_dagster.ingest.undated import UndatedDocument, UndatedSummary
    from karma_dagster.report import RunReport, name_papers

    catalog, key, _ = _one_paper(tmp_path)
    title = catalog.papers([key])[key].title
    report = RunReport(backbones=[], documents_failed={key: "boom", "2020-01-01_gone": "lost"},
                       dates=UndatedSummary(n_documents=2, undated=[
                           UndatedDocument(doc_key=key, date_source="arrival", note="no date")]))
    text = name_papers(report, catalog).markdown()
    assert f"- {title} — " in text and f"(`{key}`): boom" in text
    assert f"(`{key}`) (arrival): no date" in text
    assert "- `2020-01-01_gone`: lost" in text, "a document the catalog does not know keeps its key"
    report.calibration = {"local": "calibrated (shipped learned evaluator)", "gpt": "uncalibrated: held for review"}
    said = report.markdown()
    assert "Confidence: local calibrated (shipped learned evaluator); gpt uncalibrated: held for review" in said
    assert "(uncalibrated: the evaluator's scores are no probabilities of being right; `karma calibrate" in said
