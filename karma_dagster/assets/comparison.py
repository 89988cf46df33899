"""Per-backbone `kg_metrics` and `gold_evaluation`, the `backbone_comparison` table, and `backbones_status`.

The gold evaluations and the table are one step (build_backbone_comparison says why). Orchestration only: the
formulas live in karma_dagster/metrics. Each asset also writes its figures under
<data_dir>/metrics/ (JSON/CSV/PNG), where `backbone_comparison` and `karma compare` read them.
"""


import base64
import io
import json
from pathlib import Path

import dagster as dg
import pandas as pd

from karma_dagster.runtime.config import BackboneStatus, statuses_markdown
from karma_dagster.assets.chain import backbone_group, kg_key, stage_key
from karma_dagster.assets.freshness import kg_grew
from karma_dagster.assets.notices import judge_notice
from karma_dagster.stages import STAGE_NAMES
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.jobs import COMPARE_JOB
from karma_dagster.metrics import comparison as cmp
from karma_dagster.metrics.calibration import reliability_png
from karma_dagster.project.safe_files import replace_file, replace_with
from karma_dagster.metrics.gold_inbox import compute_gold, judge_accepted
from karma_dagster.metrics.kg_metrics import compute_kg_metrics
from karma_dagster.metrics.qa import default_questions, questions_label
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.judge import JudgeResource
from karma_dagster.resources.storage import KarmaStorageResource

GROUP = "comparison"


def _md(df: pd.DataFrame, rows: int = 25) -> dg.MetadataValue:
    return dg.MetadataValue.md(df.head(rows).to_markdown(index=False) if len(df) else "_(none)_")


# ---------------------------------------------------------------- kg_metrics
def build_kg_metrics(ns: str) -> dg.AssetsDefinition:
    @dg.asset(
        key=dg.AssetKey([ns, "kg_metrics"]),
        deps=[kg_key(ns)],
        group_name=backbone_group(ns),
        kinds={"python", "duckdb"},
        automation_condition=kg_grew(),  # refreshes when this backbone's KG grows (freshness.py)
        description=(
            "KARMA's Table-1 metrics of this backbone's KG namespace (definitions and equations in "
            "metrics/kg_metrics.py): MC/MCl/MR of the new triples (n/a when the evaluator did not run), coverage "
            "gain (new entities), connectivity gain in both readings (net degree increase over the seed entities, "
            "and their degree after/before), conflict ratio (share of the triples entering conflict resolution "
            "that it or the date's merge removed; n/a when it did not run) and the older edges replaced, judge "
            "correctness (likely correct / uncertain / likely incorrect; flagged when the judge is the chain's own "
            "model) and QA coherence (data/qa/sample_questions.v2.yaml by KG traversal) with and without this "
            "namespace's increments."
        ),
        tags={"karma/backbone": ns},
    )
    def kg_metrics(context: dg.AssetExecutionContext, storage: KarmaStorageResource, judge: JudgeResource,
                   backbones: BackbonesResource) -> dg.MaterializeResult:
        questions = Path(judge.qa_questions) if judge.qa_questions else default_questions()
        m, verdicts, answers, seed_answers = compute_kg_metrics(
            storage.stage_store(), storage.kg_store(), ns, judge.get(storage), questions,
            settings=backbones.settings(ns))
        out = cmp.metrics_dir(storage.root(), ns)
        replace_file(out / "kg_metrics.json", m.model_dump_json(indent=2))
        replace_with(out / "judge_verdicts.csv", lambda fh: verdicts.to_csv(fh, index=False))
        seed_plausible = {a.id: a.plausible for a in seed_answers}
        qa = pd.DataFrame([{**a.model_dump(), "answers": "; ".join(a.answers[:8]),
                            "plausible_seed_only": seed_plausible[a.id]} for a in answers])
        replace_with(out / "qa_answers.csv", lambda fh: qa.to_csv(fh, index=False))
        meta: dict[str, object] = {k: v for k, v in m.model_dump().items()
                                   if isinstance(v, (int, float, str)) and v is not None}
        meta["ablated"] = ", ".join(m.ablated) or "-"
        meta |= judge_notice(context, context.asset_key, {ns: m.judge_overlap} if m.judge_is_chain_model else {},
                             "the judge is not independent of backbone")  # warned once, then this metadata
        meta["verdicts"] = dg.MetadataValue.json(m.verdicts)
        meta["judge_verdicts"] = _md(verdicts.drop(columns=["doc_key", "triple_id"], errors="ignore"))
        meta["qa_answers"] = _md(qa[["id", "plausible", "plausible_seed_only", "answers", "how"]] if len(qa) else qa)
        return dg.MaterializeResult(metadata=meta)

    return kg_metrics


