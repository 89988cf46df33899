"""Bounds where input enters: the KG tools (their Python API and the MCP server, driven by the SDK's own client)
obey the KG's date range, the catalog's document-key rule and the chain's name rules, and bound every size a
caller can ask for; `karma ask` and question files bound a question's length with a one-line error."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from test_mcp_server import seeded  # noqa: F401 - the shipped seed KG imported once per module

from karma_dagster import cli
from karma_dagster.cogmg.questions import QUESTION_MAX_CHARS, QuestionFileError, QuestionRejected, load_set
from karma_dagster.kg.store import KGStore
from karma_dagster.kg_tools.bounds import COMMENT_MAX_CHARS, EVIDENCE_MAX_CHARS, NEIGHBOURS_LIMIT_MAX, SEARCH_K_MAX
from karma_dagster.kg_tools.session import KGTools
from karma_dagster.runtime.paths import DataPaths

REPO = Path(__file__).resolve().parents[2]
NS, DOC = "bounds", "2022-07-08_boundstest"
METFORMIN, GESTATIONAL_DIABETES = "Compound::DB00331", "Disease::DOID:11714"
TOMORROW = (dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=2)).isoformat()
OUT_OF_RANGE = ["0001-01-01_ancient", "9999-12-31_future", "1974-12-31_beforestart", f"{TOMORROW}_notyet"]
NOT_KEYS = ["2016-02-12_abc\n", "2016-02-12_ABC", "2016-02-12_" + "a" * 200, "../2016-02-12_x", "2016-02-30_x",
            "2016-02-12_a b", 20160212]


@pytest.fixture
def data_dir(seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KARMA_KG_START_DATE", raising=False)
    root = tmp_path / "karma"
    shutil.copytree(seeded, root)
    return root


def kg_counts(data_dir: Path) -> tuple:
    with KGStore(DataPaths(data_dir).kg).connect(read_only=True) as con:
        return con.execute("SELECT (SELECT count(*) FROM evidence), (SELECT count(*) FROM extracted_nodes), "
                           "(SELECT count(*) FROM merged_documents)").fetchall()[0]


def staged_files(data_dir: Path) -> list[str]:
    stages = data_dir / "stages"
    return sorted(str(p.relative_to(stages)) for p in stages.rglob("*.parquet")) if stages.exists() else []


def test_tool_writes_obey_the_kg_date_range_and_the_document_key_rule(data_dir: Path) -> None:
    tools = KGTools(DataPaths(data_dir), namespace=NS, caller="bounds-test")
    before = kg_counts(data_dir)
    for doc in [*OUT_OF_RANGE, *NOT_KEYS]:
        results = {
            "create_instance": tools.create_instance("Boundin", "a made-up protein", "Gene", document=doc),
            "create_statement": tools.create_statement(METFORMIN, "treats", GESTATIONAL_DIABETES,
                                                       "Metformin treats gestational diabetes.", document=doc),
            "search_instance": tools.search_instance("metformin", document=doc),
            "merge_document": tools.merge_document(doc),
            "create_class": tools.create_class("Boundase", "an enzyme of this test", "Gene", document=doc),
            "create_property": tools.create_property("bounds", "a relation of this test", super_property="treats",
                                                     document=doc),
        }
        for tool, result in results.items():
            assert not result.ok, (doc, tool, result.message)
            assert "\n" not in result.message and len(result.message) < 600, (doc, tool, result.message)
        message = results["create_statement"].message
        if doc in OUT_OF_RANGE:
            assert doc[:10] in message and ("KARMA_KG_START_DATE" in message or "after today" in message), message
        else:
            assert "document key" in message or "not a date" in message, message
    assert staged_files(data_dir) == [] and kg_counts(data_dir) == before
    assert KGStore(DataPaths(data_dir).kg).schema_extension(NS) == []
    # inside the range the same calls stage and merge
    assert tools.create_statement(METFORMIN, "treats", GESTATIONAL_DIABETES, "Metformin treats gestational "
                                  "diabetes.", document=DOC).ok
    assert tools.merge_document(DOC).ok and kg_counts(data_dir)[0] == before[0] + 1


def test_labels_comments_and_evidence_obey_the_chain_name_rules(data_dir: Path) -> None:
    tools = KGTools(DataPaths(data_dir), namespace=NS, caller="bounds-test", document=DOC)
    hostile = {
        "label with an escape sequence": dict(label="Bound\x1b[31min", comment="a protein"),
        "label with a bidi override": dict(label="Bound\u202eni", comment="a protein"),
        "label too long": dict(label="B" * 201, comment="a protein"),
        "comment with a bidi override": dict(label="Boundin", comment="a protein \u202eevil\u202c"),
        "comment with a control character": dict(label="Boundin", comment="a protein\x07\x1b[2J"),
        "comment too long": dict(label="Boundin", comment="a protein " * (COMMENT_MAX_CHARS // 5)),
    }
    for case, kwargs in hostile.items():
        for result in (tools.create_instance(type="Gene", **kwargs),
                       tools.create_class(kwargs["label"], kwargs["comment"], super_class="Gene"),
                       tools.create_property(kwargs["label"], kwargs["comment"], super_property="treats")):
            assert not result.ok, (case, result.message)
            assert ("label" in result.message or "comment" in result.message), (case, result.message)
    long_evidence = "Metformin treats gestational diabetes. " * (EVIDENCE_MAX_CHARS // 30)
    refused = tools.create_statement(METFORMIN, "treats", GESTATIONAL_DIABETES, long_evidence)
    assert not refused.ok and "evidence is too long" in refused.message and str(EVIDENCE_MAX_CHARS) in refused.message
    for bad_id in ("x" * 100_000, 42):
        assert not tools.create_statement(bad_id, "treats", GESTATIONAL_DIABETES, "Metformin treats it.").ok
        assert not tools.neighbours(bad_id).ok
    assert staged_files(data_dir) == [f"{NS}/tool_calls/{DOC}.parquet"]  # the refusals' transcript, nothing else
    assert tools.create_instance("Boundin", "a made-up protein of this test", "Gene").ok


@pytest.mark.parametrize("call, bound", [
    (lambda t, n: t.search_instance("metformin", k=n), SEARCH_K_MAX),
    (lambda t, n: t.search_class("protein", k=n), SEARCH_K_MAX),
    (lambda t, n: t.search_property("treats", k=n), SEARCH_K_MAX),
    (lambda t, n: t.neighbours(METFORMIN, limit=n), NEIGHBOURS_LIMIT_MAX),
], ids=["search_instance", "search_class", "search_property", "neighbours"])
def test_search_sizes_are_bounded_in_the_tool_api(data_dir: Path, call, bound: int) -> None:  # noqa: ANN001
    tools = KGTools(DataPaths(data_dir), namespace=NS, caller="bounds-test")
    for n in (10**6, bound + 1, 0, -5, True, 2.5, "25"):
        result = call(tools, n)
        assert not result.ok, (n, result.message)
        assert str(bound) in result.message and ("k" in result.message or "limit" in result.message), result.message
    assert call(tools, bound).ok and call(tools, 1).ok


def test_search_text_is_bounded(data_dir: Path) -> None:
    tools = KGTools(DataPaths(data_dir), namespace=NS, caller="bounds-test")
    started = time.monotonic()
    for result in (tools.search_instance("metformin " * 10_000), tools.search_class("protein " * 10_000),
                   tools.search_property("treats " * 10_000), tools.search_instance("metformin\x1b[2J")):
        assert not result.ok and "text" in result.message, result.message
    assert time.monotonic() - started < 10
    assert tools.search_instance("metformin").data["results"][0]["id"] == METFORMIN


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV",
                                                          "LITELLM_LOCAL_MODEL_COST_MAP", "TMPDIR")}


def test_the_mcp_server_refuses_out_of_bounds_calls(data_dir: Path) -> None:
    params = StdioServerParameters(command=sys.executable, env=_env(), cwd=str(REPO), args=[
        "-m", "karma_dagster.mcp_server.cli", "--data-dir", str(data_dir), "--caller", "bounds-agent"])
    refused: dict[str, str] = {}

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["search_instance"].input_schema["properties"]["k"]["maximum"] == SEARCH_K_MAX
            assert tools["neighbours"].input_schema.get("additionalProperties") is False
            calls = {
                "k too large": ("search_instance", {"text": "metformin", "k": 100_000}),
                "unknown argument": ("neighbours", {"entity": METFORMIN, "limt": 100_000}),
                "limit too large": ("neighbours", {"entity": METFORMIN, "limit": 100_000}),
                "long search text": ("search_class", {"text": "protein " * 10_000}),
                "document 9999-12-31": ("create_statement", {
                    "subject": METFORMIN, "predicate": "treats", "object": GESTATIONAL_DIABETES,
                    "evidence": "Metformin treats gestational diabetes.", "document": "9999-12-31_future"}),
                "document 0001-01-01": ("create_instance", {"label": "Boundin", "comment": "a protein", "type": "Gene",
                                                            "document": "0001-01-01_ancient"}),
                "merge 0001-01-01": ("merge_document", {"document": "0001-01-01_ancient"}),
                "bidi comment": ("create_class", {"label": "Boundase", "comment": "an enzyme \u202eevil",
                                                  "super_class": "Gene"}),
            }
            for case, (tool, args) in calls.items():
                result = await client.call_tool(tool, args)
                assert result.is_error, (case, result.content[0].text[:300])
                refused[case] = result.content[0].text
            ok = await client.call_tool("search_instance", {"text": "metformin", "k": SEARCH_K_MAX})
            assert not ok.is_error and json.loads(ok.content[0].text)["results"][0]["id"] == METFORMIN

    before = kg_counts(data_dir)
    anyio.run(main)
    assert "limt" in refused["unknown argument"]
    assert "9999-12-31" in refused["document 9999-12-31"] and "0001-01-01" in refused["merge 0001-01-01"]
    assert kg_counts(data_dir) == before and [f for f in staged_files(data_dir) if "tool_calls" not in f] == []


def test_karma_ask_bounds_the_question(tmp_path: Path, capsys: pytest.CaptureFixture, seeded: Path) -> None:
    from karma_dagster.cogmg.answer import answer_question
    from karma_dagster.runtime.config import read_backbones

    for text in ("What treats diabetes? " * 1400, "What treats " + "x" * 100_000):
        started = time.monotonic()
        code = cli.main(["ask", text, "--data-dir", str(seeded)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and time.monotonic() - started < 10, (code, err[:300])
        assert "\n" not in err and f"{len(text):,} characters" in err and f"{QUESTION_MAX_CHARS:,}" in err, err[:300]
    with pytest.raises(QuestionRejected, match="over the limit"):
        answer_question("What treats diabetes? " * 1400, backbone="local",
                        settings=read_backbones().runnable()["local"].settings(), data=DataPaths(seeded))


def test_a_question_file_with_an_over_long_question_is_refused(tmp_path: Path) -> None:
    source = (REPO / "data" / "questions" / "sample_biomed.v1.yaml").read_text(encoding="utf-8")
    import yaml

    data = yaml.safe_load(source)
    data["questions"][1]["question"] = "What treats diabetes? " * 200
    path = tmp_path / "longq.v1.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(QuestionFileError) as err:
        load_set(path)
    assert "longq.v1.yaml" in str(err.value) and repr(data["questions"][1]["id"]) in str(err.value)
    assert "over the limit" in str(err.value)
