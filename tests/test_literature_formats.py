"""PubMed/MEDLINE XML and BioC (XML and JSON) in the inbox: every date form, streaming, deletions, revisions, gold.

The files are built in tmp dirs by tests/literature_files.py from the shipped corpora's PMIDs and texts, in the
official layouts; their dates and other metadata are test data (see that module).
"""

from __future__ import annotations

import datetime as dt
import gzip
import shutil
from pathlib import Path

import dagster as dg
import pytest
from partition_views import BY_DATE, partition_of, partitions_of
from literature_files import (
    DATE_CASES,
    Citation,
    GeneratedStream,
    corpus,
    date_citations,
    update_files,
    write_generated,
    write_medline,
)

from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import load_document, scan_inbox
from karma_dagster.ingest.parse import IngestError, parse_file, source_format_of
from karma_dagster.ingest.pubmed import PubMedCitation, parse_pubmed_stream
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.runtime.removal import remove_deleted_citations

REPO = Path(__file__).resolve().parents[1]
INBOX = REPO / "data" / "inbox"
ARRIVAL = dt.date(2026, 1, 2)


def _inbox(tmp_path: Path) -> Path:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    return inbox


# ---------------------------------------------------------------- one citation: dates, identifiers, sections
@pytest.mark.parametrize("name", ["dates.xml", "dates.xml.gz"])
def test_every_date_form_pubmed_writes(tmp_path: Path, name: str) -> None:
    inbox = _inbox(tmp_path)
    write_medline(inbox / name, date_citations())
    assert source_format_of(inbox / name) == "pubmed"
    docs = parse_file(inbox / name, inbox)
    assert len(docs) == len(DATE_CASES)
    for doc, case in zip(docs, DATE_CASES, strict=True):
        assert (doc.pub_date, doc.pub_date_precision) == (case.expected, case.precision), case
        assert case.source in (doc.pub_date_source or ""), (doc.pub_date_source, case)
    # the catalog keys and dates each citation by that date, and its note says when a day was not given
    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert not scan.failed and len(scan.new_keys) == len(DATE_CASES)
    for doc, case in zip(docs, DATE_CASES, strict=True):
        entry = catalog.lookup(_key_of(catalog, doc.pmid))
        assert entry.date == case.expected and entry.date_source == "publication"
        if case.precision == "year":
            assert "1 January" in entry.date_note
        elif case.precision in ("month", "season"):
            assert case.precision in entry.date_note


def _key_of(catalog: Catalog, pmid: str) -> str:
    return next(k for k in catalog.all_keys() if catalog.lookup(k).pmid == pmid)


def test_citation_identifiers_structured_abstract_authors_and_journal(tmp_path: Path) -> None:
    structured = next(d for d in corpus() if d.abstract.startswith("BACKGROUND: "))
    inbox = _inbox(tmp_path)
    write_medline(inbox / "one.xml", [Citation(doc=structured, doi="10.9999/ABC.1", pmcid="PMC1234567")])
    (doc,) = parse_file(inbox / "one.xml", inbox)
    assert doc.source_format == "pubmed" and doc.pmid == structured.pmid  # not CommentsCorrections' or a reference's
    assert doc.doi == "10.9999/abc.1" and doc.pmcid == "PMC1234567"
    assert doc.authors == ["Ana M Rivera", "Test Data Consortium"] and doc.journal == "Journal of Test Data"
    assert doc.title == structured.title and doc.sections[0].kind == "title"
    parts = doc.sections[1:]
    assert [s.heading for s in parts][:2] == ["BACKGROUND", "METHODS"] and {s.kind for s in parts} == {"abstract"}
    assert " ".join(f"{s.heading}: {s.text}" for s in parts) == structured.abstract  # every word, in order
    assert "Test data." not in " ".join(s.text for s in parts)  # the copyright line is no abstract text


