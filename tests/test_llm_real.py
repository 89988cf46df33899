"""The LLM path on a real language model: SmolLM2-135M-Instruct served by llama.cpp on 127.0.0.1 (the `[llm]`
extra; `karma llm-serve`). Nothing here is scripted: every answer is the model's, held to the output schemas by
the server's grammar, and every count is read back from the server's own access log."""

from __future__ import annotations

import logging
import signal
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import duckdb
import litellm
import pytest

from partition_views import document_metadata, partition_of
from karma_dagster import runner
from karma_dagster.backbones.llm import (
    LLMBackbone,
    LLMCallError,
    LLMClient,
    LLMContextError,
    LLMOutputError,
    PromptStore,
)
from karma_dagster.backbones.llm.local_server import (LLMServerError, LocalLLMServer, ServerSettings, free_port,
                                                     runtime_missing)
from karma_dagster.backbones.llm.outputs import AlignmentOutput, JudgeOutput
from karma_dagster.backbones.llm.structured import FormMemory
from karma_dagster.backbones.base import TripleQuery
from karma_dagster.definitions import build_definitions
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.runtime.ledger import Ledger, ledger_path
from karma_dagster.resources.backbones import BackboneConfig

REPO = Path(__file__).resolve().parents[1]
# PMID 27860185 (sildenafil, hypoxic pulmonary remodelling), one abstract of the sample inbox's PubTator file
ABSTRACT_PMID = "27860185"
AGENTS = {"ingestion", "reader", "summarizer", "entity_extraction", "relation_extraction", "schema_alignment",
          "conflict_resolution", "evaluator"}

pytestmark = pytest.mark.skipif(runtime_missing() is not None, reason=f"no local LLM runtime: {runtime_missing()}")


def one_abstract(pmid: str) -> str:
    blocks = (REPO / "data" / "inbox" / "abstracts.pubtator").read_text().strip().split("\n\n")
    [block] = [b for b in blocks if b.startswith(f"{pmid}|t|")]
    return block.strip() + "\n\n"


def abstract_text(pmid: str) -> str:
    title, abstract = one_abstract(pmid).split("\n")[:2]
    return title.split("|t|")[1] + " " + abstract.split("|a|")[1]


@pytest.fixture(scope="module")
def llm_serve():
    """`karma llm-serve` itself, the one server of this module (the last test stops it with SIGTERM), and a
    handle on what it serves: its URL and its access log (`answered()`)."""
    port = free_port()
    # One llama.cpp thread: the suite's other worker keeps the second core busy, and two threads spinning at their
    # barriers against it made these tests' calls 12x slower (a CPU hog beside: 768 s with 2 threads, 66 s with 1).
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from karma_dagster.cli import main; sys.exit(main())",
                             "llm-serve", "--port", str(port), "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    handle = LocalLLMServer(ServerSettings(port=port))  # the CLI's own log path for this port; not started here
    deadline = time.monotonic() + 180
    while not handle.answering():
        assert proc.poll() is None, f"karma llm-serve exited with {proc.returncode}: {proc.stdout.read()}"
        assert time.monotonic() < deadline, "karma llm-serve did not answer within 180 s"
        time.sleep(0.5)
    yield proc, handle
    if proc.poll() is None:  # the SIGTERM test did not run (deselected): stop it the same way
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def llm_server(llm_serve):
    return llm_serve[1]


def smollm2(server: LocalLLMServer, **kw: object) -> BackboneConfig:
    params: dict[str, object] = dict(kind="litellm", model="hosted_vllm/smollm2", api_base=server.url,
                                     context_tokens=8192, concurrency=2, timeout=180, max_retries=1, seed=0)
    params.update(kw)
    return BackboneConfig(**params)  # type: ignore[arg-type]


def client(server: LocalLLMServer, **kw: object) -> LLMClient:
    params: dict[str, object] = dict(api_base=server.url, timeout=120, max_retries=0, name="smollm2", seed=0,
                                     max_tokens=256)
    params.update(kw)
    return LLMClient("hosted_vllm/smollm2", **params)  # type: ignore[arg-type]


