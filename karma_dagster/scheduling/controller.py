"""KARMA's Central Controller (CCA) as a scheduler: which pending document runs first.

Each pending document is a task with a utility U (novelty of its entities against the KG, recency of its date)
and a task type tau (the dominant kind of entity it names). The controller picks greedily, like the paper's
UCB rule: score = U + alpha * sqrt(ln t / (1 + n_tau)), where t counts tasks dispatched so far (+1) and n_tau
those of the document's type; after each pick t and n_tau grow, so an over-served type yields to the others.
The pick's score becomes the Dagster run priority (`dagster/priority`, higher first); the inputs go into run
tags so the UI shows why a run was ordered where it was. No Dagster import: the sensors and backfills call it.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

PRIORITY_SCALE = 100  # score 1.23 -> dagster/priority 123


class ControllerParams(BaseModel):
    """Weights of the utility and the exploration bonus (alpha as in KARMA's CCA)."""

    model_config = ConfigDict(frozen=True)
    alpha: float = Field(0.5, ge=0.0)
    w_novelty: float = Field(0.7, ge=0.0)
    w_recency: float = Field(0.3, ge=0.0)
    recency_half_life_days: float = Field(365.0, gt=0.0)


class Candidate(BaseModel):
    """A pending document partition with the utility's inputs (each in [0, 1])."""

    model_config = ConfigDict(frozen=True)
    doc_key: str
    tau: str = "unknown"
    novelty: float = Field(0.5, ge=0.0, le=1.0)
    recency: float = Field(0.5, ge=0.0, le=1.0)


class Decision(BaseModel):
    """One pick: its rank, the formula's inputs and result, and the run priority derived from it."""

    rank: int
    doc_key: str
    tau: str
    novelty: float
    recency: float
    utility: float
    t: int
    n_tau: int
    bonus: float
    score: float
    priority: int

    def tags(self) -> dict[str, str]:
        return {
            "dagster/priority": str(self.priority),
            "karma/cca_score": f"{self.score:.4f}",
            "karma/cca_utility": f"{self.utility:.4f}",
            "karma/cca_novelty": f"{self.novelty:.4f}",
            "karma/cca_recency": f"{self.recency:.4f}",
            "karma/cca_bonus": f"{self.bonus:.4f}",
            "karma/cca_tau": self.tau,
            "karma/cca_t": str(self.t),
            "karma/cca_n_tau": str(self.n_tau),
            "karma/cca_rank": str(self.rank),
        }


def utility(c: Candidate, params: ControllerParams) -> float:
    return params.w_novelty * c.novelty + params.w_recency * c.recency


def exploration_bonus(alpha: float, t: int, n_tau: int) -> float:
    """alpha * sqrt(ln t / (1 + n_tau)); zero before anything ran (t = 1)."""
    if t < 1 or n_tau < 0:
        raise ValueError(f"exploration bonus needs t >= 1 and n_tau >= 0, got t={t}, n_tau={n_tau}")
    return alpha * math.sqrt(math.log(t) / (1 + n_tau))


def order(
    candidates: Sequence[Candidate], params: ControllerParams, dispatched: Counter[str] | None = None
) -> list[Decision]:
    """Greedy UCB order of `candidates`, given the counts per type dispatched before (`dispatched`).

    Within one type the bonus is shared, so each type's best is the top of its utility heap: one pick costs
    O(types), a whole order O(n log n + n * types); 100,000 documents order in about a second.
    """
    seen: set[str] = set()
    for c in candidates:
        if c.doc_key in seen:
            raise ValueError(f"controller: document {c.doc_key!r} is listed twice")
        seen.add(c.doc_key)
    counts: Counter[str] = Counter(dispatched or {})
    t = sum(counts.values()) + 1
    heaps: dict[str, list[tuple[float, str, Candidate]]] = {}
    for c in candidates:
        heaps.setdefault(c.tau, []).append((-utility(c, params), c.doc_key, c))
    for heap in heaps.values():
        heapq.heapify(heap)
    out: list[Decision] = []
    last_priority: int | None = None
    while heaps:
        best: tuple[float, str, str] | None = None  # (-score, doc_key, tau): ties broken by key
        for tau, heap in heaps.items():
            u = -heap[0][0]
            s = u + exploration_bonus(params.alpha, t, counts[tau])
            cand = (-s, heap[0][1], tau)
            if best is None or cand < best:
                best = cand
        assert best is not None
        tau = best[2]
        neg_u, _, c = heapq.heappop(heaps[tau])
        if not heaps[tau]:
            del heaps[tau]
        bonus = exploration_bonus(params.alpha, t, counts[tau])
        score = -neg_u + bonus
        priority = round(score * PRIORITY_SCALE)
        if last_priority is not None:
            priority = min(priority, last_priority)  # Dagster dequeues by priority: keep the pick order
        last_priority = priority
        out.append(Decision(rank=len(out) + 1, doc_key=c.doc_key, tau=tau, novelty=c.novelty, recency=c.recency,
                            utility=-neg_u, t=t, n_tau=counts[tau], bonus=bonus, score=score, priority=priority))
        counts[tau] += 1
        t += 1
    return out


# ---------------------------------------------------------------- features of real documents
def recency(date: dt.date, today: dt.date, half_life_days: float) -> float:
    age = max((today - date).days, 0)
    return 0.5 ** (age / half_life_days)


def entity_features(text: str, ner, kg_names: set[str]) -> tuple[str, float]:
    """(tau, novelty) of a text: its dominant dictionary entity type, and the share of its distinct entity
    names the KG does not hold yet (0.5 when it names none: nothing known either way)."""
    mentions = list(ner.recognize(text)) if text else []
    if not mentions:
        return "unknown", 0.5
    tau = Counter(m.type for m in mentions).most_common(1)[0][0]
    names = {m.text.lower() for m in mentions}
    return tau, sum(n not in kg_names for n in names) / len(names)


def candidates_from_titles(
    rows: Iterable[tuple[str, dt.date, str]], ner, kg_names: set[str], today: dt.date, params: ControllerParams
) -> list[Candidate]:
    """(doc_key, date, title) rows of the catalog -> candidates; the title is what is known before ingestion."""
    out = []
    for key, date, title in rows:
        tau, novelty = entity_features(title or "", ner, kg_names)
        out.append(Candidate(doc_key=key, tau=tau, novelty=novelty,
                             recency=recency(date, today, params.recency_half_life_days)))
    return out


# ---------------------------------------------------------------- what was dispatched (n_tau, t)
class DispatchHistory:
    """SQLite table of the documents dispatched per type: the controller's n_tau and t across ticks."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("CREATE TABLE IF NOT EXISTS dispatched (doc_key TEXT PRIMARY KEY, tau TEXT NOT NULL, "
                        "score REAL NOT NULL, priority INTEGER NOT NULL, at TEXT NOT NULL)")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.path, timeout=60.0)
        try:
            con.execute("PRAGMA busy_timeout=60000")
            yield con
            con.commit()
        finally:
            con.close()

    def counts(self) -> Counter[str]:
        with self._connect() as con:
            return Counter(dict(con.execute("SELECT tau, count(*) FROM dispatched GROUP BY tau").fetchall()))

    def record(self, decisions: Sequence[Decision]) -> None:
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        with self._connect() as con:
            con.executemany("INSERT OR REPLACE INTO dispatched VALUES (?,?,?,?,?)",
                            [(d.doc_key, d.tau, d.score, d.priority, now) for d in decisions])
