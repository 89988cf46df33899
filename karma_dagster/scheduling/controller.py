"""KARMA's Central Controller (CCA) as a scheduler: which pending document runs first.

Each pending document is a task. Its priority is KARMA's Eq. 4, a weighted sum of utility, urgency and cost:

    priority = w_utility * U + w_urgency * urgency - w_cost * cost

- U in [0, 1]: what processing the paper is likely to add to the KG. Estimated by an LLM when backbones.yaml
  names a `controller:` LLM backbone (scheduling/llm_utility.py), else the rule U = w_novelty * novelty +
  w_recency * recency (novelty: share of the title's entity names the KG lacks; recency: 2^(-age / half-life)).
- urgency in [0, 1): how long the paper has waited since it arrived (the catalog's first registration),
  1 - 2^(-waiting hours / urgency_half_life_hours): a paper left waiting rises.
- cost in [0, 1): the estimated tokens of its chain (all backbones) from the cost ledger (ledger.py),
  tokens / (tokens + cost_reference_tokens). The paper writes "+ w3 * cost"; cheaper tasks should go first, so
  the cost enters with a minus sign and w_cost >= 0 (the same as the paper's form with w3 < 0). The local
  backbone spends no tokens: its cost is 0 and Eq. 4 reduces to utility and urgency.

On top, the paper's UCB rule balances task types tau (the dominant entity type of the title): the controller
picks greedily score = priority + alpha * sqrt(ln t / (1 + n_tau)), where t counts tasks dispatched so far (+1)
and n_tau those of the document's type; after each pick t and n_tau grow, so an over-served type yields to the
others. The pick's score becomes the Dagster run priority (`dagster/priority`, higher first); every input, the
weights and which U was used go into run tags, so the UI shows why a run was ordered where it was. No Dagster
import: the sensors and backfills call it.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
import sqlite3
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.runtime.integrity import check_sqlite, sqlite_errors
from karma_dagster.runtime.params import ControllerParams

PRIORITY_SCALE = 100  # score 1.23 -> dagster/priority 123
RULE = "rule"  # utility_source of the rule-based U

__all__ = ["Candidate", "ControllerParams", "Decision", "DispatchHistory", "PRIORITY_SCALE", "RULE", "cost_fraction",
           "eq4_priority", "exploration_bonus", "order", "urgency", "utility"]


class Candidate(BaseModel):
    """A pending document partition with Eq. 4's inputs (each in [0, 1]) and what they were derived from."""

    model_config = ConfigDict(frozen=True)
    doc_key: str
    tau: str = "unknown"
    novelty: float = Field(0.5, ge=0.0, le=1.0)
    recency: float = Field(0.5, ge=0.0, le=1.0)
    llm_utility: float | None = Field(None, ge=0.0, le=1.0)  # U from the controller LLM; None = the rule U
    utility_source: str = RULE  # "rule", "llm:<backbone>", or "rule (<why the LLM gave none>)"
    wait_hours: float = Field(0.0, ge=0.0)  # since the document arrived
    urgency: float = Field(0.0, ge=0.0, le=1.0)
    cost_tokens: float = Field(0.0, ge=0.0)  # estimated tokens of its chain (all backbones)
    cost: float = Field(0.0, ge=0.0, le=1.0)


class Decision(BaseModel):
    """One pick: its rank, Eq. 4's inputs and result, the UCB bonus, and the run priority derived from them."""

    rank: int
    doc_key: str
    tau: str
    novelty: float
    recency: float
    utility: float
    utility_source: str
    wait_hours: float
    urgency: float
    cost_tokens: float
    cost: float
    eq4: float  # w_utility * U + w_urgency * urgency - w_cost * cost
    t: int
    n_tau: int
    bonus: float
    score: float  # eq4 + bonus
    priority: int
    weights: str = ""  # the weights that produced it, for the run tags

    def tags(self) -> dict[str, str]:
        """The run's tags: its priority and score only (each tag is a chip in the runs list; 17 made a row
        330 px tall). The formula's inputs are in `details()`, logged by the sensor tick that requested it."""
        return {"dagster/priority": str(self.priority), "karma/cca_score": f"{self.score:.4f}"}

    def details(self) -> dict[str, str]:
        """Eq. 4's inputs and result, the UCB bonus and the weights, as the tick log shows them."""
        return {
            "score": f"{self.score:.4f}", "eq4": f"{self.eq4:.4f}", "utility": f"{self.utility:.4f}",
            "utility_source": self.utility_source[:200], "novelty": f"{self.novelty:.4f}",
            "recency": f"{self.recency:.4f}", "urgency": f"{self.urgency:.4f}", "wait_hours": f"{self.wait_hours:.1f}",
            "cost": f"{self.cost:.4f}", "cost_tokens": f"{self.cost_tokens:.0f}", "bonus": f"{self.bonus:.4f}",
            "tau": self.tau, "t": str(self.t), "n_tau": str(self.n_tau), "rank": str(self.rank),
            "weights": self.weights,
        }

    def summary(self) -> str:
        """One log line: `rank 1 score 0.7250 = eq4 0.7250 (U 0.5000 rule, urgency ...) + bonus 0.0000; ...`."""
        d = self.details()
        return (f"rank {d['rank']} score {d['score']} = eq4 {d['eq4']} (U {d['utility']} {d['utility_source']}: "
                f"novelty {d['novelty']}, recency {d['recency']}; urgency {d['urgency']} after {d['wait_hours']} h; "
                f"cost {d['cost']} of {d['cost_tokens']} tokens) + bonus {d['bonus']} (type {d['tau']}, "
                f"n_tau {d['n_tau']}, t {d['t']}); {d['weights']}")


