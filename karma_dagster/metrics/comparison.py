"""The side-by-side table of backbones (KARMA's Table 1 + gold F1 + cost): markdown, CSV and a PNG chart.

Best value per column in bold (higher is better except the conflict ratio and the costs). A backbone that is
enabled but not configured (its key variable is missing) gets a row saying which variable to set.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import BaseModel

if TYPE_CHECKING:
    from karma_dagster.config import BackboneStatus

# column -> (header, higher is better, format)
COLUMNS: dict[str, tuple[str, bool, str]] = {
    "documents": ("docs", True, "{:.0f}"),
    "new_triples": ("new triples", True, "{:.0f}"),
    "mean_confidence": ("MC ↑", True, "{:.3f}"),
    "mean_clarity": ("MCl ↑", True, "{:.3f}"),
    "mean_relevance": ("MR ↑", True, "{:.3f}"),
    "coverage_gain": ("Δcov ↑", True, "{:.0f}"),
    "connectivity_gain": ("Δconn ↑", True, "{:.4f}"),
    "conflict_ratio": ("CR ↓", False, "{:.3f}"),
    "llm_correctness": ("LC ↑", True, "{:.3f}"),
    "qa_coherence": ("QA ↑", True, "{:.3f}"),
    "gold_mention_f1": ("gold mention F1 ↑", True, "{:.3f}"),
    "gold_id_f1": ("gold id F1 ↑", True, "{:.3f}"),
    "gold_pair_f1": ("gold pair F1 ↑", True, "{:.3f}"),
    "gold_pair_type_f1": ("gold pair+type F1 ↑", True, "{:.3f}"),
    "cost_usd": ("cost $", False, "{:.4f}"),
    "cost_per_document": ("$ / doc ↓", False, "{:.5f}"),
    "cost_per_triple": ("$ / accepted triple ↓", False, "{:.5f}"),
}
CHART_COLUMNS = ["mean_confidence", "mean_clarity", "mean_relevance", "conflict_ratio", "llm_correctness",
                 "qa_coherence", "gold_mention_f1", "gold_pair_f1"]


class ComparisonRow(BaseModel):
    backbone: str
    status: str = "ok"  # ok | NOT CONFIGURED: set VAR | ...
    judge: str = ""
    values: dict[str, float | None] = {}


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
                    cost_of: Callable[[str], float | None]) -> list[ComparisonRow]:
    """A row per namespace from its metric files under `metrics_root` (cost from `cost_of(namespace)`), then a
    status row per enabled backbone without a namespace (not configured, ...)."""
    rows = []
    for ns in namespaces:
        km = _read_json(metrics_root / ns / "kg_metrics.json")
        gold = _read_json(metrics_root / ns / "gold.json")
        values: dict[str, float | None] = {c: km.get(c) for c in COLUMNS if c in km}
        for c in ("mention_f1", "id_f1", "pair_f1", "pair_type_f1"):
            values[f"gold_{c}"] = gold.get(f"gold_{c}")
        values.update(cost_figures(cost_of(ns), int(km.get("documents") or 0), int(km.get("new_triples") or 0)))
        rows.append(ComparisonRow(backbone=ns, status="ok" if km else "no kg_metrics yet",
                                  judge=km.get("judge", ""), values=values))
    for s in statuses:
        if s.name not in namespaces and s.enabled:
            rows.append(ComparisonRow(backbone=s.name, status=s.status))
    return rows


def frame(rows: list[ComparisonRow]) -> pd.DataFrame:
    data = [{"backbone": r.backbone, "status": r.status, **{c: r.values.get(c) for c in COLUMNS}, "judge": r.judge}
            for r in rows]
    return pd.DataFrame(data, columns=["backbone", "status", *COLUMNS, "judge"])


def best(df: pd.DataFrame, column: str) -> float | None:
    values = pd.to_numeric(df.loc[df["status"] == "ok", column], errors="coerce").dropna()
    if values.empty:
        return None
    return float(values.max() if COLUMNS[column][1] else values.min())


def markdown(rows: list[ComparisonRow]) -> str:
    df = frame(rows)
    bests = {c: best(df, c) for c in COLUMNS}
    head = "| backbone | " + " | ".join(h for h, _, _ in COLUMNS.values()) + " |"
    out = [head, "|---|" + "---:|" * len(COLUMNS)]
    for r in df.itertuples(index=False):
        if r.status != "ok":
            out.append(f"| {r.backbone} | {r.status} |" + " |" * (len(COLUMNS) - 1))
            continue
        cells = []
        for c, (_h, _up, fmt) in COLUMNS.items():
            v = getattr(r, c)
            if v is None or pd.isna(v):
                cells.append("n/a")
                continue
            text = fmt.format(v)
            cells.append(f"**{text}**" if bests[c] is not None and abs(float(v) - bests[c]) < 1e-12 else text)
        out.append(f"| {r.backbone} | " + " | ".join(cells) + " |")
    judges = sorted({r.judge for r in rows if r.judge})
    if judges:
        out += ["", "Correctness (LC) judged by: " + "; ".join(judges)]
    return "\n".join(out)


def to_csv(rows: list[ComparisonRow]) -> str:
    buf = io.StringIO()
    frame(rows).to_csv(buf, index=False)
    return buf.getvalue()


def chart(rows: list[ComparisonRow], path: Path) -> Path:
    """Grouped bars of the [0, 1] metrics, one group per metric, one bar per backbone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.status == "ok"]
    fig, ax = plt.subplots(figsize=(11, 4.2), dpi=100)
    width = 0.8 / max(1, len(ok))
    xs = range(len(CHART_COLUMNS))
    for i, r in enumerate(ok):
        values = [r.values.get(c) if r.values.get(c) is not None else 0.0 for c in CHART_COLUMNS]
        ax.bar([x + i * width for x in xs], values, width, label=r.backbone)
    ax.set_xticks([x + width * (len(ok) - 1) / 2 for x in xs])
    ax.set_xticklabels([COLUMNS[c][0] for c in CHART_COLUMNS], rotation=20, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_title("Backbones side by side (KARMA Table-1 metrics and gold F1; n/a drawn as 0)")
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
