"""Structured output in each server dialect: which form `auto` sends first, how a refusal of a form falls back
once (logged, remembered), and what never falls back. The servers here answer as the real ones do (their refusal
messages are the real ones'); the real llama-cpp-python server itself is in tests/test_llm_real.py."""

from __future__ import annotations

import json
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fake_openai_server import Fault, FakeOpenAIServer  # noqa: E402

from karma_dagster.backbones.llm.client import LLMCallError, LLMClient  # noqa: E402
from karma_dagster.backbones.llm.outputs import AlignmentOutput, ReaderOutput  # noqa: E402
from karma_dagster.backbones.llm.structured import FormMemory, candidates, grammar_schema, request_fields  # noqa: E402

GOOD = '{"kg_relation": "treats", "probability": 0.9}'
LLAMA_CPP_PYTHON_500 = ("1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                        "'msg': \"Input should be 'text' or 'json_object'\"}")


def form_of(request: dict[str, Any]) -> str:
    fmt = request.get("response_format")
    if fmt is None:
        return "ollama_format" if "format" in request else "none"
    if fmt.get("type") == "json_schema":
        return "json_schema"
    return "json_object_schema" if "schema" in fmt else "json_object"


def server_taking(*taken: str, status: int = 500, message: str = LLAMA_CPP_PYTHON_500):
    """A responder that answers GOOD for the forms it takes and refuses the others as a real server does."""
    def respond(request: dict[str, Any]):  # noqa: ANN202
        if form_of(request) in taken:
            return GOOD
        return Fault(status, body=json.dumps({"error": {"message": message, "type": "invalid_request_error"}}))
    return respond


@pytest.fixture(autouse=True)
def _forget():
    FormMemory.forget()
    yield
    FormMemory.forget()


def client(server: FakeOpenAIServer, model: str = "hosted_vllm/m", **kw: Any) -> LLMClient:
    return LLMClient(model, api_base=server.url, backoff_base=0.01, timeout=10, max_retries=2, name="dialect", **kw)


def test_auto_picks_the_form_per_provider_and_server() -> None:
    assert candidates("auto", "openai/gpt-4o", None, True) == ["json_schema", "json_object", "none"]
    assert candidates("auto", "deepseek/deepseek-chat", None, False) == ["json_object", "none"]
    assert candidates("auto", "ollama/qwen2.5", "http://127.0.0.1:11434", False)[0] == "json_schema"
    assert candidates("auto", "hosted_vllm/smollm2", "http://127.0.0.1:8088/v1", False) == [
        "json_schema", "json_object_schema", "json_object", "none"]
    assert candidates("json_object_schema", "openai/gpt-4o", None, True) == ["json_object_schema"]  # chosen: kept


def test_a_vllm_or_llama_server_gets_json_schema_and_is_never_downgraded(rendered) -> None:
    with FakeOpenAIServer(responder=server_taking("json_schema", "json_object_schema", "json_object")) as srv:
        parsed, _ = client(srv).complete_json(rendered, AlignmentOutput)
        assert parsed.probability == 0.9 and [form_of(r) for r in srv.requests] == ["json_schema"]


def test_llama_cpp_python_refuses_json_schema_once_then_json_object_with_schema_is_remembered(rendered, caplog) -> None:
    with FakeOpenAIServer(responder=server_taking("json_object_schema", "json_object")) as srv:
        with caplog.at_level(logging.WARNING, logger="karma_dagster.llm"):
            first, usage = client(srv).complete_json(rendered, AlignmentOutput)
            client(srv).complete_json(rendered, AlignmentOutput)  # a second client, same model and server
        assert [form_of(r) for r in srv.requests] == ["json_schema", "json_object_schema", "json_object_schema"]
        assert usage.calls == 1 and first.probability == 0.9
        sent = srv.requests[1]["response_format"]["schema"]["properties"]["probability"]
        assert sent["enum"][0] == 0.0 and sent["enum"][-1] == 1.0  # a bound a grammar can enforce
    logged = [r.getMessage() for r in caplog.records if "refused structured output" in r.getMessage()]
    assert len(logged) == 1 and "json_schema" in logged[0] and "json_object_schema" in logged[0]


