"""`karma ask "question" [--backbone local]`: answer one question from the shell, CogMG style.

Prints the query plan (up to two hops), hit or miss; a hit's written answer with its citations (marker -> triple
-> evidence), or a miss's missing triples with their verified completions, which are queued for review (the items
`karma review` collects from the same completions file; asking again refreshes them, never duplicates). A miss
with verified completions is answered from them, marked as not yet in the KG, citing the passages. Nothing enters
the KG without review. An LLM backbone's key is read from its `api_key_env` as `karma run` reads it.

Exit codes: 0 the question was answered (a hit, a miss with or without completions — "no fact found" — or "not
understood" when the question names no entity a plan can start from); 2 bad input (an empty or too long question,
no KG, an unknown or unconfigured backbone); 1 a failure while answering.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from typing import Any

SHOWN = 10  # triples printed with their provenance when there is no written answer


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's private subparsers type
    p = sub.add_parser("ask", help="answer a question from the KG with cited triples; on a miss, queue the missing "
                                   "triples' verified completions for review",
                       description="Answer a question from the KG with cited triples; on a miss, answer from the "
                                   "verified completions (not yet in the KG) and queue them for review.",
                       epilog="exit codes: 0 answered (a hit, 'no fact found' or 'not understood'), 2 bad input "
                              "(empty or too long question, no KG, unknown backbone), 1 failure")
    p.add_argument("question", help="the question, in quotes")
    p.add_argument("--backbone", default="local", help="whose KG namespace and decomposer (default: local)")
    p.add_argument("--data-dir", default="", help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.add_argument("--no-complete", action="store_true", help="only answer; do not complete a miss")
    p.add_argument("--no-queue", action="store_true", help="show a miss's completions without queueing them for review")
    p.set_defaults(func=cmd_ask)


class AskError(ValueError):
    """The backbone cannot be used here (unknown, or its key variable unset); the message names it."""


def _backbone(name: str, data) -> tuple[Any, Any]:  # noqa: ANN001
    """(settings, the LLM backbone or None for local). A backbone named here runs even when backbones.yaml has it
    disabled, as with `karma run --backbone`; one whose key variable is unset cannot, with the same error."""
    from karma_dagster.runtime import services
    from karma_dagster.cogmg import llm, write
    from karma_dagster.runtime.config import read_backbones

    entries = read_backbones().backbones
    if name not in entries:
        raise AskError(f"--backbone {name}: not in backbones.yaml; it has: {', '.join(sorted(entries))}")
    settings = entries[name].keyed_settings(name)  # ConfigError naming the variable when it is unset
    if settings.kind == "local":
        return settings, None
    built = services.backbone(name, settings, data, required_prompts=(llm.DECOMPOSE, llm.COMPLETE, write.ANSWER))
    return settings, getattr(built, "base", built)


def ask_key(question: str) -> str:
    """The completions file and review items' origin of an asked question: the same question, the same items."""
    return "ask-" + hashlib.sha256(" ".join(question.split()).encode()).hexdigest()[:12]


def queue_completions(completions: list, backbone: str, key: str, data) -> dict[str, int]:  # noqa: ANN001
    """Write the completions where the completions asset writes them and add their review items (with the KG
    change each would make), exactly what `karma review` collects from that file."""
    from karma_dagster.cogmg.store import CogmgStore
    from karma_dagster.kg.backends import kg_location
    from karma_dagster.review.changes import with_changes
    from karma_dagster.review.cogmg_items import items_from_completions
    from karma_dagster.review.queue import ReviewQueue

    CogmgStore(data).write_completions(backbone, key, completions)
    items = items_from_completions(completions, partition_key=key)
    counts = ReviewQueue.for_data(data).add_items(with_changes(items, kg_location(data)))
    return {"items": len(items), **counts}


