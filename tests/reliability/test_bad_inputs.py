"""Bad papers end to end: `karma run` (scan + one run per document + KG increments) over an inbox where good papers
sit next to every kind of broken file. Each broken file is reported with its name and its problem, the good
papers go on into the KG, and nothing half-written stays in the stores. (Parser-level checks: test_ingest.py.)"""

from __future__ import annotations

import shutil
import time

import psutil
import pytest
from reliability_helpers import (
    SAMPLE_INBOX,
    corrupt_pdf_bytes,
    encrypted_pdf,
    image_only_pdf,
    kg_dump,
    leftovers,
    long_pdf,
    malformed_pubtator,
    zero_page_pdf,
)

from partition_views import BY_DATE, partitions_of
from karma_dagster import runner
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.parse import IngestError, parse_file
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.partitioning.definitions import documents_partitions

PDF_PAPER = "PMC4738914.pdf"  # levofloxacin thrombocytopenia case report, 2016-01-14
TXT_PAPER = "visfatin-hypothyroidism-note.txt"  # no date: arrival-dated
LONG_PAGES = 1000

# file name -> (how to make it, words its error message must hold)
BAD_FILES = {
    "incoming/corrupt.pdf": (lambda p: p.write_bytes(corrupt_pdf_bytes()), "corrupt"),
    "incoming/truncated.pdf": (lambda p: p.write_bytes((SAMPLE_INBOX / PDF_PAPER).read_bytes()[:200_000]), "truncated"),
    "incoming/encrypted.pdf": (encrypted_pdf, "encrypted PDF: a password is needed"),
    "incoming/zero-pages.pdf": (lambda p: p.write_bytes(zero_page_pdf()), "zero pages"),
    "incoming/scan.pdf": (image_only_pdf, "no text layer: its pages hold only images"),
    "incoming/thesis.pdf": (lambda p: long_pdf(p, LONG_PAGES), f"too long: {LONG_PAGES} pages, over the limit of 300"),
    "incoming/download.pdf": (lambda p: p.write_text("<html><body>404 Not found</body></html>"), "not a PDF"),
    "incoming/latin1.txt": (lambda p: p.write_bytes("Caffeine\n\nRESULTS\n\n10 µg caffeine\n".encode("latin-1")),
                            "not UTF-8 text: byte 0xb5"),
    "incoming/broken.pubtator": (malformed_pubtator, "malformed PubTator file"),
}


@pytest.fixture(scope="module")
def ran(make_module_pipeline):
    p = make_module_pipeline(inbox_files=(PDF_PAPER, "PMC4738914.json", TXT_PAPER))
    shutil.copy(SAMPLE_INBOX / PDF_PAPER, p.inbox / "levofloxacin-copy.pdf")  # the same paper under a second name
    (p.inbox / "incoming").mkdir()
    for name, (make, _) in BAD_FILES.items():
        make(p.inbox / name)
    log: list[str] = []
    t0 = time.perf_counter()
    report = runner.run_main(p.defs, p.instance, log=log.append)
    return p, report, log, time.perf_counter() - t0


def test_each_bad_file_is_reported_by_name_with_its_problem(ran):
    p, report, _log, _s = ran
    failed = {k.removeprefix("file "): v for k, v in report.documents_failed.items() if k.startswith("file ")}
    assert set(failed) == set(BAD_FILES), "every bad file, and only those, is reported"
    for name, (_, problem) in BAD_FILES.items():
        assert failed[name].startswith(f"{name}: ") and problem in failed[name], failed[name]
        assert str(p.root.parent) not in failed[name], "messages name files relative to the inbox"
    # the catalog remembers them as failed (an unchanged bad file is not parsed again), with no document key
    records = {r.path: r for r in Catalog(p.storage.catalog_path()).files()}
    assert all(records[n].status == "failed" and not records[n].doc_keys for n in BAD_FILES)


