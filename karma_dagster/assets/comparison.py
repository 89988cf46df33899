"""Per-backbone `kg_metrics` and `gold_evaluation`, the `backbone_comparison` table, and `backbones_status`.

Orchestration only: the formulas live in karma_dagster/metrics. Each asset also writes its figures under
<data_dir>/metrics/ (JSON/CSV/PNG), where `backbone_comparison` and `karma compare` read them.
"""


import base64
import json
from pathlib import Path

import dagster as dg
import pandas as pd

from karma_dagster.backbones.registry import BackboneStatus
from karma_dagster.assets.common import STAGE_ORDER, stage_key
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.kg.store import KGStore
from karma_dagster.metrics import comparison as cmp
from karma_dagster.metrics.gold import score_gold
from karma_dagster.metrics.gold_sources import aligned_mentions, gold_document, predicted_triples
from karma_dagster.metrics.kg_metrics import (
    KGMetrics,
    connectivity_gain,
    correctness,
    judge_triples,
    triple_quality,
)
from karma_dagster.metrics.qa import DEFAULT_QUESTIONS, answer_questions, load_questions
from karma_dagster.resources.judge import JudgeResource
from karma_dagster.resources.storage import KarmaStorageResource

GROUP = "comparison"


def metrics_dir(storage: KarmaStorageResource, ns: str | None = None) -> Path:
    path = storage.root() / "metrics" / (ns or "")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _concat(stages, ns: str, stage: str, keys: list[str]) -> pd.DataFrame:
    frames = [stages.read(ns, stage, k) for k in keys if stages.exists(ns, stage, k)]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _md(df: pd.DataFrame, rows: int = 25) -> dg.MetadataValue:
    return dg.MetadataValue.md(df.head(rows).to_markdown(index=False) if len(df) else "_(none)_")


# ---------------------------------------------------------------- kg_metrics
def compute_kg_metrics(storage: KarmaStorageResource, ns: str, judge, questions_path: Path) -> tuple[KGMetrics, pd.DataFrame, list]:
    stages = storage.stage_store()
    docs = stages.partitions(ns, "documents")
    evaluated = _concat(stages, ns, "evaluated", stages.partitions(ns, "evaluated"))
    kg = KGStore(storage.kg_path())
    with kg.connect(read_only=True) as con:
        merged = set(con.execute("SELECT doc_key, triple_id FROM evidence WHERE namespace = ?", [ns]).fetchall())
        seed_edges = con.execute("SELECT head_id, relation, tail_id FROM seed_edges").fetchall()
        after = con.execute("SELECT head_id, relation, tail_id FROM kg_edges(?)", [ns]).fetchall()
        existing = {r[0] for r in con.execute("SELECT id FROM seed_nodes").fetchall()}
        coverage = con.execute("SELECT count(*) FROM kg_nodes(?) WHERE source = 'extracted'", [ns]).fetchone()[0]
    if len(evaluated):  # new triples = the accepted triples the KG integrated
        in_kg = [(d, t) in merged for d, t in zip(evaluated["doc_key"], evaluated["triple_id"])]
        evaluated = evaluated.assign(accepted=evaluated["accepted"].astype(bool) & pd.Series(in_kg, index=evaluated.index))
        quality = triple_quality(evaluated)
        new = evaluated[evaluated["accepted"]]
    else:
        quality = {"triples_proposed": 0, "new_triples": 0, "mean_confidence": None, "mean_clarity": None,
                   "mean_relevance": None, "conflicts": 0, "conflict_ratio": None}
        new = evaluated
    net, ratio = connectivity_gain(seed_edges, after, existing)
    verdicts = judge_triples(new, judge) if len(new) else judge_triples(pd.DataFrame(columns=[
        "doc_key", "triple_id", "head_name", "relation", "tail_name", "kg_relation", "evidence"]), judge)
    counts, lc = correctness(verdicts)
    qset = load_questions(questions_path)
    answers = answer_questions(kg, ns, qset, judge)
    metrics = KGMetrics(
        backbone=ns, documents=len(docs), **quality, coverage_gain=int(coverage), net_degree_increase=net,
        existing_entities=len(existing), connectivity_gain=ratio, judge=judge.label, verdicts=counts,
        llm_correctness=lc, qa_questions=len(answers), qa_answered=sum(bool(a.answers) for a in answers),
        qa_plausible=sum(a.plausible for a in answers),
        qa_coherence=(sum(a.plausible for a in answers) / len(answers)) if answers else None,
        qa_judge=f"curated key {Path(questions_path).name}" + (f" + {judge.label}" if judge.is_llm else ""),
    )
    return metrics, verdicts, answers


