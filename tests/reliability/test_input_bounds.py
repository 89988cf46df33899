"""Input bounds (issue 11, item 11, ingest side): a file over the size limit is refused from its size, unread; a
text over `max_text_chars` (under spaCy's 1,000,000) is refused with the file and the setting named; a PubTator
file of 20,000 abstracts is scanned in bounded memory, every abstract registered, and one abstract is loaded back
without parsing the file again."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from reliability_helpers import SAMPLE_INBOX

from karma_dagster import runner
from karma_dagster.definitions import build_definitions
from karma_dagster.ingest import parse as parse_module
from karma_dagster.ingest import pdf as pdf_module
from karma_dagster.ingest import pubtator as pubtator_module
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.errors import IngestError
from karma_dagster.ingest.inbox import load_document, scan_inbox
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource

ARRIVAL = dt.date(2026, 1, 2)
N_ABSTRACTS = 20_000


def _refuse_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_a: object, **_k: object) -> None:
        raise AssertionError("the file was parsed")

    for name in ("parse_text", "parse_jats", "parse_pubtator"):
        monkeypatch.setattr(parse_module, name, never)
    monkeypatch.setattr(pdf_module, "parse_pdf", never)  # imported by parse.py when a PDF is read


def test_a_50_mb_text_file_is_refused_from_its_size_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    line = "Cisplatin induced nephrotoxicity in rats; aspirin reduced hypertension in the treated group.\n"
    with (inbox / "huge.txt").open("w", encoding="utf-8") as fh:
        fh.write(line * (50_500_000 // len(line)))
    catalog = Catalog(tmp_path / "catalog.sqlite")
    t0 = time.perf_counter()
    _refuse_parsing(monkeypatch)
    monkeypatch.setattr("karma_dagster.ingest.inbox.file_hash", lambda *_a: pytest.fail("an oversized file was hashed"))
    result = scan_inbox(inbox, catalog, ARRIVAL)
    assert time.perf_counter() - t0 < 10  # refused from its size (the old scan parsed it for ~50 s)
    (failed,) = result.failed
    assert failed.path == "huge.txt"
    assert failed.error == ("huge.txt: file of 50.5 MB exceeds the input limit max_file_mb=50 MB (storage resource "
                            "setting): refused, not read")
    assert catalog.file_record("huge.txt").status == "failed"
    assert scan_inbox(inbox, catalog, ARRIVAL).failed[0].error == failed.error  # reported again, still unread


def test_a_text_longer_than_max_text_chars_is_refused_before_the_chain(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "long.txt").write_text("A long note\n\n" + "Aspirin reduced fever in the patients. " * 30_000, "utf-8")
    catalog = Catalog(tmp_path / "catalog.sqlite")
    with monkeypatch.context() as m:  # a plain text file is counted in chunks, not parsed
        _refuse_parsing(m)
        (failed,) = scan_inbox(inbox, catalog, ARRIVAL).failed
    assert failed.error.startswith("long.txt: text file of 1.2 MB holds more than 900,000 characters, the input "
                                   "limit max_text_chars (storage resource setting)")
    # a parsed format: the text length is checked after parsing, before anything is registered
    shutil.copy(SAMPLE_INBOX / "PMC4686705.xml", inbox / "paper.xml")
    from karma_dagster.ingest.limits import InputLimits

    small = InputLimits(max_text_chars=5_000)
    result = scan_inbox(inbox, catalog, ARRIVAL, limits=small)
    error = {f.path: f.error for f in result.failed}["paper.xml"]
    assert re.fullmatch(r"paper\.xml: text of [\d,]+ characters exceeds the input limit max_text_chars=5,000 "
                        r"\(storage resource setting; spaCy reads at most 1,000,000\): refused", error), error
    assert not result.new_keys and catalog.all_keys() == []
    # admitted under the defaults; loading it applies the limits of the last scan (here: tightened again)
    (key,) = scan_inbox(inbox, catalog, ARRIVAL).new_keys
    assert load_document(key, inbox, catalog).pmcid == "PMC4686705"
    scan_inbox(inbox, catalog, ARRIVAL, limits=small)
    with pytest.raises(IngestError, match="max_text_chars=5,000"):
        load_document(key, inbox, catalog)


def test_the_storage_resource_limits_reach_the_scan(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(SAMPLE_INBOX / "PMC4686705.xml", inbox / "paper.xml")
    shutil.copy(SAMPLE_INBOX / "visfatin-hypothyroidism-note.txt", inbox / "note.txt")
    storage = KarmaStorageResource(data_dir=str(tmp_path / "karma"), inbox=str(inbox), max_file_mb=0.02)
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=storage)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        keys, failed = runner.register_inbox(defs, instance)
    assert len(keys) == 1 and list(failed) == ["paper.xml"]  # the 1 kB note passes, the 36 kB JATS does not
    assert "exceeds the input limit max_file_mb=0.02 MB" in failed["paper.xml"]
    with pytest.raises(Exception, match="max_text_chars"):
        KarmaStorageResource(max_text_chars=2_000_000)  # spaCy's limit is the ceiling


def _big_pubtator(path: Path, n: int) -> None:
    """`n` abstracts made from the shipped sample: each copy gets its own PMID and a distinct last sentence."""
    blocks = [b.strip("\n") for b in (SAMPLE_INBOX / "abstracts.pubtator").read_text("utf-8").split("\n\n") if b.strip()]
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            block = blocks[i % len(blocks)]
            pmid = block.split("|", 1)[0]
            block = re.sub(r"(?m)^(\d+\|a\|.*)$", lambda m, i=i: m.group(1) + f" Copy {i}.", block)
            fh.write(re.sub(rf"(?m)^{pmid}(?=[|\t])", str(90_000_000 + i), block) + "\n\n")


_CHILD = """
import datetime as dt, json, sys
from pathlib import Path
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import scan_inbox

