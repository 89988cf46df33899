"""Adjudicating a contradiction: which of two claims that cannot both hold for one pair of entities stands.

KARMA's conflict-resolution agent debates whether a new triple really contradicts what it meets; MedKGent's
constructor settles a real contradiction with both sides' confidence and time stamps, and may replace the older
edge. Here the rules, in order (the thresholds are KarmaParams fields):

1. The debate's verdict "agree" -> keep: the two can both hold (another context, population, dose).
2. "contradict" with a debate confidence below `conflict_debate_min_confidence` -> review: the debate did not
   settle it, a curator should.
3. Otherwise both sides' support decides.
   - A new triple's support: its MedKGent sampling confidence, else the extractor's probability; occurrences of one
     edge in one document count once, at their best (one paper is one observation, kg/reinforcement.py), and at
     merge the day's papers reinforce each other: 1 - prod(1 - s) over one factor per paper.
   - A KG edge's support: its confidence as of the day before the document (one factor per paper,
     1 - prod(1 - s), beside the seed's prior: kg/reinforcement.py),
     halved for every `conflict_half_life_years` since its last evidence, so newer findings weigh more. An edge in
     the curated seed is undated and is not discounted.
   - Another new triple (same document or same day): its support, undiscounted (same date).
   new >= other + margin -> the new triple wins: against a KG edge "replace" (the edge is superseded from the new
   triple's date on and kept in history); against another new triple "keep".
   new <= other - margin -> the new triple loses: "review" when its own support >= `conflict_review_confidence`
   (a confident claim a curator should see), else "discard".
   Closer -> "review": too close to call on the numbers.

With the defaults (seed confidence 0.9, margin 0.15) one paper never replaces a seed edge by itself (it goes to
review at most), while an extracted edge with one weak or old piece of evidence gives way to a strong new finding.
A triple that loses or ties against a KG edge is recorded per paper, and the weight of such papers over time can
supersede the edge (kg/supersession.py: >= 2 papers whose combined probability leads the edge's by 1 in log-odds).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from karma_dagster.kg import reinforcement
from karma_dagster.kg.edges import EdgeFacts, edge_text
from karma_dagster.runtime.params import KarmaParams

Action = Literal["keep", "discard", "replace", "review"]
Verdict = Literal["agree", "contradict"]
Winner = Literal["new", "other", "tie"]

_EPS = 1e-9  # supports are sums of floats: 0.75 vs 0.6 + 0.15 must count as "by the margin"
_EDGE = re.compile(r"^(?P<head>.+?) -(?P<relation>[^\s>]+)-> (?P<tail>.+)$")


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True)
    action: Action
    reason: str


class EdgeTextError(ValueError):
    """A `contradicts` value that does not name edges as "head_id -relation-> tail_id"."""


def parse_edges(text: str) -> list[tuple[str, str, str]]:
    """(head_id, relation, tail_id) of each edge named in `text` ("; "-joined edge texts, see store.edge_text)."""
    out = []
    for part in text.split("; "):
        m = _EDGE.match(part.strip())
        if m is None:
            raise EdgeTextError(f"{part!r} does not name an edge as 'head_id -relation-> tail_id'")
        out.append((m["head"], m["relation"], m["tail"]))
    return out


def join_edges(edges: Iterable[tuple[str, str, str]]) -> str:
    return "; ".join(edge_text(*e) for e in edges)


def reinforced(scores: Iterable[float]) -> float:
    """MedKGent's reinforcement of independent observations (one per paper): 1 - prod(1 - s_i)."""
    return reinforcement.combine(scores)


def discounted_confidence(edge: EdgeFacts, on: dt.date | None, half_life_years: float) -> float:
    """The edge's confidence halved for every `half_life_years` from its last evidence to `on` (no discount for a
    seed edge, an undated edge, an unknown date or half_life_years == 0)."""
    if edge.in_seed or edge.last_seen is None or on is None or half_life_years <= 0:
        return edge.confidence
    years = max(0, (on - edge.last_seen).days) / 365.25
    return edge.confidence * 0.5 ** (years / half_life_years)


def weigh(new: float, other: float, margin: float) -> Winner:
    """Which side's support is ahead by at least `margin` ("tie" when neither is)."""
    if new >= other + margin - _EPS:
        return "new"
    if new <= other - margin + _EPS:
        return "other"
    return "tie"


def losing_action(support: float, params: KarmaParams) -> Action:
    """A triple that lost: a curator sees it when it was itself confident, else it is dropped."""
    return "review" if support >= params.conflict_review_confidence else "discard"


