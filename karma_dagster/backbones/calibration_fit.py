"""Fitting a calibrated scale (backbones/calibration.py): an isotonic map from a score to P(right) and the
operating-point curve read from out-of-fold probabilities, folds grouped by document so no paper's triples sit on
both sides. Used by scripts/train_evaluator.py (local) and `karma calibrate` (an LLM backbone); scikit-learn is
imported here only, never on a run's path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.isotonic import IsotonicRegression
from sklearn.model_selection import GroupKFold

from karma_dagster.backbones.calibration import CalibratedScale, OperatingPoint, wilson_low

THRESHOLDS = tuple(round(0.02 * k, 2) for k in range(1, 48))  # 0.02 .. 0.94
CAP, FLOOR = 0.95, 0.01


def isotonic(scores: np.ndarray, y: np.ndarray) -> IsotonicRegression:
    return IsotonicRegression(out_of_bounds="clip", y_min=FLOOR, y_max=CAP).fit(scores, y)


def operating_curve(p_oof: np.ndarray, y: np.ndarray) -> list[OperatingPoint]:
    """Precision (and its Wilson lower bound), recall and count of the triples at or above each threshold."""
    n_right = int(y.sum())
    curve = []
    for t in THRESHOLDS:
        sel = p_oof >= t
        k, tp = int(sel.sum()), int(y[sel].sum())
        if k:
            curve.append(OperatingPoint(threshold=t, precision=tp / k, precision_low=wilson_low(tp, k),
                                        recall=tp / max(1, n_right), admitted=k))
    return curve


class ScaleFit(CalibratedScale):
    """A fitted scale and what it was fitted on; `oof` are the out-of-fold probabilities (one per example)."""

    examples: int
    right: int
    documents: int
    folds: int
    oof: list[float]


def fit_scale(scores: Sequence[float], labels: Sequence[bool], groups: Sequence[str], folds: int = 5) -> ScaleFit:
    """The isotonic scale of one score (`scores`, right or not in `labels`, papers in `groups`): the table fitted on
    every example, the curve on out-of-fold probabilities (each fold's map fitted on the other folds' papers)."""
    if not len(scores) == len(labels) == len(groups):
        raise ValueError(f"fit_scale: {len(scores)} scores, {len(labels)} labels, {len(groups)} groups")
    x, y, g = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int), np.asarray(groups)
    if len(y) == 0 or y.min() == y.max():
        raise ValueError(f"{len(y)} judged triples, all {'right' if len(y) and y[0] else 'wrong'}: nothing to learn "
                         "from (a gold file whose triples are both right and wrong is needed)")
    k = min(folds, len(set(groups)))
    if k < 2:
        raise ValueError("the triples come from one document; at least two are needed to fit out of fold")
    oof = np.zeros(len(y))
    for train, test in GroupKFold(n_splits=k).split(x, y, g):
        if y[train].min() == y[train].max():  # a fold with one label: its map is that constant
            oof[test] = min(CAP, max(FLOOR, float(y[train][0])))
        else:
            oof[test] = isotonic(x[train], y[train]).predict(x[test])
    final = isotonic(x, y)
    return ScaleFit(calibration_x=[float(v) for v in final.X_thresholds_],
                    calibration_y=[float(v) for v in final.y_thresholds_], cap=CAP, floor=FLOOR,
                    curve=operating_curve(oof, y), examples=len(y), right=int(y.sum()),
                    documents=len(set(groups)), folds=k, oof=[float(v) for v in oof])
