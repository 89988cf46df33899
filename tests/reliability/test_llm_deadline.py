"""Issue 11 item 8: a backbone's `timeout` is a total deadline per LLM call attempt (connect + every read).

A slow-drip server on 127.0.0.1 sends the headers at once and then the body one byte every 0.5 s: every single
read is quick, so a per-read timeout never fires and the old client waited for the whole body (minutes). Each call
runs on a worker thread joined with a generous bound, so on the old code the test fails on the bound instead of
hanging the suite.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fake_openai_server import Fault, FakeOpenAIServer  # noqa: E402

from karma_dagster.backbones.llm.client import LLMCallError, LLMClient  # noqa: E402
from karma_dagster.backbones.llm.outputs import AlignmentOutput  # noqa: E402
from karma_dagster.prompts import RenderedPrompt  # noqa: E402

GOOD = '{"kg_relation": "treats", "probability": 0.9}'
DEADLINE = 2.0
BOUND = 10.0  # generous: the deadline plus thread start, connect and litellm's own overhead, many times over


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def client(server: FakeOpenAIServer, **kw: Any) -> LLMClient:
    params: dict[str, Any] = {"api_base": server.url, "api_key": "sk-test", "timeout": DEADLINE,
                              "max_retries": 0, "backoff_base": 0.01, "name": "drip-backbone", "concurrency": 1}
    params.update(kw)
    return LLMClient("openai/fake-model", **params)


def bounded(fn: Callable[[], Any], bound: float = BOUND) -> tuple[Any, BaseException | None, float]:
    """Run `fn` on a daemon thread and join it with `bound`: (result, error, seconds); fails if still running."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 (handed back to the test)
            out["error"] = exc

    start = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(bound)
    elapsed = time.monotonic() - start
    assert not worker.is_alive(), f"the LLM call was still running after {bound:g} s (timeout {DEADLINE:g} s)"
    return out.get("result"), out.get("error"), elapsed


def drip() -> Fault:
    return Fault(200, drip=0.5, then=GOOD)


def test_slow_drip_reply_fails_at_the_deadline_naming_backbone_and_deadline(
        server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script(drip())
    _, error, elapsed = bounded(lambda: client(server).complete_json(rendered, AlignmentOutput))
    assert isinstance(error, LLMCallError), error
    assert error.backbone == "drip-backbone"
    message = str(error)
    assert "drip-backbone" in message and "2 s" in message and "deadline" in message, message
    assert DEADLINE * 0.9 <= elapsed < BOUND
    assert len(server.requests) == 1


def test_deadline_is_retried_like_a_timeout_and_every_attempt_is_bounded(
        server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script(drip(), drip())
    _, error, elapsed = bounded(lambda: client(server, max_retries=1).complete_json(rendered, AlignmentOutput),
                                bound=2 * BOUND)
    assert isinstance(error, LLMCallError) and "after 2 attempt(s)" in str(error), error
    assert len(server.requests) == 2
    assert elapsed < 2 * BOUND


def test_a_retry_after_the_deadline_succeeds_and_the_slot_is_free(
        server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    # concurrency 1: the abandoned attempt must not keep the only slot, or the retry would wait for the drip
    server.script(drip(), GOOD)
    result, error, elapsed = bounded(lambda: client(server, max_retries=1).complete_json(rendered, AlignmentOutput))
    assert error is None, error
    parsed, usage = result
    assert parsed == AlignmentOutput(kg_relation="treats", probability=0.9)
    assert usage.calls == 1 and len(server.requests) == 2
    assert elapsed < BOUND


def test_a_fast_call_under_the_deadline_succeeds(server: FakeOpenAIServer, rendered: RenderedPrompt) -> None:
    server.script(GOOD)
    result, error, elapsed = bounded(lambda: client(server).complete_json(rendered, AlignmentOutput))
    assert error is None, error
    assert result[0] == AlignmentOutput(kg_relation="treats", probability=0.9)
    assert elapsed < DEADLINE + 1


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_a_deadline_that_is_not_a_positive_number_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        LLMClient("openai/fake-model", timeout=bad, name="x")
