"""KG context for any LLM, measured like MedKGent: answer correctness on the shipped question set with and without
the KG context (cogmg/kg_context.py), per context source (a grown KG's namespaces, and the seed alone) and per
answering model.

Answering models: SmolLM2-135M-Instruct served here by llama.cpp on 127.0.0.1 (`--no-smollm2` to skip), plus every
litellm model of backbones.yaml whose key variable is set (one per distinct model; skipped, and said so, when it is
unset). The same versioned prompt (prompts/kg_context_answer/) is asked without context and with the question's
context at `--budget` tokens; no response cache, so the seconds are real. A `KG only` row per source is the
context's own top answers (the far ends of its best 1-hop triples): what the KG gives with no model at all.

Scoring (stated rule), shown as "strict (lenient)": strict, one of the answer's first three names, normalized as
QA coherence normalizes names (metrics/qa.py: NFKC, case, whitespace, apostrophes) with a parenthetical and the
punctuation around it dropped, IS one of the question's `plausible` names; lenient, one contains a plausible name
as a whole-word phrase and is at most 8 words long (no credit for pasting the context).
Questions: data/qa/sample_questions.v2.yaml (76; every answer needs an edge the chains extracted, the seed lacks).

    python bench/kg_context.py --data-dir DIR [--namespace local ...] [--budget 1000] [--limit N]

Run it after `karma run --data-dir DIR` (the KG it grew). Also printed: the context's estimated tokens against
SmolLM2's own tokenizer (the estimator is ceil(characters / 3) per item).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LANCE_LOG", "error")

from pydantic import BaseModel, ConfigDict, Field  # noqa: E402

AGENT = "kg_context_answer"
SEED_ROW = "__seed__"  # SEED_ONLY_NAMESPACE: the shared seed with no namespace's merges
MAX_WORDS = 8


class ContextAnswerOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    answers: list[str] = Field(min_length=1)  # a grammar-held model otherwise often answers []; 3 are scored


def _name(answer: str) -> str:
    """An answer as a name: normalized (metrics/qa.py), a parenthetical and the punctuation around it dropped."""
    from karma_dagster.metrics.qa import normalize

    return re.sub(r"^\W+|\W+$", "", re.sub(r"\([^)]*\)", " ", normalize(answer))).strip()


def correct(answers: list[str], plausible: list[str], lenient: bool = False) -> bool:
    """Strict: one of the first three answers IS a plausible name. Lenient: one contains a plausible name as a
    whole-word phrase and is at most MAX_WORDS words long ("levofloxacin-induced thrombocytopenia")."""
    keys = [_name(p) for p in plausible]
    for a in answers[:3]:
        n = _name(a)
        if not n:
            continue
        if n in keys:
            return True
        if lenient and len(n.split()) <= MAX_WORDS and any(re.search(rf"(?<!\w){re.escape(k)}(?!\w)", n)
                                                            for k in keys):
            return True
    return False


def tally(answers: list[list[str]], questions: list) -> str:  # noqa: ANN001
    """'strict (lenient)' correct answers."""
    strict = sum(correct(a, q.plausible) for a, q in zip(answers, questions, strict=True))
    lenient = sum(correct(a, q.plausible, lenient=True) for a, q in zip(answers, questions, strict=True))
    return f"{strict} ({lenient})"


def answerers() -> tuple[list[tuple[str, object]], list[str]]:
    """(name, BackboneSettings) of the keyed litellm models of backbones.yaml, and why the others were skipped."""
    from karma_dagster.runtime.config import read_backbones

    out, skipped, models = [], [], set()
    for name, e in read_backbones().backbones.items():
        if e.kind != "litellm" or e.model in models or name == "smollm2":
            continue
        models.add(e.model)
        if e.api_base and "127.0.0.1" in e.api_base or e.api_base and "localhost" in e.api_base:
            skipped.append(f"{name}: a local server ({e.api_base}) this bench does not start")
        elif e.key_missing():
            skipped.append(f"{name} ({e.model}): skipped, {e.api_key_env} is unset")
        else:
            out.append((name, e.keyed_settings(name)))
    return out, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="the data dir a `karma run` grew")
    ap.add_argument("--namespace", action="append", help="context source (repeatable; default: every namespace "
                                                          "with merged evidence, and the seed alone)")
    ap.add_argument("--budget", type=int, default=1000, help="context tokens (default 1000)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions")
    ap.add_argument("--every", type=int, default=1, help="only every N-th question (a subset spanning the papers)")
    ap.add_argument("--llm-namespace", action="append", help="the sources an answering model is asked with "
                                                              "(repeatable; default: every --namespace)")
    ap.add_argument("--no-smollm2", action="store_true", help="do not start the local llama.cpp model")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still stop the model server (finally)

    from karma_dagster.backbones.llm import LLMClient, PromptStore
    from karma_dagster.backbones.llm.local_server import LocalLLMServer, ServerSettings, runtime_missing
    from karma_dagster.cogmg.kg_context import TOKEN_ESTIMATOR, KGContext, kg_context
    from karma_dagster.kg.backends import kg_exists, kg_store
    from karma_dagster.metrics.qa import load_questions
    from karma_dagster.runtime.paths import DataPaths

    data = DataPaths(args.data_dir)
    if not kg_exists(data):
        raise SystemExit(f"no KG in {args.data_dir}: run `karma run --data-dir {args.data_dir}` first")
    qs = load_questions()
    questions = qs.questions[:: max(1, args.every)]
    questions = questions[: args.limit] if args.limit else questions
    with kg_store(data).connect(read_only=True) as con:
        grown = [r[0] for r in con.execute("SELECT DISTINCT namespace FROM evidence ORDER BY 1").fetchall()]
    sources = args.namespace or [*grown, SEED_ROW]
    print(f"machine: {os.cpu_count()} cores; uptime: {os.popen('uptime').read().strip()}")
    print(f"questions: data/qa/sample_questions.v2.yaml, {len(questions)} of {len(qs.questions)} (every "
          f"{max(1, args.every)}, limit {args.limit or 'none'}); budget "
          f"{args.budget} tokens ({TOKEN_ESTIMATOR}); context sources: {', '.join(sources)}", flush=True)

    # ---- the contexts (one per source and question), timed
    contexts: dict[str, list[KGContext]] = {}
    ctx_seconds: dict[str, float] = {}
    kg_context(questions[0].question, args.budget, data=data, namespace=sources[0])  # loads the NER and index once
    for ns in sources:
        t0 = time.perf_counter()
        contexts[ns] = [kg_context(q.question, args.budget, data=data, namespace=ns) for q in questions]
        ctx_seconds[ns] = time.perf_counter() - t0
        print(f"contexts from {ns}: {ctx_seconds[ns]:.1f} s for {len(questions)}", flush=True)

    rows: list[tuple[str, str, int, str, str, float, float]] = []
    for ns in sources:
        rows.append(("KG only (top-3 answers of the context, no LLM)", _label(ns), len(questions), "n/a",
                     tally([c.answers() for c in contexts[ns]], questions),
                     statistics.mean(c.tokens_used for c in contexts[ns]), ctx_seconds[ns]))

    models, skipped = answerers()
    for s in skipped:
        print(f"answering model {s}")
    tmp = Path(tempfile.mkdtemp(prefix="karma-kg-context-"))
    server = None
    if not args.no_smollm2:
        why = runtime_missing()
        if why:
            print(f"smollm2: skipped ({why})")
        else:
            server = LocalLLMServer(ServerSettings(port=0), log_path=tmp / "server.log").start()
            from karma_dagster.runtime.config import BackboneSettings

            models.insert(0, ("smollm2 (SmolLM2-135M-Instruct Q4_1, llama.cpp, 2 threads)", BackboneSettings(
                kind="litellm", model="hosted_vllm/smollm2", api_base=server.url, context_tokens=8192,
                timeout=180, max_retries=1, seed=0, response_format="auto", max_tokens=96)))
    prompts = PromptStore()
    print(f"prompt: {prompts.latest(AGENT).prompt_id}@{prompts.latest(AGENT).sha256}")
    real_tokens: list[tuple[int, int]] = []
    bare_seconds: dict[str, int] = {}
    try:
        if server is not None:
            real_tokens = _smollm2_tokens(server.model_path, [c for ns in sources for c in contexts[ns]])
        for label, settings in models:
            client = LLMClient.from_settings(settings, name=label.split()[0])
            client.max_tokens = min(client.max_tokens, 256)

            def ask(question: str, context: str) -> list[str]:
                rendered = prompts.render(AGENT, None, domain="general biomedicine", question=question, context=context)
                try:
                    out, _usage = client.complete_json(rendered, ContextAnswerOutput)
                except Exception as exc:  # noqa: BLE001 - a failed answer is a wrong one; say so once per model
                    print(f"  {label.split()[0]}: no answer ({type(exc).__name__}: {str(exc)[:120]})")
                    return []
                return out.answers

            t0 = time.perf_counter()
            bare = tally([ask(q.question, "") for q in questions], questions)
            bare_s = time.perf_counter() - t0
            bare_seconds[label.split()[0]] = round(bare_s)
            print(f"{label.split()[0]} without context: {bare} of {len(questions)} in {bare_s:.0f} s", flush=True)
            for ns in args.llm_namespace or sources:
                t0 = time.perf_counter()
                hits = tally([ask(q.question, c.text) for q, c in zip(questions, contexts[ns], strict=True)],
                             questions)
                s = time.perf_counter() - t0 + ctx_seconds[ns]
                print(f"{label.split()[0]} with {ns} context: {hits} of {len(questions)} in {s:.0f} s", flush=True)
                rows.append((label, _label(ns), len(questions), bare, hits,
                             statistics.mean(c.tokens_used for c in contexts[ns]), s))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nwithout-context seconds: {bare_seconds}")
    print("\n| answering model | context source | questions | correct without context | correct with context "
          "| mean context tokens | seconds (with context) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, src, n, bare, hits, tokens, s in rows:
        print(f"| {label} | {src} | {n} | {bare} | {hits} | {tokens:.0f} | {s:.0f} |")
    if real_tokens:
        est, real = sum(e for e, _ in real_tokens), sum(r for _, r in real_tokens)
        over = sum(r > args.budget for _, r in real_tokens)
        print(f"\ntoken estimate vs SmolLM2's tokenizer over {len(real_tokens)} contexts: estimated {est}, real {real} "
              f"(real / estimated {real / est:.2f}); {over} context(s) over the budget by the real count")
    print(f"\nuptime at end: {os.popen('uptime').read().strip()}")
    return 0


def _label(ns: str) -> str:
    return "seed KG alone" if ns == SEED_ROW else f"`{ns}` KG"


def _smollm2_tokens(model_path: Path, contexts: list) -> list[tuple[int, int]]:  # noqa: ANN001
    """(estimated, SmolLM2's own count) of each context text: the estimator checked against a real tokenizer."""
    from llama_cpp import Llama

    vocab = Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    return [(c.tokens_used, len(vocab.tokenize(c.text.encode("utf-8"), add_bos=False))) for c in contexts]


if __name__ == "__main__":
    sys.exit(main())
