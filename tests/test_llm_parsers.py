"""Every agent's reply parser against the ways models actually break JSON, through litellm's real HTTP client.

Per agent: a well-formed reply and what the backbone makes of it; then the same reply fenced, with trailing
commas, truncated, wrapped in prose (all repaired without a second call), a wrong schema and a refusal (one
corrective turn that shows the model its error), and a refusal twice (a clear error naming backbone and agent).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fake_openai_server import FakeOpenAIServer, agent_of  # noqa: E402

from karma_dagster.backbones.base import DebateSide, TripleQuery  # noqa: E402
from karma_dagster.backbones.llm import LLMBackbone, LLMClient, LLMOutputError  # noqa: E402
from karma_dagster.runtime.prompts import PromptStore, default_prompt_root  # noqa: E402
from karma_dagster.schemas.records import MentionSpan, ParsedDocument, RawSection  # noqa: E402

TEXT = "Naloxone reverses the antihypertensive effect of clonidine in hypertensive rats."
TRIPLE = TripleQuery(head_name="clonidine", head_type="Compound", relation="Negative_Correlation",
                     tail_name="hypertension", tail_type="Disease", evidence=TEXT)
NALOXONE = MentionSpan(start=0, end=8, text="Naloxone", type="ChemicalEntity")
CLONIDINE = MentionSpan(start=49, end=58, text="clonidine", type="ChemicalEntity")
NOISY = ParsedDocument(source_path="papers/a.pdf", source_format="pdf", title="", sections=[
    RawSection(kind="abstract", text="Eﬀects of clonidine on blood pressure. doi: 10.1000/xyz123")])


@dataclass
class Case:
    agent: str
    call: Callable[[LLMBackbone], Any]
    valid: dict[str, Any]
    check: Callable[[Any], bool]
    wrong_schema: dict[str, Any]


KG_SIDE = DebateSide(claim="naloxone causes hypertension", source="knowledge graph", confidence=0.9, in_seed=True)
NEW_SIDE = DebateSide(claim="naloxone treats hypertension", source="new triple", evidence=["Naloxone reverses it."])
CASES = [
    Case("ingestion", lambda b: b.clean_document(NOISY),
         {"title": "Effects of clonidine on blood pressure", "doi": "10.1000/xyz123",
          "corrections": [{"wrong": "Eﬀects", "right": "Effects"}]},
         lambda d: d.sections[0].text.startswith("Effects of clonidine") and d.doi == "10.1000/xyz123",
         {"corrections": "none", "authors": "Smith"}),
    Case("reader", lambda b: b.score_relevance([RawSection(kind="abstract", text=TEXT)], ["clonidine"]),
         {"scores": [{"index": 0, "relevance": 0.9}]}, lambda r: r == [0.9], {"scores": "high"}),
    Case("summarizer", lambda b: b.summarize(RawSection(kind="abstract", text=TEXT), 2),
         {"summary": "Naloxone reverses the effect of clonidine."},
         lambda s: s == "Naloxone reverses the effect of clonidine.", {"text": "a summary under the wrong key"}),
    Case("entity_extraction", lambda b: b.recognize(TEXT),
         {"entities": [{"text": "Naloxone", "type": "ChemicalEntity"}, {"text": "clonidine", "type": "ChemicalEntity"}]},
         lambda spans: [(s.start, s.end, s.type) for s in spans] == [(0, 8, "ChemicalEntity"), (49, 58, "ChemicalEntity")],
         {"entities": [{"name": "Naloxone"}]}),
    Case("relation_extraction", lambda b: b.relation_probabilities(TEXT, [(NALOXONE, CLONIDINE)]),
         {"pairs": [{"pair": 0, "probabilities": {"Negative_Correlation": 0.9, "Association": 0.2}}]},
         lambda r: r[0]["Negative_Correlation"] == 0.9 and r[0]["Association"] == 0.2 and r[0]["Bind"] == 0.0,
         {"pairs": [{"pair": "first", "label": "inhibits"}]}),
    Case("schema_alignment", lambda b: b.align(TRIPLE, ["treats", "causes"]),
         {"kg_relation": "treats", "probability": 0.9},
         lambda a: a.kg_relation == "treats" and a.probability == 0.9, {"relation": "treats"}),
    Case("conflict_advocate", lambda b: b.advocate(1, KG_SIDE, NEW_SIDE, []),
         {"argument": "The seed KG states it at 0.9."}, lambda a: a == "The seed KG states it at 0.9.",
         {"argument": ""}),
    Case("conflict_resolution", lambda b: b.decide(TRIPLE, KG_SIDE, []),
         {"argument_for": "Direct evidence.", "argument_against": "The KG says causes.", "verdict": "contradict",
          "confidence": 0.7},
         lambda d: d.verdict == "contradict" and d.confidence == 0.7, {"verdict": "maybe"}),
    *[Case(f"evaluator_{d}", lambda b, d=d: b.evaluation_score(f"evaluator_{d}", TRIPLE, 0.9, 0.8, 1),
           {"score": 0.8, "rationale": "explicit"}, lambda score: score == 0.8, {"score": "high"})
      for d in ("confidence", "clarity", "relevance")],
    Case("judge", lambda b: b.judge(TRIPLE), {"verdict": "likely_correct", "rationale": "textbook"},
         lambda j: j.verdict == "likely_correct", {"verdict": "yes"}),
]
IDS = [c.agent for c in CASES]


def _trailing_commas(valid: str) -> str:
    return valid.replace("]", ",]").replace("}", ",}")


def _truncated(valid: str) -> str:
    return valid.rstrip("}]")  # cut off where a max_tokens limit would: the closers are lost


REPAIRABLE: dict[str, Callable[[str], str]] = {
    "fenced": lambda v: f"```json\n{v}\n```",
    "trailing_commas": _trailing_commas,
    "truncated": _truncated,
    "extra_prose": lambda v: f"Sure! Here is the JSON you asked for:\n{v}\nLet me know if you need anything else.",
    "think_block": lambda v: f"<think>The user wants JSON {{not this}}.</think>\n{v}",
}
REFUSAL = "I'm sorry, but I can't help with that request."


pytestmark = pytest.mark.usefixtures("fresh_server")  # `server` and `fresh_server`: tests/conftest.py


def make_backbone(server: FakeOpenAIServer) -> LLMBackbone:
    client = LLMClient("openai/fake-model", api_base=server.url, api_key="x", backoff_base=0.01, timeout=10,
                       name="fake", concurrency=1)
    return LLMBackbone("fake", client, PromptStore(default_prompt_root()))


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("damage", list(REPAIRABLE))
def test_near_json_is_repaired_without_a_second_call(server: FakeOpenAIServer, case: Case, damage: str) -> None:
    server.script(REPAIRABLE[damage](json.dumps(case.valid, ensure_ascii=False)))
    backbone = make_backbone(server)
    result = case.call(backbone)
    assert case.check(result), (damage, result)
    assert len(server.requests) == 1 and agent_of(server.requests[0]) == case.agent
    assert backbone.usage().calls == 1


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("first", ["wrong_schema", "refusal"])
def test_wrong_schema_or_refusal_gets_one_corrective_turn(server: FakeOpenAIServer, case: Case, first: str) -> None:
    bad = json.dumps(case.wrong_schema) if first == "wrong_schema" else REFUSAL
    server.script(bad, json.dumps(case.valid, ensure_ascii=False))
    backbone = make_backbone(server)
    assert case.check(case.call(backbone))
    assert len(server.requests) == 2 and backbone.usage().calls == 2
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": bad}
    assert "was not valid for" in retry[-1]["content"]  # the model is shown its own error


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_refusal_twice_is_a_clear_error_naming_backbone_and_agent(server: FakeOpenAIServer, case: Case) -> None:
    server.script(REFUSAL, REFUSAL)
    with pytest.raises(LLMOutputError) as err:
        case.call(make_backbone(server))
    assert err.value.backbone == "fake" and err.value.agent == case.agent
    assert f"agent {case.agent!r}" in str(err.value) and "fake" in str(err.value)
    assert len(server.requests) == 2