# ---------------------------------------------------------------- structured output: the forms this server takes
def test_each_structured_output_form_as_the_real_server_takes_or_refuses_it(llm_server, rendered, caplog):
    FormMemory.forget()
    start = len(llm_server.answered())
    with pytest.raises(LLMCallError, match="refused structured output as json_schema and no other form"):
        client(llm_server, response_format="json_schema").complete_json(rendered, AlignmentOutput)
    assert llm_server.answered()[start:] == [500]  # llama-cpp-python: "Input should be 'text' or 'json_object'"

    # json_object with the schema: held to it by the server's grammar
    parsed, usage = client(llm_server, response_format="json_object_schema").complete_json(rendered, AlignmentOutput)
    assert 0.0 <= parsed.probability <= 1.0 and usage.calls == 1 and usage.completion_tokens > 0
    start = len(llm_server.answered())
    for form in ("ollama_format", "json_object", "none"):  # taken, but nothing holds the reply to the schema
        try:
            client(llm_server, response_format=form).complete_json(rendered, AlignmentOutput)
        except LLMOutputError:
            pass
    assert set(llm_server.answered()[start:]) == {200}

    # auto: json_schema first, refused once, then json_object with the schema, remembered for the process
    FormMemory.forget()
    before = len(llm_server.answered())
    with caplog.at_level(logging.WARNING, logger="karma_dagster.llm"):
        auto = client(llm_server)
        parsed, usage = auto.complete_json(rendered, AlignmentOutput)
        other = client(llm_server)  # a second client of the same model and server: no second refusal
        other.complete_json(rendered, AlignmentOutput)  # (no response cache here: asked again)
    assert llm_server.answered()[before:] == [500, 200, 200]
    assert usage.calls == 1  # the refusal is not a billed call
    warnings = [r.getMessage() for r in caplog.records if "refused structured output" in r.getMessage()]
    assert len(warnings) == 1 and "using json_object_schema" in warnings[0]


def test_a_request_longer_than_the_context_is_split_or_refused_with_its_sizes(llm_server):
    FormMemory.forget()
    prompts = PromptStore()
    # the client's own check (context_tokens): a two-sentence text that does not fit is read as two halves
    text = abstract_text(ABSTRACT_PMID)
    whole = LLMBackbone("smollm2", client(llm_server, max_tokens=200), prompts)
    need = litellm.token_counter(model="hosted_vllm/smollm2", messages=whole._render(  # noqa: SLF001
        "entity_extraction", entity_types=whole.entity_types, text=text).messages) + 200
    small = LLMBackbone("smollm2", client(llm_server, context_tokens=need - 60, max_tokens=200), prompts)
    before = len(llm_server.answered())
    spans = small.recognize(text)
    asked = llm_server.answered()[before:]
    assert len(asked) >= 2 and set(asked) <= {200, 500}  # split: more than one request, all answered
    assert all(text[s.start:s.end] == s.text for s in spans)  # offsets of the second half moved right

    # one sentence cannot be split: the error names the backbone, the agent and the sizes
    one_sentence = "Sildenafil " + "and sildenafil " * 400 + "attenuated remodelling."
    with pytest.raises(LLMContextError, match=rf"agent 'entity_extraction'.* ~\d+ prompt tokens \+ 200 .* {need - 60} tokens"):
        small.recognize(one_sentence)

    # without context_tokens the server's own refusal is reported the same way (nothing truncated)
    blind = LLMBackbone("smollm2", client(llm_server, max_tokens=200), prompts)
    with pytest.raises(LLMContextError, match="does not fit the model's context window.*8192"):
        blind.recognize("Sildenafil " * 9000 + "treats hypertension.")


# ---------------------------------------------------------------- the whole chain on one real abstract
@pytest.fixture(scope="module")
def chain_run(make_module_pipeline, llm_server, tmp_path_factory):
    FormMemory.forget()
    prompts = tmp_path_factory.mktemp("prompts") / "prompts"
    shutil.copytree(REPO / "prompts", prompts)
    # never calibrated here: admitted by KARMA's Theta rule so the run grows the KG (the default holds it for review)
    p = make_module_pipeline(backbones={"smollm2": smollm2(llm_server, uncalibrated_admission="theta")},
                             prompts_dir=str(prompts))
    (p.inbox / f"pmid-{ABSTRACT_PMID}.pubtator").write_text(one_abstract(ABSTRACT_PMID))
    assert runner.import_kg(p.defs, p.instance)
    start = len(llm_server.answered())
    keys, _ = runner.register_inbox(p.defs, p.instance)
    failures = runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    statuses = llm_server.answered()[start:]
    increments = runner.run_increments(p.defs, p.instance, "smollm2", [date_of_document_key(keys[0])])
    return p, keys, failures, statuses, increments, prompts


