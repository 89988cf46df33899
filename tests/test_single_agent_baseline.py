"""The KARMA paper's single-agent baseline as the paper runs it: one generation per paper (or per paper-sized chunk
over the model's context), no reader filter, summarizer, theta_r, conflict resolution or Theta; its C, Cl, R read
n/a and its CRA verdict "skipped". MedKGent's N samples are N different generations."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, agent_of, karma_responder

from karma_dagster import runner, stages
from karma_dagster.agents.reader import NON_CONTENT_KINDS, clean_text
from karma_dagster.agents.single_agent import SingleAgentError, own_answer_params, paper_chunks
from karma_dagster.backbones.llm import make_llm_backbone
from karma_dagster.backbones.single_agent import DOC_DECISION, LOCAL_DECISION, NoSuchAgent, SingleAgentBackbone
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.definitions import build_definitions
from karma_dagster.ingest.parse import parse_file
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.schemas.records import MentionSpan

REPO = Path(__file__).resolve().parent.parent
INBOX = REPO / "data" / "inbox"
PAPER = ("PMC4736972.pdf", "PMC4736972.json")  # 28,804 characters: one generation at the default chunk size
FAKE_KEY = "sk-karma-test-0000-not-a-real-key"
TEXT = ("Tamoxifen reduced the risk of breast cancer in women. "
        "Cisplatin may be associated with nephrotoxicity in some patients.")


def _words(text: str) -> list[str]:
    return re.findall(r"\S+", text)


# ---------------------------------------------------------------- the paper as the one generation reads it
def test_a_paper_is_one_segment_or_paper_sized_chunks_with_nothing_filtered_by_relevance():
    (doc,) = parse_file(INBOX / PAPER[0], INBOX)
    content = [clean_text(s.text) for s in doc.sections if s.kind not in NON_CONTENT_KINDS and clean_text(s.text)]
    whole = paper_chunks("2016-01-10_pmc4736972", doc.sections, 32000)
    kept = [r for r in whole if r.kept]
    assert len(kept) == 1 and kept[0].heading == "whole paper" and kept[0].relevance == 1.0
    assert _words(kept[0].text) == _words(" ".join(content)), "every content word, in order"
    dropped = [r for r in whole if not r.kept]
    assert dropped and all(r.drop_reason.startswith("non-content section") for r in dropped)
    assert {r.section for r in dropped} <= NON_CONTENT_KINDS

    parts = [r for r in paper_chunks("2016-01-10_pmc4736972", doc.sections, 4000) if r.kept]
    assert len(parts) >= len(" ".join(content)) // 4000 and all(len(r.text) <= 4000 for r in parts)
    assert [r.heading for r in parts] == [f"part {i} of {len(parts)}" for i in range(1, len(parts) + 1)]
    assert _words(" ".join(r.text for r in parts)) == _words(" ".join(content))
    assert len({r.segment_id for r in parts}) == len(parts)
    with pytest.raises(SingleAgentError, match="max_chars must be >= 1"):
        paper_chunks("k", doc.sections, 0)


def test_the_relation_answer_is_the_models_own_not_theta_r():
    tuned = KarmaParams(theta={"default": 0.9, "Bind": 0.2})
    local = SingleAgentBackbone("local-single", base=object())  # type: ignore[arg-type] - local: no prompts/client
    own = own_answer_params(tuned, local)
    assert {r: own.theta_for(r) for r in ("Bind", "Association")} == {"Bind": LOCAL_DECISION, "Association": 0.5}
    assert own.model_copy(update={"theta": tuned.theta}) == tuned, "only theta_r changes"
    with pytest.raises(SingleAgentError, match="single_agent-mode backbone"):
        own_answer_params(tuned, object())  # type: ignore[arg-type]
    with pytest.raises(NoSuchAgent, match="no evaluator agent"):
        local.evaluation_signals(None, 0.5, 1.0, 0)  # type: ignore[arg-type]


def test_the_single_agent_chain_swaps_in_its_variants_with_the_same_graph_shape():
    for kind, model in (("local", ""), ("litellm", "openai/gpt-4o")):
        settings = BackboneSettings(kind=kind, model=model, mode="single_agent")
        chain = stages.chain_for(settings)
        assert [(s.name, s.reads) for s in chain] == [(s.name, s.reads) for s in stages.STAGES]
        assert {s.name: s.variant for s in chain} == {
            "documents": "karma", "segments": "single_agent", "summaries": "ablated", "entities": "single_agent",
            "relations": "single_agent", "aligned": "karma", "resolved": "ablated", "evaluated": "ablated"}
        if kind == "litellm":
            assert stages.all_prompts(chain) == ["ingestion", "schema_alignment", "single_agent"]
    a = BackboneSettings(mode="single_agent")
    b = BackboneSettings(mode="single_agent", single_agent_chunk_chars=8000)
    seg = stages.by_name("segments")
    assert stages.code_version(seg, a) != stages.code_version(seg, b), "the chunk size changes the segments"


# ---------------------------------------------------------------- over the local backbone
@pytest.fixture(scope="module")
def local_single(make_module_pipeline):
    backbones = {"local-single": BackboneConfig(mode="single_agent")}
    p = make_module_pipeline(backbones=backbones, inbox_files=PAPER)
    # a tuned theta_r and Theta the baseline must ignore; one sample (MedKGent off) so one pass is one call
    params = KarmaParamsResource(theta={"default": 0.95}, integrate_threshold=0.99,
                                rule_integrate_threshold=0.99, relation_samples=1)
    defs = build_definitions(backbones=backbones, storage=p.storage, params=params)
    assert runner.import_kg(defs, p.instance)
    keys, _ = runner.register_inbox(defs, p.instance)
    backbone = defs.resources["backbones"].get("local-single", p.storage)  # the process-wide instance the run uses
    assert isinstance(backbone, SingleAgentBackbone) and not backbone.is_llm
    texts: dict[str, list[str]] = {"recognize": [], "relations": []}
    # the local base's document-level entity-pair model answers the relation question (as in the KARMA chain)
    assert backbone.own_threshold == DOC_DECISION
    recognize, relations = backbone.base.recognize, backbone.document_relation_probabilities
    mention_pairs = backbone.base.relation_probabilities

    def counted_recognize(text):
        texts["recognize"].append(text)
        return recognize(text)

    def counted_relations(text, entities, pairs):
        texts["relations"].append(text)
        return relations(text, entities, pairs)

    def no_mention_pairs(text, pairs):
        texts["mention_pairs"] = [*texts.get("mention_pairs", []), text]
        return mention_pairs(text, pairs)

    backbone.base.recognize, backbone.document_relation_probabilities = counted_recognize, counted_relations
    backbone.base.relation_probabilities = no_mention_pairs
    try:
        assert not runner.run_documents(defs, p.instance, keys, log=lambda _m: None)
    finally:
        backbone.base.recognize, backbone.document_relation_probabilities = recognize, relations
        backbone.base.relation_probabilities = mention_pairs
    return p, keys[0], texts


def test_local_baseline_reads_the_whole_paper_in_one_pass(local_single):
    p, key, texts = local_single
    store = p.storage.stage_store()
    (chunk,) = store.read("local-single", "segments", key).query("kept")["text"]
    (summary,) = store.read("local-single", "summaries", key)["text"]
    assert summary == chunk, "no summarizer"
    assert texts["recognize"] == [chunk], "the dictionary NER once over the whole paper"
    assert texts["relations"] == [chunk], "the entity-pair relation model once over the whole paper"
    assert "mention_pairs" not in texts, "not the mention-pair classifier"


def test_local_baseline_keeps_what_theta_r_and_theta_would_drop_and_reads_n_a(local_single):
    p, key, _texts = local_single
    store = p.storage.stage_store()
    relations = store.read("local-single", "relations", key)
    assert len(relations) and (relations["probability"] >= DOC_DECISION).all()
    assert (relations["probability"] < 0.95).any(), "a tuned theta_r of 0.95 would have dropped these"
    resolved = store.read("local-single", "resolved", key)
    assert set(resolved["verdict"]) == {"skipped"} and not resolved["conflict"].any()
    ev = store.read("local-single", "evaluated", key)
    assert ev[["confidence", "clarity", "relevance", "score"]].isna().all().all()
    aligned = ev["schema_status"] == "aligned"
    assert list(ev["accepted"]) == list(aligned) and aligned.any(), "no Theta (0.99 here) filters"


# ---------------------------------------------------------------- over an LLM (a scripted server on 127.0.0.1)
class SingleAgentModel:
    """Answers the single_agent prompt with what TEXT states; sampled calls (temperature > 0) differ: every third
    one omits the hedged cisplatin triple, as a model sampled at a temperature sometimes does."""

    def __init__(self) -> None:
        self.sampled = 0
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> str:
        if agent_of(request) != "single_agent":
            return karma_responder(request)
        text = re.findall(r"<text>\n?(.*?)\n?</text>", request["messages"][-1]["content"], flags=re.S)[-1]
        omit = False
        if request.get("temperature", 0.0) > 0:
            with self.lock:
                omit = self.sampled % 3 == 2
                self.sampled += 1
        triples = []
        if "Tamoxifen" in text and "breast cancer" in text:
            triples.append({"head": "Tamoxifen", "head_type": "ChemicalEntity", "relation": "Negative_Correlation",
                            "tail": "breast cancer", "tail_type": "DiseaseOrPhenotypicFeature", "confidence": 0.9})
        if "Cisplatin" in text and not omit:  # hedged ("may be"): a confidence far below theta_r
            triples.append({"head": "Cisplatin", "head_type": "ChemicalEntity", "relation": "Positive_Correlation",
                            "tail": "nephrotoxicity", "tail_type": "DiseaseOrPhenotypicFeature", "confidence": 0.2})
        return json.dumps({"triples": triples})


def _text_paper(inbox: Path, name: str, cohorts: int = 1) -> None:
    """TEXT once, or stated for `cohorts` numbered cohorts (so no two chunks of a long paper are the same text)."""
    body = TEXT if cohorts == 1 else " ".join(f"In cohort {i}: {TEXT}" for i in range(1, cohorts + 1))
    (inbox / f"{name}.txt").write_text(f"Single agent test paper\n\n{body}\n")


def _llm_run(make_pipeline, samples: int, chunk_chars: int = 32000, cohorts: int = 1):
    model = SingleAgentModel()
    with FakeOpenAIServer(responder=model) as srv:
        config = BackboneConfig(kind="litellm", model="openai/karma-scripted", api_base=srv.url, api_key=FAKE_KEY,
                                mode="single_agent", single_agent_chunk_chars=chunk_chars)
        backbones = {"scripted-single": config}
        p = make_pipeline(backbones=backbones)
        _text_paper(p.inbox, "paper", cohorts)
        defs = build_definitions(backbones=backbones, storage=p.storage,
                                 params=KarmaParamsResource(relation_samples=samples))
        assert runner.import_kg(defs, p.instance)
        keys, _ = runner.register_inbox(defs, p.instance)
        assert not runner.run_documents(defs, p.instance, keys, log=lambda _m: None)
        return p, keys[0], list(srv.requests)


def test_llm_baseline_makes_one_call_per_paper_and_keeps_what_it_states(make_pipeline):
    p, key, requests = _llm_run(make_pipeline, samples=1)
    assert [agent_of(r) for r in requests] == ["single_agent"], "one generation, no other agent asked"
    assert "Be exhaustive: list every triple the text states" in requests[0]["messages"][0]["content"]
    store = p.storage.stage_store()
    relations = store.read("scripted-single", "relations", key)
    got = {(r.head_name.lower(), r.relation, r.tail_name.lower()): r.probability for r in relations.itertuples()}
    assert got[("cisplatin", "Positive_Correlation", "nephrotoxicity")] == 0.2, "no theta_r (0.4) drops it"
    assert got[("tamoxifen", "Negative_Correlation", "breast cancer")] == 0.9
    assert relations["sample_confidence"].isna().all()
    ev = store.read("scripted-single", "evaluated", key)
    assert ev[["confidence", "clarity", "relevance", "score"]].isna().all().all()
    assert set(ev["verdict"]) == {"skipped"}
    assert list(ev["accepted"]) == list(ev["schema_status"] == "aligned"), "no Theta"
    assert (ev["evidence_score"] == ev["probability"]).all()


def test_llm_baseline_cuts_a_paper_over_its_context_into_chunks_one_call_each(make_pipeline):
    p, key, requests = _llm_run(make_pipeline, samples=1, chunk_chars=1000, cohorts=30)
    chunks = p.storage.stage_store().read("scripted-single", "segments", key).query("kept")
    assert len(chunks) >= 3 and (chunks["text"].str.len() <= 1000).all()
    sent = sorted(re.findall(r"<text>\n?(.*?)\n?</text>", r["messages"][-1]["content"], flags=re.S)[-1]
                  for r in requests)
    assert [agent_of(r) for r in requests] == ["single_agent"] * len(chunks) and sent == sorted(chunks["text"])


def test_llm_baseline_samples_are_different_generations(make_pipeline):
    p, key, requests = _llm_run(make_pipeline, samples=3)
    temperatures = sorted(r.get("temperature", 0.0) for r in requests)
    assert temperatures == [0.0, 0.7, 0.7, 0.7], "the entities' generation, then three samples at T = 0.7"
    relations = p.storage.stage_store().read("scripted-single", "relations", key)
    conf = {r.head_name.lower(): r.sample_confidence for r in relations.itertuples()}
    assert conf["tamoxifen"] == 1.0 and conf["cisplatin"] == pytest.approx(2 / 3), "2 of the 3 samples state it"


def test_each_sample_is_its_own_memoized_generation(tmp_path):
    model = SingleAgentModel()
    with FakeOpenAIServer(responder=model) as srv:
        settings = BackboneSettings(kind="litellm", model="openai/karma-scripted", api_base=srv.url,
                                    api_key=FAKE_KEY, mode="single_agent")
        llm = make_llm_backbone("scripted-single", settings, cache_path=tmp_path / "cache.sqlite")
        backbone = SingleAgentBackbone("scripted-single", llm)
        spans = backbone.recognize(TEXT)
        cis = [s for s in spans if s.text in ("Cisplatin", "nephrotoxicity")]
        pairs: list[tuple[MentionSpan, MentionSpan]] = [(cis[0], cis[1])]
        answers = [backbone.sample_relation_probabilities(TEXT, pairs, k, 0.7)[0]["Positive_Correlation"]
                   for k in range(3)]
        assert sorted(answers) == [0.0, 0.2, 0.2] and len(srv.requests) == 4
        assert backbone.relation_probabilities(TEXT, pairs)[0]["Positive_Correlation"] == 0.2
        again = backbone.sample_relation_probabilities(TEXT, pairs, 1, 0.7)
        assert len(srv.requests) == 4 and again[0]["Positive_Correlation"] == answers[1], "memoized per sample"