def test_a_server_taking_no_schema_form_ends_in_json_mode_then_none(rendered) -> None:
    refuse = "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
    with FakeOpenAIServer(responder=server_taking("json_object", status=400, message=refuse)) as srv:
        client(srv).complete_json(rendered, AlignmentOutput)
        assert [form_of(r) for r in srv.requests] == ["json_schema", "json_object_schema", "json_object"]
    FormMemory.forget()
    with FakeOpenAIServer(responder=server_taking("none", status=400, message="response_format is not supported")) as srv:
        client(srv).complete_json(rendered, AlignmentOutput)
        assert [form_of(r) for r in srv.requests][-1] == "none" and len(srv.requests) == 4


def test_a_chosen_form_that_is_refused_fails_with_the_reason_and_no_fallback(rendered) -> None:
    with FakeOpenAIServer(responder=server_taking("json_object_schema")) as srv:
        with pytest.raises(LLMCallError, match="refused structured output as json_schema and no other form"):
            client(srv, response_format="json_schema").complete_json(rendered, AlignmentOutput)
        assert len(srv.requests) == 1


def test_errors_that_are_not_about_the_form_never_fall_back(rendered) -> None:
    # an overloaded server (503) is retried in the same form; a bad key (401) fails at once in the same form
    with FakeOpenAIServer() as srv:
        srv.script(Fault(503), GOOD)
        client(srv).complete_json(rendered, AlignmentOutput)
        assert [form_of(r) for r in srv.requests] == ["json_schema", "json_schema"]
        srv.reset()
        srv.script(Fault(401, body=json.dumps({"error": {"message": "invalid api key", "type": "auth"}})))
        with pytest.raises(LLMCallError, match="was refused"):
            client(srv).complete_json(rendered, AlignmentOutput)
        assert [form_of(r) for r in srv.requests] == ["json_schema"]


def test_constraints_travel_only_where_a_grammar_enforces_them() -> None:
    allowed = {"index": [0, 2]}
    grammar = request_fields("json_object_schema", ReaderOutput, allowed)["response_format"]["schema"]
    item = grammar["$defs"]["SectionScore"]["properties"]
    assert item["index"] == {"enum": [0, 2]} and item["relevance"]["enum"][10] == 0.5
    openai = request_fields("json_schema", ReaderOutput, allowed)["response_format"]["json_schema"]["schema"]
    assert openai == ReaderOutput.model_json_schema()  # an API that only reads a schema gets the model's own
    assert request_fields("ollama_format", ReaderOutput, allowed)["extra_body"]["format"] == grammar
    assert request_fields("none", ReaderOutput) == {}
    assert grammar_schema({"type": "number", "minimum": 0, "maximum": 5}) == {"type": "number", "minimum": 0,
                                                                              "maximum": 5}  # only [0, 1] bounds


class _Ollama(BaseHTTPRequestHandler):
    """Ollama's native /api/chat, as litellm's ollama_chat provider speaks it."""

    requests: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        return None

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.path != "/api/chat":  # litellm may ask /api/show for the model's details first: not a completion
            out = json.dumps({"model_info": {}, "template": "", "details": {}}).encode()
        else:
            type(self).requests.append(body)
            out = json.dumps({"model": body.get("model"), "created_at": "2026-12-02T00:00:00Z", "done": True,
                              "message": {"role": "assistant", "content": GOOD}, "prompt_eval_count": 12,
                              "eval_count": 7}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def test_ollama_gets_the_schema_as_its_own_format_field(rendered) -> None:
    _Ollama.requests.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ollama)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = LLMClient("ollama_chat/qwen2.5", api_base=f"http://127.0.0.1:{server.server_address[1]}", timeout=10,
                      max_retries=0, name="ollama")
        parsed, usage = c.complete_json(rendered, AlignmentOutput)
        assert parsed.probability == 0.9 and usage.completion_tokens == 7
        [request] = _Ollama.requests
        assert request["format"]["properties"]["probability"]["maximum"] == 1  # litellm: json_schema -> format
    finally:
        server.shutdown()