def build_kg_metrics(ns: str) -> dg.AssetsDefinition:
    @dg.asset(
        key=dg.AssetKey([ns, "kg_metrics"]),
        deps=[dg.AssetKey([ns, "knowledge_graph"])],
        group_name=GROUP,
        kinds={"python", "duckdb"},
        description=(
            "KARMA's Table-1 metrics of this backbone's KG namespace: MC/MCl/MR of the new triples, coverage gain "
            "(new entities), connectivity gain (net degree increase over existing entities per existing entity), "
            "conflict ratio, judge correctness (likely correct / uncertain / likely incorrect) and QA coherence "
            "(data/qa/sample_questions.v1.yaml answered by KG traversal)."
        ),
        tags={"karma/backbone": ns},
    )
    def kg_metrics(context: dg.AssetExecutionContext, storage: KarmaStorageResource,
                   judge: JudgeResource) -> dg.MaterializeResult:
        questions = Path(judge.qa_questions) if judge.qa_questions else DEFAULT_QUESTIONS
        m, verdicts, answers = compute_kg_metrics(storage, ns, judge.get(storage), questions)
        out = metrics_dir(storage, ns)
        (out / "kg_metrics.json").write_text(m.model_dump_json(indent=2))
        verdicts.to_csv(out / "judge_verdicts.csv", index=False)
        qa = pd.DataFrame([{**a.model_dump(), "answers": "; ".join(a.answers[:8])} for a in answers])
        qa.to_csv(out / "qa_answers.csv", index=False)
        meta: dict[str, object] = {k: v for k, v in m.model_dump().items() if isinstance(v, (int, float, str)) and v is not None}
        meta["verdicts"] = dg.MetadataValue.json(m.verdicts)
        meta["judge_verdicts"] = _md(verdicts.drop(columns=["doc_key", "triple_id"], errors="ignore"))
        meta["qa_answers"] = _md(qa[["id", "plausible", "answers", "how"]] if len(qa) else qa)
        return dg.MaterializeResult(metadata=meta)

    return kg_metrics


# ---------------------------------------------------------------- gold_evaluation
def compute_gold(storage: KarmaStorageResource, ns: str):
    """Scores over the namespace's documents that carry gold, or None when none does."""
    stages = storage.stage_store()
    catalog = Catalog(storage.catalog_path())
    docs, mentions, rea, accepted = [], [], [], []
    unaligned = 0
    for key in stages.partitions(ns, "evaluated"):
        gold = gold_document(key, storage.inbox_dir(), catalog)
        if gold is None:
            continue
        entities = stages.read(ns, "entities", key)
        summaries = stages.read(ns, "summaries", key)
        ms, n_bad = aligned_mentions(summaries, entities, gold.text)
        unaligned += n_bad
        ev = stages.read(ns, "evaluated", key)
        docs.append(gold)
        mentions.append(ms)
        rea.append(predicted_triples(stages.read(ns, "relations", key), entities))
        accepted.append(predicted_triples(ev[ev["accepted"].astype(bool)], entities))
    if not docs:
        return None
    return score_gold(docs, mentions, rea), score_gold(docs, mentions, accepted), unaligned


