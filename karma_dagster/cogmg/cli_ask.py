"""`karma ask "question" [--backbone local]`: answer one question from the shell, CogMG style.

Prints the query plan, hit or miss, the answer with its triples and provenance, or the missing triples with
their verified completions (nothing is written: completions enter the KG only through review).
"""

from __future__ import annotations

import argparse
import sys

SHOWN = 10  # triples printed with their provenance


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's private subparsers type
    p = sub.add_parser("ask", help="answer a question from the KG; on a miss, show the missing triples and their "
                                   "verified completions")
    p.add_argument("question", help="the question, in quotes")
    p.add_argument("--backbone", default="local", help="whose KG namespace and decomposer (default: local)")
    p.add_argument("--data-dir", default="", help="run-time data folder (default: $DAGSTER_HOME/karma)")
    p.add_argument("--no-complete", action="store_true", help="only answer; do not complete a miss")
    p.set_defaults(func=cmd_ask)


def _backbone(name: str, data):  # noqa: ANN001, ANN202
    from karma_dagster import services
    from karma_dagster.config import read_backbones

    entries = read_backbones().runnable()
    if name not in entries:
        raise SystemExit(f"karma ask: unknown, disabled or NOT CONFIGURED backbone {name!r}; runnable in "
                         f"backbones.yaml: {sorted(entries)}")
    settings = entries[name].settings()
    if settings.kind == "local":
        return settings, None
    built = services.backbone(name, settings, data)
    return settings, getattr(built, "base", built)


def render(answer, completions, out=None) -> None:  # noqa: ANN001
    out = out or sys.stdout  # looked up per call: a default bound at import keeps a stream that may be closed
    plan = answer.plan
    print(f"question: {answer.question}", file=out)
    print(f"plan ({plan.decomposer}):", file=out)
    for i, s in enumerate(plan.steps, 1):
        e = s.entity
        where = f"{e.entity_id}, {e.kind}" + ("" if e.linked else ", not in the KG")
        arrow = f"{e.name} -{s.relation}-> ?" if s.direction == "out" else f"? -{s.relation}-> {e.name}"
        print(f"  {i}. {arrow}   ({where}; answer kinds: {', '.join(s.answer_kinds) or 'any'})", file=out)
    for note in plan.notes:
        print(f"  note: {note}", file=out)
    if answer.error:
        print(f"MISS: {answer.error}", file=out)
        return
    print(("HIT" if answer.hit else "MISS") + f" on the {answer.backbone} KG", file=out)
    if answer.hit:
        print(f"answer: {', '.join(answer.answers)}", file=out)
        for t in answer.triples[:SHOWN]:
            print(f"  {t.head_name} -{t.relation}-> {t.tail_name}  [{t.source}, confidence "
                  f"{t.confidence if t.confidence is None else round(t.confidence, 3)}]", file=out)
            for p in t.provenance[:3]:
                where = f"{p.get('doc_key')} {p.get('date', '')} ({p.get('backbone', '')})" if p.get("doc_key") else ""
                print(f"     {where} {str(p.get('evidence', ''))[:160]}".rstrip(), file=out)
        if len(answer.triples) > SHOWN:
            print(f"  ... and {len(answer.triples) - SHOWN} more triples", file=out)
    if answer.missing:
        print("missing triples:", file=out)
        for m in answer.missing:
            print(f"  ({m.head}, {m.relation}, {m.tail})", file=out)
    if completions:
        print("completions (unreviewed; enter the KG only when accepted in review):", file=out)
        for c in completions:
            verdict = "SUPPORTED" if c.supported else "unsupported"
            print(f"  {c.head_name} -{c.relation}-> {c.tail_name}  [{c.method}, {verdict}, score {c.score:.2f}]",
                  file=out)
            top = next((p for p in c.passages if len(p.entities) == 2), c.passages[0] if c.passages else None)
            if top is not None:
                print(f"     {top.passage_id} (BM25 {top.score:.2f}; marks {', '.join(top.entities) or 'none'}): "
                      f"{top.text[:200]}", file=out)


def cmd_ask(args: argparse.Namespace) -> int:
    from karma_dagster.cogmg.answer import NoLinkableEntity, answer_question
    from karma_dagster.cogmg.pipeline import complete_answer
    from karma_dagster.paths import DataPaths

    from karma_dagster.cogmg.questions import QuestionRejected, check_question

    if not args.question.strip():
        print("karma ask: the question is empty", file=sys.stderr)
        return 2
    try:
        check_question(args.question)
    except QuestionRejected as exc:
        print(f"karma ask: {exc}", file=sys.stderr)
        return 2
    from karma_dagster.kg.backends import kg_exists

    data = DataPaths(args.data_dir)
    if not kg_exists(data):
        print(f"karma ask: no KG under the data folder yet: run `karma import-kg` or `karma run` first",
              file=sys.stderr)
        return 2
    settings, llm_backbone = _backbone(args.backbone, data)
    try:
        answer = answer_question(args.question, backbone=args.backbone, settings=settings, data=data,
                                 llm_backbone=llm_backbone)
    except NoLinkableEntity as exc:
        print(f"karma ask: {exc}", file=sys.stderr)
        return 1
    completions = [] if args.no_complete else complete_answer(answer, settings=settings, data=data,
                                                              llm_backbone=llm_backbone)
    render(answer, completions)
    return 0 if answer.hit else 1
