"""LLMBackbone over the scripted OpenAI-compatible server: every agent method returns valid contract objects."""

from __future__ import annotations

import datetime as dt
import gzip
import itertools
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fake_openai_server import FakeOpenAIServer, agent_of  # noqa: E402

from karma_dagster.backbones.base import (  # noqa: E402
    AlignmentAnswer, DebateAnswer, DebateSide, EvaluationSignals, TripleQuery,
)
from karma_dagster.backbones.llm import LLMBackbone, LLMClient, ResponseCache, locate_mentions  # noqa: E402
from karma_dagster.ingest.pubtator import parse_pubtator_lines  # noqa: E402
from karma_dagster.runtime.prompts import PromptStore, default_prompt_root  # noqa: E402
from karma_dagster.schemas.records import MentionSpan, ParsedDocument, RawSection  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TEXT = ("Cisplatin induced nephrotoxicity in patients with breast cancer. Nephrotoxicity was dose-dependent "
        "(75 mg/m2), and CISPLATIN levels predicted it.")
TRIPLE = TripleQuery(head_name="cisplatin", head_type="Compound", relation="Positive_Correlation",
                     tail_name="nephrotoxicity", tail_type="Disease", evidence=TEXT.split(". ")[0] + ".")


pytestmark = pytest.mark.usefixtures("fresh_server")  # `server` and `fresh_server`: tests/conftest.py


def make_backbone(server: FakeOpenAIServer, cache: ResponseCache | None = None, **kw: object) -> LLMBackbone:
    client = LLMClient("openai/fake-model", api_base=server.url, api_key="x", backoff_base=0.01, timeout=10,
                       cache=cache, name="fake")
    return LLMBackbone("fake", client, PromptStore(default_prompt_root()), "general biomedicine", **kw)  # type: ignore[arg-type]


def test_recognize_locates_every_occurrence_with_correct_spans(server: FakeOpenAIServer) -> None:
    backbone = make_backbone(server)
    spans = backbone.recognize(TEXT)
    assert all(isinstance(s, MentionSpan) and TEXT[s.start:s.end] == s.text for s in spans)
    found = [(s.text, s.type) for s in spans]
    assert found == [("Cisplatin", "ChemicalEntity"), ("nephrotoxicity", "DiseaseOrPhenotypicFeature"),
                     ("breast cancer", "DiseaseOrPhenotypicFeature"), ("Nephrotoxicity", "DiseaseOrPhenotypicFeature"),
                     ("CISPLATIN", "ChemicalEntity")]
    assert agent_of(server.requests[0]) == "entity_extraction" and len(server.requests) == 1
    assert backbone.usage().calls == 1 and backbone.usage().invalid_items == 0


def test_recognize_drops_and_counts_unfound_strings_and_foreign_types(server: FakeOpenAIServer) -> None:
    server.script(json.dumps({"entities": [
        {"text": "cisplatin", "type": "ChemicalEntity"},  # only in other cases: case-insensitive fallback
        {"text": "cancer", "type": "DiseaseOrPhenotypicFeature"},  # inside "breast cancer": the longer one wins
        {"text": "breast cancer", "type": "diseaseorphenotypicfeature"},  # type case is normalised
        {"text": "renal failure", "type": "DiseaseOrPhenotypicFeature"},  # not in the text
        {"text": "patients", "type": "Population"},  # not an allowed type
        {"text": "dose", "type": "ChemicalEntity"},  # in "dose-dependent": '-' is a word boundary
    ]}))
    backbone = make_backbone(server)
    spans = backbone.recognize(TEXT)
    assert [(s.start, s.text, s.type) for s in spans] == [
        (0, "Cisplatin", "ChemicalEntity"), (TEXT.index("breast"), "breast cancer", "DiseaseOrPhenotypicFeature"),
        (TEXT.index("dose"), "dose", "ChemicalEntity"), (TEXT.index("CISPLATIN"), "CISPLATIN", "ChemicalEntity")]
    assert backbone.usage().invalid_items == 2