def render(answer, completions, out=None, queued: dict[str, int] | None = None,  # noqa: ANN001
           review_hint: str = "karma review") -> None:
    out = out or sys.stdout  # looked up per call: a default bound at import keeps a stream that may be closed
    plan = answer.plan
    print(f"question: {answer.question}", file=out)
    print(f"plan ({plan.decomposer}):", file=out)
    for i, s in enumerate(plan.steps, 1):
        e = s.entity
        where = f"{e.entity_id}, {e.kind}" + ("" if e.linked else ", not in the KG")
        kinds = s.then.answer_kinds if s.then is not None else s.answer_kinds
        via = f"; via: {', '.join(s.answer_kinds) or 'any'}" if s.then is not None else ""
        print(f"  {i}. {s.describe()}   ({where}{via}; answer kinds: {', '.join(kinds) or 'any'})", file=out)
    for note in plan.notes:
        print(f"  note: {note}", file=out)
    if not answer.understood:
        print(f"NOT UNDERSTOOD: {answer.error.removeprefix('not understood: ')} (the KG was not queried)", file=out)
        return
    if answer.error:
        print(f"MISS: {answer.error}", file=out)
        return
    print(("HIT" if answer.hit else "MISS") + f" on the {answer.backbone} KG", file=out)
    if answer.hit:
        print(f"answer: {', '.join(answer.answers)}", file=out)
    if not answer.hit:
        print("no fact found in the KG" + ("" if answer.citations else " (and no verified completion to answer from)"),
              file=out)
    if answer.citations:
        print(f"written answer ({answer.writer}):", file=out)
        print(f"  {answer.text or '(none: no claim kept)'}", file=out)
        for note in answer.writer_notes:
            print(f"  FLAGGED: {note}", file=out)
        print("citations:", file=out)
        for c in answer.citations:
            print(f"  {c.label()}", file=out)
            if c.doc_key:
                print(f"      {c.sentence[:300]}", file=out)
    elif answer.hit:
        for t in answer.triples[:SHOWN]:
            print(f"  {t.head_name} -{t.relation}-> {t.tail_name}  [{t.source}, confidence "
                  f"{t.confidence if t.confidence is None else round(t.confidence, 3)}]", file=out)
            for p in t.provenance[:3]:
                where = f"{p.get('doc_key')} {p.get('date', '')} ({p.get('backbone', '')})" if p.get("doc_key") else ""
                print(f"     {where} {str(p.get('evidence', ''))[:160]}".rstrip(), file=out)
    shown = len(answer.citations) or SHOWN
    if answer.hit and len(answer.triples) > shown:
        print(f"  ... and {len(answer.triples) - shown} more triples", file=out)
    if answer.missing:
        print("missing triples:", file=out)
        for m in answer.missing:
            print(f"  ({m.head}, {m.relation}, {m.tail})", file=out)
    if completions:
        print("completions (unreviewed; enter the KG only when accepted in review):", file=out)
        for c in completions:
            if c.refused:
                print(f"  {c.head_name} -{c.relation}-> {c.tail_name}  [{c.method}, REFUSED: {c.refused}]", file=out)
                continue
            verdict = "SUPPORTED" if c.supported else "unsupported"
            read = f"; {c.verdict}" if c.verdict else ""
            fix = f"; the passage states {c.proposed_relation} instead" if c.proposed_relation else ""
            print(f"  {c.head_name} -{c.relation}-> {c.tail_name}  [{c.method}, {verdict}, score {c.score:.2f}"
                  f"{read}{fix}]", file=out)
            top = next((p for p in c.passages if len(p.entities) == 2), c.passages[0] if c.passages else None)
            if top is not None:
                print(f"     {top.passage_id} (BM25 {top.score:.2f}; marks {', '.join(top.entities) or 'none'}): "
                      f"{top.text[:200]}", file=out)
    if queued is not None:
        again = queued["refreshed"] + queued.get("folded", 0)  # folded: a fact the queue held from another proposal
        print(f"queued for review: {queued['items']} item(s) ({queued['new']} new, {again} already queued, "
              f"{queued['decided_kept']} already decided); review them with `{review_hint}`", file=out)


def cmd_ask(args: argparse.Namespace) -> int:
    from karma_dagster.cogmg import write
    from karma_dagster.cogmg.answer import answer_question
    from karma_dagster.cogmg.pipeline import complete_answer
    from karma_dagster.cogmg.questions import QuestionRejected, check_question
    from karma_dagster.runtime.config import ConfigError
    from karma_dagster.kg.backends import kg_exists
    from karma_dagster.runtime.paths import DataPaths

    if not args.question.strip():
        print("karma ask: the question is empty", file=sys.stderr)
        return 2
    try:
        check_question(args.question)
    except QuestionRejected as exc:
        print(f"karma ask: {exc}", file=sys.stderr)
        return 2
    data = DataPaths(args.data_dir)
    if not kg_exists(data):
        print("karma ask: no KG under the data folder yet: run `karma import-kg` or `karma run` first",
              file=sys.stderr)
        return 2
    try:
        settings, llm_backbone = _backbone(args.backbone, data)
    except (AskError, ConfigError) as exc:
        print(f"karma ask: {exc}", file=sys.stderr)
        return 2
    key = ask_key(args.question)
    answer = answer_question(args.question, backbone=args.backbone, settings=settings, data=data,
                             llm_backbone=llm_backbone, question_id=key)  # "not understood" is an answer
    if answer.hit:
        answer = write.write_local(answer) if llm_backbone is None else write.write_llm(answer, llm_backbone)
    completions = [] if args.no_complete else complete_answer(answer, settings=settings, data=data,
                                                              llm_backbone=llm_backbone)
    answer = write.write_completions(answer, completions)
    queued = None
    if any(not c.refused for c in completions) and not getattr(args, "no_queue", False):
        queued = queue_completions(completions, args.backbone, key, data)
    hint = "karma review" + (f" --data-dir {args.data_dir}" if args.data_dir else "")
    render(answer, completions, queued=queued, review_hint=hint)
    return 0  # answered: a hit, "no fact found" or "not understood" (a failure raised: `karma` exits 1)