# ---------------------------------------------------------------- gold_evaluation
def gold_key(ns: str) -> dg.AssetKey:
    return dg.AssetKey([ns, "gold_evaluation"])


def gold_spec(ns: str) -> dg.AssetSpec:
    """A backbone's gold scores: an output of the `backbone_comparison` step (build_backbone_comparison says why)."""
    return dg.AssetSpec(
        key=gold_key(ns),
        deps=[stage_key(ns, "evaluated")],
        group_name=backbone_group(ns),
        kinds={"python"},
        description=(
            "P/R/F1 against gold for this backbone's documents that carry PubTator annotations: mentions (span + "
            "type), normalized ids (gold MESH/NCBIGene ids vs the mentions' vocab ids; the id mapping is in "
            "gold_id_mapping.csv), relations (id pair; pair + type) from REA and from the accepted triples; micro "
            "and per type. The whole chain is measured: what the reader dropped is missed. Scored in the "
            "`backbone_comparison` step, with every backbone's gold and the table: materializing either one "
            "materializes both."
        ),
        tags={"karma/backbone": ns},
    )


def evaluate_gold(storage: KarmaStorageResource, ns: str) -> dg.MaterializeResult:
    """Score the namespace against gold and write metrics/<ns>/gold.json (+ gold_id_mapping.csv)."""
    out = cmp.metrics_dir(storage.root(), ns)
    result = compute_gold(storage.stage_store(), Catalog(storage.catalog_path()), storage.inbox_dir(), ns)
    if result is None:
        replace_file(out / "gold.json", json.dumps({"backbone": ns, "n_docs": 0}))
        return dg.MaterializeResult(asset_key=gold_key(ns), metadata={
            "documents_with_gold": 0, "note": "no document of this backbone carries gold annotations"})
    rea, acc, unaligned = result
    summary = {f"gold_{k}": v for k, v in rea.summary().items()}
    summary.update({f"gold_accepted_{k}": v for k, v in acc.summary().items() if k.startswith("pair")})
    judged = judge_accepted(storage.stage_store(), Catalog(storage.catalog_path()), storage.inbox_dir(), ns)
    calibration: dict[str, object] = {}
    if judged is not None:  # every accepted triple judged, ends without ids by their spans (metrics/judging.py)
        ece = judged.ece()
        calibration = {"judged_line": judged.one_line(), "accepted_units": len(judged.units),
                       "unjudged": judged.unjudged, "ece": None if ece is None else round(ece, 4),
                       "unjudged_reasons": judged.unjudged_reasons(), "outside_gold_scope": judged.outside_scope,
                       "reliability": [[u.confidence, bool(u.right)] for u in judged.judged]}
    replace_file(out / "gold.json", json.dumps({"backbone": ns, "n_docs": rea.n_docs, "unaligned_mentions": unaligned,
                                                **summary, "id_sources": rea.id_sources, **calibration}, indent=2))
    mapping = pd.DataFrame([m.model_dump() for m in rea.mapping])
    if len(mapping):
        mapping["kg_ids"] = mapping["kg_ids"].map(lambda v: ";".join(v))
    replace_with(out / "gold_id_mapping.csv", lambda fh: mapping.to_csv(fh, index=False))
    return dg.MaterializeResult(asset_key=gold_key(ns), metadata={
        "documents_with_gold": rea.n_docs,
        **{k: round(v, 4) for k, v in summary.items()},
        "unaligned_mentions": unaligned,
        "scores": dg.MetadataValue.md(rea.markdown()),
        "one_line": rea.one_line(),
        "accepted_judged": calibration.get("judged_line", "no relation gold"),
        "id_sources": dg.MetadataValue.json(rea.id_sources),
        "gold_id_mapping": _md(mapping, 30),
    })


