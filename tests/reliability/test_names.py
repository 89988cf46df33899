"""Issue 11 item 9: names from text reach the KG only clean.

End to end: a paper run through the whole chain of an LLM backbone (litellm's real client against the scripted
server on 127.0.0.1, tests/fake_openai_server.py). Its text carries a name wrapped in terminal colour escapes and
a 10,000-character "name"; the model's summary breaks a name over two lines and decomposes an accent (non-NFC
"café": the text parser itself joins lines and normalizes, a model's answer does not); its NER names exactly
those strings as entities. The KG ends up with none of those strings in any node or evidence; the
cleanable names are stored clean (NFC, one line), the others are dropped and counted with their reason in the
entities stage's metadata. Then the merge's own guard: a hand-edited stage table cannot write a bad name.
Plus the names function itself.
"""

from __future__ import annotations

import json
import re
import shutil
import unicodedata

import dagster as dg
import duckdb
import pandas as pd
import pytest
from fake_openai_server import FakeOpenAIServer, agent_of, karma_responder

from partition_views import document_metadata
from karma_dagster import runner
from karma_dagster.agents.integration import collect_document
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.kg.merge import TripleValidationError, merge_increment
from karma_dagster.kg.store import KGStore
from karma_dagster.kg.names import NAME_MAX_CHARS, Rejection, clean_name, clean_text
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.runtime.stage_store import StageStore

FAKE_KEY = "sk-karma-test-0000-not-a-real-key"
ESCAPED = "\x1b[31mTP53\x1b[0m"  # what a terminal shows red; a KG name must never carry it
BROKEN = "tumor\nnecrosis factor"  # a name cut by a line break: cleanable
DECOMPOSED = "cafe\u0301 au lait spots"  # "café" as e + combining acute (NFD): cleanable to NFC
HUGE = "X" + "a" * 9_999  # 10,000 characters
NAMES = {ESCAPED: "GeneOrGeneProduct", BROKEN: "GeneOrGeneProduct", DECOMPOSED: "DiseaseOrPhenotypicFeature",
         HUGE: "ChemicalEntity"}
PAPER = (
    "Published: 2016-03-01\n\n"
    "Bad names in a text\n\n"
    "Abstract\n\n"
    f"Aspirin reduced {BROKEN} in the treated patients. Tamoxifen reduced {DECOMPOSED} in the same patients. "
    f"Cisplatin induced {ESCAPED} expression in the treated rats. Metformin reduced {HUGE} in the cells.\n"
)


def _responder(request: dict) -> str:
    """The scripted model. Its summaries break a name over two lines and decompose an accent (a model's answer is
    text like any other); its NER names the bad strings as entities wherever the text holds them."""
    answer = karma_responder(request)
    if agent_of(request) == "summarizer":
        summary = json.loads(answer)["summary"]
        for clean, bad in ((" ".join(BROKEN.split()), BROKEN), (unicodedata.normalize("NFC", DECOMPOSED), DECOMPOSED)):
            summary = summary.replace(clean, bad)
        return json.dumps({"summary": summary})
    if agent_of(request) == "entity_extraction":
        text = re.findall(r"<text>\n?(.*?)\n?</text>", request["messages"][-1]["content"], flags=re.S)
        entities = json.loads(answer)["entities"]
        entities += [{"text": n, "type": t} for n, t in NAMES.items() if text and n in text[-1]]
        return json.dumps({"entities": entities})
    return answer


