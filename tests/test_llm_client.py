"""LLMClient through litellm's real HTTP client against the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fake_openai_server import Fault, FakeOpenAIServer  # noqa: E402

from karma_dagster.backbones.llm.cache import ResponseCache  # noqa: E402
from karma_dagster.backbones.llm.client import LLMCallError, LLMClient, LLMOutputError, parse_json_reply  # noqa: E402
from karma_dagster.backbones.llm.outputs import AlignmentOutput, ReaderOutput  # noqa: E402
from karma_dagster.runtime.prompts import PromptStore, RenderedPrompt, default_prompt_root  # noqa: E402

SECRET = "sk-test-DO-NOT-LEAK-123"
GOOD = '{"kg_relation": "treats", "probability": 0.9}'


pytestmark = pytest.mark.usefixtures("fresh_server")  # `server` and `fresh_server`: tests/conftest.py


def make_client(server: FakeOpenAIServer, **kw: object) -> LLMClient:
    params: dict[str, object] = {"api_base": server.url, "api_key": SECRET, "backoff_base": 0.01, "timeout": 10,
                                 "name": "fake-backbone"}
    params.update(kw)
    return LLMClient("openai/fake-model", **params)  # type: ignore[arg-type]


def test_valid_json_reply_is_parsed_with_usage(server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script(GOOD)
    parsed, usage = make_client(server).complete_json(rendered, AlignmentOutput)
    assert parsed == AlignmentOutput(kg_relation="treats", probability=0.9)
    assert len(server.requests) == 1
    request = server.requests[0]
    assert request["model"] == "fake-model"
    # a self-hosted OpenAI-compatible server (api_base set) is first asked for OpenAI's json_schema form
    assert request["response_format"]["type"] == "json_schema"
    assert request["messages"] == rendered.messages
    assert usage.calls == 1 and usage.prompt_tokens > 100 and usage.completion_tokens > 0
    assert usage.cost_usd is None  # the fake model is not priced: tokens only, no invented cost


def test_json_schema_mode_sends_the_output_model_schema(server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script(GOOD)
    make_client(server, response_format="json_schema").complete_json(rendered, AlignmentOutput)
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "AlignmentOutput"
    assert "probability" in fmt["json_schema"]["schema"]["properties"]


@pytest.mark.parametrize("reply", [
    '```json\n{"kg_relation": "treats", "probability": 0.9,}\n```',
    'Sure, here it is: {"kg_relation": "treats", "probability": 0.9} Hope this helps.',
    '<think>the evidence says lowered</think>{"kg_relation": "treats", "probability": 0.9',
])
def test_near_json_is_repaired_without_a_second_call(server: FakeOpenAIServer, rendered: RenderedPrompt,
                                                     reply: str) -> None:
    server.script(reply)
    parsed, usage = make_client(server).complete_json(rendered, AlignmentOutput)
    assert parsed.kg_relation == "treats" and parsed.probability == 0.9
    assert len(server.requests) == 1 and usage.calls == 1


def test_invalid_then_valid_shows_the_model_its_error(server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script('{"kg_relation": "treats", "probability": 1.7}', GOOD)
    parsed, usage = make_client(server).complete_json(rendered, AlignmentOutput)
    assert parsed.probability == 0.9
    assert len(server.requests) == 2 and usage.calls == 2
    second = server.requests[1]["messages"]
    assert second[:2] == rendered.messages
    assert second[2] == {"role": "assistant", "content": '{"kg_relation": "treats", "probability": 1.7}'}
    assert second[3]["role"] == "user"
    assert "probability" in second[3]["content"] and "less than or equal to 1" in second[3]["content"]


def test_invalid_twice_raises_output_error_naming_backbone_and_agent(server: FakeOpenAIServer,
                                                                      rendered: RenderedPrompt) -> None:
    server.script("I cannot answer that.", '{"probability": "high"}')
    with pytest.raises(LLMOutputError) as err:
        make_client(server).complete_json(rendered, AlignmentOutput)
    message = str(err.value)
    assert "fake-backbone" in message and "schema_alignment" in message and "AlignmentOutput" in message
    assert len(server.requests) == 2


def test_429_with_retry_after_is_honoured(server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script(Fault(429, headers={"Retry-After": "1"}), GOOD)
    client = make_client(server)
    started = time.monotonic()
    parsed, usage = client.complete_json(rendered, AlignmentOutput)
    assert time.monotonic() - started >= 1.0  # waited what the server asked, not the 0.01 s backoff
    assert parsed.kg_relation == "treats" and len(server.requests) == 2 and usage.calls == 1


def test_500_twice_then_success_with_exponential_backoff(server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script(Fault(500), Fault(503), GOOD)
    client = make_client(server, backoff_base=0.2)
    waits: list[float] = []
    client._sleep = waits.append  # record instead of sleeping
    parsed, _ = client.complete_json(rendered, AlignmentOutput)
    assert parsed.kg_relation == "treats" and len(server.requests) == 3
    assert len(waits) == 2 and 0.1 <= waits[0] <= 0.2 and 0.2 <= waits[1] <= 0.4


def test_timeout_and_dropped_connection_are_retried(server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script(Fault(200, delay=2.0, then=GOOD), Fault(drop=True), GOOD)
    parsed, _ = make_client(server, timeout=0.5).complete_json(rendered, AlignmentOutput)
    assert parsed.kg_relation == "treats" and len(server.requests) == 3


def test_retries_spent_raise_call_error_with_model_and_agent_but_no_key(server: FakeOpenAIServer,
                                                                        rendered: RenderedPrompt) -> None:
    server.script(*[Fault(500)] * 3)
    with pytest.raises(LLMCallError) as err:
        make_client(server, max_retries=2).complete_json(rendered, AlignmentOutput)
    message = str(err.value)
    assert "openai/fake-model" in message and "schema_alignment" in message and "3 attempt" in message
    assert SECRET not in message and SECRET not in repr(err.value.__cause__) and err.value.__cause__ is None
    assert len(server.requests) == 3


def test_refused_request_is_not_retried(server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script(Fault(401), GOOD)
    with pytest.raises(LLMCallError, match="refused.*AuthenticationError") as err:
        make_client(server).complete_json(rendered, AlignmentOutput)
    assert SECRET not in str(err.value)
    assert len(server.requests) == 1


def test_cache_hit_makes_no_request_and_survives_reopening(server: FakeOpenAIServer, rendered: RenderedPrompt,
                                                            tmp_path: Path) -> None:
    db = tmp_path / "cache.sqlite"
    cache = ResponseCache(db)
    server.script(GOOD)
    first, u1 = make_client(server, cache=cache).complete_json(rendered, AlignmentOutput)
    assert len(server.requests) == 1 and u1.calls == 1 and cache.misses == 1
    # a new process-like client with another key: same question, same answer, zero HTTP requests
    again, u2 = make_client(server, cache=ResponseCache(db), api_key="another").complete_json(rendered, AlignmentOutput)
    assert again == first and len(server.requests) == 1
    assert u2.calls == 0 and u2.cache_hits == 1 and u2.prompt_tokens == 0
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())
    # a different prompt (another model param) is a different key
    server.script(GOOD)
    make_client(server, cache=cache, temperature=0.5).complete_json(rendered, AlignmentOutput)
    assert len(server.requests) == 2


def test_invalid_responses_are_not_cached(server: FakeOpenAIServer, rendered: RenderedPrompt, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache.sqlite")
    client = make_client(server, cache=cache)
    server.script("not json at all", "still not json")
    with pytest.raises(LLMOutputError):
        client.complete_json(rendered, AlignmentOutput)
    assert len(cache) == 0
    server.script(GOOD)
    parsed, usage = client.complete_json(rendered, AlignmentOutput)
    assert parsed.kg_relation == "treats" and usage.calls == 1 and len(server.requests) == 3
    assert len(cache) == 1


def test_complete_many_keeps_order_under_concurrency(server: FakeOpenAIServer) -> None:
    store = PromptStore(default_prompt_root())
    prompts = [store.render("reader", domain="genomics", kg_context=["BRCA1"],
                            sections=[{"index": 0, "heading": "", "kind": "results", "text": text}])
               for text in ("BRCA1 and TP53 in breast cancer.", "Funding was provided.", "BRCA1 mutations.")]
    results = make_client(server, concurrency=3).complete_many([(p, ReaderOutput) for p in prompts])
    scores = [r.scores[0].relevance for r, _ in results]
    assert scores[1] < scores[2] < scores[0]  # the scripted reader scores by KG-context and lexicon hits
    assert len(server.requests) == 3


def test_parse_json_reply_raises_on_prose() -> None:
    assert parse_json_reply('{"a": [1, 2,],}') == {"a": [1, 2]}
    with pytest.raises(ValueError, match="not JSON"):
        parse_json_reply("no json here")
    assert json.loads(json.dumps(parse_json_reply('```\n{"x": "y"}\n```'))) == {"x": "y"}
