"""KARMA's Table-1 metrics of one backbone's KG namespace (Lu & Wang, KARMA, arXiv 2502.06472, section 4).

The paper's groups, and how each is computed here (every definition, with its equation, is in the docstring of
the function that computes it):

- core metrics      MC, MCl, MR: means of the evaluator's confidence, clarity, relevance over the new triples
                    (`triple_quality`)
- graph statistics  coverage gain Δcov (new entities, `KGStore.count_extracted_nodes`) and connectivity gain
                    Δconn, in both of its readings (`connectivity_gain`)
- quality           conflict ratio R_CR (`conflict_ratio`), LLM-based correctness LC (`correctness`) and QA
  indicators        coherence (metrics/qa.py), the latter scored with and without the namespace's increments

"New triples" are the triples the KG integrated: accepted by the evaluator *and* merged into the namespace.
A metric with nothing to measure is None (shown "n/a"), never a made-up 0: MC/MCl/MR when there is no new
triple or the evaluator did not run (ablated, single-agent baseline), R_CR when the conflict resolution agent
did not run (every verdict "skipped").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from karma_dagster.backbones.base import TripleQuery
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.kg.store import KGStore
from karma_dagster.metrics.judge import VERDICTS, TripleJudge, judge_chain_overlap
from karma_dagster.metrics.qa import QAAnswer, answer_with_and_without_increments, load_questions, score
from karma_dagster.runtime.stage_store import StageStore

Edge = tuple[str, str, str]  # head, relation, tail
REMOVED_ACTIONS = ("discard", "review")  # a triple the conflict resolution kept out of the KG


class KGMetrics(BaseModel):
    backbone: str
    mode: str = "multi_agent"  # multi_agent (the KARMA chain) | single_agent (the paper's baseline)
    ablated: list[str] = []  # agents switched off (KARMA Table 2's ablations)
    documents: int
    triples_proposed: int
    new_triples: int
    mean_confidence: float | None
    mean_clarity: float | None
    mean_relevance: float | None
    coverage_gain: int
    existing_entities: int
    connectivity_net: int  # Σ_{v ∈ V_seed} (deg_after(v) - deg_before(v))
    connectivity_ratio: float | None  # Σ_{v ∈ V_seed} deg_after(v) / Σ_{v ∈ V_seed} deg_before(v)
    triples_into_cra: int  # denominator of the conflict ratio
    conflicts_removed: int  # numerator: CRA discard/review of a conflict + merge-time same-day removals
    conflicts_removed_at_merge: int  # the merge-time part of conflicts_removed
    conflict_ratio: float | None
    replaced_edges: int  # older KG edges a new triple superseded (kept in history)
    judge: str
    judge_is_chain_model: bool = False
    judge_overlap: str = ""  # why the judge is not independent of this chain ('' = it is)
    verdicts: dict[str, int]
    llm_correctness: float | None
    qa_questions: int
    qa_answered: int
    qa_plausible: int
    qa_coherence: float | None
    qa_plausible_seed_only: int
    qa_coherence_seed_only: float | None
    qa_judge: str


# ---------------------------------------------------------------- core metrics
def _mean(values: pd.Series) -> float | None:
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(values.mean()) if len(values) else None


def triple_quality(new: pd.DataFrame) -> dict[str, float | None]:
    """MC, MCl, MR over the new triples (paper section 4, core metrics):

        MC = (1/|T|) Σ_{t ∈ T} C(t),   MCl = (1/|T|) Σ_{t ∈ T} Cl(t),   MR = (1/|T|) Σ_{t ∈ T} R(t)

    T = the triples the KG integrated, C/Cl/R the evaluator agent's confidence, clarity and relevance of t.
    A triple the evaluator did not score (C/Cl/R None: evaluator ablated, single-agent baseline) has nothing to
    average; with no scored triple the mean is None.
    """
    if not len(new):
        return {"mean_confidence": None, "mean_clarity": None, "mean_relevance": None}
    return {"mean_confidence": _mean(new["confidence"]), "mean_clarity": _mean(new["clarity"]),
            "mean_relevance": _mean(new["relevance"])}


# ---------------------------------------------------------------- graph statistics
def degrees(edges: Iterable[Edge]) -> Counter[str]:
    """deg(v) = number of distinct edges (head, relation, tail) incident to v (a self-loop counts once)."""
    deg: Counter[str] = Counter()
    for h, _r, t in set(edges):
        deg[h] += 1
        if t != h:
            deg[t] += 1
    return deg


def connectivity_gain(seed_edges: Iterable[Edge], edges_after: Iterable[Edge],
                      existing: set[str]) -> tuple[int, float | None]:
    """Connectivity gain Δconn, "the net increase of node degree over the existing entities" (section 4), in
    the two readings the paper leaves open, returned as (net, ratio):

        (a) net    Δconn = Σ_{v ∈ V_seed} (deg_after(v) - deg_before(v))         the paper's words
        (b) ratio  Δconn = Σ_{v ∈ V_seed} deg_after(v) / Σ_{v ∈ V_seed} deg_before(v)   how Table 1's 1.08-1.81 read

    V_seed = the entities of the KG before any merge, deg_before over the seed edges, deg_after over the
    namespace's current edges (seed + extracted, superseded edges gone). The ratio is None when the existing
    entities had no edge at all.
    """
    before, after = degrees(seed_edges), degrees(edges_after)
    total_before = sum(before[v] for v in existing)
    total_after = sum(after[v] for v in existing)
    return total_after - total_before, (total_after / total_before if total_before else None)


# ---------------------------------------------------------------- quality indicators
class ConflictFigures(BaseModel):
    triples_into_cra: int
    conflicts_removed: int
    conflicts_removed_at_merge: int
    conflict_ratio: float | None
    replaced_edges: int


def _keys(frame: pd.DataFrame) -> set[tuple[str, str]]:
    return set(zip(frame["doc_key"], frame["triple_id"])) if len(frame) else set()


def conflict_ratio(resolved: pd.DataFrame, adjudications: list[dict],
                   merged: set[tuple[str, str]]) -> ConflictFigures:
    """Conflict ratio R_CR (section 4, quality indicators): the share of newly extracted edges that the conflict
    resolution removes, contradictions with the KG or among the new edges themselves:

        R_CR = |E_removed| / |E_new|

    E_new = the triples entering conflict resolution: the schema-aligned rows of the resolved tables.
    E_removed = rows the conflict resolution agent found conflicting and did not let in (action discard, or
    review: sent to a curator instead of the KG), plus the triples the date's merge kept out when adjudicating
    same-day contradictions between documents (`KGStore.merge_adjudications`, action discard or review); each
    (document, triple) counted once. A triple that wins and supersedes an older edge (action replace) is not
    removed: those older edges are counted apart (`replaced_edges`, distinct edges, from the merge's
    adjudications and the merged replace rows' `contradicts`).
    None when no triple entered conflict resolution or it did not run (every verdict "skipped").
    """
    aligned = resolved[resolved["schema_status"] == "aligned"] if len(resolved) else resolved
    into = _keys(aligned)
    removed_by_cra = set()
    replaced: set[str] = set()
    if len(aligned):
        gone = aligned[aligned["conflict"].astype(bool) & aligned["action"].isin(REMOVED_ACTIONS)]
        removed_by_cra = _keys(gone)
        for row in aligned[aligned["action"] == "replace"].itertuples():
            if (row.doc_key, row.triple_id) in merged and isinstance(row.contradicts, str):
                replaced |= {e.strip() for e in row.contradicts.split(";") if e.strip()}
    removed_at_merge = {(a["doc_key"], a["triple_id"]) for a in adjudications if a["action"] in REMOVED_ACTIONS}
    replaced |= {a["against"] for a in adjudications if a["action"] == "replace"}
    removed = removed_by_cra | removed_at_merge
    skipped = not len(aligned) or bool((aligned["verdict"] == "skipped").all())
    return ConflictFigures(
        triples_into_cra=len(into), conflicts_removed=len(removed),
        conflicts_removed_at_merge=len(removed_at_merge - removed_by_cra),
        conflict_ratio=None if skipped else len(removed) / len(into), replaced_edges=len(replaced))


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
    """LLM-based correctness LC (section 4): the share of new triples the judge labels likely correct,

        LC = |{t ∈ T : judge(t) = likely_correct}| / |{t ∈ T : judged}|

    (uncertain and likely_incorrect are counted beside it; a judge that could not run judges nothing: None).
    """
    counts = {v: int((verdicts["verdict"] == v).sum()) if len(verdicts) else 0 for v in VERDICTS}
    judged = len(verdicts) - counts["not_judged"]
    return counts, (counts["likely_correct"] / judged if judged else None)


# ---------------------------------------------------------------- one namespace
def stage_frame(stages: StageStore, namespace: str, stage: str) -> pd.DataFrame:
    """Every document's table of one stage, concatenated (empty tables skipped; no table = empty frame)."""
    frames = [stages.read(namespace, stage, k) for k in stages.partitions(namespace, stage)]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def new_triples(evaluated: pd.DataFrame, merged: set[tuple[str, str]]) -> pd.DataFrame:
    """The evaluated rows the KG integrated: accepted and merged into the namespace."""
    if not len(evaluated):
        return evaluated
    in_kg = pd.Series([(d, t) in merged for d, t in zip(evaluated["doc_key"], evaluated["triple_id"])],
                      index=evaluated.index)
    return evaluated[evaluated["accepted"].astype(bool) & in_kg]


def compute_kg_metrics(stages: StageStore, kg: KGStore, namespace: str, judge: TripleJudge, questions_path: Path,
                       settings: BackboneSettings | None = None) -> tuple[KGMetrics, pd.DataFrame, list[QAAnswer],
                                                                         list[QAAnswer]]:
    """The namespace's metrics, one verdict per new triple, and the answers to the curated questions with the
    namespace's increments and over the seed alone. `settings` (the backbone's) give the row's mode, its
    ablations and whether the judge shares the chain's model."""
    settings = settings or BackboneSettings()
    docs = stages.partitions(namespace, "documents")
    evaluated = stage_frame(stages, namespace, "evaluated")
    resolved = stage_frame(stages, namespace, "resolved")
    with kg.connect(read_only=True):  # one lock, one snapshot for the reads
        merged = kg.merged_evidence(namespace)
        seed_edges = kg.seed_edge_triples()
        after = kg.edge_triples(namespace)
        existing = kg.seed_node_ids()
        coverage = kg.count_extracted_nodes(namespace)
        adjudications = kg.merge_adjudications(namespace)
    new = new_triples(evaluated, merged)
    net, ratio = connectivity_gain(seed_edges, after, existing)
    conflicts = conflict_ratio(resolved, adjudications, merged)
    verdicts = judge_triples(new, judge)
    counts, lc = correctness(verdicts)
    questions = load_questions(questions_path)
    answers, seed_answers = answer_with_and_without_increments(kg, namespace, questions, judge)
    qa, qa_seed = score(answers), score(seed_answers)
    overlap = judge_chain_overlap(judge, settings)
    metrics = KGMetrics(
        backbone=namespace, mode=settings.mode, ablated=list(getattr(settings, "ablate", [])), documents=len(docs),
        triples_proposed=len(evaluated), new_triples=len(new), **triple_quality(new), coverage_gain=coverage,
        existing_entities=len(existing), connectivity_net=net, connectivity_ratio=ratio, **conflicts.model_dump(),
        judge=judge.label, judge_is_chain_model=bool(overlap), judge_overlap=overlap, verdicts=counts,
        llm_correctness=lc, qa_questions=qa.questions, qa_answered=qa.answered, qa_plausible=qa.plausible,
        qa_coherence=qa.coherence, qa_plausible_seed_only=qa_seed.plausible, qa_coherence_seed_only=qa_seed.coherence,
        qa_judge=f"curated key {Path(questions_path).name}" + (f" + {judge.label}" if judge.is_llm else ""),
    )
    return metrics, verdicts, answers, seed_answers
