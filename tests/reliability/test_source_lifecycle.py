"""A paper's sources over time: a newer or richer source never loses to an older or poorer one, whatever order the
files arrive in (docs/project.md's table "One paper, several files").

Every pair is tried in both arrival orders: a MEDLINE citation against the paper's PDF (with its sidecar), its JATS
and a BioC export with body passages; a `<DeleteCitation>` against each of them; MEDLINE update files against each
other (a deletion in an older file, a revision with the same or a later DateRevised). The papers are the sample
inbox's (data/inbox); each MEDLINE citation is the paper's own PubMed record as its Europe PMC sidecar gives it
(PMID, DOI, PMCID, title, abstract); the abstracts of citation-only papers are the shipped BioRED corpus's. The
DateRevised values and file numbers are test data. The last test runs `karma run` on a one-paper inbox and checks
the KG against the run without the MEDLINE files.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import shutil
from pathlib import Path

import pytest
from literature_files import Citation, corpus, write_medline
from reliability_helpers import SAMPLE_INBOX, kg_dump

from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import ScanResult, load_document, scan_inbox
from karma_dagster.ingest.parse import parse_file
from karma_dagster.ingest.pubtator import PubTatorDoc
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.runtime.removal import remove_deleted_citations

ARRIVAL = dt.date(2026, 1, 2)
PDF_PAPER = "PMC4738914"  # PMID 26884767 (its sidecar names it)
JATS_PAPER = "PMC4686705"  # PMID 26779543


def _sidecar(paper: str) -> dict:
    return json.loads((SAMPLE_INBOX / f"{paper}.json").read_text(encoding="utf-8"))


def citation_of(paper: str, revised: str = "2020-01-01", abstract: str | None = None) -> Citation:
    """The paper's MEDLINE citation: its PMID, DOI, PMCID, title and abstract as its Europe PMC record gives them."""
    meta = _sidecar(paper)
    y, m, d = meta["electronicPublicationDate"][0].split("-")
    doc = PubTatorDoc(pmid=meta["pmid"][0], title=meta["title"][0], abstract=meta["abstractText"][0])
    return Citation(doc=doc, pub_date={"Year": y, "Month": m, "Day": d}, revised=revised, doi=meta["doi"][0],
                    pmcid=meta["pmcid"][0], abstract=abstract)


def pmid_of(paper: str) -> str:
    return _sidecar(paper)["pmid"][0]


def bioc_with_body(paper: str, path: Path) -> Path:
    """PubTator3's BioC JSON of a paper's full text: title, abstract and body passages (INTRO, METHODS, ...) taken
    from the paper's own JATS, its PMID and date as PubTator3 writes them."""
    jats = parse_file(SAMPLE_INBOX / f"{paper}.xml", SAMPLE_INBOX)[0]
    stype = {"title": "TITLE", "abstract": "ABSTRACT", "introduction": "INTRO", "methods": "METHODS",
             "results": "RESULTS", "discussion": "DISCUSS", "conclusion": "CONCL"}
    passages, offset = [], 0
    for s in jats.sections:
        if s.kind not in stype:
            continue
        passages.append({"infons": {"type": "abstract" if s.kind == "abstract" else s.kind,
                                    "section_type": stype[s.kind]}, "offset": offset, "text": s.text,
                         "annotations": []})
        offset += len(s.text) + 1
    meta = _sidecar(paper)
    entry = {"_id": f"{meta['pmid'][0]}|{paper}", "id": meta["pmid"][0], "pmid": int(meta["pmid"][0]),
             "pmcid": paper, "journal": "Int J Endocrinol", "authors": [], "infons": {}, "relations": [],
             "date": f"{meta['electronicPublicationDate'][0]}T00:00:00Z", "passages": passages}
    path.write_text(json.dumps({"PubTator3": [entry]}), encoding="utf-8")
    return path


