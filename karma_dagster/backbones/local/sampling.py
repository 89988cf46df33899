"""MedKGent sampling on the local backbone: N different, reproducible answers from a deterministic classifier.

MedKGent asks its extractor N times at a temperature > 0 and keeps a triple found in >= 60 % of the answers. The
local relation classifier gives one answer per input, so sample k perturbs it, the way a temperature perturbs
an LLM's choice: every relation's logit z = logit(p) gets T * l added, where T is the sampling temperature and l
a standard logistic variate (u uniform on (0, 1), l = ln(u / (1 - u))). Sample k proposes relation r when
sigma(z + T * l) >= theta_r, which happens with probability sigma((z - logit(theta_r)) / T): at T = 1 and
theta_r = 0.5 the model's own p; a lower T sharpens the model's decision, a higher T flattens it.

u comes from sha256(text, head span and type, tail span and type, sample index, relation slot): the same
(text, pair, sample) draws the same noise on every run and machine (reruns are identical), while different
samples, pairs or relations draw independently. The classifier runs once per (text, pairs) and its answer is
memoised, so N samples cost one classification plus N cheap perturbations.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable

from karma_dagster.schemas.records import MentionSpan

SAMPLER_VERSION = "logit-noise-v1"  # part of the REA provenance id: a new scheme = a new version
Pairs = list[tuple[MentionSpan, MentionSpan]]
_EPS = 1e-12  # p is clipped to [eps, 1 - eps] before its logit is taken
_PER_DIGEST = 8  # 32 bytes of sha256 = 8 uint32 draws


def _logit(p: float) -> float:
    p = min(1.0 - _EPS, max(_EPS, p))
    return math.log(p) - math.log1p(-p)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def _span_id(m: MentionSpan) -> str:
    return f"{m.start}:{m.end}:{m.type}:{m.text}"


def logistic_draws(text_digest: str, head: MentionSpan, tail: MentionSpan, sample: int, n: int) -> list[float]:
    """n standard logistic variates for one (text, pair, sample): seeded, so identical on every rerun."""
    out: list[float] = []
    block = 0
    while len(out) < n:
        seed = "\x1f".join((text_digest, _span_id(head), _span_id(tail), str(sample), str(block)))
        digest = hashlib.sha256(seed.encode("utf-8")).digest()
        for i in range(_PER_DIGEST):
            u = (int.from_bytes(digest[4 * i: 4 * i + 4], "big") + 0.5) / 2.0 ** 32  # strictly inside (0, 1)
            out.append(math.log(u) - math.log1p(-u))
        block += 1
    return out[:n]


def perturb(probs: dict[str, float], draws: list[float], temperature: float) -> dict[str, float]:
    """sigma(logit(p_r) + T * l_r) per relation, relations in the answer's key order."""
    return {r: _sigmoid(_logit(p) + temperature * l) for (r, p), l in zip(probs.items(), draws, strict=True)}


class RelationSampler:
    """Sample k of p(r | pair, text): the classifier's answer (memoised per text and pairs) with seeded logit noise."""

    def __init__(self, predict: Callable[[str, Pairs], list[dict[str, float]]], memo_size: int = 64) -> None:
        self._predict = predict
        self._memo: OrderedDict[tuple, list[dict[str, float]]] = OrderedDict()
        self._memo_size = memo_size
        self._lock = threading.Lock()

    def _base(self, text: str, pairs: Pairs) -> tuple[str, list[dict[str, float]]]:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        key = (digest, tuple((_span_id(h), _span_id(t)) for h, t in pairs))
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return digest, self._memo[key]
        answer = self._predict(text, pairs)
        with self._lock:
            self._memo[key] = answer
            while len(self._memo) > self._memo_size:
                self._memo.popitem(last=False)
        return digest, answer

    def sample(self, text: str, pairs: Pairs, sample: int, temperature: float) -> list[dict[str, float]]:
        if sample < 0 or not temperature > 0:
            raise ValueError(f"relation sample index must be >= 0 and temperature > 0 (got {sample}, {temperature})")
        if not pairs:
            return []
        digest, base = self._base(text, pairs)
        return [perturb(probs, logistic_draws(digest, h, t, sample, len(probs)), temperature)
                for (h, t), probs in zip(pairs, base, strict=True)]