def build_gold_evaluation(ns: str) -> dg.AssetsDefinition:
    @dg.asset(
        key=dg.AssetKey([ns, "gold_evaluation"]),
        deps=[stage_key(ns, "evaluated")],
        group_name=GROUP,
        kinds={"python"},
        description=(
            "P/R/F1 against gold for this backbone's documents that carry PubTator annotations: mentions (span + "
            "type), normalized ids (gold MESH/NCBIGene ids vs the mentions' vocab ids; the id mapping is in "
            "gold_id_mapping.csv), relations (id pair; pair + type) from REA and from the accepted triples; micro "
            "and per type. The whole chain is measured: what the reader dropped is missed."
        ),
        tags={"karma/backbone": ns},
    )
    def gold_evaluation(context: dg.AssetExecutionContext, storage: KarmaStorageResource) -> dg.MaterializeResult:
        out = metrics_dir(storage, ns)
        result = compute_gold(storage, ns)
        if result is None:
            (out / "gold.json").write_text(json.dumps({"backbone": ns, "n_docs": 0}))
            return dg.MaterializeResult(metadata={"documents_with_gold": 0,
                                                  "note": "no document of this backbone carries gold annotations"})
        rea, acc, unaligned = result
        summary = {f"gold_{k}": v for k, v in rea.summary().items()}
        summary.update({f"gold_accepted_{k}": v for k, v in acc.summary().items() if k.startswith("pair")})
        (out / "gold.json").write_text(json.dumps({"backbone": ns, "n_docs": rea.n_docs, "unaligned_mentions": unaligned,
                                                   **summary, "id_sources": rea.id_sources}, indent=2))
        mapping = pd.DataFrame([m.model_dump() for m in rea.mapping])
        if len(mapping):
            mapping["kg_ids"] = mapping["kg_ids"].map(lambda v: ";".join(v))
        mapping.to_csv(out / "gold_id_mapping.csv", index=False)
        return dg.MaterializeResult(metadata={
            "documents_with_gold": rea.n_docs,
            **{k: round(v, 4) for k, v in summary.items()},
            "unaligned_mentions": unaligned,
            "scores": dg.MetadataValue.md(rea.markdown()),
            "one_line": rea.one_line(),
            "id_sources": dg.MetadataValue.json(rea.id_sources),
            "gold_id_mapping": _md(mapping, 30),
        })

    return gold_evaluation


# ---------------------------------------------------------------- cost from the stage materializations
def _all_materializations(instance: dg.DagsterInstance, key: dg.AssetKey, page: int = 5000):
    cursor = None
    while True:
        result = instance.fetch_materializations(key, limit=page, cursor=cursor)
        yield from result.records
        if not result.has_more:
            return
        cursor = result.cursor


def chain_cost(instance: dg.DagsterInstance, ns: str) -> tuple[float | None, int, int]:
    """(cost in USD of the latest materialization of every stage partition, LLM calls, tokens); None = unpriced."""
    total: float | None = 0.0
    calls = tokens = 0
    for stage in STAGE_ORDER:
        seen: set[str | None] = set()
        for rec in _all_materializations(instance, stage_key(ns, stage)):  # newest first: latest per partition
            mat = rec.asset_materialization
            if mat is None or mat.partition in seen:
                continue
            seen.add(mat.partition)
            meta = mat.metadata
            cost = meta.get("cost_usd")
            value = getattr(cost, "value", None)
            if isinstance(value, (int, float)):
                total = None if total is None else total + float(value)
            elif value is not None:
                total = None  # "unpriced model (tokens only)"
            calls += int(getattr(meta.get("llm_calls"), "value", 0) or 0)
            tokens += int(getattr(meta.get("tokens_in"), "value", 0) or 0) + int(getattr(meta.get("tokens_out"), "value", 0) or 0)
    return total, calls, tokens


