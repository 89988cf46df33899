"""The KARMA chain on a real language model: SmolLM2-135M-Instruct on llama.cpp (127.0.0.1), offline.

Part 1, the chain: the first N BioRED dev abstracts through the Dagster document chain on the `smollm2` backbone
(all eight stages, the real litellm client): documents ok/failed, calls, tokens in/out per paper and divided by
the paper's own tokens (KARMA's cost question), seconds per paper, the KG increment.
Part 2, gold: the same abstracts through `karma gold-eval`'s path (entities + relations on the abstract) for
`smollm2` and `local`: mention / id / pair P/R/F1.
Part 3, concurrency: M summarizer calls over distinct abstracts at c = 1, 2, 4: completion tokens/s against the
server's own single-stream rate.

    python bench/llm_real.py [--n 20] [--c 2] [--skip-gold]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LANCE_LOG", "error")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
DEV = REPO.parent / "shared" / "data" / "biored" / "Dev.PubTator"


def dev_abstracts(n: int) -> list[str]:
    blocks = [b.strip() for b in DEV.read_text().split("\n\n") if "|t|" in b]
    return [b + "\n\n" for b in blocks[:n]]


def paper_text(block: str) -> str:
    lines = block.split("\n")
    return lines[0].split("|t|", 1)[1] + " " + lines[1].split("|a|", 1)[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20, help="dev abstracts (default 20)")
    ap.add_argument("--c", type=int, default=2, help="concurrency of the chain's backbone (default 2)")
    ap.add_argument("--skip-gold", action="store_true")
    ap.add_argument("--calls", type=int, default=8, help="summarizer calls per concurrency level (part 3)")
    args = ap.parse_args()

    import litellm

    from conftest import PipelineFactory
    from karma_dagster import runner
    from karma_dagster.runtime import services
    from karma_dagster.backbones.llm import LLMBackbone, LLMClient, PromptStore
    from karma_dagster.backbones.llm.local_server import LocalLLMServer, ServerSettings
    from karma_dagster.ingest.keys import date_of_document_key
    from karma_dagster.runtime.ledger import Ledger, ledger_path
    from karma_dagster.metrics.gold_run import evaluate_file
    from karma_dagster.runtime.params import KarmaParams
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.schemas.records import RawSection

    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at start")
    blocks = dev_abstracts(args.n)
    tmp = Path(tempfile.mkdtemp(prefix="karma-llm-real-"))
    try:
        with LocalLLMServer(ServerSettings(port=0), log_path=tmp / "server.log") as srv:
            cfg = BackboneConfig(kind="litellm", model="hosted_vllm/smollm2", api_base=srv.url, context_tokens=8192,
                                 concurrency=args.c, timeout=180, max_retries=1, seed=0)
            # ------------------------------------------------------------ part 1: the chain
            for sub in ("chain", "gold", "cache"):
                (tmp / sub).mkdir()
            factory = PipelineFactory(tmp / "chain", tmp / "cache")
            p = factory(backbones={"smollm2": cfg})
            (p.inbox / "biored-dev.pubtator").write_text("".join(blocks))
            runner.import_kg(p.defs, p.instance)
            keys, _ = runner.register_inbox(p.defs, p.instance)
            t0 = time.perf_counter()
            failures = runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
            chain_s = time.perf_counter() - t0
            dates = sorted({date_of_document_key(k) for k in keys})
            runner.run_increments(p.defs, p.instance, "smollm2", dates)
            counts = p.kg.snapshot_counts(namespace="smollm2")
            ledger = Ledger(ledger_path(p.storage.root()))
            per_doc = {t.group["partition"]: t for t in ledger.totals(["partition"], backbone="smollm2")}
            per_agent = ledger.totals(["agent"], backbone="smollm2")
            statuses = srv.answered()
            paper_tokens = {f"pmid-{b.split('|', 1)[0]}": litellm.token_counter(model="hosted_vllm/smollm2",
                                                                                text=paper_text(b)) for b in blocks}
            print(f"\n## Part 1: the KARMA chain on smollm2, {len(keys)} BioRED dev abstracts, concurrency {args.c}")
            print(f"documents ok {len(keys) - len(failures)}, failed {len(failures)}; {chain_s:.0f} s "
                  f"({chain_s / max(1, len(keys)):.1f} s per paper); server answered {statuses.count(200)} requests, "
                  f"refused {len(statuses) - statuses.count(200)}")
            for key, why in failures.items():
                print(f"- FAILED {key}: {why[:300]}")
            print(f"KG increment: {counts.n_extracted_edges} new edges, {counts.n_extracted_nodes} new nodes, "
                  f"{counts.n_evidence} evidence rows")
            print("\n| paper | calls | tokens in | tokens out | paper tokens | in / paper | out / paper |")
            print("|---|---|---|---|---|---|---|")
            tot = [0, 0, 0, 0]
            for key in keys:
                t = per_doc.get(key)
                pt = next((v for k, v in paper_tokens.items() if key.endswith(k)), 0)
                if t is None:
                    continue
                tot = [tot[0] + t.calls, tot[1] + t.tokens_in, tot[2] + t.tokens_out, tot[3] + pt]
                print(f"| {key} | {t.calls} | {t.tokens_in} | {t.tokens_out} | {pt} | {t.tokens_in / max(pt, 1):.1f} | "
                      f"{t.tokens_out / max(pt, 1):.2f} |")
            print(f"| **all** | {tot[0]} | {tot[1]} | {tot[2]} | {tot[3]} | {tot[1] / max(tot[3], 1):.1f} | "
                  f"{tot[2] / max(tot[3], 1):.2f} |")
            print("\n| agent | calls | tokens in | tokens out |\n|---|---|---|---|")
            for t in per_agent:
                print(f"| {t.group['agent']} | {t.calls} | {t.tokens_in} | {t.tokens_out} |")
            factory.close()

            # ------------------------------------------------------------ part 2: gold
            if not args.skip_gold:
                gold = tmp / "gold.pubtator"
                gold.write_text("".join(blocks))
                factory = PipelineFactory(tmp / "gold", tmp / "cache")
                p = factory(backbones={"smollm2": cfg, "local": BackboneConfig()})
                runner.import_kg(p.defs, p.instance)
                data = p.storage.paths()
                print(f"\n## Part 2: gold (BioRED dev, first {len(blocks)} abstracts; entities + relations on the "
                      "abstract, `karma gold-eval`'s path)")
                print("\n| backbone | mentions P/R/F1 | ids P/R/F1 | pairs P/R/F1 | seconds |\n|---|---|---|---|---|")
                for name in ("local", "smollm2"):
                    backbone = p.defs.resources["backbones"].get(name, p.storage)  # type: ignore[index, union-attr]
                    scores, seconds, _judged = evaluate_file(gold, backbone, services.dictionary(data),
                                                             services.entity_index(data), KarmaParams(),
                                                             identity=services.identity_index(data, name))
                    s = scores.summary()
                    print(f"| {name} | {s['mention_p']:.3f}/{s['mention_r']:.3f}/{s['mention_f1']:.3f} | "
                          f"{s['id_p']:.3f}/{s['id_r']:.3f}/{s['id_f1']:.3f} | "
                          f"{s.get('pair_p', 0):.3f}/{s.get('pair_r', 0):.3f}/{s.get('pair_f1', 0):.3f} | {seconds:.0f} |")
                factory.close()

            # ------------------------------------------------------------ part 3: concurrency
            print(f"\n## Part 3: {args.calls} summarizer calls (distinct abstracts, no cache) per concurrency level")
            print("\n| concurrency | wall s | completion tokens | tokens/s | x single stream |\n|---|---|---|---|---|")
            texts = [paper_text(b) for b in dev_abstracts(args.n + 3 * args.calls)[args.n:]]
            base = None
            for i, c in enumerate((1, 2, 4)):
                client = LLMClient("hosted_vllm/smollm2", api_base=srv.url, timeout=180, max_retries=1,
                                   concurrency=c, name=f"bench-c{c}", max_tokens=256)
                llm = LLMBackbone(f"bench-c{c}", client, PromptStore())
                batch = texts[i * args.calls:(i + 1) * args.calls]
                t0 = time.perf_counter()
                llm.map(lambda t: llm.summarize(RawSection(heading="Abstract", kind="abstract", text=t), 3), batch)
                wall = time.perf_counter() - t0
                rate = llm.usage().completion_tokens / wall
                base = base or rate
                print(f"| {c} | {wall:.1f} | {llm.usage().completion_tokens} | {rate:.1f} | {rate / base:.2f} |")
        load = os.getloadavg()
        print(f"\nload at end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
