"""`karma mcp`: the KG tools served with the official MCP SDK, driven by the SDK's own client over stdio (the
server a subprocess) and over streamable HTTP on 127.0.0.1, on a copy of the shipped seed KG."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from karma_dagster.runtime import services
from karma_dagster.kg.store import KGStore
from karma_dagster.mcp_server.server import serve
from karma_dagster.runtime.paths import DataPaths

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
NS, DOC = "mcp", "2022-07-08_mcptest"
LISINOPRIL, METFORMIN = "Compound::DB00722", "Compound::DB00331"
HYPERTENSION, GESTATIONAL_DIABETES = "Disease::DOID:10763", "Disease::DOID:11714"
TOOLS = {"search_instance", "create_instance", "search_class", "create_class", "search_property", "create_property",
         "create_statement", "neighbours", "edges_between", "edge_provenance", "merge_document", "kg_context"}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("seeded") / "karma"
    services.import_seed_kg(DataPaths(root), SEED / "nodes.tsv", SEED / "edges.sif.gz", "hetionet", 0.9)
    return root


@pytest.fixture
def data_dir(seeded: Path, tmp_path: Path) -> Path:
    root = tmp_path / "karma"
    shutil.copytree(seeded, root)
    return root


def _server_command(data_dir: Path, *extra: str) -> list[str]:
    return ["-m", "karma_dagster.mcp_server.cli", "--data-dir", str(data_dir), "--caller", "pytest-agent", *extra]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV",
                                                          "LITELLM_LOCAL_MODEL_COST_MAP", "TMPDIR")}


def _payload(result) -> dict:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def _kg_state(data_dir: Path) -> tuple:
    kg = KGStore(DataPaths(data_dir).kg)
    with kg.connect(read_only=True) as con:
        counts = con.execute("SELECT (SELECT count(*) FROM evidence), (SELECT count(*) FROM extracted_nodes)").fetchall()
    staged = sorted(str(p.relative_to(data_dir)) + str(p.stat().st_mtime_ns)
                    for p in (data_dir / "stages").rglob("*.parquet") if p.parent.name != "tool_calls") \
        if (data_dir / "stages").exists() else []
    return counts, staged, json.dumps(kg.schema_extension(NS), default=str)


def _bounded(name: str, prop: dict) -> bool:
    """A parameter a client can fill blind: described, and bounded for its type (strings in length, counts and
    scores in range); an optional one's bound sits in its non-null branch."""
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    assert branches, name
    for b in branches:
        if b["type"] == "string" and not ("maxLength" in b or "enum" in b):
            return False
        if b["type"] in ("integer", "number") and not ("minimum" in b and "maximum" in b):
            return False
    return bool(prop.get("description", "").strip())


def _check_listed_schemas(tools: list) -> None:
    """What the client sees: every tool described, every parameter described and bounded, nothing else taken."""
    for tool in tools:
        schema = tool.input_schema
        assert tool.description and tool.description.strip(), tool.name
        assert schema.get("additionalProperties") is False, tool.name
        unbounded = [p for p, prop in schema["properties"].items() if not _bounded(f"{tool.name}.{p}", prop)]
        assert not unbounded, (tool.name, unbounded, schema)


