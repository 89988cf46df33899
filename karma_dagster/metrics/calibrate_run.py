"""`karma calibrate`: an LLM backbone's evaluator scores against a gold file, and the map from score to P(right).

The backbone's agents read each gold abstract as `karma gold-eval` does (metrics/gold_run.py); every triple the
earlier agents let through (aligned to the schema, kept by conflict resolution) is judged against the gold at the
unit the KG counts, one (document, pair), with its highest evaluator score (metrics/judging.py). Units the gold
cannot judge are counted and left out. The isotonic map and its operating-point curve are fitted with folds
grouped by document (backbones/calibration_fit.py), and stored for the backbone's current settings
(backbones/llm/calibration.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from karma_dagster.backbones.base import Backbone
from karma_dagster.backbones.llm.calibration import CalibrationError, ScoreCalibration
from karma_dagster.kg.identity import IdentityIndex
from karma_dagster.metrics.calibration import expected_calibration_error
from karma_dagster.metrics.gold_run import KGView, predict_document, read_gold
from karma_dagster.metrics.judging import JudgedUnit, judge_documents
from karma_dagster.runtime.params import KarmaParams

MIN_UNITS = 10  # judged triples below which a fitted map would say more than the gold does


class CalibrationRun(BaseModel):
    """What a calibration was fitted on and what it does at the configured admission precision."""

    calibration: ScoreCalibration
    documents_read: int
    unjudged: int
    admission_precision: float
    threshold: float
    admitted_oof: int  # judged units at or above the threshold out of fold
    precision_oof: float | None

    def lines(self) -> list[str]:
        c = self.calibration
        point = (f"threshold P(right) >= {self.threshold:.2f}: {self.admitted_oof} of {c.examples} would be "
                 f"admitted, out-of-fold precision {self.precision_oof:.3f}" if self.precision_oof is not None else
                 "no operating point reaches it on this gold, so nothing is admitted automatically (all to review; "
                 "a larger gold file or a stronger model can change that)")
        return [
            f"{c.backbone} on {c.gold}: {self.documents_read} documents, {c.examples} triples judged "
            f"({c.right} right), {self.unjudged} the gold cannot judge",
            f"ECE of the raw scores {c.ece_raw:.3f} -> calibrated, out of fold ({c.folds} folds by document) "
            f"{c.ece_oof:.3f}",
            f"admission precision {self.admission_precision:.2f}: {point}",
        ]


def sha256_of(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def judged_units(path: Path, backbone: Backbone, dictionary, index, params: KarmaParams, kg: KGView,  # noqa: ANN001
                 limit: int | None = None, log: Callable[[str], None] = lambda _m: None,
                 identity: IdentityIndex | None = None) -> tuple[list[JudgedUnit], int]:
    """Every integrable (document, pair) of the gold file's documents with its raw evaluator score and verdict."""
    docs = read_gold(Path(path))[: limit or None]
    if not docs:
        raise CalibrationError(f"{Path(path).name}: holds no gold documents")
    if not any(d.relations for d in docs):
        raise CalibrationError(f"{Path(path).name}: annotates no relations, so no triple can be judged right or "
                               "wrong (use a file with relation gold, e.g. BioRED or BC5CDR)")
    judged = []
    for i, d in enumerate(docs, 1):
        _m, _t, j = predict_document(d, backbone, dictionary, index, params, kg, integrable=True, identity=identity)
        if j is not None:
            judged.append(j)
        log(f"  {i}/{len(docs)} documents")
    return judge_documents(judged, score_column="score").units, len(docs)


def fit(units: list[JudgedUnit], *, backbone: str, model: str, fingerprint: str, gold: Path, documents: int,
        params: KarmaParams, today: dt.date | None = None) -> CalibrationRun:
    """The calibration of `units` (raw scores and verdicts), refused with the reason when the gold is too thin."""
    from karma_dagster.backbones.calibration_fit import fit_scale

    judged = [u for u in units if u.right is not None]
    if len(judged) < MIN_UNITS:
        raise CalibrationError(f"{gold.name}: {len(judged)} triples could be judged ({len(units)} extracted); at "
                               f"least {MIN_UNITS} are needed to fit a calibration (use more documents)")
    scores = [u.confidence for u in judged]
    right = [bool(u.right) for u in judged]
    try:
        scale = fit_scale(scores, right, [u.doc_key for u in judged])
    except ValueError as exc:
        raise CalibrationError(f"{gold.name}: {exc}") from exc
    cal = ScoreCalibration(
        **scale.model_dump(include={"calibration_x", "calibration_y", "cap", "floor", "curve"}),
        backbone=backbone, fingerprint=fingerprint, model=model, gold=gold.name, gold_sha256=sha256_of(gold),
        fitted_on=today or dt.date.today(), examples=scale.examples, right=scale.right, documents=scale.documents,
        folds=scale.folds, ece_raw=round(expected_calibration_error(scores, right), 4),
        ece_oof=round(expected_calibration_error(scale.oof, right), 4))
    threshold = cal.threshold_for(params.admission_precision)
    threshold = 1.0 if threshold >= cal.cap else threshold  # no operating point: nothing admitted (as the evaluator)
    chosen = [r for p, r in zip(scale.oof, right, strict=True) if p >= threshold]
    return CalibrationRun(calibration=cal, documents_read=documents, unjudged=len(units) - len(judged),
                          admission_precision=params.admission_precision, threshold=threshold,
                          admitted_oof=len(chosen), precision_oof=sum(chosen) / len(chosen) if chosen else None)