def utility(c: Candidate, params: ControllerParams) -> float:
    """U: the controller LLM's estimate when there is one, else w_novelty * novelty + w_recency * recency."""
    if c.llm_utility is not None:
        return c.llm_utility
    return params.w_novelty * c.novelty + params.w_recency * c.recency


def eq4_priority(c: Candidate, params: ControllerParams) -> float:
    """KARMA Eq. 4: w_utility * U + w_urgency * urgency - w_cost * cost (cheaper first: the cost is subtracted)."""
    return params.w_utility * utility(c, params) + params.w_urgency * c.urgency - params.w_cost * c.cost


def urgency(wait_hours: float, half_life_hours: float) -> float:
    """1 - 2^(-wait / half-life): 0 on arrival, 0.5 after one half-life, towards 1 the longer a paper waits."""
    return 1.0 - 0.5 ** (max(wait_hours, 0.0) / half_life_hours)


def cost_fraction(tokens: float, reference_tokens: float) -> float:
    """tokens / (tokens + reference): 0 for a free (local) chain, 0.5 at the reference size, towards 1 above."""
    return tokens / (tokens + reference_tokens) if tokens > 0 else 0.0


def _weights(params: ControllerParams) -> str:
    return (f"w_utility={params.w_utility:g} w_urgency={params.w_urgency:g} w_cost={params.w_cost:g} "
            f"alpha={params.alpha:g}")


def exploration_bonus(alpha: float, t: int, n_tau: int) -> float:
    """alpha * sqrt(ln t / (1 + n_tau)); zero before anything ran (t = 1)."""
    if t < 1 or n_tau < 0:
        raise ValueError(f"exploration bonus needs t >= 1 and n_tau >= 0, got t={t}, n_tau={n_tau}")
    return alpha * math.sqrt(math.log(t) / (1 + n_tau))


def order(
    candidates: Sequence[Candidate], params: ControllerParams, dispatched: Counter[str] | None = None
) -> list[Decision]:
    """Greedy UCB order of `candidates` by Eq. 4's priority plus the exploration bonus, given the counts per type
    dispatched before (`dispatched`).

    Within one type the bonus is shared, so each type's best is the top of its priority heap: one pick costs
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
        heaps.setdefault(c.tau, []).append((-eq4_priority(c, params), c.doc_key, c))
    for heap in heaps.values():
        heapq.heapify(heap)
    out: list[Decision] = []
    last_priority: int | None = None
    weights = _weights(params)
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
        neg_p, _, c = heapq.heappop(heaps[tau])
        if not heaps[tau]:
            del heaps[tau]
        bonus = exploration_bonus(params.alpha, t, counts[tau])
        score = -neg_p + bonus
        priority = round(score * PRIORITY_SCALE)
        if last_priority is not None:
            priority = min(priority, last_priority)  # Dagster dequeues by priority: keep the pick order
        last_priority = priority
        out.append(Decision(rank=len(out) + 1, doc_key=c.doc_key, tau=tau, novelty=c.novelty, recency=c.recency,
                            utility=utility(c, params), utility_source=c.utility_source, wait_hours=c.wait_hours,
                            urgency=c.urgency, cost_tokens=c.cost_tokens, cost=c.cost, eq4=-neg_p, t=t,
                            n_tau=counts[tau], bonus=bonus, score=score, priority=priority, weights=weights))
        counts[tau] += 1
        t += 1
    return out


# ---------------------------------------------------------------- features of real documents
def recency(date: dt.date, today: dt.date, half_life_days: float) -> float:
    age = max((today - date).days, 0)
    return 0.5 ** (age / half_life_days)


class TitleFeatures(BaseModel):
    """What the title tells before ingestion: its dominant entity type, novelty, and the names behind them."""

    tau: str = "unknown"
    novelty: float = 0.5
    known: list[str] = []  # entity names the KG holds
    new: list[str] = []  # entity names it lacks


def title_features(text: str, ner, kg_names: set[str]) -> TitleFeatures:
    """tau = the dominant dictionary entity type of `text`; novelty = the share of its distinct entity names the KG
    does not hold yet (0.5 when it names none: nothing known either way)."""
    mentions = list(ner.recognize(text)) if text else []
    if not mentions:
        return TitleFeatures()
    tau = Counter(m.type for m in mentions).most_common(1)[0][0]
    names = sorted({m.text.lower() for m in mentions})
    new = [n for n in names if n not in kg_names]
    return TitleFeatures(tau=tau, novelty=len(new) / len(names), known=[n for n in names if n in kg_names], new=new)


# ---------------------------------------------------------------- what was dispatched (n_tau, t)
HISTORY_REMEDY = ("restore it from a backup, or move it away (the controller then counts dispatches from zero: "
                  "its order of documents changes, nothing else)")


class DispatchHistory:
    """SQLite table of the documents dispatched per type: the controller's n_tau and t across ticks."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            check_sqlite(con, self.path, "controller history", ("dispatched",), HISTORY_REMEDY)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("CREATE TABLE IF NOT EXISTS dispatched (doc_key TEXT PRIMARY KEY, tau TEXT NOT NULL, "
                        "score REAL NOT NULL, priority INTEGER NOT NULL, at TEXT NOT NULL)")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.path, timeout=60.0)
        try:
            with sqlite_errors(self.path, "controller history", HISTORY_REMEDY):
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