async def _session(client: Client, data_dir: Path) -> None:
    """The scenario both transports run: list, search, refuse invalid calls, stage and merge a valid one."""
    listed = (await client.list_tools()).tools
    assert {t.name for t in listed} == TOOLS  # no raw query tool
    _check_listed_schemas(listed)
    found = _payload(await client.call_tool("search_instance", {"text": "metformin"}))
    assert found["results"][0]["id"] == METFORMIN
    cls = _payload(await client.call_tool("search_class", {"text": "Protein"}))
    assert cls["results"][0]["label"] == "Gene"

    before = _kg_state(data_dir)
    invalid = {
        "unknown class": ("create_instance", {"label": "FRB1", "comment": "a gene", "type": "Protien",
                                              "document": DOC}, "no class 'Protien'"),
        "domain violation": ("create_statement", {"subject": METFORMIN, "predicate": "treats", "object": LISINOPRIL,
                                                  "evidence": "x", "document": DOC}, "domain/range violation"),
        "unknown entity": ("create_statement", {"subject": "Compound::DB99999", "predicate": "treats",
                                                "object": HYPERTENSION, "evidence": "x", "document": DOC},
                           "is no instance of the KG"),
        "malformed arguments": ("create_statement", {"subject": METFORMIN, "predicate": "treats", "document": DOC},
                                "object"),
        "wrong type": ("create_statement", {"subject": METFORMIN, "predicate": "treats", "object": HYPERTENSION,
                                            "evidence": "x", "document": DOC, "confidence": "very"}, "confidence"),
        "contradiction": ("create_statement", {"subject": LISINOPRIL, "predicate": "causes", "object": HYPERTENSION,
                                               "evidence": "x", "document": DOC}, "contradiction"),
        "unknown super class": ("create_class", {"label": "Oncogene", "comment": "x", "super_class": "Gen"},
                                "did you mean 'Gene'"),
        "unknown argument": ("neighbours", {"entity": GESTATIONAL_DIABETES, "limt": 3}, "limt"),
        "misspelt document": ("create_instance", {"label": "FRB1", "comment": "a gene", "type": "Gene",
                                                  "documnet": DOC}, "documnet"),
        "out of bounds": ("search_instance", {"text": "metformin", "k": 1000}, "less than or equal to 25"),
        "too long": ("search_instance", {"text": "m" * 201}, "at most 200 characters"),
    }
    for name, (tool, args, needle) in invalid.items():
        result = await client.call_tool(tool, args)
        assert result.is_error, name
        assert needle in result.content[0].text, (name, result.content[0].text)
    assert _kg_state(data_dir) == before  # nothing staged, merged or stored

    staged = _payload(await client.call_tool("create_statement", {
        "subject": METFORMIN, "predicate": "treats", "object": GESTATIONAL_DIABETES, "document": DOC,
        "evidence": "Metformin improved glycaemic control in gestational diabetes.", "confidence": 0.8}))
    assert staged["triple_id"].startswith("tool:pytest-agent:") and staged["metaedge"] == "CtD"
    merged = _payload(await client.call_tool("merge_document", {"document": DOC}))
    assert merged["stats"]["n_evidence"] == 1 and merged["stats"]["n_new_edges"] == 1
    prov = _payload(await client.call_tool("edge_provenance", {"subject": METFORMIN, "predicate": "treats",
                                                               "object": GESTATIONAL_DIABETES}))
    (row,) = prov["evidence"]
    assert (row["doc_key"], row["tool_caller"], row["backbone"]) == (DOC, "pytest-agent", NS)
    between = _payload(await client.call_tool("edges_between", {"a": GESTATIONAL_DIABETES, "b": METFORMIN}))
    assert [e["predicate"] for e in between["edges"]] == ["treats"]
    nb = _payload(await client.call_tool("neighbours", {"entity": GESTATIONAL_DIABETES}))
    assert any(e["other"]["id"] == METFORMIN and e["predicate"] == "treats" for e in nb["edges"])
    # the KG itself, read outside the server: the edge is there with the tool's evidence
    kg = KGStore(DataPaths(data_dir).kg)
    edges = kg.edges_between([(METFORMIN, GESTATIONAL_DIABETES)], NS)[(METFORMIN, GESTATIONAL_DIABETES)]
    assert [(e.relation, round(e.confidence, 2), e.n_evidence) for e in edges] == [("treats", 0.8, 1)]


def test_stdio_client_lists_and_runs_the_tools(data_dir: Path):
    params = StdioServerParameters(command=sys.executable, args=_server_command(data_dir), env=_env(),
                                   cwd=str(Path(__file__).resolve().parents[1]))

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            await _session(client, data_dir)

    anyio.run(main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server(data_dir: Path) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, *_server_command(data_dir, "--transport", "streamable-http",
                                                               "--port", str(port))],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).resolve().parents[1]))
    return proc, port


def printed_token(proc: subprocess.Popen) -> str:
    """The bearer token `karma mcp --transport streamable-http` prints at start (its second line)."""
    assert proc.stdout is not None
    proc.stdout.readline()  # MCP endpoint: http://127.0.0.1:<port>/mcp
    return proc.stdout.readline().rsplit(" ", 1)[-1].strip()


@pytest.fixture
def http_server(data_dir: Path) -> Iterator[tuple[str, str]]:
    proc, port = start_http_server(data_dir)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the server exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("the server did not listen within 60 s")
        yield f"http://127.0.0.1:{port}/mcp", printed_token(proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_streamable_http_client_lists_and_runs_the_tools(http_server: tuple[str, str], data_dir: Path):
    url, token = http_server

    async def main() -> None:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120) as client:
                await _session(client, data_dir)

    anyio.run(main)


def test_serve_refuses_a_non_loopback_host_and_a_missing_kg(data_dir: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="loopback only"):
        serve("streamable-http", host="0.0.0.0", port=1, data_dir=str(data_dir))
    with pytest.raises(ValueError, match="transport 'sse'"):
        serve("sse", data_dir=str(data_dir))
    with pytest.raises(FileNotFoundError, match="no KG yet"):
        serve("stdio", data_dir=str(tmp_path / "empty"))
    from karma_dagster.mcp_server.cli import main

    assert main(["--transport", "streamable-http", "--host", "10.0.0.1", "--data-dir", str(data_dir)]) == 2