def test_locate_mentions_recovers_gold_offsets_on_real_corpora() -> None:
    """Given the gold surface strings as a model's answer, the located spans are the gold spans."""
    for corpus, floor in (("bc5cdr", 0.99), ("biored", 0.99)):
        with gzip.open(REPO / "data" / "corpora" / f"{corpus}-train.pubtator.gz", "rt") as fh:
            docs = list(itertools.islice(parse_pubtator_lines(fh), 40))
        total = hit = 0
        for doc in docs:
            items = list(dict.fromkeys((m.text, m.type) for m in doc.mentions))
            spans, unfound = locate_mentions(doc.text, items)
            assert unfound == 0
            assert all(doc.text[s.start:s.end] == s.text for s in spans)
            gold = {(m.start, m.end, m.type) for m in doc.mentions}
            total += len(gold)
            hit += len(gold & {(s.start, s.end, s.type) for s in spans})
        assert hit / total >= floor, (corpus, hit / total)


def test_recognize_over_real_bc5cdr_abstracts_through_http(server: FakeOpenAIServer) -> None:
    with gzip.open(REPO / "data" / "corpora" / "bc5cdr-train.pubtator.gz", "rt") as fh:
        docs = list(itertools.islice(parse_pubtator_lines(fh), 8))
    backbone = make_backbone(server, entity_types={"Chemical": "drugs and chemicals", "Disease": "diseases"})
    for doc in docs:
        surfaces = list(dict.fromkeys((m.text, m.type) for m in doc.mentions))
        server.script("```json\n" + json.dumps({"entities": [{"text": t, "type": y} for t, y in surfaces]}) + "\n```")
        spans = backbone.recognize(doc.text)
        assert {(m.start, m.end) for m in doc.mentions} <= {(s.start, s.end) for s in spans}, doc.pmid
    user = server.requests[0]["messages"][1]["content"]
    assert docs[0].text in user and "Chemical: drugs and chemicals" in server.requests[0]["messages"][0]["content"]
    assert backbone.usage().calls == len(docs)


def test_score_relevance_batches_and_reasks_missing_sections(server: FakeOpenAIServer) -> None:
    sections = [RawSection(kind="abstract", text=TEXT), RawSection(kind="funding", text="Funded by a grant."),
                RawSection(kind="results", text="BRCA1 and TP53 mutations in breast cancer.")]
    backbone = make_backbone(server, section_batch=2)
    scores = backbone.score_relevance(sections, kg_context=["cisplatin", "BRCA1"])
    assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores)
    assert scores[1] < scores[0] and scores[1] < scores[2]
    assert len(server.requests) == 2  # ceil(3 / 2) batches
    server.reset()
    server.script(json.dumps({"scores": [{"index": 0, "relevance": 0.9}, {"index": 7, "relevance": 0.5}]}))
    backbone.reset_usage()
    scores = make_backbone(server, section_batch=8).score_relevance(sections[:2], kg_context=[])
    assert scores[0] == 0.9 and scores[1] < 0.5  # section 1 was asked again on its own (default responder)
    assert len(server.requests) == 2
    assert json.loads(server.requests[1]["messages"][1]["content"].split("<sections>")[1].split("</sections>")[0]) \
        == [{"index": 1, "heading": "", "kind": "funding", "text": "Funded by a grant."}]


def test_summarize_returns_the_condensed_text(server: FakeOpenAIServer) -> None:
    summary = make_backbone(server).summarize(RawSection(kind="results", text=TEXT), max_sentences=1)
    assert summary == TEXT.split(". ")[0] + "."
    assert "at most 1 sentences" in server.requests[0]["messages"][1]["content"]


