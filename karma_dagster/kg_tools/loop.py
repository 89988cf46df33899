"""The function-calling loop: a model gets the tool schemas and a paper segment by segment, calls tools until it
stops or the step limit is reached. Every call goes through KGTools.call (arguments checked, validated, refusals
answered as messages), so the model can write nothing the tools would refuse, and each call lands in the
document's transcript (`tool_calls` table).

Dagster-free and backbone-agnostic: the caller passes each segment's rendered prompt (prompts/tools_agent/) and
the litellm arguments (model, api_base, ...); kg_tools/chain.py runs it as the `tools` chain mode's stage.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from karma_dagster.backbones.base import Usage
from karma_dagster.backbones.llm.deadline import deadline_seconds, speed_of
from karma_dagster.kg_tools.schemas import tool_schemas
from karma_dagster.kg_tools.session import KGTools


class ToolLoopResult(BaseModel):
    steps: int  # tool calls made
    rounds: int  # model requests made
    stopped: str  # "done" (the model stopped calling tools on every segment) or "step_limit"
    accepted: int
    refused: int
    silent_segments: int = 0  # segments on which the model made no tool call at all
    repeated: int = 0  # calls the model asked again with the same arguments in a segment: not run twice
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0  # None: the model is not in litellm's price list (tokens only)


def _cost(response: Any) -> float | None:
    try:
        import litellm

        return float(litellm.completion_cost(completion_response=response))
    except Exception:  # noqa: BLE001 - an unpriced model (a local server, a scripted one): tokens only
        return None


def _message_dict(message: Any) -> dict[str, Any]:
    """The assistant turn as the next request must repeat it (content and its tool calls)."""
    calls = [{"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                            "arguments": c.function.arguments or ""}}
             for c in (getattr(message, "tool_calls", None) or [])]
    out: dict[str, Any] = {"role": "assistant", "content": getattr(message, "content", None)}
    if calls:
        out["tool_calls"] = calls
    return out


def _call_key(call: dict[str, Any]) -> str:
    """A call's identity within a segment: its tool and its arguments (JSON text normalised when it parses)."""
    raw = call["function"]["arguments"]
    try:
        raw = json.dumps(json.loads(raw), sort_keys=True) if isinstance(raw, str) else json.dumps(raw, sort_keys=True)
    except (TypeError, ValueError):
        pass
    return f"{call['function']['name']} {raw}"


def run_tool_loop(tools: KGTools, openings: Sequence[list[dict[str, str]]], *, model: str, max_steps: int = 30,
                  completion: Callable[..., Any] | None = None, on_usage: Callable[[Usage], None] | None = None,
                  **llm_kwargs: Any) -> ToolLoopResult:
    """For each segment's opening messages (the rendered prompt: system + the segment), run the tool calls the
    model asks for until it answers without one (next segment) or `max_steps` tool calls have been made in all.
    A turn that only repeats calls already answered in the segment ends the segment: a model that does not read
    its tools' answers (a small one, or a chat format that drops the `tool` turns, as llama-cpp-python's
    chatml-function-calling does) would otherwise ask the same until the step limit.
    `on_usage` is told of each answered request at once, so a loop that fails half-way has still booked it.
    `timeout` (in `llm_kwargs`) is the floor of each request's deadline, grown by the server's measured speed for
    the conversation so far (backbones/llm/deadline.py)."""
    if tools.document is None:
        raise ValueError("run_tool_loop: the KGTools session needs a document (its writes are staged per document)")
    if max_steps < 1:
        raise ValueError(f"max_steps {max_steps}: must be at least 1")
    if completion is None:
        import litellm

        completion = litellm.completion
    schemas = tool_schemas(include_read=True)
    floor = float(llm_kwargs.pop("timeout", 600.0))
    speed = speed_of(model, llm_kwargs.get("api_base"))
    schema_chars = len(json.dumps(schemas))
    steps = rounds = accepted = refused = prompt_tokens = completion_tokens = silent = repeated = 0
    cost: float | None = 0.0
    for opening in openings:
        messages: list[dict[str, Any]] = [dict(m) for m in opening]
        seen: set[str] = set()
        while True:
            if steps >= max_steps:
                return ToolLoopResult(steps=steps, rounds=rounds, stopped="step_limit", accepted=accepted,
                                      refused=refused, prompt_tokens=prompt_tokens, silent_segments=silent,
                                      repeated=repeated, completion_tokens=completion_tokens, cost_usd=cost)
            tokens_in = (schema_chars + sum(len(str(m.get("content") or "")) for m in messages)) // 4  # ~4 chars a token
            timeout = deadline_seconds(floor, tokens_in, int(llm_kwargs.get("max_tokens") or 0), speed.rates())
            started = time.monotonic()
            response = completion(model=model, messages=messages, tools=schemas, tool_choice="auto", timeout=timeout,
                                  **llm_kwargs)
            rounds += 1
            usage = getattr(response, "usage", None)
            speed.record(int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0),
                         time.monotonic() - started)
            prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
            completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
            price = _cost(response)
            cost = None if cost is None or price is None else cost + price
            if on_usage is not None:
                on_usage(Usage(calls=1, prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                               completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0), cost_usd=price))
            message = response.choices[0].message
            turn = _message_dict(message)
            if "tool_calls" not in turn:
                silent += not seen
                break
            fresh = [c for c in turn["tool_calls"] if _call_key(c) not in seen]
            repeated += len(turn["tool_calls"]) - len(fresh)
            if not fresh:
                break  # nothing but calls already answered: the model is not moving on
            messages.append(turn)
            for call in turn["tool_calls"]:
                if _call_key(call) in seen:
                    messages.append({"role": "tool", "tool_call_id": call["id"],
                                     "content": "REFUSED: you made this exact call already; its answer is above."})
                    continue
                if steps >= max_steps:
                    break
                seen.add(_call_key(call))
                result = tools.call(call["function"]["name"], call["function"]["arguments"])
                steps += 1
                accepted, refused = accepted + result.ok, refused + (not result.ok)
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": result.text() + "\n" + json.dumps(result.data, default=str)[:4000]})
    return ToolLoopResult(steps=steps, rounds=rounds, stopped="done", accepted=accepted, refused=refused,
                          silent_segments=silent, repeated=repeated, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, cost_usd=cost)