def test_the_karma_chain_runs_on_the_real_model_and_grows_the_kg(chain_run):
    p, keys, failures, statuses, increments, _prompts = chain_run
    assert failures == {}, failures  # 0 schema failures: every agent's answer passed validation
    assert all(increments.values())
    counts = p.kg.snapshot_counts(namespace="smollm2")
    assert counts.n_extracted_edges >= 1 and counts.n_evidence >= 1  # a KG increment from the model's triples
    con = duckdb.connect(str(p.storage.kg_path()), read_only=True)
    rows = con.execute("SELECT DISTINCT backbone, prompt_version FROM evidence WHERE namespace = 'smollm2'").fetchall()
    con.close()
    assert rows and all(r[0] == "smollm2" and "relation_extraction.v1@" in r[1] for r in rows)

    # The ledger booked every answered request, stage by stage; the one refused form is not a call.
    ledger = Ledger(ledger_path(p.storage.root()))
    booked = {t.group["agent"]: t for t in ledger.totals(["agent"], backbone="smollm2")}
    assert set(booked) == AGENTS
    assert sum(t.calls for t in booked.values()) == statuses.count(200)
    assert statuses.count(500) <= 1  # json_schema refused once, then remembered
    for agent in ("reader", "summarizer", "entity_extraction", "relation_extraction", "evaluator"):
        assert booked[agent].calls > 0 and booked[agent].tokens_in > 0 and booked[agent].tokens_out > 0, agent

    meta = document_metadata(p, dg.AssetKey(["smollm2", "relations"]), keys)
    assert meta["llm_calls"] == booked["relation_extraction"].calls


def test_a_rerun_is_answered_from_the_cache_and_a_prompt_edit_asks_only_its_agent(chain_run, llm_server):
    p, keys, _failures, _statuses, _increments, prompts = chain_run
    before = len(llm_server.answered())
    assert runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None) == {}
    assert len(llm_server.answered()) == before  # 0 requests: every answer from the response cache

    # The prompt-version sensor: editing the clarity judgement asks for the `evaluated` stage only.
    def tick(defs: dg.Definitions, cursor: str | None):  # noqa: ANN202
        ctx = dg.SensorEvaluationContext(instance_ref=p.instance.get_ref(), cursor=cursor,
                                         repository_def=defs.get_repository_def(), resources=defs.resources,
                                         sensor_name="prompt_versions")
        with ctx:
            return defs.resolve_sensor_def("prompt_versions").evaluate_tick(ctx)

    baseline = tick(p.defs, None)
    path = prompts / "evaluator_clarity" / "evaluator_clarity.v1.jinja"
    path.write_text(path.read_text() + "\nJudge clarity strictly.\n")
    defs = build_definitions(backbones={"smollm2": smollm2(llm_server)}, storage=p.storage, prompts_dir=str(prompts))
    edited = tick(defs, baseline.cursor)
    [request] = edited.run_requests
    asked = {(k.asset_key.to_user_string(), k.partition_key) for k in request.asset_graph_subset.iterate_asset_partitions()}
    assert asked == {("smollm2/evaluated", partition_of(keys[0]))}  # by date: the paper's day

    ledger = Ledger(ledger_path(p.storage.root()))
    runs_before = {t.group["run_id"] for t in ledger.totals(["run_id"], backbone="smollm2")}
    assert runner.run_documents(defs, p.instance, keys, log=lambda _m: None) == {}
    new = [t for t in ledger.totals(["run_id", "agent"], backbone="smollm2") if t.group["run_id"] not in runs_before]
    assert {t.group["agent"] for t in new if t.calls} == {"evaluator"}  # only the edited prompt was asked again
    assert sum(t.cache_hits for t in new if t.group["agent"] != "evaluator") > 0