def test_relation_probabilities_cover_every_pair_and_type(server: FakeOpenAIServer) -> None:
    backbone = make_backbone(server, pair_batch=2)
    spans = backbone.recognize(TEXT)
    chem, disease, cancer = spans[0], spans[1], spans[2]
    pairs = [(chem, disease), (chem, cancer), (cancer, disease)]
    probs = backbone.relation_probabilities(TEXT, pairs)
    assert len(probs) == 3
    assert all(set(p) == {t["name"] for t in backbone.relation_types} for p in probs)
    assert max(probs[0], key=probs[0].get) == "Positive_Correlation" and probs[0]["Positive_Correlation"] == 0.85
    assert len(server.requests) == 1 + 2  # NER + ceil(3 / 2) relation batches
    # unknown labels and missing pairs are dropped and counted
    server.script(json.dumps({"pairs": [{"pair": 0, "probabilities": {"Bind": 0.7, "Treats": 0.9}}]}))
    other = make_backbone(server)
    probs = other.relation_probabilities(TEXT, pairs[:2])
    assert probs[0]["Bind"] == 0.7 and sum(probs[0].values()) == 0.7
    assert sum(probs[1].values()) == 0.0
    assert other.usage().invalid_items == 2  # the unknown label on pair 0, the missing pair 1


def test_align_debate_evaluate_judge_return_contract_objects(server: FakeOpenAIServer) -> None:
    backbone = make_backbone(server)
    answer = backbone.align(TRIPLE, ["treats", "causes"])
    assert isinstance(answer, AlignmentAnswer) and answer.kg_relation == "treats" and 0 <= answer.probability <= 1
    debate = backbone.debate(TRIPLE, "treats")
    assert isinstance(debate, DebateAnswer) and debate.verdict == "agree" and debate.argument_for
    negated = TRIPLE.model_copy(update={"evidence": "Cisplatin did not induce nephrotoxicity."})
    assert backbone.debate(negated, "treats").verdict == "contradict"
    signals = backbone.evaluation_signals(TRIPLE, probability=0.8, segment_relevance=0.6, linked_entities=2)
    assert isinstance(signals, EvaluationSignals)
    assert set(signals.signals) == {"probability", "segment_relevance", "linked_entities",
                                    "llm_confidence", "llm_clarity", "llm_relevance"}
    assert signals.signals["probability"] == 0.8 and signals.signals["llm_confidence"] == 0.8
    assert backbone.judge(TRIPLE).verdict == "likely_correct"
    asked = [agent_of(r) for r in server.requests]
    debate_calls = ["conflict_advocate"] * 4 + ["conflict_resolution"]  # 2 rounds of two advocates, then the judge
    assert asked[:11] == ["schema_alignment", *debate_calls, *debate_calls] and asked[-1] == "judge"
    assert sorted(asked[11:-1]) == ["evaluator_clarity", "evaluator_confidence", "evaluator_relevance"]
    assert backbone.usage().calls == 15


def test_the_debate_is_two_advocates_over_rounds_then_a_judge_who_reads_them(server: FakeOpenAIServer) -> None:
    """KARMA's debate: each advocate is shown its own side (the KG's support, papers and dates; the new sentence)
    and the turns before it; the judge reads the whole transcript. Rounds are a setting."""
    backbone = make_backbone(server, debate_rounds=3)
    kg = DebateSide(claim="cisplatin treats nephrotoxicity", source="knowledge graph", confidence=0.93, papers=4,
                    in_seed=True, first_seen=dt.date(2015, 3, 1), last_seen=dt.date(2016, 1, 9))
    answer = backbone.debate(TRIPLE, "treats", kg)
    assert [(t.round, t.side) for t in answer.transcript] == [(r, s) for r in (1, 2, 3) for s in ("new", "existing")]
    prompts = [r["messages"][1]["content"] for r in server.requests]
    assert [agent_of(r) for r in server.requests] == ["conflict_advocate"] * 6 + ["conflict_resolution"]
    new_side, kg_side = json.loads(_between(prompts[0], "side")), json.loads(_between(prompts[1], "side"))
    assert new_side["evidence"] == [TRIPLE.evidence] and new_side["source"] == "new triple"
    assert (kg_side["confidence"], kg_side["papers"], kg_side["in_seed"], kg_side["last_seen"]) == (0.93, 4, True,
                                                                                                    "2016-01-09")
    # each turn answers the ones before it: the k-th advocate sees k-1 turns; the judge sees all six
    assert [len(json.loads(_between(p, "transcript"))) for p in prompts] == [0, 1, 2, 3, 4, 5, 6]
    assert json.loads(_between(prompts[-1], "existing"))["claim"] == "cisplatin treats nephrotoxicity"
    assert answer.transcript[1].argument.startswith("cisplatin treats nephrotoxicity holds: confidence 0.93")
    with pytest.raises(ValueError, match="debate_rounds must be 1..5"):
        make_backbone(server, debate_rounds=0)


