"""The one client every LLM call goes through: structured output, repair, validation, retries, cache, accounting.

litellm is imported lazily (its import costs seconds and, unless told otherwise, fetches a price map): the
first call sets LITELLM_LOCAL_MODEL_COST_MAP=True when it is unset, so an offline machine never reaches out.

A backbone's `timeout` is the floor of a total deadline per attempt (connect + every read), enforced here: litellm
hands its timeout to httpx, where it bounds each phase and each read separately, so a server sending a byte a
second never trips it. The deadline grows with the request's prompt and the server's measured speed (deadline.py
states the rule).
"""

from __future__ import annotations

import contextvars
import email.utils
import hashlib
import json
import math
import os
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

import json_repair
from pydantic import BaseModel, ValidationError

from karma_dagster.backbones.base import Usage
from karma_dagster.backbones.llm.cache import ResponseCache, cache_key
from karma_dagster.backbones.llm.deadline import deadline_seconds, speed_of
from karma_dagster.backbones.llm.structured import (
    Constraints,
    Form,
    FormMemory,
    ResponseFormatMode,
    candidates,
    is_form_refusal,
    request_fields,
)
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.runtime.prompts import RenderedPrompt

PROMPT_HEADER = "X-Karma-Prompt"
UsageDelta = Usage  # what one call adds to a backbone's running Usage
UsageSink = Callable[[Usage], None]
M = TypeVar("M", bound=BaseModel)

_LITELLM: Any = None
_DEFAULTS = BackboneSettings()  # the defaults are declared once, in config.py
_IMPORT_LOCK = threading.Lock()


def _litellm() -> Any:
    global _LITELLM
    if _LITELLM is None:
        with _IMPORT_LOCK:
            if _LITELLM is None:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import litellm

                litellm.suppress_debug_info = True
                _LITELLM = litellm
    return _LITELLM


class _NamedError(RuntimeError):
    """Carries the backbone and agent it failed for, so the asset layer can add the partition."""

    def __init__(self, message: str, *, backbone: str = "", agent: str = "", model: str = "") -> None:
        super().__init__(message)
        self.backbone, self.agent, self.model = backbone, agent, model


class LLMOutputError(_NamedError):
    """The model's reply stayed invalid after one corrective retry."""


class LLMCallError(_NamedError):
    """The provider kept failing (or refused the request); retries are spent."""


class LLMContextError(_NamedError):
    """The request does not fit the model's context window with room for the answer: an agent that can split its
    input does so; any other lets it fail the document, never truncated."""


class _FormRefused(Exception):
    """The server refused the request's structured-output form (structured.py): try the next form at once."""


class LLMDeadlineError(TimeoutError):
    """One attempt outlived the backbone's total deadline; transient, so it is retried like litellm's Timeout."""


def _transient_errors() -> tuple[type[BaseException], ...]:
    lt = _litellm()
    names = ("RateLimitError", "APIConnectionError", "Timeout", "InternalServerError",
             "ServiceUnavailableError", "BadGatewayError")
    return (LLMDeadlineError, *(getattr(lt, n) for n in names if hasattr(lt, n)))


def _within_deadline(fn: Callable[[], Any], seconds: float, describe: Callable[[], str]) -> Any:
    """`fn()` on a daemon worker thread, waited for at most `seconds` of wall-clock time.

    Why a thread: litellm routes each provider through its own HTTP stack (the OpenAI SDK, its own httpx
    handler, boto...), and none offers a total deadline, only per-phase ones, so the only bound that holds for
    every provider is the caller's own wait. Past the deadline the attempt is abandoned: the caller gets
    `LLMDeadlineError` at once and its concurrency slot back; the daemon worker keeps its socket until the
    server finishes or goes quiet for one per-read timeout (litellm still gets `timeout` for that), and it never
    delays interpreter exit. Its late result is dropped.
    """
    done = threading.Event()
    box: dict[str, Any] = {}
    context = contextvars.copy_context()  # whatever litellm or a tracer keeps in context vars follows the call

    def run() -> None:
        try:
            box["value"] = context.run(fn)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="llm-call", daemon=True).start()
    if not done.wait(seconds):
        raise LLMDeadlineError(describe())
    if "error" in box:
        raise box["error"]
    return box["value"]