def vm(name):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(name)) / 1024

before = vm("VmRSS")
r = scan_inbox(Path(sys.argv[1]), Catalog(Path(sys.argv[2])), dt.date(2026, 1, 2))
print(json.dumps({"new": len(r.new_keys), "failed": [f.error for f in r.failed], "grew_mb": vm("VmHWM") - before}))
"""


def test_a_pubtator_file_of_20000_abstracts_is_scanned_in_bounded_memory(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    _big_pubtator(inbox / "big.pubtator", N_ABSTRACTS)
    assert (inbox / "big.pubtator").stat().st_size > 70_000_000
    db = tmp_path / "catalog.sqlite"
    child = subprocess.run([sys.executable, "-c", _CHILD, str(inbox), str(db)], capture_output=True, text=True,
                           timeout=600, check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert out["failed"] == [] and out["new"] == N_ABSTRACTS
    assert out["grew_mb"] < 250, out  # peak RSS growth of the scan; holding the file's documents took ~1.4 GB
    catalog = Catalog(db)
    assert len(catalog.all_keys()) == N_ABSTRACTS

    # one abstract is read back from its byte span: the whole-file parser is never called
    key = next(k for k in catalog.all_keys() if k.endswith("pmid-90012345"))
    expected = (SAMPLE_INBOX / "abstracts.pubtator").read_text("utf-8").split("\n\n")[12345 % 10]
    monkeypatch.setattr(pubtator_module, "parse_pubtator", lambda *_a, **_k: pytest.fail("the file was re-parsed"))
    doc = load_document(key, inbox, catalog)
    assert doc.pmid == "90012345" and doc.sections[-1].text.endswith("Copy 12345.")
    assert doc.title == expected.strip("\n").split("\n")[0].split("|t|", 1)[1]
    assert len(doc.gold_mentions) == expected.count("\n") - 1 - sum(
        1 for ln in expected.strip("\n").split("\n")[2:] if not ln.split("\t")[1].isdigit())
