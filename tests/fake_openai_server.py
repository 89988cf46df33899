"""A scripted OpenAI-compatible chat server on 127.0.0.1, so the LLM path runs through litellm's real HTTP client
in tests without network or keys.

Importable helper (not a test module). Replies come from a queue of scripted items first, then from a responder
callable(request_json) -> reply. A reply is a string (the assistant's message content) or a `Fault` (an HTTP
error with headers, a delay, a dropped connection, a raw non-JSON body, or a slow drip: headers at once, then
the body a byte at a time). Every request is recorded.

The default responder (`karma_responder`) recognises which agent asked by the `agent: <name>` marker in the
system prompt and builds a deterministic, plausible JSON answer from the request's own text.
"""

from __future__ import annotations

import json
import re
import threading
import time
import unicodedata
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Fault:
    """A scripted misbehaviour: an HTTP status with a body/headers, a delay before answering, a dropped connection."""

    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None  # default: an OpenAI-style error JSON
    delay: float = 0.0  # seconds to sleep before answering (or before dropping)
    drop: bool = False  # close the socket without any response
    then: str | None = None  # with status 200: the content to return after the delay
    drip: float = 0.0  # send the headers at once, then the body one byte every `drip` seconds (a slow-drip server)


Reply = str | Fault
Responder = Callable[[dict[str, Any]], Reply]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that timed out and hung up before the scripted delay ended: expected, not worth a traceback
        return None