def _retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked us to wait (Retry-After / retry-after-ms), if it said."""
    headers: Any = getattr(exc, "litellm_response_headers", None)
    if not headers:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        headers = getattr(exc, "headers", None)
    if not headers:
        return None
    lower = {str(k).lower(): str(v) for k, v in dict(headers).items()}
    if "retry-after-ms" in lower:
        try:
            return max(0.0, float(lower["retry-after-ms"]) / 1000.0)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


_THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)


def _unclosed(text: str) -> tuple[int, str] | None:
    """(start, closers) when the reply's first JSON object/array never closes (a cut reply), else None."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    stack: list[str] = []
    in_str = escaped = False
    for ch in text[min(starts):]:
        if in_str:
            escaped, in_str = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
            if not stack:
                return None
    return (min(starts), '"' * in_str + "".join(reversed(stack)))


def parse_json_reply(text: str) -> Any:
    """Strict JSON first; then json_repair for fences, prose around the object, trailing commas.

    A cut reply is repaired only when adding its missing closing brackets makes it valid JSON as it stands; a
    reply cut inside a value or after a comma is refused (repairing it would invent values: 0.85 -> 0.0, pairs
    dropped), so the client asks again.
    """
    text = _THINK_RE.sub("", text or "").strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    cut = _unclosed(text)
    if cut is not None:
        start, closers = cut
        try:
            if closers.startswith('"'):
                raise json.JSONDecodeError("cut inside a string", text, len(text))
            return json.loads(text[start:] + closers)
        except json.JSONDecodeError:
            raise ValueError(f"reply is truncated JSON (cut inside a value; {len(closers)} bracket(s) never "
                             f"close), ends {text[-80:]!r}") from None
    repaired = json_repair.repair_json(text, return_objects=True)
    if repaired in ("", None):
        raise ValueError(f"reply is not JSON: {text[:200]!r}")
    return repaired


def _describe(exc: ValidationError | ValueError) -> str:
    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()[:12]]
        return "; ".join(parts)
    return str(exc)


