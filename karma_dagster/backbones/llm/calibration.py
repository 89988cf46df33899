"""An LLM backbone's evaluator scores made probabilities (`karma calibrate`), or said to be none.

An LLM's C, Cl and R are judgements ("0.8 / 0.8 / 0.9" for nearly everything on a small model), not probabilities
of being right. `karma calibrate --backbone NAME --pubtator GOLD` runs the backbone's agents over a gold file the
user supplies, judges each integrable triple against the gold (the scorer of `karma gold-eval`) and fits an
isotonic map from the evaluator's score -- the mean of C, Cl and R -- to P(right), with the operating-point curve
read out of fold (backbones/calibration.py). It is stored as calibration/<backbone>.json in the data folder, or
under $KARMA_STORAGE_URL when that is set (runtime/paths.DataPaths.calibration_dir: every worker reads it), with
a fingerprint of what produces the score (the model, its temperature, the evaluator's prompt files): a backbone
whose model or prompts changed since is uncalibrated again, and says why.

From then on the evaluator stores the calibrated probability as the triple's correctness and evidence score, and
admits by `admission_precision` as the local backbone does. A backbone never calibrated is "uncalibrated": its
triples are held for review unless its `uncalibrated_admission` setting is `theta` (KARMA's mean >= Theta rule).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from pydantic import ValidationError

from karma_dagster.backbones.calibration import CalibratedScale
from karma_dagster.project.safe_files import replace_file
from karma_dagster.runtime.shared_storage import is_url, put_whole

FOLDER = "calibration"
UNCALIBRATED = "uncalibrated"


class CalibrationError(ValueError):
    """A calibration file that cannot be used, or a gold run that cannot be fitted (the message says which)."""


class ScoreCalibration(CalibratedScale):
    """The fitted map of one backbone, what it was fitted on, and how well it did out of fold."""

    backbone: str
    fingerprint: str  # of the model, temperature and evaluator prompts the scores came from
    model: str
    gold: str  # the gold file's name (never its path)
    gold_sha256: str
    fitted_on: dt.date
    examples: int  # judged (document, pair) units
    right: int
    documents: int
    folds: int
    ece_raw: float  # the raw scores read as probabilities, on the same units
    ece_oof: float  # the calibrated probabilities out of fold
    version: str = ""

    def label(self) -> str:
        return f"calibrated on {self.gold} ({self.examples} triples, {self.fitted_on})"


def fingerprint(model: str, temperature: float, evaluator_prompts: str) -> str:
    """What produces the score a calibration maps: another model or another prompt file needs a new one."""
    raw = json.dumps({"model": model, "temperature": float(temperature), "prompts": evaluator_prompts}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def path_for(folder: Path, backbone: str) -> Path:
    """The backbone's calibration file in `folder` (DataPaths.calibration_dir: a Path, or a UPath under a URL)."""
    return folder / f"{backbone}.json"


def load(folder: Path, backbone: str, expected: str) -> tuple[ScoreCalibration | None, str]:
    """(the calibration in force, its label): None with "uncalibrated ..." when there is none, or it was fitted
    for other settings; an unreadable file is an error naming it (never silently uncalibrated)."""
    p = path_for(folder, backbone)
    if not p.is_file():
        return None, UNCALIBRATED
    try:
        cal = ScoreCalibration.model_validate(json.loads(p.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        raise CalibrationError(f"{p.name} (calibration of backbone {backbone!r}): not a usable calibration "
                               f"({str(exc).splitlines()[0]}); run `karma calibrate --backbone {backbone}` again "
                               "or remove the file") from exc
    if cal.backbone != backbone:
        raise CalibrationError(f"{p.name}: a calibration of backbone {cal.backbone!r}, not {backbone!r}")
    if cal.fingerprint != expected:
        return None, (f"{UNCALIBRATED} (calibrated on {cal.gold} for another model or evaluator prompts; "
                      "run karma calibrate again)")
    return cal, cal.label()


def save(folder: Path, cal: ScoreCalibration) -> Path:
    """Written whole or not at all (a reader never sees half a file): a temporary file renamed over the name on a
    local disk, one upload under a URL (an object store shows an object only once complete)."""
    p = path_for(folder, cal.backbone)
    digest = hashlib.sha256(cal.model_dump_json(exclude={"version"}).encode()).hexdigest()[:12]
    cal = cal.model_copy(update={"version": f"cal-{digest}"})
    text = cal.model_dump_json(indent=2)
    if is_url(str(p)):
        put_whole(p, text.encode("utf-8"))
        return p
    p.parent.mkdir(parents=True, exist_ok=True)
    return replace_file(p, text)


def stamp(folder: Path, backbone: str) -> str | None:
    """What changes when the stored calibration does (a cache key); None when there is none."""
    p = path_for(folder, backbone)
    try:
        if is_url(str(p)):
            return hashlib.sha256(p.read_bytes()).hexdigest()
        st = p.stat()
    except OSError:  # FileNotFoundError among them: no calibration stored
        return None
    return f"{st.st_mtime_ns}:{st.st_size}"