def full_text(kind: str, inbox: Path) -> str:
    """Put the full text of a sample paper in `inbox`; returns its file name."""
    if kind == "pdf":
        shutil.copy(SAMPLE_INBOX / f"{PDF_PAPER}.pdf", inbox / f"{PDF_PAPER}.pdf")
        shutil.copy(SAMPLE_INBOX / f"{PDF_PAPER}.json", inbox / f"{PDF_PAPER}.json")
        return f"{PDF_PAPER}.pdf"
    if kind == "jats":
        shutil.copy(SAMPLE_INBOX / f"{JATS_PAPER}.xml", inbox / f"{JATS_PAPER}.xml")
        shutil.copy(SAMPLE_INBOX / f"{JATS_PAPER}.json", inbox / f"{JATS_PAPER}.json")
        return f"{JATS_PAPER}.xml"
    return bioc_with_body(JATS_PAPER, inbox / "pubtator3-fulltext.bioc.json").name


PAPER_OF = {"pdf": PDF_PAPER, "jats": JATS_PAPER, "bioc": JATS_PAPER}


class Inbox:
    """An inbox, its catalog and data dir, scanned as `karma run` and the sensor do (deletions carried out)."""

    def __init__(self, tmp_path: Path) -> None:
        self.inbox = tmp_path / "inbox"
        self.inbox.mkdir()
        self.staging = tmp_path / "staging"
        self.staging.mkdir()
        self.data = DataPaths(data_dir=tmp_path / "karma", inbox=self.inbox)
        self.catalog = Catalog(self.data.catalog)
        self.day = ARRIVAL
        self.removed: list[str] = []

    def scan(self) -> ScanResult:
        result = scan_inbox(self.inbox, self.catalog, self.day)
        assert not result.failed, result.failed
        self.removed += [p.doc_key for p in remove_deleted_citations(self.data)]
        self.day += dt.timedelta(days=1)
        return result

    def key_of(self, pmid: str) -> str | None:
        keys = [k for k in self.catalog.all_keys() if self.catalog.lookup(k).pmid == pmid]
        assert len(keys) <= 1, keys
        return keys[0] if keys else None

    def last_request(self, key: str) -> str | None:
        hashes = [h for _, k, h in self.catalog.requests_after(0) if k == key]
        return hashes[-1] if hashes else None


# ---------------------------------------------------------------- full text against a MEDLINE citation
@pytest.mark.parametrize("kind", ["pdf", "jats", "bioc"])
def test_a_citation_arriving_after_the_full_text_changes_nothing(tmp_path: Path, kind: str) -> None:
    box = Inbox(tmp_path)
    name = full_text(kind, box.inbox)
    first = box.scan()
    key = box.key_of(pmid_of(PAPER_OF[kind]))
    assert first.new_keys == [key]
    read = box.catalog.lookup(key).preferred_source
    assert read.source_path == name and read.full_text
    seq = max(s for s, _, _ in box.catalog.requests_after(0))

    write_medline(box.inbox / "pubmed26n0001.xml", [citation_of(PAPER_OF[kind])])
    second = box.scan()
    assert second.keys_to_run == [] and second.attached_keys == [key]  # recorded, never re-run on its abstract
    assert box.catalog.requests_after(seq) == []  # nothing for the sensor either
    entry = box.catalog.lookup(key)
    assert entry.preferred_source.source_path == name
    assert [s.source_format for s in entry.sources][-1] == "pubmed"
    assert load_document(key, box.inbox, box.catalog).source_format == kind


@pytest.mark.parametrize("kind", ["pdf", "jats", "bioc"])
def test_the_full_text_arriving_after_the_citation_is_read_and_reruns_the_paper(tmp_path: Path, kind: str) -> None:
    box = Inbox(tmp_path)
    write_medline(box.inbox / "pubmed26n0001.xml", [citation_of(PAPER_OF[kind])])
    first = box.scan()
    key = box.key_of(pmid_of(PAPER_OF[kind]))
    assert first.new_keys == [key] and box.catalog.lookup(key).preferred_source.source_format == "pubmed"

    name = full_text(kind, box.inbox)
    second = box.scan()
    assert second.changed_keys == [key] and second.keys_to_run == [key]  # the richer text is read from now on
    best = box.catalog.lookup(key).preferred_source
    assert best.source_path == name and box.last_request(key) == best.content_hash
    assert load_document(key, box.inbox, box.catalog).source_format == kind


