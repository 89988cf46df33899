"""The controller's priorities turned into a few backfills (tiers), each tagged with its priority.

A backfill's tags apply to all its runs, and a multi-partition run needs a contiguous range of document
partitions, so the unit of priority is a chunk: up to `max_per_run` documents adjacent in the partition
order, ranked by the best controller score (Eq. 4 + UCB bonus) inside it. Chunks are cut into tiers by rank; the
queued-run coordinator starts a higher tier's runs first; tags show each tier's number and score range (two tags:
more make the runs list rows tall); the backfill shows its size; each document's Eq. 4 figures are in
`Decision.details()` and the controller history (DispatchHistory).
"""

from __future__ import annotations

from collections.abc import Mapping

from karma_dagster.scheduling.controller import PRIORITY_SCALE, Decision

CCA_TIERS = 4


def _chunks(decisions: Mapping[str, Decision], position: Mapping[str, int], max_per_run: int) -> list[list[str]]:
    """Runs of partition-adjacent documents, at most `max_per_run` each, in partition order."""
    chunks: list[list[str]] = []
    for key in sorted(decisions, key=position.__getitem__):
        last = chunks[-1] if chunks else None
        if last and len(last) < max_per_run and position[key] == position[last[-1]] + 1:
            last.append(key)
        else:
            chunks.append([key])
    return chunks


def controller_tiers(
    decisions: Mapping[str, Decision], position: Mapping[str, int], max_per_run: int, n_tiers: int = CCA_TIERS,
) -> list[tuple[list[str], dict[str, str]]]:
    """(document keys, run tags) per tier, best tier first. `position`: each key's index in the partitions."""
    missing = sorted(set(decisions) - set(position))
    if missing:
        raise KeyError(f"documents without a partition (register them first): {missing[:5]}")
    chunks = _chunks(decisions, position, max_per_run)
    best = {id(c): max(c, key=lambda k: (decisions[k].priority, decisions[k].score)) for c in chunks}
    chunks.sort(key=lambda c: (-decisions[best[id(c)]].score, position[c[0]]))
    n_tiers = max(1, min(n_tiers, len(chunks)))
    size = -(-len(chunks) // n_tiers)
    tiers = []
    for i in range(0, len(chunks), size):
        part = chunks[i:i + size]
        tier_keys = [k for c in part for k in c]
        scores = [decisions[best[id(c)]].score for c in part]
        tiers.append((tier_keys, {  # two chips in the runs list; tier_details() has the rest
            "dagster/priority": str(round(max(scores) * PRIORITY_SCALE)),
            "karma/cca_tier": str(len(tiers) + 1),
            "karma/cca_score": f"{min(scores):.4f}..{max(scores):.4f}",
        }))
    return tiers

