"""CogMG end to end on the shipped seed KG and sample papers: a question the seed KG cannot answer misses, names
its missing triple, gets a completion that a shipped paper's passage supports, and hits once it is accepted.
Also: the LLM path through the loopback OpenAI-compatible server, `karma ask`, bad input, the Dagster assets."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from karma_dagster import services
from karma_dagster.cogmg import complete
from karma_dagster.cogmg.answer import NoLinkableEntity, answer_question, run_plan
from karma_dagster.cogmg.benchmark import benchmark
from karma_dagster.cogmg.models import LinkedEntity, QueryPlan, QueryStep
from karma_dagster.cogmg.pipeline import complete_answer
from karma_dagster.cogmg.questions import load_set
from karma_dagster.config import BackboneSettings
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import scan_inbox
from karma_dagster.kg.store import KGStore
from karma_dagster.params import KarmaParams
from karma_dagster.paths import DataPaths
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.stage_store import StageStore
from karma_dagster.stages import StageInputs, chain_for

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = load_set(REPO / "data" / "questions" / "sample_biomed.v1.yaml")
BY_ID = {q.id: q for q in QUESTIONS.questions}
LOCAL = BackboneSettings()
PAPERS = ("abstracts.pubtator", "PMC4738914.pdf")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> DataPaths:
    """The shipped seed KG (nothing merged) and the local chain's stage tables of two sample inbox files."""
    root = tmp_path_factory.mktemp("cogmg")
    inbox = root / "inbox"
    inbox.mkdir()
    for name in PAPERS:
        shutil.copy(REPO / "data" / "inbox" / name, inbox / name)
    (root / "karma").mkdir()
    (root / "karma" / "cache").symlink_to(shared_cache)  # the session's lexicon and relation model
    paths = DataPaths(root / "karma", inbox=inbox)
    services.clear()
    seed = REPO / "data" / "seed_kg"
    services.import_seed_kg(paths, seed / "nodes.tsv", seed / "edges.sif.gz", "hetionet", 0.9)
    keys = sorted(scan_inbox(inbox, Catalog(paths.catalog), arrival_date=dt.date(2026, 1, 1)).keys_to_run)
    backbone, store = services.backbone("local", LOCAL, paths), StageStore(paths.stages_dir)
    for key in keys:
        for stage in chain_for(LOCAL):
            rows, _ = stage.run(StageInputs(stage, "local", key, paths, backbone, KarmaParams()))
            store.write("local", stage.name, key, records_to_frame(rows, stage.row_model))
    yield paths
    services.clear()


def _ask(data: DataPaths, qid: str, **kw):  # noqa: ANN202
    return answer_question(BY_ID[qid].question, backbone="local", settings=LOCAL, data=data, question_id=qid, **kw)


def _other_end(answer, c) -> str:  # noqa: ANN001
    return c.tail_name if answer.missing[0].known_end == "head" else c.head_name


def test_a_seed_miss_gets_a_completion_a_shipped_paper_supports_and_hits_once_accepted(data):
    q = BY_ID["arrhythmia-drug"]  # "Which drug causes cardiac arrhythmia when consumed prior to delivery?"
    answer = _ask(data, q.id)
    assert not answer.hit and not answer.error
    assert answer.plan.steps and all(s.relation == "causes" for s in answer.plan.steps)
    missing = answer.missing[0]
    assert (missing.head, missing.relation) == ("?", "causes") and missing.tail.lower() == "cardiac arrhythmia"
    completions = complete_answer(answer, settings=LOCAL, data=data)
    key = {a.lower() for a in q.answers}
    good = [c for c in completions if c.supported and _other_end(answer, c).lower() in key]
    assert good, [(c.head_name, c.tail_name, c.supported, c.score) for c in completions]
    best = good[0]
    pmid = q.source.split("#")[1]
    support = next(p for p in best.passages if len(p.entities) == 2)
    assert pmid in support.doc_key and pmid in best.evidence_doc_keys[0]  # the paper the question was written from
    assert 0.5 <= best.score <= 1 and best.method in ("candidate", "passage_re")
    assert all(e.lower() in support.text.lower() for e in support.entities)
    # the completion, once in the KG (here: as the benchmark's overlay), answers the question
    after = run_plan(answer.plan, question_id=q.id, backbone="local", data=data, overlay=[best])
    assert after.hit and any(a.lower() in key for a in after.answers)
    assert after.triples[0].source == "completion"
    row = benchmark("local", QUESTIONS.key, [q], data, {q.id: answer}, {q.id: completions}, lambda c: c is best)
    assert (row.hit_before, row.hit_after_completion, row.hit_after_review) == (0.0, 1.0, 1.0)
    row = benchmark("local", QUESTIONS.key, [q], data, {q.id: answer}, {q.id: completions}, lambda c: False)
    assert (row.hit_before, row.hit_after_review) == (0.0, 0.0)


