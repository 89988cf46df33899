"""KG integration: a document's evaluated triples -> what its date's increment merges.

Re-validates the evaluated table (the blocking asset check ran in the stage's own run, but a table may
have been written by a run whose check failed), keeps accepted triples (and, flagged, the triples that contradict a
KG edge without entering the KG: the merge records them, kg/supersession.py), and names the new entities
those triples need, with the kind the schema alignment gave them. Every column travels with a triple, among them
`evidence_score` (what the KG's reinforcement aggregates) and C, Cl, R, score as None when no evaluator ran.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import pandera.errors as pa_errors

from karma_dagster.kg import supersession
from karma_dagster.kg.store import NodeIn
from karma_dagster.schemas.tables import EntitiesTable, EvaluatedTable

Collected = tuple[list[dict], list[NodeIn]]


class StageTableInvalid(ValueError):
    """A stage table that fails its pandera model; names the document and the failing checks."""


def _validated(frame: pd.DataFrame, model: type, doc_key: str, stage: str) -> pd.DataFrame:
    try:
        return model.validate(frame, lazy=True)
    except pa_errors.SchemaErrors as exc:
        checks = sorted({str(c) for c in exc.failure_cases["check"].head(5)})
        raise StageTableInvalid(f"document {doc_key}: {stage} table fails its schema ({'; '.join(checks)})") from exc


def _alike(frames: list[pd.DataFrame], model: type) -> bool:
    """Tables one pandera pass can stand for: the same columns with the same dtypes (so their concatenation has
    each table's dtypes: every check of these models is per column or per row, `unique` only stricter), and the
    columns the model coerces already of their target dtype (the pass's coercion then changes nothing)."""
    first = frames[0]
    if any(list(f.columns) != list(first.columns) or not f.dtypes.equals(first.dtypes) for f in frames[1:]):
        return False
    columns = model.to_schema().columns
    return all(str(first[name].dtype) == str(col.dtype) for name, col in columns.items()
               if col.coerce and name in first.columns)


def validate_tables(frames: Mapping[str, pd.DataFrame], model: type, stage: str) -> dict[str, pd.DataFrame | StageTableInvalid]:
    """Each document's validated table, or why it fails. pandera's cost is per column and call (~0.1 s for a
    document's evaluated table of a few rows, most of an increment's time), so alike tables are validated in one
    pass over their concatenation; when that pass fails, each on its own, to name the documents that fail."""
    if len(frames) > 1 and _alike(list(frames.values()), model):
        try:
            model.validate(pd.concat(list(frames.values()), ignore_index=True), lazy=True)
        except pa_errors.SchemaErrors:
            pass
        else:
            return dict(frames)
    out: dict[str, pd.DataFrame | StageTableInvalid] = {}
    for key, frame in frames.items():
        try:
            out[key] = _validated(frame, model, key, stage)
        except StageTableInvalid as exc:
            out[key] = exc
    return out


def collect_documents(
    tables: Mapping[str, tuple[pd.DataFrame, pd.DataFrame]], prompt_version: str
) -> dict[str, Collected | Exception]:
    """collect_document for many documents (a date's, or every evaluated one for the merge state), validated
    together (validate_tables); a document whose tables fail gets the error instead (StageTableInvalid when a
    table fails its schema), so one bad document never fails the others."""
    evaluated = validate_tables({k: ev for k, (ev, _) in tables.items()}, EvaluatedTable, "evaluated")
    entities = validate_tables({k: en for k, (_, en) in tables.items()}, EntitiesTable, "entities")
    out: dict[str, Collected | Exception] = {}
    for key in tables:
        ev, en = evaluated[key], entities[key]
        if isinstance(ev, StageTableInvalid) or isinstance(en, StageTableInvalid):
            out[key] = ev if isinstance(ev, StageTableInvalid) else en  # type: ignore[assignment]
            continue
        try:
            out[key] = _collect_valid(ev, en, prompt_version)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - e.g. a node the KG's model refuses: this document only
            out[key] = exc
    return out


def collect_document(
    doc_key: str, evaluated: pd.DataFrame, entities: pd.DataFrame, prompt_version: str
) -> Collected:
    evaluated = _validated(evaluated, EvaluatedTable, doc_key, "evaluated")
    entities = _validated(entities, EntitiesTable, doc_key, "entities")
    return _collect_valid(evaluated, entities, prompt_version)


def _collect_valid(evaluated: pd.DataFrame, entities: pd.DataFrame, prompt_version: str) -> Collected:
    accepted = evaluated[evaluated["accepted"]]
    triples = [
        {**row, "prompt_version": prompt_version}
        for row in accepted.astype(object).where(accepted.notna(), None).to_dict(orient="records")
    ]
    contra = evaluated[contradicting(evaluated)]
    contradictions = [{**row, "prompt_version": prompt_version, supersession.ROW_FLAG: True}
                      for row in contra.astype(object).where(contra.notna(), None).to_dict(orient="records")]
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
    return triples + contradictions, list(nodes.values())


def contradicting(evaluated: pd.DataFrame) -> pd.Series:
    """Rows that contradict a KG edge without entering the KG: the conflict agent, after a debate that found a
    real contradiction, sent them to review or discarded them against the edge. The merge records them per paper
    (kg/supersession.py): their weight over time may supersede the edge."""
    if "against" not in evaluated.columns:
        return pd.Series(False, index=evaluated.index)
    return (~evaluated["accepted"].astype(bool) & evaluated["conflict"].astype(bool)
            & (evaluated["against"] == "kg") & (evaluated["verdict"] == "contradict")
            & evaluated["action"].isin(["review", "discard"]) & (evaluated["schema_status"] == "aligned")
            & evaluated["kg_relation"].notna() & evaluated["contradicts"].notna())