# ---------------------------------------------------------------- the other LLM roles on the same model
def test_single_agent_judge_controller_and_cogmg_prompts_answer_through_the_schemas(chain_run, llm_server):
    from karma_dagster.backbones.single_agent import SingleAgentBackbone
    from karma_dagster.cogmg.llm import complete, decompose
    from karma_dagster.cogmg.models import OpenTriple
    from karma_dagster.runtime.paths import DataPaths
    from karma_dagster.scheduling.llm_utility import LLMUtility, UtilityItem

    p, *_ = chain_run
    FormMemory.forget()
    llm = LLMBackbone("smollm2", client(llm_server, max_tokens=512), PromptStore())
    text = abstract_text(ABSTRACT_PMID)

    single = SingleAgentBackbone("smollm2-single", llm)
    triples = single._triples(text)  # noqa: SLF001 (the one generation of the baseline)
    assert isinstance(triples, list)

    verdict = llm.judge(TripleQuery(head_name="sildenafil", head_type="ChemicalEntity", relation="treats",
                                    tail_name="pulmonary hypertension", tail_type="Disease",
                                    evidence="Sildenafil attenuates hypoxic pulmonary remodelling."))
    assert isinstance(verdict, JudgeOutput)

    utility = LLMUtility("smollm2", llm.client).estimate([
        UtilityItem(doc=0, title="Sildenafil attenuates hypoxic pulmonary remodelling", date="2016-11-01",
                    entity_type="Compound"),
        UtilityItem(doc=1, title="Lithium carbonate toxicity in a newborn infant", date="1981-01-01",
                    entity_type="Compound")])
    assert all(0.0 <= u <= 1.0 for u in utility.values())

    data = DataPaths(p.storage.root(), inbox=p.inbox)
    plan = decompose("Which drugs treat pulmonary hypertension?", llm, data, "smollm2", 0.5)
    assert plan.decomposer.startswith("cogmg_decompose.v3@")
    assert all(s.relation in __import__("karma_dagster.runtime.services", fromlist=["x"]).kg_schema().relation_names
               for s in plan.steps)  # the grammar held the plan to the schema's relations
    fills = complete("Which drugs treat pulmonary hypertension?", [OpenTriple(
        head="?", relation="treats", tail="pulmonary hypertension", known_id="Disease::DOID:6432",
        known_end="tail", known_kind="Disease", answer_kinds=["Compound"])], llm)
    assert isinstance(fills, list)
    assert llm.usage().calls >= 5


def test_a_stage_that_fails_on_the_real_model_still_books_what_it_spent(make_pipeline, llm_server):
    # an answer cut at 6 tokens is never valid: the reader asks, is corrected once, fails; both calls are booked
    FormMemory.forget()
    p = make_pipeline(backbones={"tiny": smollm2(llm_server, max_tokens=6, concurrency=1)})
    (p.inbox / f"pmid-{ABSTRACT_PMID}.pubtator").write_text(one_abstract(ABSTRACT_PMID))
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    start = len(llm_server.answered())
    failures = runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    answered = llm_server.answered()[start:].count(200)
    assert keys[0] in failures and "agent 'reader'" in failures[keys[0]] and "after one corrective retry" in \
        failures[keys[0]]
    ledger = Ledger(ledger_path(p.storage.root()))
    failed = [t for t in ledger.totals(["agent", "status"], backbone="tiny") if t.group["status"] == "failed"]
    assert [t.group["agent"] for t in failed] == ["reader"]
    assert failed[0].calls == answered >= 2 and failed[0].tokens_out > 0


# ---------------------------------------------------------------- conflict resolution: a debate on the real model
def test_a_seeded_clash_is_debated_by_two_advocates_over_two_rounds_and_judged(llm_server, tmp_path):
    """KARMA's debate (conflict resolution) on the real model: a new 'sildenafil causes pulmonary hypertension' read
    from the shipped abstract meets a seeded KG edge 'sildenafil treats pulmonary hypertension'; two advocates argue
    two rounds, each shown its own side, then the judge decides; the turns are stored on the stage row."""
    import datetime as dt
    import json

    from karma_dagster.agents.conflict_resolution import resolve_conflicts
    from karma_dagster.kg.edges import EdgeFacts
    from karma_dagster.kg.schema import KGSchema
    from karma_dagster.runtime.params import KarmaParams
    from karma_dagster.runtime.stage_store import StageStore
    from karma_dagster.schemas.frames import frame_to_records, records_to_frame
    from karma_dagster.schemas.records import AlignedRow, ResolvedRow

    FormMemory.forget()
    llm = LLMBackbone("smollm2", client(llm_server, max_tokens=160), PromptStore(), debate_rounds=2)
    drug, disease = "Compound::DB00203", "Disease::DOID:6432"
    sentence = next(s for s in abstract_text(ABSTRACT_PMID).split(". ") if "pulmonary" in s.lower())
    new = AlignedRow(doc_key="2016-11-01_pmid-27860185", triple_id="t1", summary_id="s1", segment_id="g1",
                     head_mention_id="m0", head_id=drug, head_name="sildenafil", head_type="ChemicalEntity",
                     relation="Positive_Correlation", tail_mention_id="m1", tail_id=disease,
                     tail_name="pulmonary hypertension", tail_type="DiseaseOrPhenotypicFeature", probability=0.8,
                     evidence=sentence, head_kg_type="Compound", tail_kg_type="Disease", kg_relation="causes",
                     metaedge="CcD", alignment_prob=0.9, schema_status="aligned")
    seeded = EdgeFacts(head_id=drug, relation="treats", tail_id=disease, confidence=0.9, first_seen=None,
                       last_seen=None, n_evidence=0, in_seed=True, n_docs=0)
    start = len(llm_server.answered())
    (row,) = resolve_conflicts([new], lambda pairs: {(drug, disease): [seeded]} if (drug, disease) in pairs else {},
                               llm, KGSchema.load(), KarmaParams(), on=dt.date(2016, 11, 1))
    assert llm_server.answered()[start:].count(200) >= 5  # four advocate turns and the verdict, all answered
    assert row.conflict and row.against == "kg" and row.verdict in ("agree", "contradict")
    assert row.action in ("keep", "discard", "review", "replace") and row.contradicts == f"{drug} -treats-> {disease}"
    turns = json.loads(row.debate_transcript)
    assert [(t["round"], t["side"]) for t in turns] == [(1, "new"), (1, "existing"), (2, "new"), (2, "existing")]
    assert all(t["argument"].strip() for t in turns), turns  # each advocate said something (the model's words)
    stages = StageStore(tmp_path)
    stages.write("smollm2", "resolved", new.doc_key, records_to_frame([row], ResolvedRow))
    assert frame_to_records(stages.read("smollm2", "resolved", new.doc_key), ResolvedRow) == [row]