def test_xml_files_are_told_apart_by_their_root_element(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    write_medline(inbox / "citations.xml", date_citations()[:1])
    shutil.copy(INBOX / "PMC4686705.xml", inbox / "article.xml")
    shutil.copy(INBOX / "PMC4686705.json", inbox / "article.json")  # its sidecar: never a source
    (inbox / "collection.xml").write_text("<?xml version='1.0'?><collection><source>x</source></collection>")
    (inbox / "eupmc.json").write_text('{"pmid": "1", "title": "A record"}')  # no passages: not BioC
    (inbox / "export.json").write_text('{"PubTator3": [{"id": "1", "passages": []}]}')
    assert source_format_of(inbox / "citations.xml") == "pubmed"
    assert source_format_of(inbox / "article.xml") == "jats"
    assert source_format_of(inbox / "collection.xml") == "bioc"
    assert source_format_of(inbox / "article.json") is None
    assert source_format_of(inbox / "eupmc.json") is None
    assert source_format_of(inbox / "export.json") == "bioc"
    assert parse_file(inbox / "article.xml", inbox)[0].pmid == "26779543"  # JATS still gets its sidecar


def test_jats_full_text_wins_over_the_medline_abstract_of_the_same_paper(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    shutil.copy(INBOX / "PMC4686705.xml", inbox / "PMC4686705.xml")
    shutil.copy(INBOX / "PMC4686705.json", inbox / "PMC4686705.json")  # gives the PMID, 26779543
    write_medline(inbox / "pubmed25n1500.xml", [Citation(doc=corpus()[5], pmid="26779543", revised="2025-01-01")])
    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert not scan.failed and scan.new_keys == ["2015-12-08_pmc4686705"] and not scan.changed_keys
    entry = catalog.lookup("2015-12-08_pmc4686705")
    assert [s.source_format for s in entry.sources] == ["jats", "pubmed"]
    assert load_document(entry.doc_key, inbox, catalog).source_format == "jats"


# ---------------------------------------------------------------- streaming: bounded memory, spans
def test_the_parser_yields_each_citation_before_reading_the_rest() -> None:
    """30,000 generated citations, produced only as the parser reads them: the first is yielded after a chunk
    or two of the stream, and the reader never runs ahead of the parser by more than a chunk's worth."""
    stream = GeneratedStream(30_000)
    items = parse_pubmed_stream(stream, "generated.xml")  # type: ignore[arg-type]
    first = next(items)
    assert isinstance(first, PubMedCitation) and first.document.pmid == "90000000"
    assert stream.produced < 1_000 and stream.bytes_read < 3_000_000
    for n, item in enumerate(items, start=2):
        assert item.document.pmid == str(90_000_000 + n - 1)
        if n == 2_000:
            break
    assert stream.produced - 2_000 < 1_000  # a chunk ahead at most, never the whole file (30,000)


def test_a_big_file_registers_with_byte_spans_and_loads_one_citation_alone(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    write_generated(inbox / "pubmed25n0001.xml.gz", 1_200)
    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert not scan.failed and len(scan.new_keys) == 1_200
    last = _key_of_pmid(scan, "90001199")
    entry = catalog.lookup(last)
    span = catalog.member_span("pubmed25n0001.xml.gz", "90001199")
    assert entry.preferred_source.member == "90001199" and span is not None
    with gzip.open(inbox / "pubmed25n0001.xml.gz", "rb") as fh:
        fh.seek(span[0])
        block = fh.read(span[1] - span[0])
    assert block.startswith(b"<PubmedArticle>") and block.endswith(b"</PubmedArticle>") and b">90001199<" in block
    assert load_document(last, inbox, catalog).pmid == "90001199"


def _key_of_pmid(scan, pmid: str) -> str:
    return next(r.doc_key for r in scan.registrations if r.member == pmid)


# ---------------------------------------------------------------- bad files
def test_a_malformed_citation_names_the_file_the_line_and_the_pmid(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    citations = date_citations()[:4]
    path = write_medline(inbox / "pubmed25n1400.xml", citations)
    text = path.read_text(encoding="utf-8")
    bad_pmid = citations[2].id
    at = text.index(f">{bad_pmid}</PMID>")
    broken_at = text.index("</ArticleTitle>", at)
    path.write_text(text[:broken_at] + "</ArticleTitel>" + text[broken_at + len("</ArticleTitle>"):], encoding="utf-8")
    line = text[:broken_at].count("\n") + 1
    with pytest.raises(IngestError, match=rf"^pubmed25n1400\.xml: malformed PubMed citation \(line {line}, PMID "
                                          rf"{bad_pmid}\): mismatched tag"):
        parse_file(path, inbox)
    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert [f.path for f in scan.failed] == ["pubmed25n1400.xml"] and f"PMID {bad_pmid}" in scan.failed[0].error
    assert catalog.all_keys() == []  # checked before anything is registered: no citation of it half-registered


def test_a_truncated_file_and_a_citation_without_pmid_are_refused(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    path = write_medline(inbox / "cut.xml", date_citations()[:3])
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b"<AbstractText")])
    with pytest.raises(IngestError, match=r"^cut\.xml: line \d+: <PubmedArticle> \(PMID \d+\) is never closed"):
        parse_file(path, inbox)
    gz = inbox / "cut.xml.gz"
    gz.write_bytes(gzip.compress(data)[:-40])
    with pytest.raises(IngestError, match=r"^cut\.xml\.gz: cannot read PubMed file"):
        parse_file(gz, inbox)
    path.write_bytes(data.replace(f'<PMID Version="1">{date_citations()[1].id}</PMID>'.encode(), b"", 1))
    with pytest.raises(IngestError, match=r"^cut\.xml: line \d+: citation without a numeric <PMID>"):
        parse_file(path, inbox)
    (inbox / "html.xml.gz").write_bytes(gzip.compress(b"<html><body>Service unavailable</body></html>"))
    with pytest.raises(IngestError, match=r"not a PubMed file \(root element <html>"):
        parse_file(inbox / "html.xml.gz", inbox)


# ---------------------------------------------------------------- update files: a deletion and a revision
def test_deletion_and_revision_in_a_later_update_file(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    data = DataPaths(data_dir=tmp_path / "karma", inbox=inbox)
    files = update_files(tmp_path / "staging")
    shutil.copy(files.first, inbox / files.first.name)
    catalog = Catalog(data.catalog)
    first = scan_inbox(inbox, catalog, ARRIVAL)
    assert not first.failed and len(first.new_keys) == 3
    deleted_key, revised_key = _key_of_pmid(first, files.deleted.id), _key_of_pmid(first, files.revised.id)
    assert deleted_key == "2016-02-03_pmid-" + files.deleted.id
    assert revised_key == "2015-11-01_pmid-" + files.revised.id

    shutil.copy(files.second, inbox / files.second.name)
    second = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=1))
    assert not second.failed
    assert second.deleted_keys == [deleted_key] and deleted_key not in second.keys_to_run
    assert second.changed_keys == [revised_key]  # the revision re-runs its document
    assert second.new_keys == [f"2016-02-20_pmid-{files.added.id}"]  # its ArticleDate
    entry = catalog.lookup(revised_key)
    assert entry.preferred_source.source_path == files.second.name  # the newer citation wins
    assert [s.source_path for s in entry.sources] == [files.second.name, files.first.name]
    assert "the revised text" in load_document(revised_key, inbox, catalog).sections[-1].text
    assert revised_key in {key for _, key, _ in catalog.requests_after(len(first.new_keys))}  # requested again

    assert catalog.lookup(deleted_key) is not None  # the scan records the deletion; removal carries it out
    removed = remove_deleted_citations(data)
    assert [p.doc_key for p in removed] == [deleted_key] and catalog.lookup(deleted_key) is None
    assert remove_deleted_citations(data) == [] and catalog.pending_deletions() == []
    third = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=2))
    assert not third.keys_to_run and sorted(third.unchanged_files) == sorted([files.first.name, files.second.name])


