"""How an answer's JSON schema travels to the model: each server dialect takes structured output in its own form.

- `json_schema`: OpenAI's `response_format: {"type": "json_schema", ...}` (OpenAI, vLLM, llama.cpp's own
  `llama-server`; for litellm's `ollama/` and `ollama_chat/` providers litellm turns it into Ollama's `format`).
- `json_object_schema`: `{"type": "json_object", "schema": ...}` (llama-cpp-python's server, which refuses
  `json_schema` with HTTP 500; `llama-server` takes it too).
- `ollama_format`: Ollama's native `format: <schema>` as a body field (an OpenAI-compatible endpoint that forwards it).
- `json_object`: JSON mode without a schema: the reply is *some* JSON; nothing holds it to the output model.
- `none`: no response format; the prompt alone asks for JSON.

`auto` tries the forms a provider may take, strongest first; a server that refuses one (a 4xx/5xx naming the
response format) is asked again at once with the next, and that choice is remembered for the process (a Dagster
run), so each run pays at most one refused request per form, model and server.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Literal

from pydantic import BaseModel

ResponseFormatMode = Literal["auto", "json_schema", "json_object_schema", "ollama_format", "json_object", "none"]
Form = Literal["json_schema", "json_object_schema", "ollama_format", "json_object", "none"]
_OLLAMA = ("ollama", "ollama_chat")
_log = logging.getLogger("karma_dagster.llm")

# What a server says when it cannot take the form it was sent (llama-cpp-python: "Input should be 'text' or
# 'json_object'"; vLLM: "guided decoding ..."; OpenAI: "Invalid parameter: 'response_format' ..."). A refusal that
# names none of these (a bad key, an unknown model, an overloaded server) is not about the form: never a fallback.
_FORM_WORDS = re.compile(r"response_format|json_schema|json_object|\bschema\b|\bformat\b|grammar|guided", re.I)
_FORM_STATUS = frozenset({400, 415, 422, 500, 501})


def provider_of(model: str) -> str:
    """litellm's provider prefix ("hosted_vllm/smollm2" -> "hosted_vllm"); "" for a bare model name."""
    return model.split("/", 1)[0] if "/" in model else ""


def candidates(mode: ResponseFormatMode, model: str, api_base: str | None, schema_native: bool) -> list[Form]:
    """The forms to try, in order. `schema_native`: litellm's map says the model takes `json_schema`."""
    if mode != "auto":
        return [mode]  # type: ignore[list-item]  # the user chose: no guessing, no fallback
    provider = provider_of(model)
    if provider in _OLLAMA:
        return ["json_schema", "json_object", "none"]  # litellm sends Ollama's `format` from json_schema
    if api_base or provider in ("hosted_vllm", "llamafile", "lm_studio", "openai_like"):
        # a self-hosted OpenAI-compatible server: vLLM and llama-server take json_schema, llama-cpp-python only
        # json_object with a schema, Ollama's /v1 json_schema; the rest fall through to JSON mode
        return ["json_schema", "json_object_schema", "json_object", "none"]
    if schema_native:
        return ["json_schema", "json_object", "none"]
    return ["json_object", "none"]  # a hosted API without schema support (e.g. DeepSeek): JSON mode


# A probability on the grammar's own terms: llama.cpp turns a JSON schema into a grammar that enforces types,
# enums and string lengths but not a number's minimum/maximum, so a bounded score is sent as an enum of steps.
_PROB_STEPS = [round(i * 0.05, 2) for i in range(21)]


def grammar_schema(schema: Any) -> Any:
    """`schema` with every number bounded to [0, 1] written as an enum of 0.05 steps (what a grammar can hold)."""
    if isinstance(schema, list):
        return [grammar_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("type") == "number" and schema.get("minimum") == 0 and schema.get("maximum") == 1:
        return {k: v for k, v in schema.items() if k not in ("type", "minimum", "maximum")} | {"enum": _PROB_STEPS}
    out = {k: grammar_schema(v) for k, v in schema.items()}
    if out.get("type") == "object" and out.get("additionalProperties") == {"type": "number"}:
        out["additionalProperties"] = {"enum": _PROB_STEPS}  # relation probabilities: label -> probability
    return out


GRAMMAR_FORMS = ("json_object_schema", "ollama_format")  # decoded under a grammar (llama.cpp underneath)
Constraints = dict[str, Any]  # property name -> allowed values (a list: an enum) or a JSON schema fragment


def constrained(schema: Any, constrain: Constraints) -> Any:
    """`schema` with each property named in `constrain` replaced by what it allows, wherever it appears."""
    if isinstance(schema, list):
        return [constrained(x, constrain) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: constrained(v, constrain) for k, v in schema.items()}
    props = out.get("properties")
    if isinstance(props, dict):
        for name, allowed in constrain.items():
            if name in props:
                props[name] = {"enum": list(allowed)} if isinstance(allowed, (list, tuple)) else allowed
    return out


def request_fields(form: Form, output_model: type[BaseModel], constrain: Constraints | None = None) -> dict[str, Any]:
    """The litellm.completion keyword arguments that carry `form` (empty for `none`). `constrain` (the values a
    property may take in this request: listed types, the text's own spans, the indices asked about) is added for
    the grammar forms only, where the decoder enforces it; an API that merely reads a schema gets the model's."""
    if form == "none":
        return {}
    if form == "json_object":
        return {"response_format": {"type": "json_object"}}
    schema = output_model.model_json_schema()
    if form in GRAMMAR_FORMS:
        schema = grammar_schema(constrained(schema, constrain) if constrain else schema)
    if form == "json_object_schema":
        return {"response_format": {"type": "json_object", "schema": schema}}
    if form == "ollama_format":
        return {"extra_body": {"format": schema}}
    return {"response_format": {"type": "json_schema", "json_schema": {
        "name": output_model.__name__, "schema": schema, "strict": False}}}


def is_form_refusal(exc: BaseException) -> bool:
    """True when the server refused the request because of its structured-output form."""
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    return status in _FORM_STATUS and bool(_FORM_WORDS.search(str(exc)))


class FormMemory:
    """Which form each (model, server) settled on in this process; shared by every client of that pair."""

    _lock = threading.Lock()
    _settled: dict[tuple[str, str, tuple[str, ...]], int] = {}

    @classmethod
    def start(cls, model: str, api_base: str | None, forms: list[Form]) -> int:
        with cls._lock:
            return cls._settled.get((model, api_base or "", tuple(forms)), 0)

    @classmethod
    def refused(cls, model: str, api_base: str | None, tried: int, forms: list[Form], backbone: str,
                reason: str) -> int | None:
        """Record that forms[tried] was refused; the index to try next, or None when none is left."""
        nxt = tried + 1
        if nxt >= len(forms):
            return None
        key = (model, api_base or "", tuple(forms))
        with cls._lock:
            moved = cls._settled.get(key, 0) < nxt
            cls._settled[key] = max(cls._settled.get(key, 0), nxt)
        if moved:  # logged once per pair and step, not once per concurrent request
            _log.warning("backbone %r: the server refused structured output as %s (%s); using %s for the rest of "
                         "this run", backbone, forms[tried], reason[:160], forms[nxt])
        return nxt

    @classmethod
    def forget(cls) -> None:
        with cls._lock:
            cls._settled.clear()