def test_a_seed_hit_comes_with_its_triples_and_provenance(data):
    answer = _ask(data, "graves-genes")  # the seed KG has Graves' disease -associates-> genes (not the key's)
    assert answer.hit and answer.answers and not answer.missing
    t = answer.triples[0]
    assert t.source == "seed" and t.provenance[0]["evidence"] == "seed KG (imported)"
    assert t.head_name == "Graves' disease" and t.relation == "associates"


def test_candidates_are_the_chains_unaccepted_triples(data):
    rows = complete.candidate_rows(data, "local")
    evaluated = StageStore(data.stages_dir)
    assert len(rows) and "accepted" in rows and not rows["accepted"].any()
    aligned = rows[rows["kg_relation"].notna()].iloc[0]
    from karma_dagster.cogmg.models import OpenTriple

    open_triple = OpenTriple(head=aligned["head_name"], relation=aligned["kg_relation"], tail="?",
                             known_id=aligned["head_id"], known_end="head")
    found = complete.from_candidates(open_triple, "q", "question?", "local", rows)
    assert any(c.tail_id == aligned["tail_id"] and c.method == "candidate" and c.evidence == aligned["evidence"]
               for c in found)
    assert evaluated.partitions("local", "evaluated")


def test_no_linkable_entity_is_a_clear_error(data):
    with pytest.raises(NoLinkableEntity, match="no linkable entity"):
        answer_question("What is the meaning of life?", backbone="local", settings=LOCAL, data=data)


def test_plan_values_are_bound_never_pasted_into_sql(data):
    kg = KGStore(data.kg)
    before = kg.seed_counts()
    evil = LinkedEntity(mention="x", entity_id="x'; DROP TABLE seed_nodes; --", name="x", kind="Compound",
                        distance=0.0)
    plan = QueryPlan(question="q?", decomposer="test", steps=[QueryStep(entity=evil, relation="causes",
                                                                        direction="out")])
    assert not run_plan(plan, question_id="q", backbone="local", data=data).hit
    assert kg.seed_counts() == before
    with pytest.raises(ValueError, match="not in the KG schema"):
        QueryStep(entity=evil, relation="cures", direction="out")


def test_karma_ask_prints_plan_miss_and_supported_completions(data, capsys):
    from karma_dagster.cogmg.cli_ask import cmd_ask

    args = argparse.Namespace(question=BY_ID["arrhythmia-drug"].question, backbone="local",
                              data_dir=str(data.root), no_complete=False)
    assert cmd_ask(args) == 1  # a miss
    out = capsys.readouterr().out
    assert "plan (local:" in out and "? -causes-> cardiac arrhythmia" in out and "MISS on the local KG" in out
    assert "missing triples:" in out and "SUPPORTED" in out
    bad = argparse.Namespace(question="What is the meaning of life?", backbone="local", data_dir=str(data.root),
                             no_complete=False)
    assert cmd_ask(bad) == 1
    assert "no linkable entity" in capsys.readouterr().err


# ---------------------------------------------------------------- the LLM path, through the loopback server
def test_llm_decomposition_is_schema_constrained_asked_again_once_and_completes(data, server):
    from fake_openai_server import agent_of

    from karma_dagster.backbones.llm import LLMBackbone, LLMClient, PromptStore

    server.reset()
    ns = "fake"
    shutil.copytree(data.stages_dir / "local" / "documents", data.stages_dir / ns / "documents", dirs_exist_ok=True)
    client = LLMClient("openai/fake-model", api_base=server.url, api_key="x", backoff_base=0.01, timeout=10,
                       name=ns)
    llm = LLMBackbone(ns, client, PromptStore(), "general biomedicine")
    step = {"entity": "cardiac arrhythmia", "entity_kind": "Disease", "direction": "in", "answer_kind": "Compound"}
    server.script(json.dumps({"steps": [{**step, "relation": "induces"}]}),  # outside the schema: asked again
                  json.dumps({"steps": [{**step, "relation": "causes"}]}),
                  json.dumps({"fills": [{"triple": 0, "answer": "Lithium", "answer_kind": "Compound"}]}))
    settings = BackboneSettings(kind="litellm", model="openai/fake-model")
    q = BY_ID["arrhythmia-drug"]
    answer = answer_question(q.question, backbone=ns, settings=settings, data=data, question_id=q.id,
                             llm_backbone=llm)
    assert [agent_of(r) for r in server.requests] == ["cogmg_decompose", "cogmg_decompose"]
    assert '"induces"' in server.requests[1]["messages"][0]["content"]  # the re-ask names the bad label
    assert answer.plan.decomposer.startswith("cogmg_decompose.v1@")
    assert any("asked again once" in n for n in answer.plan.notes)
    assert [(s.relation, s.direction) for s in answer.plan.steps] == [("causes", "in")]
    assert not answer.hit and answer.missing[0].head == "?"
    completions = complete_answer(answer, settings=settings, data=data, llm_backbone=llm)
    assert agent_of(server.requests[-1]) == "cogmg_complete" and len(server.requests) == 3
    [c] = completions
    assert (c.method, c.head_name, c.relation) == ("llm", "Lithium", "causes") and c.head_id.startswith("Compound::")
    assert c.supported and q.source.split("#")[1] in c.evidence_doc_keys[0]