def _query(path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _kg_text(path) -> list[str]:
    """Every text value the KG's own tables hold for extracted nodes and evidence."""
    rows = _query(path, "SELECT id, name, kind, vocab_id FROM extracted_nodes")
    rows += _query(path, "SELECT triple_id, head_id, relation, tail_id, metaedge, segment_id, evidence FROM evidence")
    return [v for row in rows for v in row if isinstance(v, str)]


@pytest.fixture(scope="module")
def ran(make_module_pipeline):
    """The paper through the scripted LLM chain and its date's KG increment (shared: the tests only read it)."""
    with FakeOpenAIServer(responder=_responder) as server:
        backbone = BackboneConfig(kind="litellm", model="openai/karma-scripted", api_base=server.url,
                                  api_key=FAKE_KEY, uncalibrated_admission="theta")  # by Theta: the KG grows
        p = make_module_pipeline(backbones={"scripted": backbone})
        (p.inbox / "bad_names.txt").write_text(PAPER, encoding="utf-8")
        assert runner.import_kg(p.defs, p.instance)
        keys, failed = runner.register_inbox(p.defs, p.instance)
        assert len(keys) == 1 and not failed
        assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
        assert all(runner.run_increments(p.defs, p.instance, "scripted", [date_of_document_key(keys[0])]).values())
        yield p, keys[0], list(server.requests)


def test_bad_names_from_a_paper_never_reach_the_kg(ran) -> None:
    p, key, requests = ran
    # the model's NER was asked about text holding every bad string (else this test proves nothing)
    asked = " ".join(r["messages"][-1]["content"] for r in requests if agent_of(r) == "entity_extraction")
    assert all(n in asked for n in NAMES)

    kg = _kg_text(p.storage.kg_path())
    assert kg, "the chain merged nothing: the test would prove nothing"
    for value in kg:
        assert "\x1b" not in value and "\n" not in value and len(value) <= 4000, value[:80]
        assert "a" * NAME_MAX_CHARS not in value
        assert unicodedata.is_normalized("NFC", value), value
    names = {r[0] for r in _query(p.storage.kg_path(), "SELECT name FROM extracted_nodes")}
    assert "tumor necrosis factor" in names  # cleaned: one line
    assert "caf\u00e9 au lait spots" in names  # cleaned: NFC
    assert not [n for n in names if "TP53" in n or n.startswith("Xaaa")]
    evidence = " ".join(r[0] for r in _query(p.storage.kg_path(), "SELECT evidence FROM evidence"))
    assert "tumor necrosis factor" in evidence and "caf\u00e9 au lait spots" in evidence

    meta = document_metadata(p, dg.AssetKey(["scripted", "entities"]), key)
    by_reason = meta["names_rejected_by_reason"]
    assert meta["names_rejected"] == sum(by_reason.values()) >= 2
    assert by_reason["control_character"] >= 1 and by_reason["too_long"] >= 1
    assert meta["dropped_by_reason"]["bad_name"] == meta["names_rejected"]
    examples = meta["names_rejected_examples"]
    reasons = {e["reason"] for e in examples}
    assert "control character U+001B" in reasons and "too long (10000 > 200 chars)" in reasons
    assert all(len(e["name"]) < 120 and "\x1b" not in e["name"] for e in examples)  # escaped, cut: one short line

    # the entities table holds only clean names (the span's `text` stays the summary's own characters)
    entities = StageStore(p.storage.paths().stages_dir).read("scripted", "entities", key)
    for name in entities["long_form"].fillna(entities["text"]):
        assert clean_name(name) == name


def test_the_merge_refuses_a_bad_name_in_a_hand_edited_table(ran, tmp_path) -> None:
    """Even when a stage table was edited by hand, the merge writes no bad name: it refuses, naming the document
    and the field, and the KG is left as it was; a cleanable name is stored clean."""
    p, key, _ = ran
    store = StageStore(p.storage.paths().stages_dir)
    triples, nodes = collect_document(key, store.read("scripted", "evaluated", key),
                                      store.read("scripted", "entities", key), "v")
    assert triples and nodes, "no new entity to tamper with"
    kg_path = tmp_path / "kg.duckdb"
    shutil.copy(p.storage.kg_path(), kg_path)
    kg, day = KGStore(kg_path), pd.Timestamp(date_of_document_key(key)).date()
    before = _kg_text(kg_path)

    for field, bad in (("name", ESCAPED), ("name", HUGE), ("name", "\n "), ("kind", "Gene\x00"),
                       ("id", "NEW:x\ny"), ("vocab_id", "MESH:\x1b[0m")):
        tampered = [nodes[0].model_copy(update={field: bad}), *nodes[1:]]
        with pytest.raises(TripleValidationError, match=rf"doc '{key}'.*field '{field}'"):
            merge_increment(kg, day, "scripted", {key: (triples, tampered)}, "run-2")
    for field in ("head_id", "tail_id", "triple_id"):
        with pytest.raises(TripleValidationError, match=rf"doc '{key}'.*field '{field}'"):
            merge_increment(kg, day, "scripted", {key: ([{**triples[0], field: ESCAPED}], nodes)}, "run-2")
    assert _kg_text(kg_path) == before  # nothing written

    # a cleanable name in a hand-edited table is stored clean, and evidence text is cleaned
    spaced = [nodes[0].model_copy(update={"name": "  cafe\u0301\n\tx  "}), *nodes[1:]]
    dirty = [{**triples[0], "evidence": f"Cisplatin induced {ESCAPED}\nexpression."}, *triples[1:]]
    merge_increment(kg, day, "scripted", {key: (dirty, spaced)}, "run-2")
    assert _query(kg_path, "SELECT name FROM extracted_nodes WHERE id = ?", [nodes[0].id]) == [("caf\u00e9 x",)]
    assert _query(kg_path, "SELECT evidence FROM evidence WHERE triple_id = ?", [triples[0]["triple_id"]]) == [
        ("Cisplatin induced TP53 expression.",)]


@pytest.mark.parametrize(("raw", "expected"), [
    ("tumor\nnecrosis\t factor", "tumor necrosis factor"),
    ("  TP53  ", "TP53"),
    ("cafe\u0301", "caf\u00e9"),
    ("acetyl\u00adcholine", "acetylcholine"),  # a soft hyphen: a PDF's invisible hyphenation hint
    ("IL-\u200b6", "IL-6"),  # a zero-width space, as PMC XML puts inside words
    ("IL\u00a01\u2009beta", "IL 1 beta"),  # no-break and thin spaces are spaces
    ("a" * NAME_MAX_CHARS, "a" * NAME_MAX_CHARS),
])
def test_clean_names(raw: str, expected: str) -> None:
    assert clean_name(raw) == expected
    assert clean_name(expected) == expected  # idempotent


@pytest.mark.parametrize(("raw", "code", "reason"), [
    (ESCAPED, "control_character", "control character U+001B"),
    ("TP53\x00", "control_character", "control character U+0000"),
    ("TP\u200d53", "control_character", "format character U+200D"),  # zero-width joiner
    ("TP\u202e53", "control_character", "format character U+202E"),  # right-to-left override
    ("TP\ue00053", "control_character", "private-use character U+E000"),
    ("x" * 10_000, "too_long", "too long (10000 > 200 chars)"),
    ("x" * (NAME_MAX_CHARS + 1), "too_long", "too long (201 > 200 chars)"),
    ("x" * 10_000_000, "too_long", "too long (10000000 > 200 chars)"),
    (" \n\t ", "empty", "empty"),
    ("", "empty", "empty"),
])
def test_rejected_names(raw: str, code: str, reason: str) -> None:
    assert clean_name(raw) == Rejection(code=code, reason=reason)


def test_labels_and_types_have_their_own_limit() -> None:
    assert clean_name("Positive_Correlation", 64) == "Positive_Correlation"
    assert clean_name("x" * 65, 64) == Rejection(code="too_long", reason="too long (65 > 64 chars)")


def test_evidence_is_cleaned_not_refused() -> None:
    assert clean_text(f"Cisplatin induced {ESCAPED}\nexpression\x07.") == "Cisplatin induced TP53 expression."
    assert clean_text("cafe\u0301") == "caf\u00e9"
    assert len(clean_text("word " * 5000)) == 4000
