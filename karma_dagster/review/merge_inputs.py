"""Accepted review decisions -> what kg/merge.merge_increment takes, and the merge of what is not merged yet.

An item is one fact, proposed by one or more backbones: accepted, it enters the KG of every backbone that proposed
it, each as that backbone's proposal (its document and paper; models.ReviewItem.for_backbone), and is recorded
merged per backbone. An Accept that chose EXTENSION adds the relation to the backbone's schema extensions
(review/accepting.py) and waits, refused by the admission rules with that reason, for a metaedge in the schema.

Each accepted item is its own document `review_<item_id>` of the KG date it was decided on (UTC): knowledge
enters the graph when a person confirmed it, so no past day's view changes. Its row names the paper it was read
from (`paper_key`: a KARMA item's origin document, a CogMG item's supporting passage's), so it folds into that
paper's support instead of counting as a paper of its own, and one whose paper the KG already holds a reading of
the edge from adds nothing to its confidence (kg/reinforcement.py). Its row carries the item's score as
evidence, the best evidence text, and `prompt_version` "reviewed by <name> via <source>" (the provenance a KG
reader sees next to backbone and run). A reviewed row is not adjudicated again by the day's merge (verdict
"skipped"): a person decided; a conflict item accepted supersedes the KG edge it contradicted ("replace").

merge_increment replaces the increments row and adjudications of its (namespace, date), so a date's merge must
carry all of that date's documents: the chain's (`chain_docs`) and every accepted review document of the day.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from karma_dagster.agents.integration import collect_document
from karma_dagster.runtime.document_states import DocumentStates
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.kg import admission_rules as rules
from karma_dagster.kg import day_order, keyed, merge
from karma_dagster.kg.backends import kg_store, open_kg_store
from karma_dagster.kg.merge import DocInput, IncrementStats, TripleValidationError
from karma_dagster.kg.store import KGStore, NodeIn, load_schema, schema_relations
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review import accepting
from karma_dagster.review.models import EXTENSION, Decision, ReviewItem
from karma_dagster.review.queue import ReviewError, ReviewQueue, default_path
from karma_dagster.runtime.stage_store import StageStore

DOC_PREFIX = "review_"
ChainDocs = Callable[[str, dt.date], dict[str, DocInput]]  # (namespace, date) -> the chain's documents of that day


class NotMergeable(ReviewError):
    """An accepted item the KG cannot take as it is (names the item and what to do)."""


class MergeOutcome(BaseModel):
    namespace: str
    date: dt.date
    items: list[str]  # item ids merged now
    stats: IncrementStats
    again: bool = False  # a later date withdrawn by an earlier one's merge, merged again after it (day order)


def doc_key(item_id: str) -> str:
    return DOC_PREFIX + item_id


def merge_date(decision: Decision) -> dt.date:
    return decision.decided_at.date()


def provenance(item: ReviewItem, decision: Decision) -> str:
    return f"reviewed by {decision.reviewer} via {item.source}"


def merge_input(item: ReviewItem, decision: Decision, kg_nodes: Mapping[str, Mapping[str, Any]]) -> DocInput:
    """One accepted item as (triples, nodes); NotMergeable says why it cannot enter the KG as it is.

    `kg_nodes`: KGStore.nodes_by_id of the item's ends. The document carries a node for every end that is not a
    seed node, also one the KG already holds: an end this document introduced is a KG node only through its own
    extracted_nodes row, which a re-merge of its date deletes first (merge._delete_previous), and an end another
    document introduced must outlive that document's re-merge without it (as integration.collect_document carries
    a chain's). A node stored again under this document keeps its name and kind (kg_nodes takes them from its
    earliest row; another name becomes a synonym); a seed end is left out, as merge_increment would leave it. So
    what the document holds depends on the item and the seed only (and on the KG's node for an end the item
    gives no kind): every merge of its date takes, and fingerprints, it the same."""
    if not decision.accepted:
        raise NotMergeable(f"item {item.item_id} was {decision.action}ed, not accepted")
    if decision.choice == EXTENSION:
        raise NotMergeable(f"item {item.item_id}: relation type {item.relation!r} ({item.head_kind or '?'} -> "
                           f"{item.tail_kind or '?'}) was added to the schema's extensions of {item.backbone} "
                           f"(accepted by {decision.reviewer}); the triple enters the KG once kg/schema.yaml has a "
                           "metaedge for it: refused by admission rule metaedge until then")
    if item.relation not in schema_relations():
        what = "a new relation type" if item.source == "new_relation_type" else "not a KG schema relation"
        raise NotMergeable(f"item {item.item_id}: {item.relation!r} is {what}: add it to kg/schema.yaml, or decide "
                           "again on an edited item whose relation is one of the schema's")
    kinds = load_schema()[0]
    nodes = []
    for end in ("head", "tail"):
        node_id, name, kind = getattr(item, f"{end}_id"), getattr(item, f"{end}_name"), getattr(item, f"{end}_kind")
        known = kg_nodes.get(node_id)
        if known is not None and known["source"] == "seed":
            continue
        if kind in kinds:
            nodes.append(NodeIn(id=node_id, name=name, kind=kind))
        elif known is not None:  # an extracted node, the item without a kind: carried as the KG names it
            nodes.append(NodeIn(id=node_id, name=known["name"], kind=known["kind"]))
        else:
            raise NotMergeable(f"item {item.item_id}: {end} {node_id!r} is not a KG node and has no node kind "
                               f"({kind!r}); edit it to a KG node id")
    rows = []
    for k, (paper, score, text) in enumerate(_readings(item)):
        admitted = _admitted(item, decision, kg_nodes, text)  # evidence required: a decision is no sentence
        rows.append({
            "doc_key": doc_key(item.item_id), "triple_id": item.item_id if k == 0 else f"{item.item_id}-{k}",
            "head_id": item.head_id, "relation": item.relation, "tail_id": item.tail_id, "metaedge": admitted.metaedge,
            "score": score, "evidence_score": score, "segment_id": f"{doc_key(item.item_id)}#decision",
            "evidence": text, "prompt_version": provenance(item, decision),
            "action": "replace" if item.contradicts else "keep", "contradicts": item.contradicts,
            "adjudication": f"{provenance(item, decision)} at {decision.decided_at:%Y-%m-%d %H:%M} UTC",
            "verdict": "skipped", "head_kg_type": item.head_kind, "tail_kg_type": item.tail_kind,
            "paper_key": paper,
        })
    return rows, nodes


def _readings(item: ReviewItem) -> list[tuple[str | None, float, str]]:
    """(paper, score, sentence) per paper among the backbone's proposals of the fact, first proposal first: each
    paper stands once (its best score), so an accepted fact read by two papers is two papers' support, and one
    the KG already read from a paper adds nothing for it (kg/reinforcement.py)."""
    fallback = next((e.text for e in item.evidence if e.text.strip()), "")
    mine = [p for p in item.all_proposals() if p.backbone == item.backbone]
    own = item.own_proposal()
    mine = [own if p.proposal_id == item.item_id else p for p in mine] or [own]  # the edited fields are its own
    out: dict[str | None, tuple[float, str]] = {}
    for p in mine:
        paper = p.paper or None
        score, text = out.get(paper, (-1.0, ""))
        out[paper] = (max(score, p.score), text or p.evidence or fallback)
    return [(paper, score, text) for paper, (score, text) in out.items()]


def _admitted(item: ReviewItem, decision: Decision, kg_nodes: Mapping[str, Mapping[str, Any]],
              text: str) -> rules.Admitted:
    """The admission rules (kg/admission_rules.py) on the item as decided: its ends with the kinds the KG gives
    them (the item's own for an end the KG lacks). A refusal names the rule; the item stays in the queue with it."""
    ends: dict[str, Any] = {}
    for end in ("head", "tail"):
        known = kg_nodes.get(getattr(item, f"{end}_id")) or {}
        ends[f"{end}_kind"] = known.get("kind") or getattr(item, f"{end}_kind")
        ends[f"{end}_name"] = known.get("name") or getattr(item, f"{end}_name")
        ends[f"{end}_vocab_id"] = known.get("vocab_id")
    result = rules.check(rules.Fact(head_id=item.head_id, relation=item.relation, tail_id=item.tail_id,
                                    evidence=text, date=merge_date(decision), **ends))
    if isinstance(result, rules.Refusal):
        raise NotMergeable(f"item {item.item_id}: {result.message()}")
    return result


def review_docs(queue: ReviewQueue, kg: KGStore, namespace: str, day: dt.date) -> dict[str, DocInput]:
    """Every mergeable accepted item of (namespace, day), merged before or not: what that date's merge adds
    to the chain's documents (the KG increment asset calls this too). Items that cannot enter get a note."""
    chosen = [(i.for_backbone(namespace), d) for i, d in queue.accepted()
              if namespace in i.backbones and merge_date(d) == day]
    known = kg.nodes_by_id({x for i, _ in chosen for x in (i.head_id, i.tail_id)}, namespace)
    docs: dict[str, DocInput] = {}
    for item, decision in chosen:
        if decision.choice == EXTENSION:  # what Accept said it does: the relation joins this KG's extensions
            accepting.extend_schema(kg, namespace, item, decision.reviewer)
        try:
            docs[doc_key(item.item_id)] = merge_input(item, decision, known)
            merge.document_fingerprint(doc_key(item.item_id), *docs[doc_key(item.item_id)])  # merge's own checks
        except (NotMergeable, TripleValidationError) as exc:
            docs.pop(doc_key(item.item_id), None)
            queue.note(item.item_id, str(exc))
    return docs


def with_review_documents(paths: DataPaths, states: dict[str, DocumentStates]) -> dict[str, DocumentStates]:
    """`states` (document_states.states_in_stores) plus each backbone's accepted review items, as documents
    `review_<item_id>` of their decision's date told apart like the chain's: merged (`reviewed`) when the KG
    recorded the document with the fingerprint of what a merge of its date takes now, else unmerged (that merge
    never ran, or it failed: a re-merge that raised leaves the KG and merged_documents as they were) with its date;
    `failed` with the reason when the KG cannot take the item as it is. The queue is read only when it exists:
    a status creates no file."""
    if not default_path(paths).exists():
        return states
    accepted = ReviewQueue(default_path(paths)).accepted()
    kg = kg_store(paths)
    out: dict[str, DocumentStates] = {}
    for ns, state in states.items():
        mine = [(i.for_backbone(ns), d) for i, d in accepted if ns in i.backbones]
        if not mine:
            out[ns] = state
            continue
        state = state.model_copy(deep=True)
        recorded = kg.merged_documents(ns)
        nodes = kg.nodes_by_id({x for i, _ in mine for x in (i.head_id, i.tail_id)}, ns)
        for item, decision in mine:
            key = doc_key(item.item_id)
            try:
                fingerprint = merge.document_fingerprint(key, *merge_input(item, decision, nodes))
            except (NotMergeable, TripleValidationError) as exc:
                state.failed[key] = f"accepted review item cannot be merged: {exc}"
                continue
            if recorded.get(key) == fingerprint:
                state.reviewed.append(key)
            else:
                state.unmerged.append(key)
                state.dates[key] = merge_date(decision).isoformat()
        out[ns] = state
    return out


def record_merged(queue: ReviewQueue, docs: dict[str, DocInput], day: dt.date,
                  backbone: str | None = None) -> list[str]:
    """After a date's merge took `docs` in (the KG increment asset's call): mark its review documents merged
    into `backbone`'s KG (None: every backbone that proposed them)."""
    ids = [k[len(DOC_PREFIX):] for k in docs if k.startswith(DOC_PREFIX)]
    if ids:
        queue.mark_merged(ids, day, backbone=backbone)
    return ids


def pending_dates(queue: ReviewQueue) -> dict[str, set[dt.date]]:
    """namespace -> the KG dates holding accepted items not merged yet (what a sensor would launch)."""
    out: dict[str, set[dt.date]] = defaultdict(set)
    for item, decision in queue.accepted(unmerged_only=True):
        for backbone in item.backbones:
            if not decision.merged_in(backbone):
                out[backbone].add(merge_date(decision))
    return dict(out)


def chain_docs_from(paths: DataPaths) -> ChainDocs:
    """The chain's documents of a day as the KG increment asset collects them (evaluated tables), each with the
    prompt version its evidence already carries in the KG, so a re-merge changes nothing of theirs."""
    stages, kg = StageStore(paths.stages_dir), kg_store(paths)

    def collect(ns: str, day: dt.date) -> dict[str, DocInput]:
        docs: dict[str, DocInput] = {}
        keys = Catalog(paths.catalog).documents_for_dates(day, day) if paths.catalog.exists() else []
        keys = [k for k in keys if stages.exists(ns, "evaluated", k)]
        with kg.connect(read_only=True) as con:
            versions = keyed.prompt_versions(con, keys, ns)
        for key in keys:
            docs[key] = collect_document(key, stages.read(ns, "evaluated", key), stages.read(ns, "entities", key),
                                         versions.get(key, ""))
        return docs

    return collect


def _chain_keys_merged(kg: KGStore, ns: str, day: dt.date) -> list[str]:
    with kg.connect(read_only=True) as con:
        rows = con.execute("SELECT doc_key FROM merged_documents WHERE namespace = ? AND date = ? AND doc_key NOT LIKE "
                           "'review\\_%' ESCAPE '\\' ORDER BY doc_key", [ns, day]).fetchall()
    return [r[0] for r in rows]


def merge_accepted(
    kg_path: Path | str, queue: ReviewQueue, *, chain_docs: ChainDocs | None = None, run_id: str | None = None,
    params: KarmaParams | None = None,
) -> list[MergeOutcome]:
    """Merge every (namespace, date) that holds accepted items not merged yet; record them merged. Idempotent:
    a second call finds nothing to do. Without `chain_docs`, a date whose chain documents the KG already holds is
    refused (its merge would drop their increment row and adjudications), naming the date.

    The KG keeps its dates in order (kg/day_order.py), as the KG asset does: a date merged while later dates are
    already merged withdraws them in its transaction, and they are merged again after it (their chain documents
    and accepted items; outcomes with `again`). Only with `chain_docs`, and only when every document the later
    dates hold can be carried again; else the date merges out of order and loses nothing."""
    kg = open_kg_store(kg_path)
    if not kg.exists():
        raise ReviewError("the KG file does not exist yet: import the seed KG first (karma import-kg)")
    run_id = run_id or f"review-{uuid.uuid4().hex[:12]}"
    outcomes = []
    for ns, days in sorted(pending_dates(queue).items()):
        chain_of: dict[dt.date, dict[str, DocInput]] = {}  # each day's chain documents, read once

        def chain(day: dt.date, ns: str = ns) -> dict[str, DocInput]:
            if chain_docs is None:
                return {}
            if day not in chain_of:
                chain_of[day] = chain_docs(ns, day)
            return chain_of[day]

        reviewed_of: dict[dt.date, dict[str, DocInput]] = {}  # each day's accepted items, read once

        def reviewed(day: dt.date, ns: str = ns) -> dict[str, DocInput]:
            if day not in reviewed_of:
                reviewed_of[day] = review_docs(queue, kg, ns, day)
            return reviewed_of[day]

        def carried(day: dt.date, held: list[str]) -> list[str]:
            return [*chain(day), *reviewed(day)]

        again: set[dt.date] = set()  # withdrawn by an earlier date's merge: merged again whatever is pending

        def merge_one(day: dt.date, ns: str = ns, again: set[dt.date] = again) -> list[dt.date]:
            docs = reviewed(day)
            waiting = {i.item_id for i, d in queue.accepted(unmerged_only=True) if not d.merged_in(ns)}
            merged = [k[len(DOC_PREFIX):] for k in docs if k[len(DOC_PREFIX):] in waiting]
            if not merged and day not in again:
                return []  # every pending item of the day is blocked (its note says why)
            if chain_docs is not None:
                docs = {**chain(day), **docs}
                with kg.connect(read_only=True) as con:
                    _, lost = day_order.withdrawable(con, ns, day, carried)
            else:
                held = _chain_keys_merged(kg, ns, day)
                if held:
                    raise ReviewError(f"KG date {day} of {ns!r} holds the chain's documents ({', '.join(held[:3])}"
                                      f"{' ...' if len(held) > 3 else ''}): merge with the data paths (karma review "
                                      "--merge) or through the KG increment asset, which carry them too")
                lost = ["(no chain documents to merge later dates again)"]
            stats = merge.merge_increment(kg, day, ns, docs, run_id, params=params, withdraw_later=not lost)
            queue.mark_merged(merged, day, backbone=ns)
            outcomes.append(MergeOutcome(namespace=ns, date=day, items=merged, stats=stats, again=day in again))
            again.update(stats.withdrawn)
            return stats.withdrawn

        day_order.merge_in_order(days, merge_one)
    return outcomes
