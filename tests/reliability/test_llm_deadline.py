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
from karma_dagster.runtime.prompts import RenderedPrompt  # noqa: E402

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


# ---------------------------------------------------------------- the deadline grows with the request and the server
def test_the_deadline_rule_grows_with_the_prompt_and_the_measured_speed_and_keeps_timeout_as_its_floor() -> None:
    from karma_dagster.backbones.llm.deadline import DEADLINE_MAX_S, SAFETY, Rates, deadline_seconds

    assert deadline_seconds(180, 5000, 1024, None) == 180  # nothing measured yet: the backbone's timeout
    slow = Rates(prefill=10.0, decode=2.0, answers=5)  # a loaded machine
    assert deadline_seconds(180, 3000, 512, slow) == pytest.approx(SAFETY * (3000 / 10 + 512 / 2))
    assert deadline_seconds(180, 6000, 512, slow) > deadline_seconds(180, 3000, 512, slow)  # a longer prompt
    fast = Rates(prefill=300.0, decode=80.0, answers=5)
    assert deadline_seconds(180, 3000, 512, fast) == 180  # a fast server keeps its settings' deadline
    assert deadline_seconds(180, 10**6, 10**5, slow) == DEADLINE_MAX_S  # what the rule adds is bounded
    assert deadline_seconds(4000, 10**6, 10**5, slow) == 4000  # ... never below the setting


def test_the_server_speed_is_measured_from_answers_prefill_and_decode_apart() -> None:
    from karma_dagster.backbones.llm.deadline import ServerSpeed

    speed = ServerSpeed()
    assert speed.rates() is None
    speed.record(3000, 100, 3000 / 300 + 100 / 60)  # one answer: both phases bounded from below
    one = speed.rates()
    assert one is not None and one.prefill <= 300 and one.decode <= 60
    for tokens_in, tokens_out in ((500, 400), (2000, 50), (1200, 250), (800, 30)):
        speed.record(tokens_in, tokens_out, tokens_in / 300 + tokens_out / 60)
    rates = speed.rates()
    assert rates is not None and rates.answers == 5
    assert rates.prefill == pytest.approx(300, rel=1e-6) and rates.decode == pytest.approx(60, rel=1e-6)
    speed.record(100, 0, 1.0)  # no answer tokens: says nothing of speed
    assert speed.rates().answers == 5


def test_a_call_to_a_server_measured_slow_gets_a_longer_deadline(server: FakeOpenAIServer,
                                                                 rendered: RenderedPrompt) -> None:
    from karma_dagster.backbones.llm import deadline
    from karma_dagster.backbones.llm.client import _litellm

    _litellm()  # imported before the bounded calls (on a loaded machine the import alone can outlast BOUND)
    deadline.forget()
    late = Fault(200, delay=DEADLINE + 1.0, then=GOOD)  # an honest answer, later than the backbone's timeout
    server.script(late)
    _, error, _ = bounded(lambda: client(server).complete_json(rendered, AlignmentOutput))
    assert isinstance(error, LLMCallError) and "deadline" in str(error)  # the fixed deadline ends it
    # the same server measured at 20 prompt tokens/s and 5 answer tokens/s: this request's deadline grows past it
    speed = deadline.speed_of("openai/fake-model", server.url)
    for tokens_in, tokens_out in ((40, 5), (20, 10), (60, 2)):
        speed.record(tokens_in, tokens_out, tokens_in / 20 + tokens_out / 5)
    grown = client(server, max_tokens=4)
    assert grown.deadline(40) == pytest.approx(deadline.SAFETY * (40 / 20 + 4 / 5))
    server.script(late)
    result, error, _ = bounded(lambda: grown.complete_json(rendered, AlignmentOutput))
    assert error is None, error
    assert result[0] == AlignmentOutput(kg_relation="treats", probability=0.9)
    deadline.forget()
