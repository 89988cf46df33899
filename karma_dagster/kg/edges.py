"""A KG edge as conflict resolution sees it; shared by the store and its keyed reads (kg/keyed.py)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict


class EdgeFacts(BaseModel):
    """A KG edge as of a date with what supports it: what a contradiction is adjudicated against."""

    model_config = ConfigDict(frozen=True)
    head_id: str
    relation: str
    tail_id: str
    confidence: float  # 1 - prod(1 - s) over its seed confidence and one factor per paper (kg/reinforcement.py)
    first_seen: dt.date | None  # its first live evidence (None: seed only)
    last_seen: dt.date | None  # its latest live evidence (None: seed only)
    n_evidence: int
    in_seed: bool
    n_docs: int = 0  # distinct papers among its live evidence (a review decision counts as the paper it came from)

    @property
    def text(self) -> str:
        return edge_text(self.head_id, self.relation, self.tail_id)


def edge_text(head_id: str, relation: str, tail_id: str) -> str:
    """How an edge is named in stage tables and adjudications: "head_id -relation-> tail_id"."""
    return f"{head_id} -{relation}-> {tail_id}"