def test_a_bioc_export_counts_as_full_text_only_with_body_passages(tmp_path: Path) -> None:
    """The BioC tier is decided by what the document holds: PubTator3 exports abstracts and full texts alike."""
    from karma_dagster.ingest.source_rank import is_full_text

    path = bioc_with_body(JATS_PAPER, tmp_path / "full.bioc.json")
    full = parse_file(path, tmp_path)[0]
    body = json.loads(path.read_text(encoding="utf-8"))
    body["PubTator3"][0]["passages"] = body["PubTator3"][0]["passages"][:2]  # title and abstract only
    (tmp_path / "abstract.bioc.json").write_text(json.dumps(body), encoding="utf-8")
    abstract = parse_file(tmp_path / "abstract.bioc.json", tmp_path)[0]
    assert is_full_text(full) and not is_full_text(abstract)


# ---------------------------------------------------------------- <DeleteCitation> against a full text
@pytest.mark.parametrize("kind", ["pdf", "jats", "bioc"])
@pytest.mark.parametrize("order", list(itertools.permutations(["full", "citation", "deletion"])))
def test_a_deletion_withdraws_only_the_citation_never_the_full_text(tmp_path: Path, kind: str,
                                                                    order: tuple[str, ...]) -> None:
    """The full text, the paper's citation (update file 1301) and a later update file (1302) deleting the PMID, in
    every arrival order: the citation is withdrawn, the paper stays, read from its full text (a paper known only
    by its citation when the deletion came is removed, and comes back when its full text arrives)."""
    box = Inbox(tmp_path)
    pmid = pmid_of(PAPER_OF[kind])
    staged = {"citation": write_medline(box.staging / "pubmed26n1301.xml", [citation_of(PAPER_OF[kind])]),
              "deletion": write_medline(box.staging / "pubmed26n1302.xml", [], deleted=[pmid])}
    for step in order:
        if step == "full":
            name = full_text(kind, box.inbox)
        else:
            shutil.copy(staged[step], box.inbox / staged[step].name)
        box.scan()
    key = box.key_of(pmid)
    # removed only when the citation was all there was of the paper (the full text came after the deletion)
    only_citation = order.index("citation") < order.index("deletion") < order.index("full")
    assert key is not None and box.removed == ([key] if only_citation else [])
    entry = box.catalog.lookup(key)
    assert [s.source_path for s in entry.sources] == [name]  # the citation withdrawn, the full text kept
    assert box.last_request(key) == entry.preferred_source.content_hash  # what was last run is the full text
    assert box.catalog.pending_deletions() == []


def test_a_deletion_leaves_other_abstract_sources_and_reruns_on_them(tmp_path: Path) -> None:
    """A paper known from a PubTator file and its MEDLINE citation (read first) loses the citation only: it is run
    again on the PubTator abstract, never removed."""
    box = Inbox(tmp_path)
    doc = corpus()[30]
    (box.inbox / "mine.pubtator").write_text(f"{doc.pmid}|t|{doc.title}\n{doc.pmid}|a|{doc.abstract}\n\n",
                                             encoding="utf-8")
    write_medline(box.inbox / "pubmed26n1301.xml", [Citation(doc=doc, abstract=doc.abstract + " Revised.")])
    box.scan()
    key = box.key_of(doc.pmid)
    assert box.catalog.lookup(key).preferred_source.source_format == "pubmed"
    write_medline(box.inbox / "pubmed26n1302.xml", [], deleted=[doc.pmid])
    result = box.scan()
    assert result.deleted_keys == [] and result.changed_keys == [key] and box.removed == []
    entry = box.catalog.lookup(key)
    assert [s.source_path for s in entry.sources] == ["mine.pubtator"]
    assert box.last_request(key) == entry.preferred_source.content_hash


# ---------------------------------------------------------------- MEDLINE update files against each other
def _two_files(box: Inbox, older: list[Citation], newer: list[Citation], older_deletes: list[str] = (),
               newer_deletes: list[str] = ()) -> tuple[Path, Path]:
    return (write_medline(box.staging / "pubmed26n1301.xml", older, deleted=list(older_deletes)),
            write_medline(box.staging / "pubmed26n1302.xml.gz", newer, deleted=list(newer_deletes)))


def _arrive(box: Inbox, files: tuple[Path, Path], order: str) -> None:
    for f in files if order == "in order" else reversed(files):
        shutil.copy(f, box.inbox / f.name)
        box.scan()


ORDERS = ["in order", "newer first"]


