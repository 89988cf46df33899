"""`karma context "question" [--budget N] [--backbone local]`: the KG context of a question, ready to paste into any
LLM's prompt (cogmg/kg_context.py); `--json` prints the whole context (entities, triples, evidence, counts)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's private subparsers type
    from karma_dagster.kg_tools.bounds import CONTEXT_BUDGET_DEFAULT, CONTEXT_BUDGET_MAX, CONTEXT_BUDGET_MIN

    p = sub.add_parser("context", help="the KG context of a question for any LLM: entities, ranked triples and "
                                       "evidence, cut to a token budget")
    p.add_argument("question", help="the question, in quotes")
    p.add_argument("--budget", type=int, default=CONTEXT_BUDGET_DEFAULT,
                   help=f"tokens of context ({CONTEXT_BUDGET_MIN} to {CONTEXT_BUDGET_MAX}; default "
                        f"{CONTEXT_BUDGET_DEFAULT}; ~3 characters a token)")
    p.add_argument("--backbone", default="local", help="whose KG namespace (default: local)")
    p.add_argument("--as-of", default=None, help="the KG as it was on this date, YYYY-MM-DD")
    p.add_argument("--data-dir", default="", help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.add_argument("--json", action="store_true", help="print the whole context as JSON")
    p.set_defaults(func=cmd_context)


def cmd_context(args: argparse.Namespace) -> int:
    from karma_dagster.cogmg.kg_context import KGContextError, kg_context
    from karma_dagster.runtime.paths import DataPaths

    try:
        as_of = dt.date.fromisoformat(args.as_of) if args.as_of else None
    except ValueError:
        print(f"karma context: --as-of {args.as_of!r} is not a date: write YYYY-MM-DD", file=sys.stderr)
        return 2
    try:
        found = kg_context(args.question, args.budget, data=DataPaths(args.data_dir), namespace=args.backbone,
                           as_of=as_of)
    except KGContextError as exc:
        print(f"karma context: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(found.model_dump_json(indent=2))
        return 0
    print(found.text, end="")
    print(f"-- {len(found.triples)} triple(s), {found.tokens_used} of {found.budget} tokens "
          f"({found.token_estimator}); left out by the budget: {found.dropped['triples']} triple(s), "
          f"{found.dropped['evidence']} evidence sentence(s)", file=sys.stderr)
    for note in found.notes:
        print(f"-- note: {note}", file=sys.stderr)
    return 0
