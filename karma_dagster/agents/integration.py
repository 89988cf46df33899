"""KG integration: a document's evaluated triples -> what its date's increment merges.

Re-validates the evaluated table (the blocking asset check ran in the stage's own run, but a table may
have been written by a run whose check failed), keeps accepted triples only, and names the new entities
those triples need, with the kind the schema alignment gave them. Every column travels with a triple, among them
`evidence_score` (what the KG's reinforcement aggregates) and C, Cl, R, score as None when no evaluator ran.
"""

from __future__ import annotations

import pandas as pd
import pandera.errors as pa_errors

from karma_dagster.kg.store import NodeIn
from karma_dagster.schemas.tables import EntitiesTable, EvaluatedTable


class StageTableInvalid(ValueError):
    """A stage table that fails its pandera model; names the document and the failing checks."""


def _validated(frame: pd.DataFrame, model: type, doc_key: str, stage: str) -> pd.DataFrame:
    try:
        return model.validate(frame, lazy=True)
    except pa_errors.SchemaErrors as exc:
        checks = sorted({str(c) for c in exc.failure_cases["check"].head(5)})
        raise StageTableInvalid(f"document {doc_key}: {stage} table fails its schema ({'; '.join(checks)})") from exc


def collect_document(
    doc_key: str, evaluated: pd.DataFrame, entities: pd.DataFrame, prompt_version: str
) -> tuple[list[dict], list[NodeIn]]:
    evaluated = _validated(evaluated, EvaluatedTable, doc_key, "evaluated")
    entities = _validated(entities, EntitiesTable, doc_key, "entities")
    accepted = evaluated[evaluated["accepted"]]
    triples = [
        {**row, "prompt_version": prompt_version}
        for row in accepted.astype(object).where(accepted.notna(), None).to_dict(orient="records")
    ]
    # new entities, and those linked to an entity an earlier paper of this namespace introduced: this document
    # carries their node too, so re-merging that earlier date (which may drop it) never orphans this triple
    # (the KG keeps one node per id: the earliest row names it, so nothing is counted twice)
    carried = entities["status"] == "new"
    if "linked_to" in entities.columns:
        carried |= entities["linked_to"] == "extracted"
    new_mentions = entities[carried]
    # a KG tool instance also carries its comment and tool-created class (columns absent in older tables: None)
    names = {
        row["entity_id"]: (row["long_form"] or row["text"]
                           if row["status"] == "new" else row["kg_name"] or row["long_form"] or row["text"],
                           row["vocab_id"], row.get("comment"), row.get("class_label"))
        for row in new_mentions.astype(object).where(new_mentions.notna(), None).to_dict(orient="records")
    }
    nodes: dict[str, NodeIn] = {}
    for t in triples:
        for end in ("head", "tail"):
            entity_id = t[f"{end}_id"]
            if entity_id in names and entity_id not in nodes:
                name, vocab_id, comment, class_label = names[entity_id]
                nodes[entity_id] = NodeIn(id=entity_id, name=name, kind=t[f"{end}_kg_type"], vocab_id=vocab_id,
                                          comment=comment, class_label=class_label)
    return triples, list(nodes.values())
