"""KARMA's "review" outcomes as review items, read from the stage tables (one file per backbone and document).

- schema alignment found no place (aligned.schema_status == "review"): a *new relation type* when both node kinds
  are known but no metaedge joins them, else a *schema review* (unknown kind, or a mapping below the floor;
  the relation the schema table suggests is proposed when there is one, oriented as its metaedge runs);
- the conflict debate could not settle (resolved.action == "review" on an aligned triple): an *unresolved
  conflict*; accepting it supersedes the KG edge it contradicts (a same-document clash supersedes nothing);
- the evaluator held an integrable triple back (evaluated: kept and aligned, not accepted, with its `admission`
  reason: below the operating point, or a precision rule such as a negated co-mention): a *held back* item, its
  score the calibrated P(right), so the queue ranks them by it. Accepting it merges the triple.
The resolved table is read when the document has one (it carries every aligned column), else the aligned one.
- an admission rule refused the triple at the KG's merge (kg/admission_rules.py; the KG's `admission_refusals`):
  a *schema review* item whose note is the refusal (the rule and why); accepting it as it is is refused again with
  that reason, an edit that fixes the fact merges it.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from karma_dagster.kg import adjudication
from karma_dagster.kg.backends import kg_store
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.marks import find_spans
from karma_dagster.review.models import Evidence, ReviewItem, item_id
from karma_dagster.runtime.stage_store import StageStore


def namespaces(paths: DataPaths) -> list[str]:
    root = paths.stages_dir
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []


def collect_karma(paths: DataPaths, schema: KGSchema, only: Iterable[str] | None = None) -> list[ReviewItem]:
    """Every review outcome of the chosen backbones (all with stage tables by default)."""
    stages = StageStore(paths.stages_dir)
    items: dict[str, ReviewItem] = {}
    kg = kg_store(paths)
    for ns in list(only) if only is not None else namespaces(paths):
        for item in refused_items(kg, ns):
            items[item.item_id] = item
        docs = sorted(set(stages.partitions(ns, "aligned")) | set(stages.partitions(ns, "resolved")))
        for doc in docs:
            stage = "resolved" if stages.exists(ns, "resolved", doc) else "aligned"
            found = items_from_table(ns, doc, stage, stages.read(ns, stage, doc), schema)
            if stages.exists(ns, "evaluated", doc):
                found += held_back_items(ns, doc, stages.read(ns, "evaluated", doc))
            for item in found:
                old = items.get(item.item_id)
                items[item.item_id] = item if old is None else _joined(old, item)
    return list(items.values())


def refused_items(kg: KGStore, ns: str) -> list[ReviewItem]:
    """The namespace's triples an admission rule kept out of the KG at a merge (nothing when none was)."""
    if not kg.exists():
        return []
    with kg.connect(read_only=True) as con:
        if not kg._has_table(con, "admission_refusals"):
            return []
        rows = con.execute(
            "SELECT doc_key, head_id, relation, tail_id, score, segment_id, evidence, reason FROM admission_refusals "
            "WHERE namespace = ? ORDER BY doc_key, triple_id", [ns]).fetchall()
    nodes = kg.nodes_by_id({x for r in rows for x in (r[1], r[3])}, ns)
    out: dict[str, ReviewItem] = {}
    for doc, head, relation, tail, score, segment, evidence, reason in rows:
        h, t = nodes.get(head, {}), nodes.get(tail, {})
        item = ReviewItem(
            item_id=item_id("schema_review", ns, head, relation, tail, doc), source="schema_review", backbone=ns,
            head_id=head, head_name=h.get("name") or head, head_kind=h.get("kind"), relation=relation, tail_id=tail,
            tail_name=t.get("name") or tail, tail_kind=t.get("kind"), origin=doc, agent="admission rules (KG merge)",
            stage="evaluated", evidence=_evidence(doc, {"evidence": evidence, "segment_id": segment},
                                                  h.get("name") or head, t.get("name") or tail),
            scores={"score": round(float(score), 4)}, score=min(1.0, max(0.0, float(score))), change="", note=reason)
        out[item.item_id] = item if item.item_id not in out else _joined(out[item.item_id], item)
    return list(out.values())


def held_back_items(ns: str, doc: str, table: pd.DataFrame) -> list[ReviewItem]:
    """Integrable triples the evaluator did not admit (tables without `admission` predate it: none)."""
    if "admission" not in table.columns or table.empty:
        return []
    rows = table[~table["accepted"].astype(bool) & table["admission"].notna()
                 & table["action"].isin(["keep", "replace"]) & (table["schema_status"] == "aligned")]
    out = []
    for row in rows.astype(object).where(rows.notna(), None).to_dict(orient="records"):
        relation = str(row["kg_relation"])
        out.append(ReviewItem(
            item_id=item_id("held_back", ns, row["head_id"], relation, row["tail_id"], doc), source="held_back",
            backbone=ns, head_id=row["head_id"], head_name=row["head_name"], head_kind=row.get("head_kg_type"),
            relation=relation, tail_id=row["tail_id"], tail_name=row["tail_name"], tail_kind=row.get("tail_kg_type"),
            origin=doc, agent="evaluator (EA)", stage="evaluated",
            evidence=_evidence(doc, row, row["head_name"], row["tail_name"]),
            scores=_scores(row, "probability", "sample_confidence", "correctness"),
            score=float(row.get("correctness") if row.get("correctness") is not None else _score(row)), change="",
            note=str(row["admission"]), extracted_relation=str(row["relation"]),
            contradicts=str(row["contradicts"]) if row.get("action") == "replace" and row.get("contradicts") else None,
        ))
    return out


