"""LLM backbone throughput: an OpenAI-compatible server on 127.0.0.1 with an injected latency per call.

Part 1, saturation: N independent agent calls (summarizer prompts over distinct real abstracts) through
`Backbone.map` at concurrency c; throughput must reach 0.8 * c / L calls/s.
Part 2, the chain: every sample paper of data/inbox through the Dagster document chain (all eight stages, real
litellm HTTP client, scripted answers from tests/fake_openai_server.py:karma_responder) at c = 1, 4, 8 (one
backbone per c, each its own model string so no c reuses another's cache); per document and per stage: calls,
cache hits, tokens in/out (from the cost ledger) and wall time. Then a rerun at the largest c: 0 calls.

    LITELLM_LOCAL_MODEL_COST_MAP=True python bench/llm_throughput.py [--latency 0.2] [--c 1 4 8]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LANCE_LOG", "error")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fake_openai_server import FakeOpenAIServer, karma_responder  # noqa: E402

AGENTS = ["ingestion", "reader", "summarizer", "entity_extraction", "relation_extraction", "schema_alignment",
          "conflict_resolution", "evaluator"]


class Latency:
    """karma_responder after `latency` seconds; counts requests and the peak in flight in shared memory, so the
    server can run in its own process (it must not compete with the client for the GIL, as a real one would not)."""

    def __init__(self, latency: float) -> None:
        ctx = mp.get_context("fork")
        self.latency, self.lock = latency, ctx.Lock()
        self._in_flight, self._peak, self._count = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Value("i", 0)

    @property
    def count(self) -> int:
        return self._count.value

    @property
    def peak(self) -> int:
        return self._peak.value

    @peak.setter
    def peak(self, value: int) -> None:
        self._peak.value = value

    def __call__(self, request: dict[str, Any]) -> str:
        with self.lock:
            self._in_flight.value += 1
            self._count.value += 1
            self._peak.value = max(self._peak.value, self._in_flight.value)
        try:
            time.sleep(self.latency)
            return karma_responder(request)
        finally:
            with self.lock:
                self._in_flight.value -= 1


def _serve(responder: Latency, conn: Any) -> None:
    with FakeOpenAIServer(responder=responder) as server:
        conn.send(server.url)
        conn.recv()  # until the parent says stop


class ServerProcess:
    def __init__(self, responder: Latency) -> None:
        ctx = mp.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(responder, child), daemon=True)

    def __enter__(self) -> str:
        self._proc.start()
        return self._conn.recv()

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        self._proc.join(10)


def saturation(url: str, responder: Latency, concurrencies: list[int], latency: float) -> list[list[str]]:
    from karma_dagster.backbones.llm import LLMBackbone, LLMClient
    from karma_dagster.ingest.pubtator import parse_pubtator_lines
    from karma_dagster.runtime.prompts import PromptStore
    from karma_dagster.schemas.records import RawSection

    with gzip.open(REPO / "data" / "corpora" / "bc5cdr-train.pubtator.gz", "rt") as fh:
        docs = list(itertools.islice(parse_pubtator_lines(fh), 16 * max(concurrencies) + 1))
    rows = []
    for c in concurrencies:
        client = LLMClient("openai/bench-saturation", api_base=url, api_key="bench", timeout=30, concurrency=c,
                           name=f"c{c}")
        backbone = LLMBackbone(f"c{c}", client, PromptStore())
        backbone.summarize(RawSection(kind="abstract", text=docs[-1].abstract), 3)  # warm-up: litellm import
        n = 16 * c
        responder.peak = 0
        started = time.perf_counter()
        backbone.map(lambda d: backbone.summarize(RawSection(kind="abstract", text=d.abstract), 3), docs[:n])
        wall = time.perf_counter() - started
        rate, need = n / wall, 0.8 * c / latency
        rows.append([str(c), str(n), f"{wall:.2f}", f"{rate:.1f}", f"{need:.1f}", str(responder.peak),
                     "PASS" if rate >= need else "FAIL"])
    return rows


def chain(url: str, responder: Latency, concurrencies: list[int], inbox_files: list[str]) -> tuple[list, list, dict]:
    import dagster as dg

    from karma_dagster import runner
    from karma_dagster.definitions import build_definitions
    from karma_dagster.runtime.ledger import Ledger, ledger_path
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource

    work = Path(tempfile.mkdtemp(prefix="karma-bench-"))
    inbox = work / "inbox"
    inbox.mkdir()
    for name in inbox_files:
        shutil.copy(REPO / "data" / "inbox" / name, inbox / name)
    storage = KarmaStorageResource(data_dir=str(work / "karma"), inbox=str(inbox))
    instance = dg.DagsterInstance.ephemeral()
    walls: dict[tuple[str, int], float] = {}
    keys: list[str] = []
    try:
        for i, c in enumerate(concurrencies):
            cfg = BackboneConfig(kind="litellm", model=f"openai/bench-c{c}", api_base=url, api_key="bench",
                                 concurrency=c, timeout=30)
            defs = build_definitions(backbones={f"c{c}": cfg}, storage=storage)
            if i == 0:
                assert runner.import_kg(defs, instance), "seed import failed"
            new_keys, _ = runner.register_inbox(defs, instance)
            keys = keys or sorted(new_keys)  # later registrations find nothing new: same documents
            if i == 0:  # warm the process-wide builders (lexicon, index, litellm import) off the clock
                warm = BackboneConfig(kind="litellm", model="openai/bench-warm", api_base=url, api_key="bench")
                runner.run_documents(build_definitions(backbones={"warm": warm}, storage=storage), instance,
                                       keys[:1], log=lambda _m: None)
            for key in keys:
                started = time.perf_counter()
                failed = runner.run_documents(defs, instance, [key], log=lambda _m: None)
                walls[(key, c)] = time.perf_counter() - started
                if failed:
                    raise SystemExit(f"c={c}: {failed}")
        # the rerun at the largest c: unchanged inputs, answered from the response cache
        c = concurrencies[-1]
        defs = build_definitions(backbones={f"c{c}": BackboneConfig(
            kind="litellm", model=f"openai/bench-c{c}", api_base=url, api_key="bench", concurrency=c)},
            storage=storage)
        before = responder.count
        started = time.perf_counter()
        runner.run_documents(defs, instance, keys, log=lambda _m: None)
        rerun = {"calls": responder.count - before, "seconds": time.perf_counter() - started}
        ledger = Ledger(ledger_path(storage.root()))
        base = f"c{concurrencies[0]}"
        per_doc = {t.group["partition"]: t for t in ledger.totals(["partition"], backbone=base)}
        per_stage = {(t.group["partition"], t.group["agent"]): t
                     for t in ledger.totals(["partition", "agent"], backbone=base)}
        rerun_totals = [t for t in ledger.totals(["run_id"], backbone=f"c{c}")]
        rerun["ledger_calls_last_runs"] = sorted(t.calls for t in rerun_totals)[: len(keys)]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    doc_rows = []
    for key in keys:
        t = per_doc[key]
        doc_rows.append([key, str(t.calls), str(t.tokens_in), str(t.tokens_out),
                         *(f"{walls[(key, c)]:.1f}" for c in concurrencies),
                         f"{walls[(key, concurrencies[0])] / walls[(key, concurrencies[-1])]:.1f}x"])
    stage_rows = []
    for agent in AGENTS:
        ts = [per_stage[(k, agent)] for k in keys if (k, agent) in per_stage]
        stage_rows.append([agent, str(sum(t.calls for t in ts)), str(sum(t.cache_hits for t in ts)),
                           str(sum(t.tokens_in for t in ts)), str(sum(t.tokens_out for t in ts)),
                           " / ".join(str(t.calls) for t in ts)])
    return doc_rows, stage_rows, rerun


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, rows)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the server waits per call")
    parser.add_argument("--c", type=int, nargs="+", default=[1, 4, 8], help="concurrency limits to compare")
    parser.add_argument("--skip-chain", action="store_true", help="only the saturation part")
    args = parser.parse_args()
    inbox = ["PMC4686705.xml", "PMC4686705.json", "PMC4736972.pdf", "PMC4736972.json", "PMC4737013.pdf",
             "PMC4737013.json", "PMC4738914.pdf", "PMC4738914.json"]
    responder = Latency(args.latency)
    with ServerProcess(responder) as url:
        sat = saturation(url, responder, args.c, args.latency)
        print(f"\n## Saturation: independent summarizer calls via Backbone.map, server latency L = {args.latency} s\n")
        print(table(["c", "calls", "wall s", "calls/s", "0.8*c/L", "peak in flight", "verdict"], sat))
        if args.skip_chain:
            return 0 if all(r[-1] == "PASS" for r in sat) else 1
        docs, stages, rerun = chain(url, responder, args.c, inbox)
    print(f"\n## Chain per document (8 stages, Dagster in-process run per document), L = {args.latency} s\n")
    print(table(["document", "calls", "tokens in", "tokens out", *(f"wall s c={c}" for c in args.c),
                 f"speed-up c={args.c[-1]}"], docs))
    print(f"\n## Chain per stage (all {len(docs)} documents; first pass, c={args.c[0]})\n")
    print(table(["agent", "calls", "cache hits", "tokens in", "tokens out", "calls per document"], stages))
    print(f"\n## Rerun at c={args.c[-1]} with unchanged inputs: {rerun['calls']} calls to the server "
          f"({rerun['seconds']:.1f} s for {len(docs)} documents)")
    ok = all(r[-1] == "PASS" for r in sat) and rerun["calls"] == 0
    print("\nverdict:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
