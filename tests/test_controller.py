"""The Central Controller: its order follows U + alpha * sqrt(ln t / (1 + n_tau)), greedily, on a fixture."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from karma_dagster.sensors.new_papers import plan_runs
from karma_dagster.scheduling.controller import Candidate, ControllerParams, DispatchHistory, exploration_bonus, order

P = ControllerParams(alpha=0.5, w_novelty=0.7, w_recency=0.3)
FIXTURE = [
    Candidate(doc_key="d-gene-hi", tau="Gene", novelty=0.9, recency=0.8),
    Candidate(doc_key="d-gene-mid", tau="Gene", novelty=0.8, recency=0.7),
    Candidate(doc_key="d-gene-lo", tau="Gene", novelty=0.7, recency=0.6),
    Candidate(doc_key="d-disease", tau="Disease", novelty=0.5, recency=0.5),
    Candidate(doc_key="d-chem", tau="Chemical", novelty=0.2, recency=1.0),
]


def _brute_force(cands: list[Candidate], counts: Counter) -> list[str]:
    """The formula evaluated from scratch at every step (no heaps): the reference the controller must match."""
    left, counts, out = list(cands), Counter(counts), []
    while left:
        t = sum(counts.values()) + 1
        score = {c.doc_key: P.w_novelty * c.novelty + P.w_recency * c.recency
                 + P.alpha * math.sqrt(math.log(t) / (1 + counts[c.tau])) for c in left}
        best = min(left, key=lambda c: (-score[c.doc_key], c.doc_key))
        out.append(best.doc_key)
        counts[best.tau] += 1
        left.remove(best)
    return out


def test_order_follows_the_formula_and_exploration_lets_other_types_in():
    decisions = order(FIXTURE, P)
    keys = [d.doc_key for d in decisions]
    assert keys == _brute_force(FIXTURE, Counter())
    # Pure utility would serve all three Gene papers first; the bonus brings Disease in before the third.
    by_utility = sorted(FIXTURE, key=lambda c: -(0.7 * c.novelty + 0.3 * c.recency))
    assert [c.doc_key for c in by_utility][:3] == ["d-gene-hi", "d-gene-mid", "d-gene-lo"]
    assert keys.index("d-disease") < keys.index("d-gene-lo")
    for d in decisions:  # every decision carries the formula's inputs and its result, as run tags
        assert d.score == pytest.approx(d.utility + P.alpha * math.sqrt(math.log(d.t) / (1 + d.n_tau)))
        assert d.utility == pytest.approx(0.7 * d.novelty + 0.3 * d.recency)
        tags = d.tags()
        assert int(tags["dagster/priority"]) == d.priority and tags["karma/cca_tau"] == d.tau
        assert float(tags["karma/cca_bonus"]) == pytest.approx(d.bonus, abs=1e-4)
    assert [d.t for d in decisions] == [1, 2, 3, 4, 5] and decisions[0].bonus == 0.0
    priorities = [d.priority for d in decisions]
    assert priorities == sorted(priorities, reverse=True)  # Dagster dequeues in the controller's order


def test_history_counts_shift_the_order_to_under_served_types(tmp_path):
    dispatched = DispatchHistory(tmp_path / "controller.sqlite")
    history = Counter({"Gene": 40, "Disease": 2, "Chemical": 0})
    assert order(FIXTURE, P, history)[0].doc_key == _brute_force(FIXTURE, history)[0]
    assert [d.doc_key for d in order(FIXTURE, P, history)] == _brute_force(FIXTURE, history)
    assert order(FIXTURE, P, history)[0].tau != "Gene"  # 40 Gene papers done: exploration favours the rest
    dispatched.record(order(FIXTURE, P))
    assert dispatched.counts() == Counter({"Gene": 3, "Disease": 1, "Chemical": 1})
    assert exploration_bonus(0.5, 1, 0) == 0.0
    with pytest.raises(ValueError, match="t >= 1"):
        exploration_bonus(0.5, 0, 0)
    with pytest.raises(ValueError, match="listed twice"):
        order(FIXTURE + FIXTURE[:1], P)


def test_sensor_requests_carry_the_priority_in_controller_order():
    decisions = order(FIXTURE, P)
    tags = {d.doc_key: d.tags() for d in decisions}
    requests = plan_runs([(c.doc_key, "abc") for c in FIXTURE], "document_chain", tags)
    assert [r.partition_key for r in requests] == [d.doc_key for d in decisions]
    assert [int(r.tags["dagster/priority"]) for r in requests] == [d.priority for d in decisions]
    assert all("karma/cca_score" in r.tags and "karma/cca_n_tau" in r.tags for r in requests)
