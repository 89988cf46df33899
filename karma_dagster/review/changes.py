"""What accepting an item would change in its backbone's KG, in a curator's words (read from the KG store)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from karma_dagster.kg import reinforcement
from karma_dagster.kg.backends import open_kg_store
from karma_dagster.kg.store import schema_relations
from karma_dagster.review import accepting
from karma_dagster.review.models import ReviewItem


def reinforced(old: float, new: float, *, seed_only: bool = False) -> float:
    """An edge's confidence once a paper it had no reading from adds `new`, as the KG's edges view aggregates it:
    MedKGent's reinforcement, or for an edge only the seed states, the seed's prior beside that paper
    (kg/reinforcement.py). A seed edge that papers already support is reinforced as its papers are (exact when
    they lift it above its prior; an upper bound otherwise)."""
    if seed_only:
        return reinforcement.with_prior(old, new)
    return reinforcement.combine([old, new])


def with_changes(items: Sequence[ReviewItem], kg_path: Path | str | None) -> list[ReviewItem]:
    """Each item with `change` filled from the KG (new edge / reinforces / supersedes / new entity / schema).

    Without a KG file (none imported yet) every mergeable triple is a new edge between new entities."""
    store = open_kg_store(kg_path) if kg_path is not None else None
    store = store if store is not None and store.exists() else None
    by_ns: dict[str, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        by_ns[item.backbone].append(i)
    out = list(items)
    for ns, idx in by_ns.items():
        pairs = [(items[i].head_id, items[i].tail_id) for i in idx]
        edges = store.edges_between(pairs, namespace=ns) if store else {}
        nodes = store.nodes_by_id({x for i in idx for x in (items[i].head_id, items[i].tail_id)}, ns) if store else {}
        papers = store.chain_papers({(items[i].head_id, items[i].relation, items[i].tail_id) for i in idx}, ns) \
            if store else {}
        for i in idx:
            out[i] = items[i].model_copy(update={"change": describe(items[i], edges, nodes, papers)})
    return out


def describe(item: ReviewItem, edges: dict, nodes: dict, papers: dict | None = None) -> str:
    """The change in words. `papers`: KGStore.chain_papers of the item's edge; a paper counts once, so accepting
    what the KG already read from the item's paper leaves the edge's score as it is."""
    chosen = accepting.what_accept_does(item)  # a schema-review / new-relation-type item: a relation to pick
    if chosen is not None:
        return chosen
    if item.relation not in schema_relations():  # another kind stating no schema relation: refused on accept
        return (f"tries the KG, which refuses it: {item.relation!r} is not a KG relation (admission rule "
                "metaedge); edit the relation to one of the schema's to add the triple")
    parts = []
    same = [e for e in edges.get((item.head_id, item.tail_id), []) if e.relation == item.relation]
    held = (papers or {}).get((item.head_id, item.relation, item.tail_id), set())
    if same and item.source_paper in held:
        parts.append(f"edge already read from paper {item.source_paper} (score {same[0].confidence:.2f}, unchanged)")
    elif same:
        old = same[0].confidence
        new = reinforced(old, item.score, seed_only=same[0].in_seed and not same[0].n_docs)
        parts.append(f"reinforces edge (score {old:.2f} → {new:.2f})")
    else:
        parts.append(f"new edge (score {item.score:.2f})")
    for end, name, kind in (("head_id", item.head_name, item.head_kind), ("tail_id", item.tail_name, item.tail_kind)):
        if getattr(item, end) not in nodes:
            parts.append(f"new entity {name!r} ({kind or 'no kind: edit to a KG node'})")
    if item.contradicts:
        parts.append(f"supersedes edge {item.contradicts}")
    return "; ".join(parts)
