"""Fit the learned evaluator (correctness.py) on labelled triples: a regularised logistic regression, its strength
chosen by document-grouped cross-validation, an isotonic calibration fitted on its out-of-fold scores, and the
operating-point curve read from the same out-of-fold probabilities. Grouped by document, so no paper's triples sit
on both sides of a fold.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import GroupKFold

from karma_dagster.backbones.calibration_fit import CAP, FLOOR, isotonic, operating_curve
from karma_dagster.backbones.local.correctness import CorrectnessModel
from karma_dagster.backbones.local.triple_features import FEATURES_VERSION

C_GRID = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


def _matrix(rows: Sequence[dict[str, float]], names: list[str]) -> np.ndarray:
    x = np.zeros((len(rows), len(names)))
    index = {n: i for i, n in enumerate(names)}
    for r, f in enumerate(rows):
        for n, v in f.items():
            if n in index:
                x[r, index[n]] = v
    return x


def _oof_scores(x: np.ndarray, y: np.ndarray, groups: np.ndarray, c: float, folds: int) -> np.ndarray:
    out = np.zeros(len(y))
    for train, test in GroupKFold(n_splits=folds).split(x, y, groups):
        model = LogisticRegression(C=c, max_iter=2000).fit(x[train], y[train])
        out[test] = model.decision_function(x[test])
    return out


def fit_model(rows: Sequence[dict[str, float]], labels: Sequence[bool], groups: Sequence[str], *,
              folds: int = 5, min_count: int = 5, provenance: dict[str, object] | None = None,
              log=print) -> CorrectnessModel:
    """The model of `rows` (features) and `labels` (right at pair level), documents as `groups`."""
    if len(rows) != len(labels) or len(rows) != len(groups):
        raise ValueError(f"fit_model: {len(rows)} rows, {len(labels)} labels, {len(groups)} groups")
    y = np.asarray(labels, dtype=int)
    if y.min() == y.max():
        raise ValueError("fit_model: every example has the same label; nothing to learn")
    counts: dict[str, int] = {}
    for f in rows:
        for n, v in f.items():
            if v:
                counts[n] = counts.get(n, 0) + 1
    names = sorted(n for n, k in counts.items() if k >= min_count)
    raw = _matrix(rows, names)
    mean, std = raw.mean(axis=0), raw.std(axis=0)
    std[std == 0] = 1.0
    x = (raw - mean) / std
    g = np.asarray(groups)
    losses = {}
    for c in C_GRID:
        z = _oof_scores(x, y, g, c, folds)
        losses[c] = log_loss(y, 1 / (1 + np.exp(-z)))
        log(f"  C={c:g}: out-of-fold log loss {losses[c]:.4f}")
    best_c = min(losses, key=lambda c: (losses[c], c))
    oof = _oof_scores(x, y, g, best_c, folds)
    iso = isotonic(oof, y)
    p_oof = iso.predict(oof)
    n_right = int(y.sum())
    curve = operating_curve(p_oof, y)
    final = LogisticRegression(C=best_c, max_iter=2000).fit(x, y)
    coefficients = {n: float(w) for n, w in zip(names, final.coef_[0], strict=True) if abs(w) > 1e-9}
    payload = {
        "features_version": FEATURES_VERSION,
        "intercept": float(final.intercept_[0]),
        "coefficients": coefficients,
        "scale": {n: (float(mean[i]), float(std[i])) for i, n in enumerate(names) if n in coefficients},
        "calibration_x": [float(v) for v in iso.X_thresholds_],
        "calibration_y": [float(v) for v in iso.y_thresholds_],
        "cap": CAP, "floor": FLOOR,
        "curve": [p.model_dump() for p in curve],
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
    prov = {**(provenance or {}), "examples": len(rows), "right": n_right, "documents": len(set(groups)),
            "C": best_c, "oof_log_loss": round(losses[best_c], 4),
            "oof_brier": round(float(np.mean((p_oof - y) ** 2)), 4)}
    return CorrectnessModel(version=f"evaluator-lr-iso-{digest}", provenance=prov, **payload)
