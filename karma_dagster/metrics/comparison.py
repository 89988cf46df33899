"""The side-by-side table of backbones (KARMA's Table 1, in Table 2's shape with ablation rows, + gold F1 + cost):
markdown, CSV and a PNG chart.

One row per backbone namespace: the KARMA chain, its ablations (`mode` multi_agent, `ablated` the agents switched
off) and the single-agent baseline (`mode` single_agent). A metric that was not measured is "n/a" (None): the
evaluator's MC/MCl/MR when it did not run, R_CR when conflict resolution did not run. Best value per column in
bold (higher is better except the conflict ratio and the costs; counts that are no quality are never bold).
A row whose judge is the chain's own model is flagged (`judge = chain`), with a warning under the table. A
backbone that is enabled but not configured (its key variable is missing) gets a row saying which variable to set.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import BaseModel

from karma_dagster.project.safe_files import replace_with

if TYPE_CHECKING:
    from karma_dagster.runtime.config import BackboneStatus

# column -> (header, higher is better (None: not a quality, never bold), format); Table 1's metrics first
COLUMNS: dict[str, tuple[str, bool | None, str]] = {
    "mean_confidence": ("MC ↑", True, "{:.3f}"),
    "mean_clarity": ("MCl ↑", True, "{:.3f}"),
    "mean_relevance": ("MR ↑", True, "{:.3f}"),
    "coverage_gain": ("Δcov ↑", True, "{:.0f}"),
    "connectivity_net": ("Δconn Σ(deg′−deg) ↑", True, "{:.0f}"),
    "connectivity_ratio": ("Δconn Σdeg′/Σdeg ↑", True, "{:.4f}"),
    "conflict_ratio": ("R_CR ↓", False, "{:.3f}"),
    "replaced_edges": ("edges replaced", None, "{:.0f}"),
    "llm_correctness": ("LC ↑", True, "{:.3f}"),
    "qa_coherence": ("QA ↑", True, "{:.3f}"),
    "qa_coherence_seed_only": ("QA seed only", None, "{:.3f}"),
    "documents": ("docs", None, "{:.0f}"),
    "new_triples": ("new triples", None, "{:.0f}"),
    "gold_mention_f1": ("gold mention F1 ↑", True, "{:.3f}"),
    "gold_id_f1": ("gold id F1 ↑", True, "{:.3f}"),
    "gold_pair_f1": ("gold pair F1 ↑", True, "{:.3f}"),
    "gold_pair_type_f1": ("gold pair+type F1 ↑", True, "{:.3f}"),
    "cost_usd": ("cost $", False, "{:.4f}"),
    "cost_per_document": ("$ / doc ↓", False, "{:.5f}"),
    "cost_per_triple": ("$ / accepted triple ↓", False, "{:.5f}"),
}
# text columns of the CSV around the metrics (the markdown shows mode, ablated, judge = chain)
LEADING = ["backbone", "mode", "ablated", "status", "calibration"]
TRAILING = ["judge_is_chain_model", "judge"]
CHART_COLUMNS = ["mean_confidence", "mean_clarity", "mean_relevance", "conflict_ratio", "llm_correctness",
                 "qa_coherence", "qa_coherence_seed_only", "gold_mention_f1", "gold_pair_f1"]
AGENT_NAMES = {"summarizer": "summarizer", "conflict_resolution": "conflict resolution", "evaluator": "evaluator"}


class ComparisonRow(BaseModel):
    backbone: str
    status: str = "ok"  # ok | NOT CONFIGURED: set VAR | ...
    mode: str = "multi_agent"
    ablated: list[str] = []
    judge: str = ""
    judge_is_chain_model: bool | None = None  # None = unknown (no metrics yet)
    judge_overlap: str = ""
    calibration: str = ""  # what its evaluator's confidence is: "calibrated ..." or "uncalibrated ..." ("": unknown)
    values: dict[str, float | None] = {}

    @property
    def confidence_kind(self) -> str:
        """The markdown's short form: a probability (calibrated) or a score (uncalibrated)."""
        if not self.calibration:
            return "n/a"
        return "calibrated" if self.calibration.startswith("calibrated") else "**uncalibrated** ⚠"


def variant(mode: str, ablated: list[str]) -> str:
    """How the paper names a row: KARMA, KARMA w/o <agents>, or the single-agent baseline."""
    if mode == "single_agent":
        return "single-agent"
    if ablated:
        return "w/o " + " + ".join(AGENT_NAMES.get(a, a) for a in ablated)
    return "KARMA"


def cost_figures(cost_usd: float | None, documents: int, accepted: int) -> dict[str, float | None]:
    """None when the model is unpriced (tokens only) or there is nothing to divide by."""
    return {
        "cost_usd": cost_usd,
        "cost_per_document": cost_usd / documents if cost_usd is not None and documents else None,
        "cost_per_triple": cost_usd / accepted if cost_usd is not None and accepted else None,
    }


def metrics_dir(data_root: Path, namespace: str | None = None) -> Path:
    """<data_root>/metrics[/<namespace>], created: where the metric files of a backbone (or the table) go."""
    path = Path(data_root) / "metrics" / (namespace or "")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _value(entry: object) -> object:
    """The plain value of a metadata entry (a Dagster MetadataValue carries it in `.value`)."""
    return getattr(entry, "value", entry)


