"""Recorded responses for FakeOpenAIServer, keyed by prompt version: a changed prompt forces a re-record.

Layout: tests/recordings/<agent>/<prompt_id>@<sha12>.json = {"prompt": ..., "responses": {request_hash: content}}.
The prompt's versioned id comes from the `X-Karma-Prompt` header the client sends with every call, so the
recording used is the one of the exact prompt file that rendered the request. `request_hash` is the sha256 of
the request's messages (+ temperature), so changed inputs are caught as well.

Replay (default): a request whose prompt id+hash has no recording file, or whose messages were never recorded,
is answered with HTTP 400 and a message saying what to re-record; the client turns it into an LLMCallError and
`failures` lists it. Record: `KARMA_RECORD=1 pytest tests/test_llm_replay.py` asks `source` (a responder, the
scripted `karma_responder` by default, or anything that forwards to a real model) and writes the files.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from fake_openai_server import Fault, Reply, Responder, agent_of, karma_responder

RECORDINGS = Path(__file__).resolve().parent / "recordings"
PROMPT_HEADER = "x-karma-prompt"


def request_hash(request: dict[str, Any]) -> str:
    payload = json.dumps({"messages": request.get("messages", []), "temperature": request.get("temperature")},
                         sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:24]


class Recordings:
    """A responder over the recordings folder; `record=True` fills it from `source` instead of failing."""

    def __init__(self, root: Path = RECORDINGS, *, record: bool | None = None,
                 source: Responder = karma_responder) -> None:
        self.root = Path(root)
        self.record = os.environ.get("KARMA_RECORD") == "1" if record is None else record
        self.source = source
        self.failures: list[str] = []
        self.replayed = 0
        self._lock = threading.Lock()
        self._files: dict[str, dict[str, Any]] = {}

    def path(self, prompt: str) -> Path:
        agent = prompt.split(".v", 1)[0]
        return self.root / agent / f"{prompt}.json"

    def _load(self, prompt: str) -> dict[str, Any] | None:
        if prompt not in self._files:
            path = self.path(prompt)
            self._files[prompt] = json.loads(path.read_text()) if path.exists() else None  # type: ignore[assignment]
        return self._files[prompt]

    def _fail(self, message: str) -> Fault:
        self.failures.append(message)
        return Fault(400, body=json.dumps({"error": {"message": message, "type": "invalid_request_error"}}))

    def __call__(self, request: dict[str, Any]) -> Reply:
        prompt = (request.get("_headers") or {}).get(PROMPT_HEADER)
        if not prompt:
            return self._fail(f"request of agent {agent_of(request)!r} carries no {PROMPT_HEADER} header")
        key = request_hash(request)
        with self._lock:
            data = self._load(prompt)
            if self.record:
                if data is None:
                    data = self._files[prompt] = {"prompt": prompt, "responses": {}}
                if key not in data["responses"]:
                    data["responses"][key] = self.source(request)
                    path = self.path(prompt)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
                return data["responses"][key]
            if data is None:
                known = sorted(p.stem for p in self.path(prompt).parent.glob("*.json"))
                return self._fail(
                    f"prompt changed: re-record. No recording for prompt {prompt} (recorded versions of this "
                    f"agent: {known or 'none'}); run KARMA_RECORD=1 pytest tests/test_llm_replay.py")
            if key not in data["responses"]:
                return self._fail(
                    f"inputs changed: re-record. Prompt {prompt} is recorded but not this request {key}; "
                    f"run KARMA_RECORD=1 pytest tests/test_llm_replay.py")
            self.replayed += 1
            return data["responses"][key]