def test_update_files_arriving_out_of_order_keep_the_later_word(tmp_path: Path) -> None:
    """The later file (by MEDLINE's numbering) first: its deletion holds against the older file's citation, and
    the older revision neither becomes the preferred source nor re-runs the document."""
    inbox = _inbox(tmp_path)
    files = update_files(tmp_path / "staging")
    catalog = Catalog(tmp_path / "catalog.sqlite")
    shutil.copy(files.second, inbox / files.second.name)
    early = scan_inbox(inbox, catalog, ARRIVAL)
    assert early.deleted_keys == [] and len(early.new_keys) == 2  # the deleted PMID is unknown yet
    revised_key = _key_of_pmid(early, files.revision.id)
    shutil.copy(files.first, inbox / files.first.name)
    late = scan_inbox(inbox, catalog, ARRIVAL + dt.timedelta(days=1))
    assert not late.failed and files.deleted.id not in {r.member for r in late.registrations}
    assert late.keys_to_run == [_key_of_pmid(late, files.kept[0].id)]  # only the kept citation is new
    assert catalog.lookup(revised_key).preferred_source.source_path == files.second.name


def test_the_new_papers_sensor_carries_out_a_deletion_and_requests_the_revision(make_pipeline) -> None:
    """The sensor's path (no run executed): the deleted document is removed and its partition deleted in the tick
    that registers the deleting file; the revised one is requested again with its new content."""
    from sensor_ticks import tick

    p = make_pipeline()
    files = update_files(p.inbox.parent / "staging")
    shutil.copy(files.first, p.inbox / files.first.name)
    first = tick(p, "new_papers")
    deleted = f"2016-02-03_pmid-{files.deleted.id}"
    revised = f"2015-11-01_pmid-{files.revised.id}"
    assert partition_of(deleted) in {r.partition_key for r in first.run_requests}
    p.instance.add_dynamic_partitions("kg_dates" if BY_DATE else "documents",
                                      [r.partition_key for r in first.run_requests])
    shutil.copy(files.second, p.inbox / files.second.name)
    second = tick(p, "new_papers", first.cursor)
    requested = {r.partition_key for r in second.run_requests}
    assert requested == set(partitions_of([revised, f"2016-02-20_pmid-{files.added.id}"]))
    assert Catalog(p.storage.catalog_path()).lookup(deleted) is None
    drops = [k for req in second.dynamic_partitions_requests if isinstance(req, dg.DeleteDynamicPartitionsRequest)
             for k in req.partition_keys]
    assert drops == ([] if BY_DATE else [deleted])  # a day stays a partition: its other papers are in it