def _between(text: str, tag: str) -> str:
    return text.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]


def test_align_never_forces_a_relation_outside_the_candidates(server: FakeOpenAIServer) -> None:
    backbone = make_backbone(server)
    assert backbone.align(TRIPLE, []) == AlignmentAnswer(kg_relation=None, probability=0.0)
    assert server.requests == []  # no candidates: no call
    server.script('{"kg_relation": "induces", "probability": 0.95}')
    assert backbone.align(TRIPLE, ["treats", "causes"]) == AlignmentAnswer(kg_relation=None, probability=0.0)
    assert backbone.usage().invalid_items == 1


def test_clean_document_fixes_noise_and_fills_only_missing_metadata(server: FakeOpenAIServer) -> None:
    noisy = ParsedDocument(source_path="papers/a.pdf", source_format="pdf", title="", sections=[
        RawSection(kind="abstract", text="Eﬀects of cisplatin on kid-\nney ﬁbrosis. doi: 10.1000/xyz123"),
        RawSection(kind="results", text="Renal ﬁbrosis rose at 75 mg/m2.")])
    backbone = make_backbone(server)
    cleaned = backbone.clean_document(noisy)
    assert cleaned.sections[0].text == "Effects of cisplatin on kidney fibrosis. doi: 10.1000/xyz123"
    assert cleaned.sections[1].text == "Renal fibrosis rose at 75 mg/m2."  # fixes apply document-wide
    assert cleaned.doi == "10.1000/xyz123" and cleaned.title.startswith("Effects of cisplatin")
    assert len(server.requests) == 1
    # a clean document with complete metadata costs no call
    server.reset()
    clean = ParsedDocument(source_path="p/b.txt", source_format="pubtator", title="T", sections=[RawSection(text=TEXT)])
    assert backbone.clean_document(clean) == clean and server.requests == []
    # corrections that are not in the text or change numbers are refused; a DOI not in the text is never kept
    server.script(json.dumps({"title": "X", "authors": ["A. Author"], "pub_date": "2016-02-12", "doi": "10.9999/made.up",
                              "corrections": [{"wrong": "75 mg", "right": "7.5 mg"}, {"wrong": "ghost", "right": "host"},
                                              {"wrong": "kid-\nney", "right": "kidney"}]}))
    backbone.reset_usage()
    cleaned = backbone.clean_document(noisy)
    assert "75 mg/m2" in cleaned.sections[1].text and "kidney" in cleaned.sections[0].text
    assert cleaned.doi is None and cleaned.pub_date == dt.date(2016, 2, 12) and cleaned.authors == ["A. Author"]
    assert backbone.usage().invalid_items == 3


def test_usage_cache_and_prompt_ids(server: FakeOpenAIServer, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "llm-cache.sqlite")
    backbone = make_backbone(server, cache=cache)
    first = backbone.recognize(TEXT)
    assert backbone.recognize(TEXT) == first
    usage = backbone.usage()
    assert (usage.calls, usage.cache_hits, len(server.requests)) == (1, 1, 1)
    assert usage.prompt_tokens > 0 and usage.cost_usd is None
    backbone.reset_usage()
    assert backbone.usage().calls == 0
    store = PromptStore(default_prompt_root())
    assert backbone.prompt_id("reader") == f"reader.v1@{store.get('reader', 1).sha256}"
    with pytest.raises(ValueError, match="domain 'astrology'"):
        make_backbone(server).__class__("x", backbone.client, store, "astrology")  # type: ignore[arg-type]
