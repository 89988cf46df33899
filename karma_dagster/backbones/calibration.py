"""A score made a probability: an isotonic table from a score to P(right), and the operating-point curve that says
which probability an admitted triple must reach for the admitted ones to hold a precision.

Shared by the local backbone's learned evaluator (local/correctness.py: its logistic decision score) and an LLM
backbone calibrated with `karma calibrate` (llm/calibration.py: the mean of its C, Cl and R judgements). Both are
fitted out of fold, grouped by document, so the curve's precision is what unseen papers got
(fitting: metrics/calibration_fit.py).

The operating point: `threshold_for(precision)` is the lowest probability whose admitted triples reached that
precision out of fold, read at the lower end of a 95 % Wilson interval (so a threshold is not chosen by a lucky
handful). A probability is capped at `cap` (< 0.99): one paper never makes an edge certain.
"""

from __future__ import annotations

import bisect
import math

from pydantic import BaseModel, ConfigDict, Field

MIN_POINT = 50  # triples above a threshold before its precision can veto the thresholds below it


class OperatingPoint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threshold: float
    precision: float  # out-of-fold precision of the triples at or above the threshold
    precision_low: float  # its 95 % Wilson lower bound
    recall: float  # the share of the right triples (pair level) at or above it
    admitted: int


class CalibratedScale(BaseModel):
    """score -> probability (piecewise linear through the isotonic table, clipped to [floor, cap]) and the curve."""

    model_config = ConfigDict(extra="forbid")
    calibration_x: list[float]
    calibration_y: list[float]
    cap: float = Field(0.95, gt=0.0, lt=0.99)
    floor: float = Field(0.01, ge=0.0, lt=0.5)
    curve: list[OperatingPoint]

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

    def threshold_for(self, precision: float) -> float:
        """The lowest threshold whose out-of-fold precision's lower bound reaches `precision` (and every higher
        one's too); above every point: the cap, so nothing is admitted automatically."""
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


def wilson_low(successes: int, n: int, z: float = 1.96) -> float:
    if n == 0:
        return 0.0
    phat = successes / n
    denom = 1 + z * z / n
    centre = phat + z * z / (2 * n)
    margin = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n))
    return max(0.0, (centre - margin) / denom)