# ---------------------------------------------------------------- cost from the stage materializations
def _partition_metadata(instance: dg.DagsterInstance, key: dg.AssetKey, page: int = 5000):
    """(partition, metadata) of every materialization of the asset, newest first."""
    cursor = None
    while True:
        result = instance.fetch_materializations(key, limit=page, cursor=cursor)
        for rec in result.records:
            if rec.asset_materialization is not None:
                yield rec.asset_materialization.partition, rec.asset_materialization.metadata
        if not result.has_more:
            return
        cursor = result.cursor


def chain_cost(instance: dg.DagsterInstance, ns: str) -> tuple[float | None, int, int]:
    """(cost in USD, LLM calls, tokens) of the namespace's stage materializations (metrics.comparison.chain_cost)."""
    return cmp.chain_cost(_partition_metadata(instance, stage_key(ns, stage)) for stage in STAGE_NAMES)


MAX_EMBEDDED_PNG = 400_000  # bytes: metadata lives in the event log; a larger chart is scaled down first


def reliability_chart(out: Path, namespaces: list[str]) -> Path | None:
    """metrics/reliability.png: each backbone's accepted triples' stored confidence against being right by gold
    (from gold.json), or None when no backbone has judged triples."""
    series = {}
    for ns in namespaces:
        path = out / ns / "gold.json"
        points = json.loads(path.read_text()).get("reliability") if path.is_file() else None
        if points:
            series[ns] = ([float(c) for c, _ in points], [bool(r) for _, r in points])
    if not series:
        return None
    png = out / "reliability.png"
    replace_file(png, reliability_png(series, "Accepted triples: stored confidence vs right by gold (pair level)"))
    return png


