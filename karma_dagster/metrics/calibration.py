"""Is a stored confidence a probability? Expected calibration error and the reliability diagram.

ECE (10 equal-width bins): sum over bins of (bin size / n) * |mean confidence - share right|. A KG whose edges
say 0.8 should be right 8 times in 10; the diagram shows where it is not, per backbone.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

BINS = 10


def reliability_bins(confidences: Sequence[float], right: Sequence[bool], bins: int = BINS
                     ) -> list[tuple[float, float, int]]:
    """(mean confidence, share right, count) per non-empty bin, in bin order."""
    if len(confidences) != len(right):
        raise ValueError(f"reliability: {len(confidences)} confidences but {len(right)} verdicts")
    groups: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for c, r in zip(confidences, right, strict=True):
        if not 0.0 <= c <= 1.0:
            raise ValueError(f"reliability: confidence {c!r} is not in [0, 1]")
        groups[min(bins - 1, int(c * bins))].append((c, bool(r)))
    return [(sum(c for c, _ in g) / len(g), sum(r for _, r in g) / len(g), len(g)) for g in groups if g]


def expected_calibration_error(confidences: Sequence[float], right: Sequence[bool], bins: int = BINS) -> float:
    n = len(confidences)
    if n == 0:
        raise ValueError("expected calibration error of nothing: no judged triples")
    return sum(k / n * abs(c - r) for c, r, k in reliability_bins(confidences, right, bins))


def reliability_png(series: Mapping[str, tuple[Sequence[float], Sequence[bool]]], title: str = "") -> bytes:
    """One reliability curve per backbone (marker size ~ triples in the bin), the diagonal, ECE in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 5.0), dpi=110)
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfectly calibrated")
    for name, (conf, right) in series.items():
        if not conf:
            continue
        pts = reliability_bins(conf, right)
        ece = expected_calibration_error(conf, right)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", linewidth=1.5,
                label=f"{name} (ECE {ece:.3f}, n={len(conf)})")
        for x, y, k in pts:
            ax.annotate(str(k), (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7, color="0.3")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("stored confidence of accepted triples (bin mean)")
    ax.set_ylabel("share right by gold (pair level)")
    ax.set_title(title or "Reliability of the KG's confidence", fontsize=10)
    ax.legend(loc="upper left", fontsize=7, frameon=True)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
