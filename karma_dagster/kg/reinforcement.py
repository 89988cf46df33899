"""How an edge's support combines into its confidence: a paper counts once, papers and the seed reinforce.

Why per paper: MedKGent's 1 - prod(1 - s) treats its factors as independent observations. Rows of one paper are
not: one sentence read under two labels that align to one relation became two evidence rows (0.60 -> 0.84 from a
single sentence), and an accepted review decision of a sentence the KG already held became another. So, per edge:

- each paper contributes one factor, the max score of its readings of the edge (its best-supported reading);
- a review decision's row stands for the paper it came from (evidence.paper_key) and counts only when the chain
  holds no reading of the edge from that paper: a person confirming what the KG already read adds nothing;
- without a seed row: confidence = 1 - prod(1 - s) over those per-paper factors;
- with one, the seed's stated confidence c is a prior, not a paper (SEED_PRIOR_CEILING, SEED_PRIOR_WEIGHT):
  confidence = max(c, 1 - (1 - c)**SEED_PRIOR_WEIGHT * prod(1 - s)), c capped at SEED_PRIOR_CEILING. In evidence
  weight (-ln(1 - s), what 1 - prod(1 - s) adds up) the prior is worth half a paper of its own confidence: curated
  sources are largely drawn from the literature the papers are read from, so a paper that agrees with the seed is
  partly the seed's own source (their errors are not independent). Alone, the seed stands as stated (capped);
  papers never lower it. So the seed plus one paper stays below 0.99 (at most 1 - sqrt(0.05) * 0.05 = 0.9888), and it
  takes two or more papers to approach certainty: no edge reaches MIN_CERTAIN without MIN_CERTAIN_PAPERS papers
  (kg/invariants.py checks every stored edge).

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

# The seed's stated confidence as a prior (see the module docstring): what a curated source may claim on its own (no
# more than one paper's best reading), and how many papers of the same confidence its evidence weight is worth.
SEED_PRIOR_CEILING = 0.95
SEED_PRIOR_WEIGHT = 0.5

# "Certain" (what kg/invariants.py holds every edge to): confidence >= MIN_CERTAIN takes >= MIN_CERTAIN_PAPERS papers.
MIN_CERTAIN = 0.99
MIN_CERTAIN_PAPERS = 2


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


def seed_prior(seed: float) -> float:
    """The seed's stated confidence as the prior the KG holds: capped at SEED_PRIOR_CEILING."""
    return min(float(seed), SEED_PRIOR_CEILING)


def with_prior(seed: float | None, papers: float) -> float:
    """An edge's confidence from its seed's stated confidence (None: no seed row) and its papers' reinforcement
    `papers` (combine() of one factor per paper; 0.0 when none): the module docstring's rule."""
    if seed is None:
        return papers
    c = seed_prior(seed)
    return max(c, 1.0 - (1.0 - c) ** SEED_PRIOR_WEIGHT * (1.0 - papers))


def confidence(seed: float | None, readings: Iterable[Reading]) -> float:
    """An edge's confidence from its seed prior (None: not a seed edge, or superseded) and its live readings.

    Factors are multiplied in paper order, so the same rows give the same float whatever order they came in."""
    per_paper = paper_scores(readings)
    return with_prior(seed, combine(per_paper[p] for p in sorted(per_paper)))


def sql_confidence(seed: str, rest: str) -> str:
    """with_prior() as an SQL expression (DuckDB and PostgreSQL), so the views state the rule from these constants:
    `seed` is the seed's stated confidence (NULL: no seed row), `rest` is prod(1 - s) over the papers (NULL: none)."""
    c = f"least({seed}, CAST({SEED_PRIOR_CEILING!r} AS DOUBLE PRECISION))"
    return (f"(CASE WHEN {seed} IS NULL THEN 1 - coalesce({rest}, 1) ELSE greatest({c}, 1 - power(1 - {c}, "
            f"CAST({SEED_PRIOR_WEIGHT!r} AS DOUBLE PRECISION)) * coalesce({rest}, 1)) END)")