def test_good_papers_go_on_into_the_kg_and_the_copy_is_one_document(ran):
    p, report, _log, _s = ran
    assert not {k for k in report.documents_failed if not k.startswith("file ")}, "no good document failed"
    catalog = Catalog(p.storage.catalog_path())
    keys = catalog.all_keys()
    assert len(keys) == 2, keys  # the PDF, its renamed copy (one key) and the text note
    pdf_key = next(k for k in keys if "pmc4738914" in k)
    assert {s.source_path for s in catalog.lookup(pdf_key).sources} == {PDF_PAPER, "levofloxacin-copy.pdf"}
    if BY_DATE:  # no partition per paper: their days are the partitions
        assert not p.instance.get_dynamic_partitions(documents_partitions.name)
        assert sorted(p.instance.get_dynamic_partitions("kg_dates")) == partitions_of(keys)
    else:
        assert sorted(p.instance.get_dynamic_partitions(documents_partitions.name)) == sorted(keys)
    dump = kg_dump(p.storage.kg_path())
    merged_docs = {row[1] for row in dump["evidence"]}  # (namespace, doc_key, ...)
    assert pdf_key in merged_docs, "the good PDF's triples reached the KG"
    assert merged_docs <= set(keys)
    increments = {str(row[1]) for row in dump["increments"]}
    assert increments == {date_of_document_key(k) for k in keys}


def test_nothing_half_written(ran):
    p, _report, _log, _s = ran
    assert leftovers(p.root) == []
    stages = p.storage.stage_store()
    keys = set(Catalog(p.storage.catalog_path()).all_keys())
    for stage in ("documents", "segments", "evaluated"):
        assert set(stages.partitions("local", stage)) == keys, f"{stage}: tables only for registered documents"


def test_the_1000_page_pdf_is_refused_fast_in_bounded_memory(ran, tmp_path):
    p, _report, _log, _s = ran
    path = p.inbox / "incoming" / "thesis.pdf"
    proc = psutil.Process()
    rss0, t0 = proc.memory_info().rss, time.perf_counter()
    with pytest.raises(IngestError, match=r"thesis\.pdf: too long: 1000 pages, over the limit of 300 pages"):
        parse_file(path, p.inbox)
    seconds, grown_mb = time.perf_counter() - t0, (proc.memory_info().rss - rss0) / 2**20
    # the refusal reads the page count only: no page is parsed
    assert seconds < 2.0 and grown_mb < 50, (seconds, grown_mb)


def test_a_registered_paper_whose_file_turns_corrupt_fails_only_its_partition(ran):
    p, _report, _log, _s = ran
    catalog = Catalog(p.storage.catalog_path())
    keys = sorted(catalog.all_keys())
    txt_key = next(k for k in keys if "pmc" not in k)
    # a date merged again counts the graph as it is then (a later date's new nodes are in its nodes_before):
    # what must not change is what the KG holds, each increment's documents and evidence
    before = kg_dump(p.storage.kg_path(), with_increment_stats=False)
    tables_before = {k: p.storage.stage_store().read("local", "evaluated", k) for k in keys}
    original = (p.inbox / TXT_PAPER).read_bytes()
    (p.inbox / TXT_PAPER).write_bytes(original.replace(b"Visfatin", "Visfatin \xb5".encode("latin-1"), 1))
    try:
        failed = runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
        assert set(failed) == {txt_key}, failed  # the other partition goes on
        assert TXT_PAPER in failed[txt_key] and "not UTF-8" in failed[txt_key], failed[txt_key]
        dates = sorted({date_of_document_key(k) for k in keys})
        assert all(runner.run_increments(p.defs, p.instance, "local", dates).values())
        assert kg_dump(p.storage.kg_path(), with_increment_stats=False) == before, "the KG is unchanged"
        for k in keys:  # the previous stage tables stay whole
            assert p.storage.stage_store().read("local", "evaluated", k).equals(tables_before[k])
        assert leftovers(p.root) == []
    finally:
        (p.inbox / TXT_PAPER).write_bytes(original)
