"""The whole chain on the LLM path: litellm's real HTTP client against a scripted OpenAI-compatible server on
127.0.0.1, every agent answered from its versioned prompt, triples merged into the backbone's KG namespace."""

from __future__ import annotations

import dagster as dg
import duckdb
import pytest
from fake_openai_server import FakeOpenAIServer, agent_of

from partition_views import document_metadata
from karma_dagster import runner
from karma_dagster.runtime.ledger import Ledger, ledger_path
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.resources.backbones import BackboneConfig

PAPER = ("PMC4736972.pdf", "PMC4736972.json")  # Notch signalling, tamoxifen, breast cancer (2016-01-10)
FAKE_KEY = "sk-karma-test-0000-not-a-real-key"


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def test_llm_backbone_runs_every_stage_through_litellm_and_grows_its_namespace(make_pipeline, server):
    # never calibrated: KARMA's Theta rule admits its triples (the default would hold them all for review)
    backbone = BackboneConfig(kind="litellm", model="openai/karma-scripted", api_base=server.url, api_key=FAKE_KEY,
                              uncalibrated_admission="theta")
    p = make_pipeline(backbones={"scripted": backbone}, inbox_files=PAPER)
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    asked = {agent_of(r) for r in server.requests}
    assert {"reader", "summarizer", "entity_extraction", "relation_extraction", "evaluator_confidence",
            "evaluator_clarity", "evaluator_relevance"} <= asked
    assert all(runner.run_increments(p.defs, p.instance, "scripted", [date_of_document_key(keys[0])]).values())

    con = duckdb.connect(str(p.storage.kg_path()), read_only=True)
    rows = con.execute("SELECT namespace, backbone, prompt_version, evidence FROM evidence").fetchall()
    con.close()
    assert rows and {r[0] for r in rows} == {"scripted"} and {r[1] for r in rows} == {"scripted"}
    assert all("relation_extraction.v1@" in r[2] for r in rows)
    assert all(r[2].endswith("@uncalibrated") for r in rows), "each row says its score is no probability"
    assert p.kg.snapshot_counts(namespace="local").n_evidence == 0, "backbones do not write into each other's KG"
    # the KG browser says so beside each of its scores: an uncalibrated score, not a probability of being right
    from starlette.testclient import TestClient

    from karma_dagster.review.app import create_app
    from karma_dagster.review.queue import ReviewQueue
    from karma_dagster.web.guard import TOKEN_HEADER

    con = duckdb.connect(str(p.storage.kg_path()), read_only=True)
    head, relation, tail = con.execute("SELECT head_id, relation, tail_id FROM evidence LIMIT 1").fetchone()
    con.close()
    app = create_app(ReviewQueue(p.root / "queue.duckdb"), dagster_url="http://127.0.0.1:3999/", kg=p.kg)
    browser = TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token})
    page = browser.get("/kg/edge", params={"head": head, "relation": relation, "tail": tail, "backbone": "scripted"})
    assert page.status_code == 200 and '<small class="uncalibrated"' in page.text.split('id="evidence"')[1]

    evaluated = document_metadata(p, dg.AssetKey(["scripted", "evaluated"]), keys)
    assert evaluated["confidence"] == "uncalibrated: admitted by Theta" and "theta" in evaluated
    meta = document_metadata(p, dg.AssetKey(["scripted", "entities"]), keys)
    assert meta["llm_calls"] > 0 and meta["tokens_in"] > 0
    assert meta["prompt_id"].startswith("entity_extraction.v1@")

    # The ledger booked every stage of the run: one row per (run, partition, backbone, agent).
    ledger = Ledger(ledger_path(p.storage.root()))
    first = {t.group["agent"]: t for t in ledger.totals(["agent"], backbone="scripted")}
    assert set(first) == {"ingestion", "reader", "summarizer", "entity_extraction", "relation_extraction",
                          "schema_alignment", "conflict_resolution", "evaluator"}
    assert sum(t.calls for t in first.values()) == len(server.requests)
    assert first["entity_extraction"].calls == meta["llm_calls"]
    assert all(t.cost_usd is None for t in first.values() if t.calls)  # an unpriced model: tokens only

    # Re-materializing with unchanged inputs is answered from the response cache: zero requests.
    before = len(server.requests)
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    assert len(server.requests) == before
    runs = {t.group["run_id"]: t for t in ledger.totals(["run_id"], backbone="scripted")}
    assert len(runs) == 2 and sorted(t.calls for t in runs.values())[0] == 0  # the rerun: 0 calls, all cache hits
    assert max(t.cache_hits for t in runs.values()) >= sum(t.calls for t in first.values())

    # The key never reaches stored data or metadata.
    for path in p.root.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path.name
    for record in p.instance.fetch_materializations(dg.AssetKey(["scripted", "entities"]), limit=10).records:
        assert FAKE_KEY not in str(record.asset_materialization.metadata)  # type: ignore[union-attr]