# ---------------------------------------------------------------- Dagster: the question assets
def test_question_assets_materialize_answers_completions_and_the_benchmark(data, shared_cache):
    from karma_dagster.assets.questions import question_assets
    from karma_dagster.resources.backbones import BackbonesResource
    from karma_dagster.resources.storage import KarmaStorageResource

    key = QUESTIONS.key + "__arrhythmia-drug"
    resources = {"storage": KarmaStorageResource(data_dir=str(data.root), inbox=str(data.inbox),
                                                 cache_dir=str(shared_cache)),
                 "backbones": BackbonesResource()}
    assets = question_assets(["local"])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("questions", [key])
        result = dg.materialize(assets, instance=instance, resources=resources, partition_key=key,
                                selection=[dg.AssetKey(["local", "answers"]), dg.AssetKey(["local", "completions"])])
        assert result.success
        events = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
        meta = {m.asset_key.to_user_string(): m.metadata for m in events}
        assert meta["local/answers"]["misses"].value == 1
        assert meta["local/completions"]["supported"].value >= 1
        bench = dg.materialize(assets, instance=instance, resources=resources, selection=["qa_benchmark"])
        m = bench.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
        assert m[f"local/{QUESTIONS.key}/hit_before"].value == 0.0
        assert m[f"local/{QUESTIONS.key}/hit_after_completion"].value == round(1 / 76, 4)
        assert m[f"local/{QUESTIONS.key}/hit_after_review"].value == 0.0, "nobody reviewed anything yet"

        # a reviewer accepts the supported completions in the review queue: "after review" counts them
        from karma_dagster.cogmg.store import CogmgStore
        from karma_dagster.review.cogmg_items import items_from_completions
        from karma_dagster.review.models import DecisionIn
        from karma_dagster.review.queue import ReviewQueue

        queue = ReviewQueue.for_data(data)
        items = items_from_completions(CogmgStore(data).read_completions("local", key), key)
        queue.add_items(items)
        assert items
        for item in items:
            queue.decide(item.item_id, DecisionIn(action="accept", reviewer="alice"))
        again = dg.materialize(assets, instance=instance, resources=resources, selection=["qa_benchmark"])
        m = again.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
        assert m[f"local/{QUESTIONS.key}/hit_after_review"].value == round(1 / 76, 4)
    for f in queue.path.parent.glob(queue.path.name + "*"):  # restore the module's data: the loop test reviews anew
        f.unlink()


# ---------------------------------------------------------------- the whole loop, last: it merges into the module's KG
def test_the_loop_miss_completion_review_page_kg_increment_hit(data, tmp_path):
    """Issue 13's loop with its real parts: the seed misses, CogMG completes and verifies, a reviewer accepts in the
    review page, the review_decisions sensor requests the KG date, the KG increment asset merges it, the question
    hits with provenance 'reviewed by alice via cogmg'."""
    from sensor_ticks import tick
    from starlette.testclient import TestClient

    from karma_dagster.definitions import build_definitions
    from karma_dagster.jobs import kg_job_name
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource
    from karma_dagster.review.app import create_app
    from karma_dagster.review.changes import with_changes
    from karma_dagster.review.cogmg_items import items_from_completions
    from karma_dagster.review.queue import ReviewQueue

    q = BY_ID["arrhythmia-drug"]
    key = f"{QUESTIONS.key}__{q.id}"
    answer = _ask(data, q.id)
    assert not answer.hit
    answers = {a.lower() for a in q.answers}
    good = [c for c in complete_answer(answer, settings=LOCAL, data=data)
            if c.supported and _other_end(answer, c).lower() in answers]
    assert good

    queue = ReviewQueue.for_data(data)
    queue.add_items(with_changes(items_from_completions(good[:1], key), data.kg))
    (item,) = [i for i, _ in queue.items(source="cogmg")]
    app = create_app(queue)
    page = TestClient(app, base_url="http://127.0.0.1:8766", follow_redirects=False)
    assert page.get("/", params={"key": app.state.token}).status_code == 303  # the printed address: the cookie
    decision = {"action": "accept", "reviewer": "alice", "_token": app.state.token}  # the page's forms carry it
    assert page.post(f"/items/{item.item_id}/decision", data=decision).status_code == 303

    storage = KarmaStorageResource(data_dir=str(data.root), inbox=str(data.inbox))
    p = SimpleNamespace(defs=build_definitions(backbones={"local": BackboneConfig()}, storage=storage))
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as p.instance:
        requested = tick(p, "review_decisions")
        (request,) = requested.run_requests
        for add in requested.dynamic_partitions_requests:  # what the daemon does with the sensor's requests
            p.instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
        run = p.defs.resolve_job_def(kg_job_name("local")).execute_in_process(
            partition_key=request.partition_key, instance=p.instance)
        assert run.success
        assert not tick(p, "review_decisions").run_requests, "merged: nothing waits any more"

    after = _ask(data, q.id)
    assert after.hit and any(a.lower() in answers for a in after.answers)
    assert after.triples[0].provenance[0]["prompt_version"] == "reviewed by alice via cogmg"
