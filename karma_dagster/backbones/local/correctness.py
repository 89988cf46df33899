"""The local backbone's learned evaluator: P(this triple is right | what the chain knows), calibrated.

A logistic regression over named features (triple_features.py) whose score an isotonic map turns into a
probability, both fitted on the chain's own triples over the *training* splits, cross-fitted (the relation model
that proposed a training triple never saw its document; scripts/train_evaluator.py). Shipped as JSON in
data/models/evaluator/ (coefficients by name, the calibration table, the operating-point curve, provenance), so it
loads in milliseconds, reads as a table, and gives the same answer on every machine.

The operating point: `threshold_for(precision)` is the lowest probability whose admitted triples reached that
precision out of fold on train, read at the lower end of a 95 % Wilson interval (so a threshold is not chosen by a
lucky handful). A probability is capped at `cap` (< 0.99): one paper never makes an edge certain.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.backbones.local.triple_features import FEATURES_VERSION, features
from karma_dagster.runtime.paths import data_file
from karma_dagster.schemas.triple_context import TripleContext

MODEL_FILE = "model.json"


class CorrectnessModelError(ValueError):
    """A model file that cannot be used (missing, unreadable, built from other features)."""


class OperatingPoint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threshold: float
    precision: float  # out-of-fold precision on train of the triples at or above the threshold
    precision_low: float  # its 95 % Wilson lower bound
    recall: float  # the share of train's right triples (pair level) at or above it
    admitted: int


class CorrectnessModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str
    features_version: str
    intercept: float
    coefficients: dict[str, float]
    scale: dict[str, tuple[float, float]]  # feature -> (mean, std) it was standardised with
    calibration_x: list[float]  # isotonic: decision score -> probability (piecewise linear)
    calibration_y: list[float]
    cap: float = Field(0.95, gt=0.0, lt=0.99)
    floor: float = Field(0.01, ge=0.0, lt=0.5)
    curve: list[OperatingPoint]
    provenance: dict[str, object] = {}

    def decision(self, f: dict[str, float]) -> float:
        z = self.intercept
        for name, w in self.coefficients.items():
            mean, std = self.scale.get(name, (0.0, 1.0))
            z += w * (f.get(name, 0.0) - mean) / (std or 1.0)
        return z

    def calibrate(self, z: float) -> float:
        xs, ys = self.calibration_x, self.calibration_y
        if z <= xs[0]:
            p = ys[0]
        elif z >= xs[-1]:
            p = ys[-1]
        else:
            i = bisect.bisect_right(xs, z)
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            p = y0 if x1 == x0 else y0 + (y1 - y0) * (z - x0) / (x1 - x0)
        return min(self.cap, max(self.floor, p))

    def probabilities(self, contexts: Sequence[TripleContext]) -> list[float]:
        return [self.calibrate(self.decision(features(c))) for c in contexts]

    def threshold_for(self, precision: float) -> float:
        """The lowest threshold whose out-of-fold precision's lower bound reaches `precision` (and every higher
        one's too); above every point: the cap, so nothing is admitted automatically."""
        ok = [p for p in self.curve if p.precision_low >= precision]
        if not ok:
            return self.cap
        # the curve is not always monotone: take the lowest threshold above which it never falls below again
        chosen = self.cap
        for p in sorted(self.curve, key=lambda q: -q.threshold):
            if p.precision_low >= precision:
                chosen = p.threshold
            elif p.admitted >= MIN_POINT:  # a point of a handful of triples is noise, not a fall
                break
        return chosen

    def point_at(self, threshold: float) -> OperatingPoint | None:
        above = [p for p in self.curve if p.threshold >= threshold - 1e-9]
        return min(above, key=lambda p: p.threshold) if above else None


MIN_POINT = 50  # triples above a threshold before its precision can veto the thresholds below it


def default_path() -> Path:
    return data_file("models", "evaluator", MODEL_FILE)


@lru_cache(maxsize=4)
def load(path: str | None = None) -> CorrectnessModel:
    p = Path(path) if path else default_path()
    if not p.is_file():
        raise CorrectnessModelError(f"{p}: no evaluator model (train it: python scripts/train_evaluator.py)")
    try:
        model = CorrectnessModel.model_validate(json.loads(p.read_text(encoding="utf-8")))
    except (ValueError, OSError) as exc:
        raise CorrectnessModelError(f"{p}: not a usable evaluator model ({exc})") from exc
    if model.features_version != FEATURES_VERSION:
        raise CorrectnessModelError(f"{p}: trained on features {model.features_version!r}, the code computes "
                                    f"{FEATURES_VERSION!r}: retrain (python scripts/train_evaluator.py)")
    if len(model.calibration_x) != len(model.calibration_y) or not model.calibration_x:
        raise CorrectnessModelError(f"{p}: calibration table is empty or ragged")
    return model


def wilson_low(successes: int, n: int, z: float = 1.96) -> float:
    if n == 0:
        return 0.0
    phat = successes / n
    denom = 1 + z * z / n
    centre = phat + z * z / (2 * n)
    margin = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n))
    return max(0.0, (centre - margin) / denom)
