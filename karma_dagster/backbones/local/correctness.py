"""The local backbone's learned evaluator: P(this triple is right | what the chain knows), calibrated.

A logistic regression over named features (triple_features.py) whose score an isotonic map turns into a
probability, both fitted on the chain's own triples over the *training* splits, cross-fitted (the relation model
that proposed a training triple never saw its document; scripts/train_evaluator.py). Shipped as JSON in
data/models/evaluator/ (coefficients by name, the calibration table, the operating-point curve, provenance), so it
loads in milliseconds, reads as a table, and gives the same answer on every machine.

The isotonic table, the operating-point curve and `threshold_for(precision)` are the shared calibrated scale
(backbones/calibration.py), here fitted out of fold on train.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from karma_dagster.backbones.calibration import MIN_POINT, CalibratedScale, OperatingPoint, wilson_low
from karma_dagster.backbones.local.triple_features import FEATURES_VERSION, features
from karma_dagster.runtime.paths import data_file
from karma_dagster.schemas.triple_context import TripleContext

MODEL_FILE = "model.json"
__all__ = ["MIN_POINT", "CorrectnessModel", "CorrectnessModelError", "OperatingPoint", "load", "wilson_low"]


class CorrectnessModelError(ValueError):
    """A model file that cannot be used (missing, unreadable, built from other features)."""


class CorrectnessModel(CalibratedScale):
    version: str
    features_version: str
    intercept: float
    coefficients: dict[str, float]
    scale: dict[str, tuple[float, float]]  # feature -> (mean, std) it was standardised with
    provenance: dict[str, object] = {}

    def decision(self, f: dict[str, float]) -> float:
        z = self.intercept
        for name, w in self.coefficients.items():
            mean, std = self.scale.get(name, (0.0, 1.0))
            z += w * (f.get(name, 0.0) - mean) / (std or 1.0)
        return z

    def probabilities(self, contexts: Sequence[TripleContext]) -> list[float]:
        return [self.calibrate(self.decision(features(c))) for c in contexts]


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