def items_from_table(ns: str, doc: str, stage: str, table: pd.DataFrame, schema: KGSchema) -> list[ReviewItem]:
    out = []
    for row in table.astype(object).where(table.notna(), None).to_dict(orient="records"):
        if row.get("schema_status") == "review":
            out.append(_schema_item(ns, doc, stage, row, schema))
        elif row.get("action") == "review":
            out.append(_conflict_item(ns, doc, stage, row))
    return out


def _score(row: dict) -> float:
    """What the triple would add to its edge: MedKGent sampling confidence when sampled, else the extractor's p."""
    s = row.get("sample_confidence")
    return float(s if s is not None else row["probability"])


def _scores(row: dict, *names: str) -> dict[str, float]:
    return {n: round(float(row[n]), 4) for n in names if row.get(n) is not None}


def _evidence(doc: str, row: dict, head: str, tail: str) -> list[Evidence]:
    text = str(row.get("evidence") or "")
    return [Evidence(text=text, where=str(row["segment_id"]),
                     spans=find_spans(text, [(head, "head"), (tail, "tail")]))] if text else []


def _schema_item(ns: str, doc: str, stage: str, row: dict, schema: KGSchema) -> ReviewItem:
    hk, tk, label = row.get("head_kg_type"), row.get("tail_kg_type"), str(row["relation"])
    head = (row["head_id"], row["head_name"], hk)
    tail = (row["tail_id"], row["tail_name"], tk)
    relation, note = label, ""
    if hk and tk and not schema.candidates(hk, tk):
        source = "new_relation_type"
        note = f"the schema has no relation between {hk} and {tk}; the extractor said {label!r}"
    else:
        source = "schema_review"
        found = schema.map_label(label, hk, tk) if hk and tk else None
        if not hk or not tk:
            missing = [f"{row[f'{e}_name']!r} ({row[f'{e}_type']})" for e, k in (("head", hk), ("tail", tk)) if not k]
            note = f"no KG node kind for {', '.join(missing)}"
        elif found is None:
            note = (f"{label!r} maps to no relation between {hk} and {tk}; candidates: "
                    f"{', '.join(sorted({m.relation for m in schema.candidates(hk, tk)}))}")
        else:
            me, swapped = found
            relation = me.relation
            if swapped:
                head, tail = tail, head
            p = float(row.get("alignment_prob") or 0)
            note = f"alignment below the floor (p = {p:.2f}); the schema table suggests {me}"
    return ReviewItem(
        item_id=item_id(source, ns, head[0], relation, tail[0], doc), source=source, backbone=ns,
        head_id=head[0], head_name=head[1], head_kind=head[2], relation=relation, tail_id=tail[0], tail_name=tail[1],
        tail_kind=tail[2], origin=doc, agent="schema alignment (SAA)", stage=stage,
        evidence=_evidence(doc, row, head[1], tail[1]),
        scores=_scores(row, "probability", "sample_confidence", "alignment_prob"), score=_score(row), change="",
        note=note, extracted_relation=label,
    )


def _conflict_item(ns: str, doc: str, stage: str, row: dict) -> ReviewItem:
    relation = str(row["kg_relation"])
    against = row.get("against")
    note = str(row.get("adjudication") or "the debate could not settle the contradiction")
    for side in ("argument_for", "argument_against"):
        if row.get(side):
            note += f" | {side.replace('_', ' ')}: {row[side]}"
    note += adjudication.debate_said(row.get("debate_transcript"))
    return ReviewItem(
        item_id=item_id("unresolved_conflict", ns, row["head_id"], relation, row["tail_id"], doc),
        source="unresolved_conflict", backbone=ns, head_id=row["head_id"], head_name=row["head_name"],
        head_kind=row.get("head_kg_type"), relation=relation, tail_id=row["tail_id"], tail_name=row["tail_name"],
        tail_kind=row.get("tail_kg_type"), origin=doc, agent="conflict resolution (CRA)", stage=stage,
        evidence=_evidence(doc, row, row["head_name"], row["tail_name"]),
        scores=_scores(row, "probability", "sample_confidence", "alignment_prob", "debate_confidence",
                       "against_confidence"),
        score=_score(row), change="", note=note, extracted_relation=str(row["relation"]),
        contradicts=str(row["contradicts"]) if against == "kg" and row.get("contradicts") else None,
    )


def _joined(a: ReviewItem, b: ReviewItem) -> ReviewItem:
    """One triple stated several times in one document: one item, every sentence, the best score."""
    return a.model_copy(update={"evidence": a.evidence + [e for e in b.evidence if e not in a.evidence],
                                "score": max(a.score, b.score)})