@pytest.mark.parametrize("order", ORDERS)
def test_an_older_deletion_never_removes_a_newer_files_citation(tmp_path: Path, order: str) -> None:
    """Update file 1301 deletes a PMID that file 1302 (later in MEDLINE's numbering) still holds: the citation
    stays, in both arrival orders."""
    box = Inbox(tmp_path)
    doc = corpus()[31]
    files = _two_files(box, [], [Citation(doc=doc)], older_deletes=[doc.pmid])
    _arrive(box, files, order)
    key = box.key_of(doc.pmid)
    assert key is not None and box.removed == []
    assert [s.source_path for s in box.catalog.lookup(key).sources] == [files[1].name]
    assert box.catalog.pending_deletions() == []


@pytest.mark.parametrize("order", ORDERS)
def test_a_newer_deletion_removes_an_older_files_citation(tmp_path: Path, order: str) -> None:
    """Update file 1302 deletes a PMID that 1301 holds: the paper (known from nothing else) is gone in both orders,
    and in the order where the deletion comes last it is removed as `karma remove` does."""
    box = Inbox(tmp_path)
    doc, other = corpus()[32], corpus()[33]
    files = _two_files(box, [Citation(doc=doc), Citation(doc=other)], [], newer_deletes=[doc.pmid])
    _arrive(box, files, order)
    assert box.key_of(doc.pmid) is None and box.key_of(other.pmid) is not None
    assert len(box.removed) == (1 if order == "in order" else 0)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("revised", ["2024-06-30", "2020-01-01"])
def test_the_later_revision_is_read_whatever_arrives_first(tmp_path: Path, order: str, revised: str) -> None:
    """A citation revised in file 1302 (a later DateRevised, or the same one: then the later file) is the one read
    in both arrival orders, and the older file arriving last never re-runs the paper."""
    box = Inbox(tmp_path)
    doc = corpus()[34]
    files = _two_files(box, [Citation(doc=doc, revised="2020-01-01")],
                       [Citation(doc=doc, revised=revised, abstract=doc.abstract + " Erratum: the revised text.")])
    first = files[0] if order == "in order" else files[1]
    shutil.copy(first, box.inbox / first.name)
    box.scan()
    key = box.key_of(doc.pmid)
    last = files[1] if order == "in order" else files[0]
    shutil.copy(last, box.inbox / last.name)
    result = box.scan()
    assert result.keys_to_run == ([key] if order == "in order" else [])
    best = box.catalog.lookup(key).preferred_source
    assert best.source_path == files[1].name and box.last_request(key) == best.content_hash
    assert "the revised text" in load_document(key, box.inbox, box.catalog).sections[-1].text


# ---------------------------------------------------------------- end to end: the KG of `karma run`
def test_medline_files_about_a_full_text_leave_the_kg_as_it_was(make_pipeline) -> None:
    """`karma run` on a sample PDF paper; then a MEDLINE file with the paper's citation, then an update file
    deleting its PMID, each followed by `karma run`: the KG (evidence, edges, nodes, increments) stays the KG of
    the run without those files, and the paper keeps its evidence."""
    from karma_dagster import runner

    p = make_pipeline(inbox_files=(f"{PDF_PAPER}.pdf", f"{PDF_PAPER}.json"))
    lines: list[str] = []
    outcome = runner.run_main(p.defs, p.instance, log=lines.append)
    assert not outcome.failed, outcome.failed
    before = kg_dump(p.storage.kg_path())
    catalog = Catalog(p.storage.catalog_path())
    keys = catalog.all_keys()
    assert len(keys) == 1 and len(before["evidence"]) > 1  # a full text: more than an abstract's evidence

    write_medline(p.inbox / "pubmed26n1301.xml", [citation_of(PDF_PAPER)])
    outcome = runner.run_main(p.defs, p.instance, log=lines.append)
    assert not outcome.failed, outcome.failed
    assert kg_dump(p.storage.kg_path()) == before

    write_medline(p.inbox / "pubmed26n1302.xml", [], deleted=[pmid_of(PDF_PAPER)])
    outcome = runner.run_main(p.defs, p.instance, log=lines.append)
    assert not outcome.failed, outcome.failed
    assert kg_dump(p.storage.kg_path()) == before
    assert catalog.all_keys() == keys