# ---------------------------------------------------------------- the tools mode on the real model
@pytest.mark.timeout(2400)  # ~30 s on an idle machine; its ~3,300 prompt tokens took 430 s at load 19 on 2 cores
def test_a_tools_mode_run_on_the_real_model_makes_a_tool_call_the_kg_tools_validate(make_pipeline, llm_server,
                                                                                    monkeypatch):
    from karma_dagster.kg_tools import chain as tools_chain
    from karma_dagster.kg_tools.staging import TOOL_LOG

    # one request of the loop is the behaviour asked about (the model calls a tool); the step limit bounds the time
    monkeypatch.setattr(tools_chain, "STEP_LIMIT", 1)
    ns = "smollm2-tools"
    p = make_pipeline(backbones={ns: smollm2(llm_server, model=f"hosted_vllm/{ns}", mode="tools", concurrency=1,
                                             max_tokens=512, timeout=1800)})
    (p.inbox / f"pmid-{ABSTRACT_PMID}.pubtator").write_text(one_abstract(ABSTRACT_PMID))
    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    start = len(llm_server.answered())
    assert runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None) == {}
    assert llm_server.answered()[start:] == [200]  # the tool loop's one request, nothing else of the chain

    calls = p.storage.stage_store().read(ns, TOOL_LOG, keys[0]).to_dict("records")
    print("tool calls:", [(c["tool"], c["ok"], c["message"][:120]) for c in calls])
    assert len(calls) >= 1  # the model called a tool, and the KG tools answered it: accepted, or refused with why
    assert all(c["ok"] or c["message"].strip() for c in calls)  # a refusal says why (e.g. "no class 'string'")
    meta = document_metadata(p, dg.AssetKey([ns, "entities"]), keys)
    assert meta["tool_calls"] == len(calls) and "warning" not in meta


# ---------------------------------------------------------------- stopping: this module's last test
def test_sigterm_stops_karma_llm_serve_with_exit_0_even_during_a_generation(llm_serve):
    proc, handle = llm_serve

    def generate() -> None:
        try:
            litellm.completion(model="hosted_vllm/smollm2", api_base=handle.url, max_tokens=2000, timeout=300,
                               messages=[{"role": "user", "content": "Write a long story about a cat."}])
        except Exception:  # noqa: BLE001 - the server goes away mid-answer: that is the point
            pass

    busy = threading.Thread(target=generate, daemon=True)
    busy.start()  # a generation in progress: uvicorn's graceful shutdown would wait for it
    time.sleep(2.0)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    elapsed = time.monotonic() - started
    print(f"karma llm-serve stopped {elapsed:.1f} s after SIGTERM, exit {code}")  # speed: bench/, not asserted
    said = proc.stdout.read()
    assert code == 0, said
    assert said.rstrip().endswith("stopped"), said
    assert not handle.answering()  # the llama.cpp server went with it


def test_a_server_killed_by_an_illegal_instruction_is_reported_with_how_to_rebuild_it(tmp_path, monkeypatch):
    """llama.cpp compiled for an instruction the machine does not run (AMX in a virtual machine) dies by SIGILL at
    its first matrix product: the error names the signal and the rebuild, not a bare "-4"."""
    server = LocalLLMServer(ServerSettings(port=free_port(), start_timeout=30), log_path=tmp_path / "server.log")
    monkeypatch.setattr(server, "command",
                        lambda: [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"])
    with pytest.raises(LLMServerError) as refused:
        server.start()
    assert "code -4 (SIGILL" in str(refused.value) and "--force-reinstall" in str(refused.value)