# ---------------------------------------------------------------- end to end: `karma run` on MEDLINE update files
def _evidence_docs(p) -> set[str]:
    import duckdb

    con = duckdb.connect(str(p.storage.kg_path()), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT DISTINCT doc_key FROM evidence").fetchall()}
    finally:
        con.close()


def test_medline_update_files_flow_through_karma_run_into_dated_increments(make_pipeline) -> None:
    """Update file 1 (three abstracts of three dates), then update file 2 (a deletion, a revision, a new abstract):
    `karma run`'s path keys each by its publication date, merges one increment per date, removes the deleted one
    everywhere and re-runs the revised one."""
    from karma_dagster import runner

    p = make_pipeline()
    files = update_files(p.inbox.parent / "staging")
    shutil.copy(files.first, p.inbox / files.first.name)
    lines: list[str] = []
    outcome = runner.run_main(p.defs, p.instance, log=lines.append)
    assert not outcome.failed, outcome.failed
    kept, deleted, revised = (f"2016-01-10_pmid-{files.kept[0].id}", f"2016-02-03_pmid-{files.deleted.id}",
                              f"2015-11-01_pmid-{files.revised.id}")
    catalog = Catalog(p.storage.catalog_path())
    assert sorted(catalog.all_keys()) == sorted([kept, deleted, revised])
    assert "KG increments (local): 2015-11-01 ok, 2016-01-10 ok, 2016-02-03 ok" in lines
    stages = p.storage.stage_store()
    row = stages.read("local", "documents", revised).iloc[0]
    assert row["source_format"] == "pubmed" and str(row["date"])[:10] == "2015-11-01"
    assert {kept, deleted, revised} & _evidence_docs(p), "the abstracts grew the KG"

    shutil.copy(files.second, p.inbox / files.second.name)
    lines.clear()
    outcome = runner.run_main(p.defs, p.instance, log=lines.append)
    assert not outcome.failed, outcome.failed
    added = f"2016-02-20_pmid-{files.added.id}"
    assert sorted(catalog.all_keys()) == sorted([kept, revised, added])
    assert deleted not in _evidence_docs(p) and not stages.exists("local", "documents", deleted)
    assert not p.instance.has_dynamic_partition("documents", deleted)
    row = stages.read("local", "documents", revised).iloc[0]
    assert row["source_path"] == files.second.name and "the revised text" in row["text"]  # re-run on the revision
    assert str(stages.read("local", "documents", added).iloc[0]["date"])[:10] == "2016-02-20"
    merged = next(line for line in lines if line.startswith("KG increments (local)"))
    assert "2016-02-20 ok" in merged and "2016-01-10" not in merged  # only the dates with new or changed documents


# ---------------------------------------------------------------- BioC XML and JSON
def _same_gold(a, b) -> bool:
    return [(d.pmid, d.title, d.abstract, d.mentions, d.relations) for d in a] == \
           [(d.pmid, d.title, d.abstract, d.mentions, d.relations) for d in b]


@pytest.mark.parametrize("corpus_name", ["biored-train", "bc5cdr-train", "ncbi-disease-train"])
def test_bioc_exports_of_a_shipped_corpus_give_back_its_pubtator_gold(tmp_path: Path, corpus_name: str) -> None:
    from literature_files import bioc_json, bioc_xml

    from karma_dagster.metrics.gold_run import read_gold

    docs = list(corpus(corpus_name)[:60])
    files = [bioc_xml(docs, tmp_path / "slice.bioc.xml"), bioc_json(docs, tmp_path / "slice.bioc.json"),
             bioc_json(docs, tmp_path / "collection.json", style="collection")]
    lines = (tmp_path / "lines.bioc.json")  # JSON Lines: one document per line
    lines.write_text("\n".join(__import__("json").dumps(d) for d in __import__("json").loads(
        files[1].read_text())["PubTator3"]) + "\n", encoding="utf-8")
    for path in [*files, lines]:
        assert source_format_of(path) == "bioc", path.name
        assert _same_gold(read_gold(path), docs), path.name


def test_bioc_documents_sections_metadata_and_dates(tmp_path: Path) -> None:
    from literature_files import bioc_json, bioc_xml

    docs = list(corpus()[40:42])
    days = [dt.date(2014, 3, 9), dt.date(2013, 11, 30)]
    inbox = _inbox(tmp_path)
    xml = parse_file(bioc_xml(docs, inbox / "two.xml", days), inbox)
    js = parse_file(bioc_json(docs, inbox / "export.json", days=days), inbox)
    for parsed in (xml, js):
        assert [d.pmid for d in parsed] == [d.pmid for d in docs] and {d.source_format for d in parsed} == {"bioc"}
        first = parsed[0]
        assert [s.kind for s in first.sections] == ["title", "abstract"] and first.title == docs[0].title
        assert first.sections[1].text == docs[0].abstract
        assert first.authors == ["Rivera AM", "Test Data Consortium"] and first.journal == "J Test Data"
        assert [d.pub_date for d in parsed] == days and first.pub_date_precision == "day"
        assert first.gold_mentions == docs[0].mentions
    assert xml[0].doi == f"10.9999/bioc.{docs[0].pmid}" and "journal citation" in xml[0].pub_date_source
    assert "BioC date" in js[0].pub_date_source
    catalog = Catalog(tmp_path / "catalog.sqlite")
    scan = scan_inbox(inbox, catalog, ARRIVAL)
    assert not scan.failed and sorted(scan.new_keys) == sorted(f"{day}_pmid-{d.pmid}" for d, day in zip(docs, days))
    key = scan.new_keys[0]
    assert {s.source_format for s in catalog.lookup(key).sources} == {"bioc"} and len(catalog.lookup(key).sources) == 2
    assert load_document(key, inbox, catalog).pmid == key.split("-")[-1]
    from karma_dagster.metrics.gold_sources import gold_document  # the pipeline's gold_evaluation reads it so

    for d, day in zip(docs, days):
        assert _same_gold([gold_document(f"{day}_pmid-{d.pmid}", inbox, catalog)], [d])


def test_bad_bioc_files_name_the_file_and_the_document(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    (inbox / "bad.bioc.json").write_text('{"PubTator3": [{"id": "1", "passages": [\n{"text": "x", "offset": }]}]}')
    with pytest.raises(IngestError, match=r"^bad\.bioc\.json: not valid JSON \(line 2"):
        parse_file(inbox / "bad.bioc.json", inbox)
    (inbox / "bad.bioc.json").write_text('{"documents": [{"id": "7", "passages": [{"offset": 0, "text": "A title", '
                                         '"infons": {"type": "title"}}]}, {"id": "8"}]}')
    with pytest.raises(IngestError, match=r"^bad\.bioc\.json: BioC document 2: not an object with \"passages\""):
        parse_file(inbox / "bad.bioc.json", inbox)
    (inbox / "cut.xml").write_text("<collection><document><id>1</id><passage><text>A title")
    with pytest.raises(IngestError, match=r"^cut\.xml: not well-formed BioC XML"):
        parse_file(inbox / "cut.xml", inbox)
    (inbox / "empty.bioc.json").write_text('{"documents": [{"id": "9", "passages": [{"offset": 0, "text": " "}]}]}')
    with pytest.raises(IngestError, match=r"^empty\.bioc\.json: BioC document 9 has no passage text"):
        parse_file(inbox / "empty.bioc.json", inbox)


def test_bioc_xml_and_json_flow_through_karma_run_and_score_as_their_pubtator_gold(make_pipeline, tmp_path) -> None:
    """Two abstracts in BioC XML and two in PubTator3's BioC JSON, dated by their files, run by `karma run`'s path
    into one increment per date; then `karma gold-eval`'s scoring of a PubTator slice and of its BioC XML and JSON
    exports gives the same figures (the same backbone, dictionary and entity index)."""
    from literature_files import bioc_json, bioc_xml

    from karma_dagster import runner
    from karma_dagster.runtime import services
    from karma_dagster.metrics.gold_run import evaluate_file
    from karma_dagster.runtime.params import KarmaParams

    p = make_pipeline()
    docs = list(corpus()[50:54])
    days = [dt.date(2014, 3, 9), dt.date(2014, 3, 10), dt.date(2013, 11, 30), dt.date(2014, 3, 9)]
    bioc_xml(docs[:2], p.inbox / "collection.bioc.xml", days[:2])
    bioc_json(docs[2:], p.inbox / "pubtator3-export.json", days=days[2:])
    lines: list[str] = []
    outcome = runner.run_main(p.defs, p.instance, log=lines.append)
    assert not outcome.failed, outcome.failed
    keys = sorted(f"{day}_pmid-{d.pmid}" for d, day in zip(docs, days))
    assert sorted(Catalog(p.storage.catalog_path()).all_keys()) == keys
    assert "KG increments (local): 2013-11-30 ok, 2014-03-09 ok, 2014-03-10 ok" in lines
    stages = p.storage.stage_store()
    assert {stages.read("local", "documents", k).iloc[0]["source_format"] for k in keys} == {"bioc"}

    from corpus_slices import first_abstracts

    gold = first_abstracts(CORPUS := REPO / "data" / "corpora" / "biored-train.pubtator.gz", 4, tmp_path / "s.pubtator")
    sliced = list(corpus()[:4])
    files = [gold, bioc_xml(sliced, tmp_path / "s.bioc.xml"), bioc_json(sliced, tmp_path / "s.bioc.json")]
    data = p.storage.paths()
    backbone = p.defs.resources["backbones"].get("local", p.storage)
    figures = [evaluate_file(f, backbone, services.dictionary(data), services.entity_index(data), KarmaParams())[0]
               for f in files]
    assert figures[0].n_docs == 4 and figures[0].mentions.mentions["micro"].tp > 0, CORPUS
    assert figures[1].summary() == figures[0].summary() == figures[2].summary()
    assert figures[1].one_line() == figures[0].one_line()
