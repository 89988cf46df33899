"""CogMG completions (cogmg/models.Completion) as review items: the filled triple, its passages, its verdict.

The item's origin is the question's partition key (`<set>.v<N>__<id>`, the file the completions asset wrote)
when known, so its link opens `<backbone>/completions` at that partition; else the completion's question id.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from karma_dagster.cogmg.models import Completion
from karma_dagster.kg import admission_rules as rules
from karma_dagster.cogmg.store import CogmgStore
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.marks import find_spans
from karma_dagster.review.models import Evidence, ReviewItem, item_id
from karma_dagster.review.queue import ReviewQueue


def collect_cogmg(paths: DataPaths, only: Iterable[str] | None = None) -> list[ReviewItem]:
    """Every completion the completions asset wrote (`<data>/cogmg/<backbone>/completions/<key>.json`)."""
    store = CogmgStore(paths)
    backbones = list(only) if only is not None else sorted(
        p.name for p in Path(store.root).iterdir() if p.is_dir()) if Path(store.root).exists() else []
    items: list[ReviewItem] = []
    for ns in backbones:
        for key in store.keys(ns, "completions"):
            items += items_from_completions(store.read_completions(ns, key), partition_key=key)
    return items


def completion_item_id(c: Completion, partition_key: str | None = None) -> str:
    return item_id("cogmg", c.backbone, c.head_id, c.relation, c.tail_id, partition_key or c.question_id)


def accepted_item_ids(queue: ReviewQueue) -> set[str]:
    """Ids of the CogMG items a reviewer accepted (as is or edited): what 'after review' counts as in the KG;
    match a completion with `completion_item_id(c, partition_key) in accepted_item_ids(queue)`. An item is one
    fact: every CogMG proposal folded into an accepted item counts (each backbone's, each question's)."""
    return {p.proposal_id for i, _ in queue.accepted() for p in i.all_proposals() if p.source == "cogmg"}


def items_from_completions(completions: Iterable[Completion], partition_key: str | None = None) -> list[ReviewItem]:
    """One item per completed triple; a completion verification refused (one entity at both ends) is no item."""
    items: dict[str, ReviewItem] = {}
    for c in completions:
        if getattr(c, "refused", ""):
            continue
        item = from_completion(c, partition_key)
        old = items.get(item.item_id)
        if old is None or item.score > old.score:  # the same triple filled twice: the better supported one
            items[item.item_id] = item
    return list(items.values())


def admission(c: Completion) -> rules.Refusal | None:
    """The admission rules (kg/admission_rules.py) on the completion as filled: ends, kinds and names as the fill
    gives them (the merge of an accepted item asks again with the KG's kinds)."""
    evidence = getattr(c, "evidence", "") or next((p.text for p in c.passages if p.text.strip()), "")
    result = rules.check(rules.Fact(
        head_id=c.head_id, relation=c.relation, tail_id=c.tail_id, head_kind=getattr(c, "head_kind", "") or None,
        tail_kind=getattr(c, "tail_kind", "") or None, head_name=c.head_name, tail_name=c.tail_name,
        evidence=evidence))
    return result if isinstance(result, rules.Refusal) else None


def from_completion(c: Completion, partition_key: str | None = None) -> ReviewItem:
    ends = [(c.head_name, "head"), (c.tail_name, "tail")]
    evidence = []
    fill_text = getattr(c, "evidence", "")
    if fill_text:
        evidence.append(Evidence(text=fill_text, where=f"filled by {c.method}", spans=find_spans(fill_text, ends)))
    for p in c.passages:
        names = ends + [(e, "entity") for e in p.entities]
        evidence.append(Evidence(text=p.text, where=f"{p.doc_key} / {p.passage_id}", score=round(p.score, 4),
                                 spans=find_spans(p.text, names)))
    scores = {"verification": round(c.score, 4), "supported": 1.0 if c.supported else 0.0}
    if getattr(c, "fill_score", None):
        scores["fill"] = round(float(c.fill_score), 4)
    if c.passages:
        scores["best_passage_bm25"] = round(max(p.score for p in c.passages), 4)
    verdict = ("supported by " + ", ".join(c.evidence_doc_keys) if c.supported and c.evidence_doc_keys
               else "supported" if c.supported else "NOT supported by any retrieved passage")
    read = getattr(c, "verdict", "")
    if read and not c.supported:  # what the passage's sentence said instead (cogmg/relation_reading.py)
        verdict += f" ({read})"
    if getattr(c, "proposed_relation", ""):
        verdict += f"; the passage states {c.proposed_relation!r} instead: edit the relation to accept that"
    refusal = admission(c)
    if refusal is not None:  # queued all the same (what is not admitted goes to review), the reason first
        verdict += f" — {refusal.message()}; accepting it as it is will not enter the KG: edit it"
    return ReviewItem(
        item_id=completion_item_id(c, partition_key), source="cogmg",
        backbone=c.backbone, head_id=c.head_id, head_name=c.head_name, head_kind=getattr(c, "head_kind", "") or None,
        relation=c.relation, tail_id=c.tail_id, tail_name=c.tail_name, tail_kind=getattr(c, "tail_kind", "") or None,
        origin=partition_key or c.question_id, agent=f"cogmg:{c.method}", stage="completions", evidence=evidence, scores=scores,
        score=min(1.0, max(0.0, float(c.score))), change="", note=f"question: {c.question} — {verdict}",
        paper=c.evidence_doc_keys[0] if c.evidence_doc_keys else "",  # the supporting passage's paper comes first
    )