class LLMClient:
    """A litellm model string plus parameters; `complete_json` returns a validated pydantic object and its usage."""

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        temperature: float = _DEFAULTS.temperature,
        max_tokens: int = _DEFAULTS.max_tokens,
        timeout: float = _DEFAULTS.timeout,
        max_retries: int = _DEFAULTS.max_retries,
        concurrency: int = _DEFAULTS.concurrency,
        cache: ResponseCache | None = None,
        *,
        name: str | None = None,
        response_format: ResponseFormatMode = "auto",
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        extra_params: dict[str, Any] | None = None,
        on_usage: UsageSink | None = None,
        context_tokens: int | None = None,
        seed: int | None = None,
    ) -> None:
        """`on_usage`: told of every answered request and cache hit the moment it happens (thread-safe callers
        only), so what a call spent is counted even when it then fails: an invalid reply after its corrective
        retry, a refusal or a deadline on a later attempt, a sibling request of `complete_many` failing. A caller
        that sets it must not add the usage `complete_json` returns again (LLMBackbone books through it)."""
        if not model or not model.strip():
            raise ValueError("model: give a litellm model string, e.g. 'openai/gpt-4o' or 'ollama/qwen2.5'")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
                or timeout <= 0:
            raise ValueError(f"timeout: the total deadline per LLM call must be a positive number of seconds "
                             f"(got {timeout!r}) for backbone {name or model!r}")
        if max_retries < 0 or concurrency < 1:
            raise ValueError(f"max_retries must be >= 0 and concurrency >= 1 (got {max_retries}, {concurrency})")
        self.model = model
        self.name = name or model
        self.api_base = api_base
        self._api_key = api_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = float(timeout)  # total per attempt: connect + every read (see _within_deadline)
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.cache = cache
        self.response_format = response_format
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.extra_params = dict(extra_params or {})
        self.on_usage = on_usage
        self.context_tokens = context_tokens
        self.seed = seed
        self._sleep: Callable[[float], None] = time.sleep  # tests may replace it
        # the per-backbone limit on requests in flight, shared by every thread and nested map of this client:
        # held only around the HTTP request, never across a backoff sleep or a cache lookup
        self._slots = threading.BoundedSemaphore(concurrency)
        self._schema_ids: dict[type[BaseModel], str] = {}
        self._forms: list[Form] | None = None

    @classmethod
    def from_settings(cls, settings: BackboneSettings, *, name: str | None = None,
                      cache: ResponseCache | None = None) -> "LLMClient":
        return cls(settings.model, api_base=settings.api_base, api_key=settings.api_key,
                   temperature=settings.temperature, max_tokens=settings.max_tokens, timeout=settings.timeout,
                   max_retries=settings.max_retries, concurrency=settings.concurrency, cache=cache, name=name,
                   response_format=settings.response_format,  # type: ignore[arg-type]
                   context_tokens=settings.context_tokens, seed=settings.seed)

    def __repr__(self) -> str:  # never show the key
        return f"LLMClient(model={self.model!r}, api_base={self.api_base!r}, name={self.name!r})"

    # ------------------------------------------------------------------ public API
    def complete_json(self, rendered: RenderedPrompt, output_model: type[M], *, temperature: float | None = None,
                      sample: int | None = None, constrain: Constraints | None = None) -> tuple[M, UsageDelta]:
        """`temperature` overrides the client's for this call; `sample` (an index) makes the N samples of a
        sampled question N different cache keys, so they are never all one cached answer; `constrain` narrows
        properties of the answer for a grammar-constrained server (structured.request_fields)."""
        usage = Usage(cost_usd=0.0)
        temp = self.temperature if temperature is None else float(temperature)
        # the key names the chosen mode and the schema, not the form a server settled on: a rerun is answered
        # from the cache whichever form this process had to fall back to
        params: dict[str, Any] = {"temperature": temp, "max_tokens": self.max_tokens,
                                  "response_format": self.response_format, "schema": self._schema_id(output_model),
                                  "output_model": output_model.__name__, **self.extra_params}
        if sample is not None:
            params["sample"] = int(sample)
        seed = None if self.seed is None else self.seed + (sample or 0)
        if seed is not None:
            params["seed"] = seed
        if constrain:
            params["constrain"] = hashlib.sha256(json.dumps(constrain, sort_keys=True, default=str).encode()
                                                 ).hexdigest()[:16]
        key = cache_key(self.model, rendered.prompt_id, rendered.sha256, rendered.messages, params)
        if self.cache is not None:
            stored = self.cache.get(key)
            if stored is not None:
                try:
                    hit = output_model.model_validate_json(stored)
                except ValidationError:
                    pass  # the output model changed since: ask again
                else:
                    return hit, self._spent(Usage(cache_hits=1))

        messages = [dict(m) for m in rendered.messages]
        text, delta = self._call(messages, rendered.agent, output_model, temp, rendered.versioned_id,
                                     constrain, seed)
        usage = usage.add(self._spent(delta))
        try:
            parsed = output_model.model_validate(parse_json_reply(text))
        except (ValidationError, ValueError) as first:
            # one corrective turn: show the model its own reply and what was wrong with it
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": (
                    f"Your reply was not valid for {output_model.__name__}: {_describe(first)}. "
                    "Answer again with only the corrected JSON object, no prose, no code fences."
                )},
            ]
            text, delta = self._call(messages, rendered.agent, output_model, temp, rendered.versioned_id,
                                     constrain, seed)
            usage = usage.add(self._spent(delta))
            try:
                parsed = output_model.model_validate(parse_json_reply(text))
            except (ValidationError, ValueError) as second:
                raise LLMOutputError(
                    f"backbone {self.name!r}, agent {rendered.agent!r} (prompt {rendered.versioned_id}): reply is "
                    f"not a valid {output_model.__name__} after one corrective retry: {_describe(second)}; "
                    f"reply began {text[:200]!r}",
                    backbone=self.name, agent=rendered.agent, model=self.model,
                ) from second
        if self.cache is not None:
            self.cache.put(key, model=self.model, prompt_id=rendered.versioned_id,
                           output_model=output_model.__name__, response=parsed.model_dump_json())
        return parsed, usage

    def complete_many(
        self, requests: Sequence[tuple[RenderedPrompt, type[M]]], *, temperature: float | None = None,
        sample: int | None = None,
    ) -> list[tuple[M, UsageDelta]]:
        """Several calls at once, at most `concurrency` in flight; results in input order, first error raised."""
        return self.map(lambda req: self.complete_json(req[0], req[1], temperature=temperature, sample=sample),
                        requests)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """`fn` over `items` on up to `concurrency` threads, results in input order; the first error (in input
        order) is raised and work not yet started is cancelled. Threads, not asyncio: agents and Dagster assets
        are synchronous, litellm's sync client releases the GIL while waiting, and the semaphore in `_call`
        keeps the limit exact even when a mapped function maps again (a reader batch inside a document map)."""
        items = list(items)
        if len(items) <= 1 or self.concurrency == 1:
            return [fn(x) for x in items]
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(items)), thread_name_prefix="llm")
        try:
            futures = [pool.submit(fn, x) for x in items]
            return [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ internals
    def _spent(self, delta: Usage) -> Usage:
        if self.on_usage is not None:
            self.on_usage(delta)
        return delta

    def _schema_id(self, output_model: type[BaseModel]) -> str:
        # the JSON schema costs milliseconds per call: worked out once per output model
        sid = self._schema_ids.get(output_model)
        if sid is None:
            schema = json.dumps(output_model.model_json_schema(), sort_keys=True)
            sid = self._schema_ids[output_model] = hashlib.sha256(schema.encode()).hexdigest()[:16]
        return sid

    def forms(self) -> list[Form]:
        """The structured-output forms this client tries, in order (structured.py); litellm's map is read once."""
        if self._forms is None:
            try:
                native = bool(_litellm().supports_response_schema(model=self.model))
            except Exception:  # unknown provider/model in litellm's map
                native = False
            self._forms = candidates(self.response_format, self.model, self.api_base, native)  # type: ignore[arg-type]
        return self._forms

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _call(self, messages: list[dict[str, str]], agent: str, output_model: type[BaseModel],
              temperature: float | None = None, prompt: str | None = None,
              constrain: Constraints | None = None, seed: int | None = None) -> tuple[str, UsageDelta]:
        """One answered request. A refusal of the structured-output form is asked again at once in the next form
        (structured.py); it spends no retry, since the server answered and said why."""
        tokens_in = self._check_fits(messages, agent)  # once per request, not per retry or form
        forms = self.forms()
        at = FormMemory.start(self.model, self.api_base, forms)
        while True:
            try:
                return self._request(messages, agent, request_fields(forms[at], output_model, constrain),
                                     temperature, prompt, seed, tokens_in)
            except _FormRefused as exc:
                nxt = FormMemory.refused(self.model, self.api_base, at, forms, self.name, str(exc))
                if nxt is None:
                    raise LLMCallError(
                        f"LLM call to model {self.model!r} for agent {agent!r} (backbone {self.name!r}): the server "
                        f"refused structured output as {forms[at]} and no other form is left to try "
                        f"(response_format: {self.response_format}): {exc}",
                        backbone=self.name, agent=agent, model=self.model) from None
                at = nxt

    def _request(self, messages: list[dict[str, str]], agent: str, fmt: dict[str, Any],
                 temperature: float | None = None, prompt: str | None = None,
                 seed: int | None = None, tokens_in: int = 0) -> tuple[str, UsageDelta]:
        lt = _litellm()
        transient = _transient_errors()
        kwargs: dict[str, Any] = {
            "model": self.model, "messages": messages,
            "temperature": self.temperature if temperature is None else temperature,
            "max_tokens": self.max_tokens, "timeout": self.timeout,
            "max_retries": 0,  # retries are ours (backoff, Retry-After, counting); the SDK's would hide them
            "drop_params": True, **self.extra_params,
        }
        for field_name, value in fmt.items():  # extra_body merges with one the backbone set
            kwargs[field_name] = {**kwargs.get(field_name, {}), **value} if field_name == "extra_body" else value
        if seed is not None:
            kwargs["seed"] = seed
        if prompt:  # the versioned prompt id travels as a header: proxies, logs and recorded replays can key on it
            kwargs["extra_headers"] = {**kwargs.get("extra_headers", {}), PROMPT_HEADER: prompt}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        attempts = self.max_retries + 1
        speed = speed_of(self.model, self.api_base)
        for attempt in range(attempts):
            try:
                with self._slots:
                    deadline = self.deadline(tokens_in)  # per attempt: the measurements may have moved
                    kwargs["timeout"] = deadline  # httpx's per-read bound must not end the wait first
                    started = time.monotonic()
                    response = _within_deadline(
                        lambda: lt.completion(**kwargs), deadline,
                        lambda: f"no complete reply within the total deadline of {deadline:g} s (backbone "
                                f"{self.name!r}: its `timeout` {self.timeout:g} s, grown for {tokens_in} prompt "
                                f"tokens and {self.max_tokens} max_tokens at the server's measured speed; "
                                f"backbones/llm/deadline.py)")
                    elapsed = time.monotonic() - started
                break
            except Exception as exc:
                if isinstance(exc, getattr(lt, "ContextWindowExceededError", ())):
                    raise LLMContextError(
                        f"backbone {self.name!r}, agent {agent!r}: the request does not fit the model's context "
                        f"window (the server said: {self._scrub(str(exc))[-260:]})",
                        backbone=self.name, agent=agent, model=self.model) from None
                if fmt and is_form_refusal(exc):  # not transient, not final: the caller tries the next form
                    raise _FormRefused(self._scrub(str(exc))[:300]) from None
                if not isinstance(exc, transient):
                    raise LLMCallError(  # auth, bad request, unknown model: retrying will not help
                        f"LLM call to model {self.model!r} for agent {agent!r} (backbone {self.name!r}) was refused: "
                        f"{type(exc).__name__}: {self._scrub(str(exc))[:300]}",
                        backbone=self.name, agent=agent, model=self.model,
                    ) from None
                if attempt + 1 >= attempts:
                    raise LLMCallError(
                        f"LLM call to model {self.model!r} for agent {agent!r} (backbone {self.name!r}) failed after "
                        f"{attempts} attempt(s): {type(exc).__name__}: {self._scrub(str(exc))[:300]}",
                        backbone=self.name, agent=agent, model=self.model,
                    ) from None
                self._sleep(self._delay(attempt, _retry_after(exc)))
        content = response.choices[0].message.content or ""
        raw_usage = getattr(response, "usage", None)
        speed.record(int(getattr(raw_usage, "prompt_tokens", 0) or 0),
                     int(getattr(raw_usage, "completion_tokens", 0) or 0), elapsed)
        try:
            cost: float | None = float(lt.completion_cost(completion_response=response))
        except Exception:  # model not priced in litellm's map (local servers, new models)
            cost = None
        return content, Usage(
            calls=1,
            prompt_tokens=int(getattr(raw_usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(raw_usage, "completion_tokens", 0) or 0),
            cost_usd=cost,
        )

    def deadline(self, tokens_in: int) -> float:
        """Seconds one attempt with `tokens_in` prompt tokens may take (deadline.py's rule)."""
        return deadline_seconds(self.timeout, tokens_in, self.max_tokens,
                                speed_of(self.model, self.api_base).rates())

    def _check_fits(self, messages: list[dict[str, str]], agent: str) -> int:
        """The request's prompt tokens, for its deadline. With `context_tokens` set they are counted (litellm's
        count for the model, or its default tokenizer for an unknown one: an estimate, so the server's own refusal
        is reported the same way) and a request that cannot fit is refused before it is sent; without it, ~4
        characters a token is close enough for a deadline and never loads a tokenizer."""
        estimate = sum(len(str(m.get("content", ""))) for m in messages) // 4
        if not self.context_tokens:
            return estimate
        try:
            need = int(_litellm().token_counter(model=self.model, messages=messages))
        except Exception:  # no tokenizer for this model: ~4 characters a token
            need = estimate
        if need + self.max_tokens > self.context_tokens:
            raise LLMContextError(
                f"backbone {self.name!r}, agent {agent!r}: the request needs ~{need} prompt tokens + {self.max_tokens} "
                f"for the answer, more than the model's context of {self.context_tokens} tokens",
                backbone=self.name, agent=agent, model=self.model)
        return need

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(self.backoff_max, self.backoff_base * (2 ** attempt)) * random.uniform(0.5, 1.0)
        if retry_after is not None:
            return min(self.backoff_max, retry_after) + random.uniform(0.0, 0.1 * max(self.backoff_base, 0.1))
        return backoff