def _debate_gate(verdict: Verdict, debate_confidence: float, params: KarmaParams) -> Decision | None:
    if verdict == "agree":
        return Decision(action="keep", reason=f"debate: agree ({debate_confidence:.2f}), no real contradiction; "
                                               "both stand")
    if debate_confidence < params.conflict_debate_min_confidence:
        return Decision(action="review", reason=f"debate: contradict at {debate_confidence:.2f} < "
                                                 f"{params.conflict_debate_min_confidence:.2f}, not settled")
    return None


def describe_edge(edge: EdgeFacts, on: dt.date | None, params: KarmaParams) -> str:
    """The existing side as the reason states it: support, evidence count, dates, discount."""
    parts = (["seed"] if edge.in_seed else []) + ([f"{edge.n_evidence} evidence"] if edge.n_evidence else [])
    text = f"KG edge {edge.text} ({' + '.join(parts) or 'no support'}, confidence {edge.confidence:.2f}"
    if edge.last_seen is not None:
        text += f", first seen {edge.first_seen}, last seen {edge.last_seen}"
    weight = discounted_confidence(edge, on, params.conflict_half_life_years)
    if abs(weight - edge.confidence) > 1e-6:
        text += f", {weight:.2f} after {(on - edge.last_seen).days / 365.25:.1f} y"  # type: ignore[operator]
    return text + ")"


def against_edge(
    new_support: float, edge: EdgeFacts, on: dt.date | None, verdict: Verdict, debate_confidence: float,
    params: KarmaParams,
) -> Decision:
    """A new triple (dated `on`) against a KG edge (as of the day before) it contradicts on the same pair."""
    gated = _debate_gate(verdict, debate_confidence, params)
    if gated is not None:
        return gated
    other = discounted_confidence(edge, on, params.conflict_half_life_years)
    sides = f"new {new_support:.2f} vs {describe_edge(edge, on, params)}"
    winner = weigh(new_support, other, params.conflict_replace_margin)
    if winner == "new":
        return Decision(action="replace", reason=f"debate: contradict ({debate_confidence:.2f}); {sides}: the new "
                                                  f"triple leads by >= {params.conflict_replace_margin:.2f}, the edge "
                                                  f"is superseded from {on}")
    if winner == "other":
        action = losing_action(new_support, params)
        return Decision(action=action, reason=f"debate: contradict ({debate_confidence:.2f}); {sides}: the edge "
                                               f"leads by >= {params.conflict_replace_margin:.2f}")
    return Decision(action="review", reason=f"debate: contradict ({debate_confidence:.2f}); {sides}: within "
                                             f"{params.conflict_replace_margin:.2f}, too close to call")


def against_claim(
    new_support: float, other_support: float, other: str, verdict: Verdict, debate_confidence: float,
    params: KarmaParams, where: str = "same document",
) -> Decision:
    """A new triple against another new triple (`other`, its edge text) of the same document: no KG edge to replace,
    so the stronger keeps and the weaker loses (each side decides its own row, with the same numbers)."""
    gated = _debate_gate(verdict, debate_confidence, params)
    if gated is not None:
        return gated
    sides = f"new {new_support:.2f} vs {other} {other_support:.2f} ({where})"
    winner = weigh(new_support, other_support, params.conflict_replace_margin)
    if winner == "new":
        return Decision(action="keep", reason=f"debate: contradict ({debate_confidence:.2f}); {sides}: this one "
                                               f"leads by >= {params.conflict_replace_margin:.2f}")
    if winner == "other":
        return Decision(action=losing_action(new_support, params),
                        reason=f"debate: contradict ({debate_confidence:.2f}); {sides}: the other leads by >= "
                               f"{params.conflict_replace_margin:.2f}")
    return Decision(action="review", reason=f"debate: contradict ({debate_confidence:.2f}); {sides}: within "
                                             f"{params.conflict_replace_margin:.2f}, too close to call")


def same_day(a_support: float, b_support: float, params: KarmaParams) -> tuple[Action, Action]:
    """Two incompatible edges that different documents of one day assert (each side's reinforced support; no debate
    at merge: each already passed its own chain). The winner keeps; the loser is discarded or reviewed; a close
    call sends both to review. Returns (action for a, action for b)."""
    winner = weigh(a_support, b_support, params.conflict_replace_margin)
    if winner == "new":
        return "keep", losing_action(b_support, params)
    if winner == "other":
        return losing_action(a_support, params), "keep"
    return "review", "review"


def debate_said(transcript: object) -> str:
    """The advocates' turns as one line, in order, for a reviewer or an edge's history (the verdict is already in
    the adjudication's reason); '' when there was no multi-agent debate (the local rule debate, an ablation)."""
    if not isinstance(transcript, str) or not transcript:
        return ""
    who = {"new": "for the new triple", "existing": "for the KG"}
    return "".join(f" | round {t['round']} {who.get(t['side'], t['side'])}: {t['argument']}"
                   for t in json.loads(transcript))
