"""How long one LLM request may take: a deadline that grows with the request and the server's measured speed.

Why: a fixed deadline is either too short for a long prompt on a slow (or loaded) server, so a healthy call fails
its batch, or too long to notice a hung one. The rule, per attempt:

    deadline = max(timeout, min(DEADLINE_MAX_S, SAFETY * (tokens_in / prefill_rate + max_tokens / decode_rate)))

`timeout` is the backbone's setting: the base, and a floor (the rule only ever lengthens it, so a fast server keeps
exactly the deadline its settings give; DEADLINE_MAX_S bounds only what the rule adds). `tokens_in` is the
request's prompt tokens (counted before it is sent), `max_tokens` the most the answer may hold. The two rates are
measured, per model and server, from the requests this process has had answered (the wall time of each, queueing
included, against its prompt and completion tokens): a least-squares fit of seconds = tokens_in / prefill_rate +
tokens_out / decode_rate over the last WINDOW answers (through zero: a request's fixed cost is charged to its
tokens, which lengthens the prediction). When that fit is not determined (fewer than 3 answers, all of one shape,
or a rate that comes out negative) each rate is bounded from below by charging the answers' whole time to that
phase (sum of tokens / sum of seconds), which can only lengthen the deadline. Before any answer is measured the
deadline is `timeout`.
"""

from __future__ import annotations

import threading
from collections import deque

from pydantic import BaseModel, Field

SAFETY = 3.0  # a loaded machine runs a call several times slower than the answers measured so far
DEADLINE_MAX_S = 1800.0  # no single attempt waits longer than this, whatever the measurements say
WINDOW = 32  # answers the rates are measured over (the server's recent speed, not its speed at start)


class Rates(BaseModel):
    """A server's measured speed, tokens per second."""

    prefill: float = Field(gt=0, description="prompt tokens read per second")
    decode: float = Field(gt=0, description="answer tokens written per second")
    answers: int = Field(ge=1, description="how many answered requests they were measured over")


class ServerSpeed:
    """The recent answers of one model on one server, and the rates they give (thread-safe)."""

    def __init__(self, window: int = WINDOW) -> None:
        self._samples: deque[tuple[int, int, float]] = deque(maxlen=window)
        self._lock = threading.Lock()

    def record(self, tokens_in: int, tokens_out: int, seconds: float) -> None:
        if tokens_in > 0 and tokens_out > 0 and seconds > 0:  # an answer without usage says nothing of speed
            with self._lock:
                self._samples.append((int(tokens_in), int(tokens_out), float(seconds)))

    def rates(self) -> Rates | None:
        with self._lock:
            samples = list(self._samples)
        if not samples:
            return None
        a = sum(x * x for x, _, _ in samples)
        b = sum(x * y for x, y, _ in samples)
        c = sum(y * y for _, y, _ in samples)
        e = sum(x * t for x, _, t in samples)
        f = sum(y * t for _, y, t in samples)
        det = a * c - b * b
        if len(samples) >= 3 and det > 1e-6 * a * c:
            per_in, per_out = (e * c - b * f) / det, (a * f - b * e) / det
            if per_in > 0 and per_out > 0:
                return Rates(prefill=1.0 / per_in, decode=1.0 / per_out, answers=len(samples))
        seconds = sum(t for _, _, t in samples)  # each phase charged the whole time: rates from below
        return Rates(prefill=sum(x for x, _, _ in samples) / seconds, decode=sum(y for _, y, _ in samples) / seconds,
                     answers=len(samples))


def deadline_seconds(timeout: float, tokens_in: int, max_tokens: int, rates: Rates | None) -> float:
    """The rule of this module's docstring: `timeout` until the server's speed is measured."""
    if rates is None:
        return float(timeout)
    expected = max(0, tokens_in) / rates.prefill + max(0, max_tokens) / rates.decode
    return max(float(timeout), min(DEADLINE_MAX_S, SAFETY * expected))


_SPEEDS: dict[tuple[str, str], ServerSpeed] = {}
_SPEEDS_LOCK = threading.Lock()


def speed_of(model: str, api_base: str | None) -> ServerSpeed:
    """The process-wide measurements of `model` on `api_base` (every client of the pair shares them)."""
    key = (model, api_base or "")
    with _SPEEDS_LOCK:
        return _SPEEDS.setdefault(key, ServerSpeed())


def forget() -> None:
    """Drop every measurement (tests; a server restarted on other hardware)."""
    with _SPEEDS_LOCK:
        _SPEEDS.clear()