def chain_cost(stages: Iterable[Iterable[tuple[str | None, Mapping[str, Any]]]]) -> tuple[float | None, int, int]:
    """(cost in USD, LLM calls, tokens) of a chain, None cost = unpriced.

    `stages` holds, per stage, the (partition, metadata) of its materializations newest first: only the first
    (latest) of each partition counts. A stage partition whose `cost_usd` is not a number ("unpriced model
    (tokens only)") makes the whole cost None; calls and tokens are summed all the same.
    """
    total: float | None = 0.0
    calls = tokens = 0
    for materializations in stages:
        seen: set[str | None] = set()
        for partition, meta in materializations:
            if partition in seen:
                continue
            seen.add(partition)
            value = _value(meta.get("cost_usd"))
            if isinstance(value, (int, float)):
                total = None if total is None else total + float(value)
            elif value is not None:
                total = None
            calls += int(_value(meta.get("llm_calls")) or 0)
            tokens += int(_value(meta.get("tokens_in")) or 0) + int(_value(meta.get("tokens_out")) or 0)
    return total, calls, tokens


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def comparison_rows(metrics_root: Path, namespaces: list[str], statuses: list[BackboneStatus],
                    cost_of: Callable[[str], float | None],
                    calibration_of: Callable[[str], str] = lambda _ns: "") -> list[ComparisonRow]:
    """A row per namespace from its metric files under `metrics_root` (cost from `cost_of(namespace)`, what its
    confidence is from `calibration_of`), then a status row per enabled backbone that cannot run here (NOT
    CONFIGURED; one left out by `--backbone` gets none)."""
    rows = []
    for ns in namespaces:
        km = _read_json(metrics_root / ns / "kg_metrics.json")
        gold = _read_json(metrics_root / ns / "gold.json")
        values: dict[str, float | None] = {c: km.get(c) for c in COLUMNS if c in km}
        for c in ("mention_f1", "id_f1", "pair_f1", "pair_type_f1"):
            values[f"gold_{c}"] = gold.get(f"gold_{c}")
        values.update(cost_figures(cost_of(ns), int(km.get("documents") or 0), int(km.get("new_triples") or 0)))
        rows.append(ComparisonRow(
            backbone=ns, status="ok" if km else "no kg_metrics yet", mode=km.get("mode", "multi_agent"),
            ablated=list(km.get("ablated") or []), judge=km.get("judge", ""),
            judge_is_chain_model=km.get("judge_is_chain_model") if km else None,
            judge_overlap=km.get("judge_overlap", ""), calibration=calibration_of(ns), values=values))
    for s in statuses:
        if s.name not in namespaces and s.enabled and not s.runnable:
            rows.append(ComparisonRow(backbone=s.name, status=s.status, mode=s.mode,
                                      ablated=list(getattr(s, "ablate", []) or [])))
    return rows


def frame(rows: list[ComparisonRow]) -> pd.DataFrame:
    """The CSV's table: backbone, mode, ablated (';'-joined agents), status, the metrics, judge flag, judge."""
    data = [{"backbone": r.backbone, "mode": r.mode, "ablated": ";".join(r.ablated), "status": r.status,
             "calibration": r.calibration, **{c: r.values.get(c) for c in COLUMNS},
             "judge_is_chain_model": r.judge_is_chain_model,
             "judge": r.judge} for r in rows]
    return pd.DataFrame(data, columns=[*LEADING, *COLUMNS, *TRAILING])


def best(df: pd.DataFrame, column: str) -> float | None:
    """The best value of a column among the measured rows; None when the column ranks nothing (not a quality,
    nothing measured, or every row ties: bolding them all would single nothing out)."""
    better = COLUMNS[column][1]
    values = pd.to_numeric(df.loc[df["status"] == "ok", column], errors="coerce").dropna()
    if better is None or values.nunique() < 2:
        return None
    return float(values.max() if better else values.min())


def _cell(value: object, column: str, best_value: float | None) -> str:
    if value is None or pd.isna(value):  # type: ignore[arg-type]
        return "n/a"
    text = COLUMNS[column][2].format(value)
    return f"**{text}**" if best_value is not None and abs(float(value) - best_value) < 1e-12 else text  # type: ignore[arg-type]


def _flag(value: bool | None) -> str:
    return "n/a" if value is None else ("**yes** ⚠" if value else "no")


def judge_warnings(rows: list[ComparisonRow]) -> list[str]:
    """One line per reason the judge is not independent of a row's chain, naming those rows (empty when none)."""
    by_reason: dict[str, list[str]] = {}
    for r in rows:
        if r.status == "ok" and r.judge_is_chain_model:
            by_reason.setdefault(r.judge_overlap or "the judge is the chain's model", []).append(r.backbone)
    return [f"{', '.join(names)}: {why}" for why, names in by_reason.items()]


