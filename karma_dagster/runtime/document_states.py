"""Where each registered document stands, per backbone: the state that drives merging.

`karma run`, `karma status`, the kg_increments sensor and the KG asset's check all read it from the stores (the
catalog, the stage tables, the KG's merged_documents), never from what one invocation happened to touch: so a
document evaluated by a run that crashed before its merge is merged by whichever of them comes next. Dagster-free.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from karma_dagster.agents.integration import collect_documents
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.kg import merge
from karma_dagster.kg.backends import kg_store
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.runtime.stage_store import StageStore
from karma_dagster.stages import FINAL_STAGE


class DocumentStates(BaseModel):
    """Where each registered document of one backbone stands.

    merged: its evaluated table's accepted triples are in the KG as they are now (same fingerprint);
    unmerged: evaluated, but not merged or merged from a different table; pending: registered, not evaluated;
    failed: known failures (an evaluated table the merge cannot take, or a pending document whose last run failed).

    Accepted review items are documents too (`review_<item_id>`, of their decision's date; added by
    review/merge_inputs.with_review_documents, not by states_in_stores): `reviewed` when the KG holds them as a
    merge of their date takes them now, else in `unmerged` (their date's merge never ran or failed) or `failed`
    (the KG cannot take the item as it is). They are not registered, evaluated nor counted in `merged`.
    """

    backbone: str
    registered: list[str] = []
    evaluated: list[str] = []
    merged: list[str] = []
    unmerged: list[str] = []
    pending: list[str] = []
    failed: dict[str, str] = {}
    reviewed: list[str] = []  # accepted review documents merged as they are
    dates: dict[str, str] = {}  # the KG date of an unmerged document whose key does not lead with it (review items)

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name))
                for name in ("registered", "evaluated", "merged", "unmerged", "failed", "pending")}


def states_in_stores(
    paths: DataPaths, namespaces: Iterable[str], last_failures: dict[str, str] | None = None,
    *, documents: Iterable[str] | None = None,
) -> dict[str, DocumentStates]:
    """Every backbone's DocumentStates (of `documents` only, when given). `last_failures` (document -> why its last
    chain run failed, from the Dagster instance when the caller has one) marks pending documents that failed
    rather than never ran.

    One unreadable evaluated table fails only its document (state.failed), never the whole answer: a sensor
    tick reading this must still request the other documents' increments."""
    stages, kg, catalog = StageStore(paths.stages_dir), kg_store(paths), Catalog(paths.catalog)
    # asked about some documents (a date, a sensor tick's slice), every read is of those only: the answer costs
    # the same in a catalog of ten million papers as in one of a thousand
    registered = sorted(catalog.all_keys() if documents is None else catalog.registered(documents))
    last_failures = last_failures or {}
    out: dict[str, DocumentStates] = {}
    for ns in namespaces:
        state = DocumentStates(backbone=ns, registered=registered)
        recorded = kg.merged_documents(ns, None if documents is None else registered)
        # every document: one listing of the evaluated tables, not a stat (or on S3 a request) per registered
        # document (a sensor tick over a million papers took 40 s that way, bench/scale.py); some: a stat each
        evaluated = (set(stages.partitions(ns, FINAL_STAGE)) if documents is None
                     else {key for key in registered if stages.exists(ns, FINAL_STAGE, key)})
        for key in registered:
            if key not in evaluated:
                state.pending.append(key)
                if key in last_failures:
                    state.failed[key] = last_failures[key]
                continue
            state.evaluated.append(key)
        for key, fingerprint in table_fingerprints(stages, ns, state.evaluated).items():
            if isinstance(fingerprint, Exception):  # any unreadable table: this document only, with the reason
                state.failed[key] = f"cannot be merged: {fingerprint}"
            else:
                (state.merged if recorded.get(key) == fingerprint else state.unmerged).append(key)
        out[ns] = state
    return out


def unmerged_dates(states: dict[str, DocumentStates]) -> dict[str, set[str]]:
    """{namespace: dates of its unmerged documents}: the increments the next run must (re-)merge."""
    return {ns: {st.dates.get(k) or date_of_document_key(k) for k in st.unmerged} for ns, st in states.items()}


_FINGERPRINTS: dict[tuple[str, str, str], tuple[tuple, str]] = {}


def table_fingerprint(stages: StageStore, ns: str, key: str) -> str:
    """The fingerprint a merge of the document's current tables records (merge.document_fingerprint)."""
    (fingerprint,) = table_fingerprints(stages, ns, [key]).values()
    if isinstance(fingerprint, Exception):
        raise fingerprint
    return fingerprint


def table_fingerprints(stages: StageStore, ns: str, keys: Iterable[str]) -> dict[str, str | Exception]:
    """table_fingerprint of each document, or the error that makes its tables unmergeable.

    Kept per process and keyed by the two files' size and mtime: a sensor ticking every 30 s re-reads only the
    tables that changed, not every evaluated table of the inbox; those it reads are validated together
    (integration.collect_documents)."""
    keys = list(keys)
    out: dict[str, str | Exception] = {}
    tables: dict[str, tuple] = {}
    signatures: dict[str, tuple] = {}
    for key in keys:
        try:
            files = (stages.path(ns, FINAL_STAGE, key), stages.path(ns, "entities", key))
            signatures[key] = tuple((st.st_size, st.st_mtime_ns) for st in (f.stat() for f in files))  # local or UPath
            cached = _FINGERPRINTS.get((str(stages.root), ns, key))
            if cached is not None and cached[0] == signatures[key]:
                out[key] = cached[1]
                continue
            tables[key] = (stages.read(ns, FINAL_STAGE, key), stages.read(ns, "entities", key))
        except Exception as exc:  # noqa: BLE001 - this document only, with the reason
            out[key] = exc
    for key, collected in collect_documents(tables, "").items():
        if isinstance(collected, Exception):
            out[key] = collected
            continue
        try:
            out[key] = merge.document_fingerprint(key, *collected)
        except Exception as exc:  # noqa: BLE001 - rows the merge would refuse: this document only
            out[key] = exc
            continue
        _FINGERPRINTS[(str(stages.root), ns, key)] = (signatures[key], out[key])
    return {key: out[key] for key in keys if key in out}


def evaluated_not_recorded(paths: DataPaths, ns: str) -> list[str]:
    """Documents with an evaluated table but no merge record at all: a cheap view of "unmerged" (no table is read,
    so a re-evaluated document merged from its older table is not in it; states_in_stores tells those apart)."""
    recorded = kg_store(paths).merged_documents(ns)
    return [key for key in StageStore(paths.stages_dir).partitions(ns, FINAL_STAGE) if key not in recorded]