def comparison_rows(storage: KarmaStorageResource, instance: dg.DagsterInstance | None, namespaces: list[str],
                    statuses: list[BackboneStatus]) -> list[cmp.ComparisonRow]:
    rows = []
    for ns in namespaces:
        mdir = storage.root() / "metrics" / ns
        km = json.loads((mdir / "kg_metrics.json").read_text()) if (mdir / "kg_metrics.json").exists() else {}
        gold = json.loads((mdir / "gold.json").read_text()) if (mdir / "gold.json").exists() else {}
        values: dict[str, float | None] = {c: km.get(c) for c in cmp.COLUMNS if c in km}
        for c in ("mention_f1", "id_f1", "pair_f1", "pair_type_f1"):
            values[f"gold_{c}"] = gold.get(f"gold_{c}")
        cost, _calls, _tokens = chain_cost(instance, ns) if instance is not None else (None, 0, 0)
        values.update(cmp.cost_figures(cost, int(km.get("documents") or 0), int(km.get("new_triples") or 0)))
        rows.append(cmp.ComparisonRow(backbone=ns, status="ok" if km else "no kg_metrics yet",
                                      judge=km.get("judge", ""), values=values))
    for s in statuses:
        if s.name not in namespaces and s.enabled:
            rows.append(cmp.ComparisonRow(backbone=s.name, status=s.status))
    return rows


def build_backbone_comparison(namespaces: list[str], statuses: list[BackboneStatus]) -> dg.AssetsDefinition:
    @dg.asset(
        key="backbone_comparison",
        deps=[dg.AssetKey([ns, name]) for ns in namespaces for name in ("kg_metrics", "gold_evaluation")],
        group_name=GROUP,
        kinds={"python", "matplotlib"},
        description=(
            "KARMA's Table 1 for these backbones (a row per backbone, best value bold) plus gold F1 and cost per "
            "document and per accepted triple (cost_usd of the stage materializations); as markdown, CSV and PNG."
        ),
    )
    def backbone_comparison(context: dg.AssetExecutionContext, storage: KarmaStorageResource) -> dg.MaterializeResult:
        rows = comparison_rows(storage, context.instance, namespaces, statuses)
        out = metrics_dir(storage)
        table = cmp.markdown(rows)
        (out / "backbone_comparison.md").write_text(table + "\n")
        (out / "backbone_comparison.csv").write_text(cmp.to_csv(rows))
        png = cmp.chart(rows, out / "backbone_comparison.png")
        encoded = base64.b64encode(png.read_bytes()).decode()
        context.log.info("\n" + table)
        return dg.MaterializeResult(metadata={
            "table": dg.MetadataValue.md(table),
            "chart": dg.MetadataValue.md(f"![backbone comparison](data:image/png;base64,{encoded})"),
            "csv": dg.MetadataValue.path(str(out / "backbone_comparison.csv")),
            "png": dg.MetadataValue.path(str(png)),
            "backbones": len(rows),
        })

    return backbone_comparison


def build_backbones_status(statuses: list[BackboneStatus], judge_label: str) -> dg.AssetsDefinition:
    from karma_dagster.backbones.registry import markdown

    @dg.asset(key="backbones_status", group_name=GROUP, kinds={"python"},
              description="Every backbone of backbones.yaml: enabled, disabled or NOT CONFIGURED (with the variable "
                          "to set), and the judge.")
    def backbones_status(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={
            "backbones": dg.MetadataValue.md(markdown(statuses, judge_label)),
            "not_configured": dg.MetadataValue.json({s.name: s.key_env for s in statuses if s.enabled and not s.configured}),
        })

    return backbones_status


def comparison_assets(namespaces: list[str], statuses: list[BackboneStatus], judge_label: str) -> list[dg.AssetsDefinition]:
    out: list[dg.AssetsDefinition] = []
    for ns in namespaces:
        out += [build_kg_metrics(ns), build_gold_evaluation(ns)]
    out += [build_backbone_comparison(namespaces, statuses), build_backbones_status(statuses, judge_label)]
    return out