def markdown(rows: list[ComparisonRow]) -> str:
    df = frame(rows)
    bests = {c: best(df, c) for c in COLUMNS}
    head = ("| backbone | mode | ablated | confidence | " + " | ".join(h for h, _, _ in COLUMNS.values())
            + " | judge = chain |")
    out = [head, "|---|---|---|---|" + "---:|" * len(COLUMNS) + "---|"]
    for r, (_, row) in zip(rows, df.iterrows(), strict=True):
        ablated = variant(r.mode, r.ablated) if r.ablated else "-"
        measured = any(v is not None for v in r.values.values())
        if r.status != "ok" and not measured:
            out.append(f"| {r.backbone} | {r.mode} | {ablated} | {r.confidence_kind} | {r.status} |"
                       + " |" * len(COLUMNS))
            continue
        cells = [_cell(row[c], c, bests[c]) for c in COLUMNS]
        # a row measured in part (gold and cost, no kg_metrics yet) shows what it has; its status where the flag goes
        last = _flag(r.judge_is_chain_model) if r.status == "ok" else r.status
        out.append(f"| {r.backbone} | {r.mode} | {ablated} | {r.confidence_kind} | " + " | ".join(cells)
                   + f" | {last} |")
    out += ["", "n/a: not measured (the evaluator or the conflict resolution agent did not run, or nothing to "
            "measure). Δconn Σ(deg′−deg): net degree increase over the seed entities; Δconn Σdeg′/Σdeg: their "
            "degree after / before. R_CR: share of the triples entering conflict resolution that it (or the "
            "date's merge) removed. QA seed only: the same questions over the seed KG alone."]
    uncalibrated = [f"{r.backbone} ({r.calibration})" for r in rows if r.calibration.startswith("uncalibrated")]
    if uncalibrated:
        out += ["", "⚠ Uncalibrated: these backbones' evaluator scores are no probabilities of being right, so their "
                "confidences and MC/MCl/MR do not compare with a calibrated row's (`karma calibrate --backbone NAME "
                "--pubtator GOLD` fits a multi-agent LLM backbone's): " + "; ".join(uncalibrated)]
    judges = sorted({r.judge for r in rows if r.judge})
    if judges:
        out += ["", "Correctness (LC) judged by: " + "; ".join(judges)]
    warnings = judge_warnings(rows)
    if warnings:
        out += ["", "⚠ The judge is not independent of these chains (their LC, and QA answers the judge accepts, "
                "grade the chain with its own model or rules; name another model as `judge:` in backbones.yaml):"]
        out += [f"- {w}" for w in warnings]
    return "\n".join(out)


def to_csv(rows: list[ComparisonRow]) -> str:
    buf = io.StringIO()
    frame(rows).to_csv(buf, index=False)
    return buf.getvalue()


NA_HEIGHT = 0.04  # a missing value's hatched placeholder: visible, clearly not a measurement


def figure(rows: list[ComparisonRow], questions: str = ""):  # noqa: ANN201 - a matplotlib Figure
    """Grouped bars of the [0, 1] metrics, one group per metric, one bar per backbone. A value not measured is a
    short hatched grey bar labelled "n/a" (never a bar at 0, which reads as measured and bad); the legend sits
    right of the axes, clear of the bars; the footnote names the QA question set (`questions`; default: the
    package's sample set, said to be so: qa.questions_label)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.status == "ok"]
    fig, ax = plt.subplots(figsize=(12, 4.6), dpi=100)
    width = 0.8 / max(1, len(ok))
    xs = range(len(CHART_COLUMNS))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(ok):
        colour = colours[i % len(colours)]
        at = [x + i * width for x in xs]
        values = [r.values.get(c) for c in CHART_COLUMNS]
        measured = [(x, v) for x, v in zip(at, values, strict=True) if v is not None]
        ax.bar([x for x, _ in measured], [v for _, v in measured], width, color=colour, label=r.backbone)
        missing = [x for x, v in zip(at, values, strict=True) if v is None]
        if missing:
            ax.bar(missing, [NA_HEIGHT] * len(missing), width, color="white", edgecolor=colour, hatch="///",
                   linewidth=0.8, gid="n/a")
            for x in missing:
                ax.text(x, NA_HEIGHT + 0.01, "n/a", ha="center", va="bottom", fontsize=6, rotation=90, color="#555")
    ax.set_xticks([x + width * (len(ok) - 1) / 2 for x in xs])
    ax.set_xticklabels([COLUMNS[c][0] for c in CHART_COLUMNS], rotation=20, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_title("Backbones side by side (KARMA Table-1 metrics and gold F1)")
    if not questions:
        from karma_dagster.metrics.qa import questions_label  # here: the table's import stays light

        questions = questions_label()
    fig.text(0.01, 0.01, f'Hatched "n/a": not measured. QA coherence on {questions}.', fontsize=8, color="#444")
    if ok:  # no measured row yet: no legend (matplotlib would warn on every comparison run)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize="small",
                  title="backbone")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def chart(rows: list[ComparisonRow], path: Path, questions: str = "") -> Path:
    """`figure` as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = figure(rows, questions)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_with(path, lambda fh: fig.savefig(fh, format="png"))  # a link at the name is replaced, not followed
    plt.close(fig)
    return path
