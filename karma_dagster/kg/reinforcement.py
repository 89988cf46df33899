"""How an edge's support combines into its confidence: a paper counts once, papers and the seed reinforce.

Why per paper: MedKGent's 1 - prod(1 - s) treats its factors as independent observations. Rows of one paper are
not: one sentence read under two labels that align to one relation became two evidence rows (0.60 -> 0.84 from a
single sentence), and an accepted review decision of a sentence the KG already held became another. So, per edge:

- each paper contributes one factor, the max score of its readings of the edge (its best-supported reading);
- a review decision's row stands for the paper it came from (evidence.paper_key) and counts only when the chain
  holds no reading of the edge from that paper: a person confirming what the KG already read adds nothing;
- confidence = 1 - prod(1 - s) over the seed prior and those per-paper factors.

The SQL (store.kg_edges_all, pg_store's kg_edges_all, keyed.py, browse/queries.py) states the same rule; this
module is its Python form for the code that aggregates rows it already holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


# What one reading may stand for when it enters the KG: the calibrated evaluator's own cap (its probabilities stop
# there, backbones/local/correctness.py). An uncalibrated backbone's 1.0 (five agreeing samples, an LLM's "certain")
# is stored as this, so no single paper sets an edge to certainty; papers that repeat it still raise it.
PAPER_CEILING = 0.95


class Reading(NamedTuple):
    """One evidence row as the rule sees it."""

    paper: str  # the paper it stands for: its paper_key when set, else its doc_key
    score: float
    decision: bool  # a review decision attributed to `paper` (paper_key set), not the chain's own reading


def reading(doc_key: str, paper_key: str | None, score: float) -> Reading:
    """An evidence row's Reading: attributed to `paper_key` when it names another document than `doc_key`."""
    if paper_key and paper_key != doc_key:
        return Reading(paper=paper_key, score=float(score), decision=True)
    return Reading(paper=doc_key, score=float(score), decision=False)


def paper_scores(readings: Iterable[Reading]) -> dict[str, float]:
    """paper -> its one factor: the best chain reading, else (no chain reading of it) the best decision."""
    chain: dict[str, float] = {}
    decided: dict[str, float] = {}
    for r in readings:
        into = decided if r.decision else chain
        into[r.paper] = max(into.get(r.paper, 0.0), r.score)
    return {**decided, **chain}


def combine(factors: Iterable[float]) -> float:
    """MedKGent's reinforcement of independent factors: 1 - prod(1 - s)."""
    rest = 1.0
    for s in factors:
        rest *= 1.0 - float(s)
    return 1.0 - rest


def confidence(seed: float | None, readings: Iterable[Reading]) -> float:
    """An edge's confidence from its seed prior (None: not a seed edge, or superseded) and its live readings.

    Factors are multiplied in paper order, so the same rows give the same float whatever order they came in."""
    per_paper = paper_scores(readings)
    return combine(([] if seed is None else [seed]) + [per_paper[p] for p in sorted(per_paper)])