def chart_markdown(png: Path, alt: str = "backbone comparison") -> dg.MetadataValue:
    """The chart as a markdown image with a data: URI, so the UI shows it (a file path opens nothing in a
    browser); scaled down (half the pixels at a time) until it fits MAX_EMBEDDED_PNG."""
    data = png.read_bytes()
    if len(data) > MAX_EMBEDDED_PNG:
        from PIL import Image

        image = Image.open(io.BytesIO(data))
        while len(data) > MAX_EMBEDDED_PNG and min(image.size) > 64:
            image = image.resize((image.width * 7 // 10, image.height * 7 // 10))
            buffer = io.BytesIO()
            image.save(buffer, format="PNG", optimize=True)
            data = buffer.getvalue()
    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{base64.b64encode(data).decode()})")


def missing_metrics_hint(rows: list[cmp.ComparisonRow]) -> str:
    """One line saying what to click when a backbone has no kg_metrics yet ('' when every row has them)."""
    missing = [r.backbone for r in rows if r.status == "no kg_metrics yet"]
    if not missing:
        return ""
    return (f"no kg_metrics yet for {', '.join(missing)} (their columns read n/a): launch the `{COMPARE_JOB}` job "
            "(Jobs > compare_backbones > Materialize all) to measure them with this table")


def build_backbone_comparison(namespaces: list[str], statuses: list[BackboneStatus]) -> dg.AssetsDefinition:
    """The table and every backbone's gold scores, one step (a multi-asset that cannot be subset).

    Why one step: the gold columns come from `<ns>/gold_evaluation`, which nothing refreshes on its own (unlike
    kg_metrics, which the karma_freshness sensor keeps fresh, it would ask for a re-score after every paper run).
    As separate assets, "Materialize" on the comparison ran the table alone, its gold columns n/a, the UI only
    warning that upstream assets were never materialized. Not subsettable, the UI's "Materialize" on the
    comparison (or on any gold_evaluation) lists the gold evaluations it also materializes and runs them in the
    same step: one click, and gold scores never older than the table. Scoring gold reads stage tables only (no
    model call): cheap enough to redo with each table.
    """
    specs = [gold_spec(ns) for ns in namespaces]
    specs.append(dg.AssetSpec(
        key="backbone_comparison",
        deps=[*(dg.AssetKey([ns, "kg_metrics"]) for ns in namespaces), *(gold_key(ns) for ns in namespaces)],
        group_name=GROUP,
        kinds={"python", "matplotlib"},
        description=(
            "KARMA's Table 1 for these backbones in Table 2's shape (a row per backbone, ablation and single-agent "
            "baseline: mode / ablated columns; n/a where a metric was not measured; best value bold; a judge = chain "
            "flag) plus gold F1 and cost per document and per accepted triple (cost_usd of the stage "
            "materializations); as markdown, CSV and PNG. Materialize scores every backbone's gold in the same step "
            f"(its `<backbone>/gold_evaluation`); kg_metrics refresh when the KG grows, or launch the `{COMPARE_JOB}` "
            "job to measure everything at once."
        ),
    ))

    @dg.multi_asset(name="backbone_comparison", specs=specs, can_subset=False)
    def backbone_comparison(context: dg.AssetExecutionContext, storage: KarmaStorageResource, judge: JudgeResource,
                            backbones: BackbonesResource):
        for ns in namespaces:  # first: the table reads gold.json
            yield evaluate_gold(storage, ns)
        out = cmp.metrics_dir(storage.root())
        rows = cmp.comparison_rows(out, namespaces, statuses, lambda ns: chain_cost(context.instance, ns)[0],
                                   lambda ns: backbones.calibration_state(ns, storage))
        table = cmp.markdown(rows)
        replace_file(out / "backbone_comparison.md", table + "\n")
        replace_file(out / "backbone_comparison.csv", cmp.to_csv(rows))
        png = cmp.chart(rows, out / "backbone_comparison.png", questions_label(judge.qa_questions))
        reliability = reliability_chart(out, namespaces)
        context.log.info("\n" + table)
        hint = missing_metrics_hint(rows)
        if hint:
            context.log.warning(hint)
        flagged = [r.backbone for r in rows if r.status == "ok" and r.judge_is_chain_model]
        reasons = {r.backbone: r.judge_overlap or "the judge is the chain's model" for r in rows
                   if r.status == "ok" and r.judge_is_chain_model}
        key = dg.AssetKey("backbone_comparison")
        yield dg.MaterializeResult(asset_key=key, metadata={
            "table": dg.MetadataValue.md(table),
            "chart": chart_markdown(png),
            **({"reliability": chart_markdown(reliability, "reliability of the KG's confidence")} if reliability
               else {}),
            "csv": _md(cmp.frame(rows)),
            "files": dg.MetadataValue.text(  # relative: a machine path means nothing in a browser
                ", ".join(f"metrics/{name}" for name in ("backbone_comparison.csv", "backbone_comparison.png",
                                                         "backbone_comparison.md")) + " (in the data dir)"),
            "backbones": len(rows),
            "missing": dg.MetadataValue.text(hint or "-"),
            "judge_is_chain_model": bool(flagged),
            "judge_is_chain_model_backbones": dg.MetadataValue.json(flagged),
            **judge_notice(context, key, reasons, "the judge is not independent of backbone"),
        })

    return backbone_comparison


def build_backbones_status(statuses: list[BackboneStatus], judge_label: str,
                           loaded: list[str] | None = None, source: str = "") -> dg.AssetsDefinition:
    """`source`: which backbones.yaml was read (the project's or the package default), in the description and
    the metadata, so the UI says it before and after a materialization."""
    read_from = f" Read from: {source}." if source else ""

    @dg.asset(key="backbones_status", group_name=GROUP, kinds={"python"},
              description="Every backbone of backbones.yaml: enabled, disabled or NOT CONFIGURED (with the variable "
                          "to set), and the judge." + read_from)
    def backbones_status(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={
            "backbones_file": dg.MetadataValue.text(source or "not recorded"),
            "backbones": dg.MetadataValue.md(statuses_markdown(statuses, judge_label, loaded)),
            "not_configured": dg.MetadataValue.json({s.name: s.key_env for s in statuses if s.enabled and not s.configured}),
            "disabled": dg.MetadataValue.json([s.name for s in statuses if not s.enabled]),
            "enabled": dg.MetadataValue.json([s.name for s in statuses if s.runnable]),
        })

    return backbones_status


def comparison_assets(namespaces: list[str], statuses: list[BackboneStatus], judge_label: str,
                      backbones_source: str = "") -> list[dg.AssetsDefinition]:
    out: list[dg.AssetsDefinition] = []
    for ns in namespaces:
        out.append(build_kg_metrics(ns))
    out += [build_backbone_comparison(namespaces, statuses),
            build_backbones_status(statuses, judge_label, namespaces, backbones_source)]
    return out
