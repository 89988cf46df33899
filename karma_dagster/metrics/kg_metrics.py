"""KARMA's Table-1 metrics of one backbone's KG namespace (Lu & Wang, KARMA, arXiv 2502.06472, section 4).

Over the *new triples* = the accepted triples of the namespace's evaluated tables (what the KG integrated):

- MC, MCl, MR    mean confidence, clarity, relevance (the evaluator agent's C, Cl, R of each new triple)
- coverage gain  Δcov = |V_ns \\ V_seed|: entities the namespace added to the KG
- connectivity   Δconn = Σ_{v ∈ V_seed} (deg_after(v) - deg_before(v)) / |V_seed|: the net increase of degree
  gain             over the existing entities, per existing entity (degree = distinct edges incident to v;
                   before = seed edges, after = the namespace's edges); `net_degree_increase` is the numerator
- conflict ratio CR = new triples that clash with an existing KG edge (schema-incompatible relation on the same
                   pair, flagged by the conflict agent and not discarded) / new triples
- correctness    LC = share of new triples the judge labels likely_correct (also uncertain / likely_incorrect)
- QA coherence   share of the curated questions (data/qa/*.yaml) whose KG-traversal answer is judged plausible

A metric with nothing to average (no new triples) is None, never a made-up 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from karma_dagster.backbones.base import TripleQuery
from karma_dagster.kg.store import KGStore
from karma_dagster.metrics.judge import VERDICTS, TripleJudge
from karma_dagster.metrics.qa import QAAnswer, answer_questions, load_questions
from karma_dagster.stage_store import StageStore

Edge = tuple[str, str, str]  # head, relation, tail


class KGMetrics(BaseModel):
    backbone: str
    documents: int
    triples_proposed: int
    new_triples: int
    mean_confidence: float | None
    mean_clarity: float | None
    mean_relevance: float | None
    coverage_gain: int
    net_degree_increase: int
    existing_entities: int
    connectivity_gain: float | None
    conflicts: int
    conflict_ratio: float | None
    judge: str
    verdicts: dict[str, int]
    llm_correctness: float | None
    qa_questions: int
    qa_answered: int
    qa_plausible: int
    qa_coherence: float | None
    qa_judge: str


def _mean(values: pd.Series) -> float | None:
    return float(values.mean()) if len(values) else None


def triple_quality(evaluated: pd.DataFrame) -> dict[str, float | int | None]:
    """MC, MCl, MR and CR over the accepted triples of an evaluated table (all documents concatenated)."""
    new = evaluated[evaluated["accepted"].astype(bool)] if len(evaluated) else evaluated
    conflicts = int(new["conflict"].astype(bool).sum()) if len(new) else 0
    return {
        "triples_proposed": len(evaluated),
        "new_triples": len(new),
        "mean_confidence": _mean(new["confidence"]) if len(new) else None,
        "mean_clarity": _mean(new["clarity"]) if len(new) else None,
        "mean_relevance": _mean(new["relevance"]) if len(new) else None,
        "conflicts": conflicts,
        "conflict_ratio": conflicts / len(new) if len(new) else None,
    }


def degrees(edges: Iterable[Edge]) -> Counter[str]:
    deg: Counter[str] = Counter()
    for h, _r, t in set(edges):
        deg[h] += 1
        if t != h:
            deg[t] += 1
    return deg


def connectivity_gain(seed_edges: Iterable[Edge], edges_after: Iterable[Edge], existing: set[str]) -> tuple[int, float | None]:
    """(net degree increase over existing entities, that increase per existing entity)."""
    before, after = degrees(seed_edges), degrees(edges_after)
    net = sum(after[v] - before[v] for v in existing)
    return net, (net / len(existing) if existing else None)


def judge_triples(new: pd.DataFrame, judge: TripleJudge) -> pd.DataFrame:
    """One verdict per new triple: triple_id, head, relation, tail, verdict, rationale."""
    rows = []
    for t in new.itertuples():
        rel = t.kg_relation if isinstance(t.kg_relation, str) else t.relation
        q = TripleQuery(head_name=t.head_name, head_type=t.head_kg_type or t.head_type, relation=rel,
                        tail_name=t.tail_name, tail_type=t.tail_kg_type or t.tail_type, evidence=t.evidence)
        verdict, why = judge.judge(q)
        rows.append({"doc_key": t.doc_key, "triple_id": t.triple_id, "head": t.head_name, "relation": rel,
                     "tail": t.tail_name, "verdict": verdict, "rationale": why})
    return pd.DataFrame(rows, columns=["doc_key", "triple_id", "head", "relation", "tail", "verdict", "rationale"])


def correctness(verdicts: pd.DataFrame) -> tuple[dict[str, int], float | None]:
    counts = {v: int((verdicts["verdict"] == v).sum()) if len(verdicts) else 0 for v in VERDICTS}
    judged = len(verdicts) - counts["not_judged"]
    return counts, (counts["likely_correct"] / judged if judged else None)


def stage_frame(stages: StageStore, namespace: str, stage: str) -> pd.DataFrame:
    """Every document's table of one stage, concatenated (empty tables skipped; no table = empty frame)."""
    frames = [stages.read(namespace, stage, k) for k in stages.partitions(namespace, stage)]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def compute_kg_metrics(stages: StageStore, kg: KGStore, namespace: str, judge: TripleJudge,
                       questions_path: Path) -> tuple[KGMetrics, pd.DataFrame, list[QAAnswer]]:
    """The namespace's metrics, one verdict per new triple, and the answers to the curated questions."""
    docs = stages.partitions(namespace, "documents")
    evaluated = stage_frame(stages, namespace, "evaluated")
    with kg.connect(read_only=True):  # one lock, one snapshot for the five reads
        merged = kg.merged_evidence(namespace)
        seed_edges = kg.seed_edge_triples()
        after = kg.edge_triples(namespace)
        existing = kg.seed_node_ids()
        coverage = kg.count_extracted_nodes(namespace)
    if len(evaluated):  # new triples = the accepted triples the KG integrated
        in_kg = [(d, t) in merged for d, t in zip(evaluated["doc_key"], evaluated["triple_id"])]
        evaluated = evaluated.assign(accepted=evaluated["accepted"].astype(bool) & pd.Series(in_kg, index=evaluated.index))
    quality = triple_quality(evaluated)
    new = evaluated[evaluated["accepted"]] if len(evaluated) else evaluated
    net, ratio = connectivity_gain(seed_edges, after, existing)
    verdicts = judge_triples(new, judge)
    counts, lc = correctness(verdicts)
    answers = answer_questions(kg, namespace, load_questions(questions_path), judge)
    metrics = KGMetrics(
        backbone=namespace, documents=len(docs), **quality, coverage_gain=coverage, net_degree_increase=net,
        existing_entities=len(existing), connectivity_gain=ratio, judge=judge.label, verdicts=counts,
        llm_correctness=lc, qa_questions=len(answers), qa_answered=sum(bool(a.answers) for a in answers),
        qa_plausible=sum(a.plausible for a in answers),
        qa_coherence=(sum(a.plausible for a in answers) / len(answers)) if answers else None,
        qa_judge=f"curated key {Path(questions_path).name}" + (f" + {judge.label}" if judge.is_llm else ""),
    )
    return metrics, verdicts, answers
