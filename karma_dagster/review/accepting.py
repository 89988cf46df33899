"""What Accept does for each item kind, said before the decision and done by it.

- held back, unresolved conflict, CogMG completion, and a schema-review item whose relation fits its kinds: the
  triple enters the KG as it stands (a conflict item supersedes the edge it contradicts);
- a schema-review or new-relation-type item whose relation is no schema metaedge for its kinds: Accept takes a
  choice: a schema metaedge joining the two kinds (either direction: the triple is turned to run as it does) and
  the triple enters the KG as that relation, or EXTENSION: the relation is added to the KG's schema extensions
  (`schema_extension`, what the KG tools' search_property lists) and the triple waits, refused by the admission
  rule `metaedge` with that reason, until kg/schema.yaml has a metaedge for it.
Every write still goes through kg/admission_rules (in merge_inputs); a refusal keeps the item in the queue.
"""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel

from karma_dagster.kg import admission_rules as rules
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.store import KGStore
from karma_dagster.review.models import EXTENSION, ReviewItem

CHOOSING = ("schema_review", "new_relation_type")  # the kinds whose Accept may take a choice


class Choice(BaseModel):
    """A schema metaedge a schema-review triple can be accepted as; `swapped`: it runs tail -> head."""

    abbrev: str
    relation: str
    swapped: bool
    text: str  # "Compound -treats-> Disease (CtD)"


def fits(item: ReviewItem, schema: KGSchema | None = None) -> bool:
    """Whether the item's relation is a schema metaedge for its end kinds as it stands."""
    fact = rules.Fact(head_id=item.head_id, relation=item.relation, tail_id=item.tail_id, head_kind=item.head_kind,
                      tail_kind=item.tail_kind)
    return not isinstance(rules.resolve_metaedge(fact, schema or rules.default_schema()), rules.Refusal)


def choices(item: ReviewItem, schema: KGSchema | None = None) -> list[Choice]:
    """The schema metaedges joining the item's two kinds, either way round ([] when a kind is unknown)."""
    schema = schema or rules.default_schema()
    hk, tk = item.head_kind, item.tail_kind
    if not hk or not tk:
        return []
    out = []
    for me in schema.metaedges:
        for swapped, (s, t) in ((False, (hk, tk)), (True, (tk, hk))):
            if (me.source, me.target) == (s, t) and not (swapped and hk == tk):
                out.append(Choice(abbrev=me.abbrev, relation=me.relation, swapped=swapped, text=str(me)))
    return out


def needs_choice(item: ReviewItem, schema: KGSchema | None = None) -> bool:
    return item.source in CHOOSING and not fits(item, schema)


def what_accept_does(item: ReviewItem, schema: KGSchema | None = None) -> str | None:
    """The Accept text of an item that takes a choice; None when Accept enters the triple as it stands (the
    caller says what that changes in the KG)."""
    if not needs_choice(item, schema):
        return None
    kinds = f"{item.head_kind or '?'} -> {item.tail_kind or '?'}"
    extension = (f"adds relation type {item.relation!r} ({kinds}) to the schema's extensions of this KG; the triple "
                 "enters the KG once kg/schema.yaml has a metaedge for it (it waits in the queue with that reason)")
    found = choices(item, schema)
    if not found and item.relation in (schema or rules.default_schema()).relation_names:
        return (f"tries the KG with {item.relation!r}, which the admission rules refuse while an end has no KG kind "
                f"that fits ({kinds}): it stays in the queue with the reason; edit the end to a KG node")
    if not found:
        return extension
    return ("maps the triple to the relation you pick: " + "; ".join(c.text for c in found)
            + f" — or {extension}")


def default_choice(item: ReviewItem, schema: KGSchema | None = None) -> str:
    """An Accept without a choice: EXTENSION for a relation no schema metaedge can carry between the item's
    kinds (nothing to pick), else none (the triple as it stands, or the reviewer must pick)."""
    schema = schema or rules.default_schema()
    if needs_choice(item, schema) and not choices(item, schema) and item.relation not in schema.relation_names:
        return EXTENSION
    return ""


def chosen_edits(item: ReviewItem, choice: str, schema: KGSchema | None = None) -> dict[str, list[str]]:
    """The edits (field -> [old, new]) an Accept with `choice` makes; ValueError names the item and the choices."""
    if not choice:  # the triple as it stands: the admission rules decide at the merge (a refusal keeps it queued)
        return {}
    if item.source not in CHOOSING:
        raise ValueError(f"item {item.item_id}: a {item.source} item is accepted as it is; a choice is for "
                         f"{' and '.join(CHOOSING)} items (edit it to change it)")
    if choice == EXTENSION:
        if item.relation in (schema or rules.default_schema()).relation_names:
            raise ValueError(f"item {item.item_id}: {item.relation!r} is a schema relation already: pick a metaedge "
                             f"({', '.join(c.abbrev for c in choices(item, schema)) or 'none fits its kinds'}) or "
                             "edit the item")
        return {}
    found = {c.abbrev: c for c in choices(item, schema)}
    if choice not in found:
        raise ValueError(f"item {item.item_id}: {choice!r} is not a metaedge between {item.head_kind} and "
                         f"{item.tail_kind}: pick one of {', '.join(found) or 'none'} or {EXTENSION!r}")
    picked = found[choice]
    edits = {"relation": [item.relation, picked.relation]} if picked.relation != item.relation else {}
    if picked.swapped:
        for a, b in (("head_id", "tail_id"), ("head_name", "tail_name"), ("head_kind", "tail_kind")):
            edits[a] = [str(getattr(item, a)), str(getattr(item, b))]
            edits[b] = [str(getattr(item, b)), str(getattr(item, a))]
    return edits


def extend_schema(kg: KGStore, namespace: str, item: ReviewItem, reviewer: str) -> bool:
    """Add the item's relation to the namespace's schema extensions (a property with the item's kinds as domain
    and range); False when the KG has it already (idempotent: every merge attempt may call it)."""
    from karma_dagster.kg_tools.ontology import label_key

    key = label_key(item.relation)
    if any(r["what"] == "property" and r["label_key"] == key for r in kg.schema_extension(namespace)):
        return False
    kg.add_schema_extension({
        "namespace": namespace, "what": "property", "label": item.relation, "label_key": key,
        "comment": f"accepted in review: {item.triple_text}", "super": None, "domain": item.head_kind,
        "range": item.tail_kind, "caller": f"review:{reviewer}", "doc_key": None,
        "created_at": dt.datetime.now(dt.UTC).replace(tzinfo=None)})
    return True