class FakeOpenAIServer:
    """Context manager: `with FakeOpenAIServer() as srv: litellm.completion(..., api_base=srv.url)`."""

    def __init__(self, responder: Responder | None = None, model_name: str = "fake-model") -> None:
        self.responder: Responder = responder or karma_responder
        self.model_name = model_name
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str] = []  # each request's Authorization header, kept apart from `requests`
        # (request, usage) of every plain reply sent in full at once: what a client was billed for (a delayed,
        # dripped or faulted reply is left out: the client may have hung up before it arrived)
        self.answered: list[tuple[dict[str, Any], dict[str, int]]] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()  # ends a slow drip still running when the server stops

    # ------------------------------------------------------------------ scripting
    def script(self, *replies: Reply) -> "FakeOpenAIServer":
        """Queue replies used (in order) before the responder."""
        with self._lock:
            self._queue.extend(replies)
        return self

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.authorizations.clear()
            self.answered.clear()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeOpenAIServer is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.popleft()
        return self.responder(request)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "FakeOpenAIServer":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once: no 40 ms delayed-ACK stall per call

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                return None

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "request body is not JSON", "type": "invalid_request"}})
                    return
                with owner._lock:
                    owner.authorizations.append(self.headers.get("Authorization", ""))
                request["_headers"] = {k.lower(): v for k, v in self.headers.items()  # for replay keys;
                                       if k.lower() not in ("authorization", "api-key")}  # never the key
                reply = owner._next_reply(request)
                if isinstance(reply, Fault):
                    if reply.delay:
                        time.sleep(reply.delay)
                    if reply.drop:
                        self.close_connection = True
                        try:
                            self.connection.shutdown(2)
                        except OSError:
                            pass
                        return
                    if reply.status == 200 and reply.drip > 0:
                        self._drip(owner._completion(request, reply.then or "{}"), reply.drip)
                        return
                    if reply.status == 200:
                        self._send(200, owner._completion(request, reply.then or "{}"), reply.headers)
                        return
                    if reply.body is not None:
                        self._send_raw(reply.status, reply.body.encode(), "text/plain", reply.headers)
                        return
                    error = {"error": {"message": f"scripted fault {reply.status}", "type": "server_error",
                                       "code": str(reply.status)}}
                    self._send(reply.status, error, reply.headers)
                    return
                completion = owner._completion(request, reply)
                self._send(200, completion)
                with owner._lock:
                    owner.answered.append((request, completion["usage"]))

            def _drip(self, payload: dict[str, Any], every: float) -> None:
                """Headers now, then one byte of the body per `every` seconds: each read is quick, the reply is not."""
                body = json.dumps(payload).encode()
                self.close_connection = True
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.flush()
                    for i in range(len(body)):
                        if owner._stopping.wait(every):
                            return
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                except OSError:  # the client gave up and hung up: what a deadline is meant to do
                    return

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

            def _send_raw(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

        self._stopping.clear()
        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ response shape
    def _completion(self, request: dict[str, Any], content: str) -> dict[str, Any]:
        prompt_chars = sum(len(str(m.get("content", ""))) for m in request.get("messages", []))
        prompt_tokens = max(1, prompt_chars // 4)
        completion_tokens = max(1, len(content) // 4)
        with self._lock:
            n = len(self.requests)
        return {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", self.model_name),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


# ====================================================================== the default, agent-aware responder
_LEXICON: dict[str, str] = {
    # a tiny scripted lexicon; types follow BioRED's labels (the default entity types of the LLM backbone)
    "aspirin": "ChemicalEntity", "cisplatin": "ChemicalEntity", "tamoxifen": "ChemicalEntity",
    "metformin": "ChemicalEntity", "lithium": "ChemicalEntity", "haloperidol": "ChemicalEntity",
    "naloxone": "ChemicalEntity", "clonidine": "ChemicalEntity", "insulin": "ChemicalEntity",
    "breast cancer": "DiseaseOrPhenotypicFeature", "cancer": "DiseaseOrPhenotypicFeature",
    "hypertension": "DiseaseOrPhenotypicFeature", "diabetes": "DiseaseOrPhenotypicFeature",
    "nephrotoxicity": "DiseaseOrPhenotypicFeature", "hypotension": "DiseaseOrPhenotypicFeature",
    "bradycardia": "DiseaseOrPhenotypicFeature", "asthma": "DiseaseOrPhenotypicFeature",
    "brca1": "GeneOrGeneProduct", "tp53": "GeneOrGeneProduct", "egfr": "GeneOrGeneProduct",
    "esr1": "GeneOrGeneProduct",
}


def _system(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in request.get("messages", []) if m.get("role") == "system")


def _last_user(request: dict[str, Any]) -> str:
    users = [str(m.get("content", "")) for m in request.get("messages", []) if m.get("role") == "user"]
    # a validation retry appends a user turn; the task itself is the first user message
    return users[0] if users else ""


def _tag(text: str, name: str) -> str:
    found = re.findall(rf"<{name}>\n?(.*?)\n?</{name}>", text, flags=re.S)
    return found[-1] if found else ""


def _json_tag(text: str, name: str) -> Any:
    raw = _tag(text, name)
    return json.loads(raw) if raw else None


def agent_of(request: dict[str, Any]) -> str:
    """The agent named by the `agent: <name>` marker of the system prompt ('' when absent)."""
    found = re.search(r"agent:\s*([a-z_]+)", _system(request))
    return found.group(1) if found else ""


def _find_lexicon(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    taken: list[tuple[int, int]] = []
    for term in sorted(_LEXICON, key=len, reverse=True):
        for m in re.finditer(rf"(?<!\w){re.escape(term)}(?!\w)", text, flags=re.I):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            taken.append((m.start(), m.end()))
            surface = m.group(0)
            if (surface, _LEXICON[term]) not in out:
                out.append((surface, _LEXICON[term]))
    return out


def karma_responder(request: dict[str, Any]) -> str:
    """Answer like a cooperative model would, from the request's own text; deterministic."""
    agent, user = agent_of(request), _last_user(request)
    if agent == "ingestion":
        text = _tag(user, "text")
        fixes = [{"wrong": w, "right": unicodedata.normalize("NFKC", w)}
                 for w in sorted(set(re.findall(r"\w*[\ufb00-\ufb06]\w*", text)))]
        fixes += [{"wrong": w, "right": w.replace("-\n", "")} for w in sorted(set(re.findall(r"\w+-\n\w+", text)))]
        title = next((line.strip() for line in text.splitlines() if line.strip()), "")
        doi = re.search(r"10\.\d{4,9}/[^\s\"<>]+", text)
        return json.dumps({"title": title, "authors": [], "journal": None, "pub_date": None,
                           "doi": doi.group(0).rstrip(".") if doi else None, "pmid": None, "corrections": fixes})
    if agent == "reader":
        sections = _json_tag(user, "sections") or []
        context = [c.lower() for c in (_json_tag(user, "kg_context") or [])]
        scores = []
        for item in sections:
            text = item["text"].lower()
            hits = sum(1 for c in context if c and c in text) + len(_find_lexicon(item["text"]))
            scores.append({"index": item["index"], "relevance": round(min(1.0, 0.1 + 0.3 * hits), 3)})
        return json.dumps({"scores": scores})
    if agent == "summarizer":
        text = _tag(user, "text")
        limit = int((re.search(r"at most (\d+) sentences", user) or [None, "3"])[1])
        sentences = re.split(r"(?<=[.!?])\s+", text.strip())
        return json.dumps({"summary": " ".join(sentences[:limit])})
    if agent == "entity_extraction":
        text = _tag(user, "text")
        return json.dumps({"entities": [{"text": s, "type": t} for s, t in _find_lexicon(text)]})
    if agent == "relation_extraction":
        text = _tag(user, "text").lower()
        pairs = _json_tag(user, "pairs") or []
        types = _json_tag(user, "relation_types") or []
        answers = []
        for pair in pairs:
            probs = {t: 0.05 for t in types}
            label = "Association"
            if re.search(r"treat|reduc|prevent|improv|inhibit", text):
                label = "Negative_Correlation"
            elif re.search(r"induc|caus|increas|associated with", text):
                label = "Positive_Correlation"
            if label in probs:
                probs[label] = 0.85
            answers.append({"pair": pair["pair"], "probabilities": probs})
        return json.dumps({"pairs": answers})
    if agent == "schema_alignment":
        candidates = _json_tag(user, "candidates") or []
        triple = _json_tag(user, "triple") or {}
        relation = str(triple.get("relation", "")).lower()
        choice = next((c for c in candidates if c.lower() in relation), candidates[0] if candidates else None)
        return json.dumps({"kg_relation": choice, "probability": 0.8 if choice else 0.0})
    if agent == "conflict_resolution":
        triple = _json_tag(user, "triple") or {}
        negated = re.search(r"\b(not|no|without|failed)\b", str(triple.get("evidence", "")).lower())
        return json.dumps({"argument_for": "The evidence states the relation directly.",
                           "argument_against": "The existing KG edge asserts an incompatible relation.",
                           "verdict": "contradict" if negated else "agree",
                           "confidence": 0.7})
    if agent == "conflict_advocate":  # argues from its own side's first sentence, or its support
        own, said = _json_tag(user, "side") or {}, _json_tag(user, "transcript") or []
        ground = (own.get("evidence") or [f"confidence {own.get('confidence')} from {own.get('papers')} paper(s)"])[0]
        answer = f" Against the last argument: {said[-1]['argument'][:40]}" if said else ""
        return json.dumps({"argument": f"{own.get('claim', '?')} holds: {ground}.{answer}"})
    if agent.startswith("evaluator_"):
        triple = _json_tag(user, "triple") or {}
        words = len(str(triple.get("evidence", "")).split())
        scores = {"evaluator_confidence": 0.8, "evaluator_clarity": round(max(0.2, 1.0 - words / 100), 3),
                  "evaluator_relevance": 0.7}
        return json.dumps({"score": scores.get(agent, 0.5), "rationale": "scripted"})
    if agent == "judge":
        return json.dumps({"verdict": "likely_correct", "rationale": "scripted"})
    return json.dumps({"error": f"unknown agent {agent!r}"})
