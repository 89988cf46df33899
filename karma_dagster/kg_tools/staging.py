"""Tool writes staged per document in the chain's own tables, merged by the same `merge_increment`.

A tool call never writes to the KG. A statement becomes a row of the document's `evaluated` table (the final
stage's row format: accepted, aligned, kept), a new instance a row of its `entities` table (status "new"), in the
tool caller's namespace of the stage store; `agents/integration.collect_document` reads them exactly as it reads
a chain's, so the date increment (the KG asset, or `merge_staged` here outside Dagster) merges them with the
same validation, one transaction and provenance. Every call, accepted or refused, is appended to the document's
`tool_calls` table: the transcript (who, which tool, arguments, answer).

Each file is replaced atomically (StageStore.write); the entities table is written before the evaluated table, so
a crash between the two leaves at most an unused entity, never a statement without its node.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path

import filelock
import pandas as pd
from pydantic import BaseModel

from karma_dagster.agents.integration import collect_document
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.kg import day_order, keyed, merge
from karma_dagster.kg.merge import IncrementStats
from karma_dagster.kg.backends import kg_store
from karma_dagster.kg_tools.bounds import document_key
from karma_dagster.kg_tools.results import Refused
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.schemas.frames import frame_to_records, records_to_frame
from karma_dagster.schemas.records import EvaluatedRow, MentionRow
from karma_dagster.schemas.tables import EntitiesTable, EvaluatedTable
from karma_dagster.runtime.stage_store import StageStore

FINAL_STAGE = "evaluated"  # stages.FINAL_STAGE (what the KG increment merges); not imported: stages.py imports
# kg_tools for the `tools` chain mode (tests/test_kg_tools.py checks the two agree)
ENTITIES = "entities"
TOOL_LOG = "tool_calls"
TOOL_PREFIX = "tool:"  # every triple_id and mention_id a tool writes starts so: tool rows are told from a chain's
TOOLS_PROMPT_VERSION = "kg-tools-v1"
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


class ToolCallRecord(BaseModel):
    """One line of a document's transcript."""

    seq: int
    at: str  # ISO timestamp (UTC)
    caller: str
    tool: str
    arguments: str  # JSON
    ok: bool
    message: str
    wrote: str | None = None  # the triple_id / entity id / class or property label written


def check_doc_key(doc_key: str) -> str:
    """The catalog's key rule and the KG's date range (kg_tools/bounds.py): a document no increment could merge
    is refused before anything is staged for it."""
    return document_key(doc_key)


class DocumentStage:
    """One document's staged tool writes in one namespace (read, append, replace), under a lock."""

    def __init__(self, stages: StageStore, namespace: str, doc_key: str, statements: str = FINAL_STAGE,
                 entities: str = ENTITIES) -> None:
        """`statements` / `entities`: the tables written; the chain's own by default (merged as they are), the
        tools chain mode's staging tables when its later stages carry them through (kg_tools/chain.py)."""
        self.stages, self.namespace, self.doc_key = stages, namespace, check_doc_key(doc_key)
        self.statements_table, self.entities_table = statements, entities
        stages.path(namespace, statements, doc_key)  # the store's own name check
        stages.path(namespace, entities, doc_key)
        lock_path = Path(stages.root) / namespace / f".{doc_key}.tools.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        self._file_lock = filelock.FileLock(str(lock_path), timeout=60)
        with _THREAD_LOCKS_GUARD:
            self._thread_lock = _THREAD_LOCKS.setdefault(str(lock_path), threading.Lock())

    def __enter__(self) -> "DocumentStage":
        self._thread_lock.acquire()
        try:
            self._file_lock.acquire()
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._file_lock.release()
        self._thread_lock.release()

    @property
    def date(self) -> dt.date:
        return dt.date.fromisoformat(date_of_document_key(self.doc_key))

    def triples(self) -> list[EvaluatedRow]:
        if not self.stages.exists(self.namespace, self.statements_table, self.doc_key):
            return []
        rows = frame_to_records(self.stages.read(self.namespace, self.statements_table, self.doc_key), EvaluatedRow)
        self._own(rows, "triple_id", self.statements_table)
        return rows  # type: ignore[return-value]

    def mentions(self) -> list[MentionRow]:
        if not self.stages.exists(self.namespace, self.entities_table, self.doc_key):
            return []
        rows = frame_to_records(self.stages.read(self.namespace, self.entities_table, self.doc_key), MentionRow)
        self._own(rows, "mention_id", self.entities_table)
        return rows  # type: ignore[return-value]

    def _own(self, rows: list, id_field: str, stage: str) -> None:
        """Tools add to their own tables only: a chain's table of this document is never rewritten by a tool."""
        foreign = [getattr(r, id_field) for r in rows if not getattr(r, id_field).startswith(TOOL_PREFIX)]
        if foreign:
            raise Refused(f"document {self.doc_key} already has a {stage} table written by an agent chain in "
                          f"namespace {self.namespace!r}; tool writes go to their own namespace (another --namespace)")

    def write(self, triples: list[EvaluatedRow], mentions: list[MentionRow]) -> None:
        """Validate both tables as the chain's are validated, then replace entities first, evaluated second."""
        entities = EntitiesTable.validate(records_to_frame(mentions, MentionRow), lazy=True)
        evaluated = EvaluatedTable.validate(records_to_frame(triples, EvaluatedRow), lazy=True)
        self.stages.write(self.namespace, self.entities_table, self.doc_key, entities)
        self.stages.write(self.namespace, self.statements_table, self.doc_key, evaluated)

    def reset(self) -> None:
        """Forget this document's staged writes and transcript (a rerun of the tools chain starts afresh)."""
        for table in (self.statements_table, self.entities_table, TOOL_LOG):
            self.stages.path(self.namespace, table, self.doc_key).unlink(missing_ok=True)

    def transcript(self) -> list[ToolCallRecord]:
        if not self.stages.exists(self.namespace, TOOL_LOG, self.doc_key):
            return []
        frame = self.stages.read(self.namespace, TOOL_LOG, self.doc_key)
        return [ToolCallRecord.model_validate(r) for r in frame.astype(object).where(frame.notna(), None)
                .to_dict(orient="records")]

    def log(self, caller: str, tool: str, arguments: dict, ok: bool, message: str, wrote: str | None) -> None:
        records = self.transcript()
        records.append(ToolCallRecord(
            seq=len(records) + 1, at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), caller=caller, tool=tool,
            arguments=json.dumps(arguments, sort_keys=True, default=str), ok=ok, message=message, wrote=wrote))
        frame = pd.DataFrame([r.model_dump() for r in records], columns=list(ToolCallRecord.model_fields))
        self.stages.write(self.namespace, TOOL_LOG, self.doc_key, frame)


# ---------------------------------------------------------------- merging outside Dagster
class MergeOutcome(BaseModel):
    stats: IncrementStats
    documents: list[str]
    skipped: dict[str, str]
    # later dates this merge withdrew (merged out of order before it) and merged again after it, in date order
    remerged: list[dt.date] = []


def staged_documents(paths: DataPaths, namespace: str, day: dt.date) -> list[str]:
    """The documents of `day` whose final table exists in the namespace: the catalog's (as the KG asset takes
    them) and any staged by tools without a catalog entry. A date's merge carries all of them: a merge replaces
    the date's increment, so leaving one out would drop what an earlier merge took in."""
    stages = StageStore(paths.stages_dir)
    keys = {k for k in stages.partitions(namespace, FINAL_STAGE) if _date_or_none(k) == day}
    if paths.catalog.exists():
        keys |= {k for k in Catalog(paths.catalog).documents_for_dates(day, day)
                 if stages.exists(namespace, FINAL_STAGE, k)}
    return sorted(keys)


def _date_or_none(key: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(date_of_document_key(key))
    except ValueError:
        return None


def merge_staged(
    paths: DataPaths, namespace: str, day: dt.date, run_id: str, *, backbone: str | None = None,
    prompt_version: str = TOOLS_PROMPT_VERSION, params: KarmaParams | None = None,
) -> MergeOutcome:
    """Merge a date of the namespace from its staged tables, as the KG asset does: collect_document per document
    (an unreadable or invalid table skips its document, with the reason), then one merge_increment. The KG keeps
    its dates in order (kg/day_order.py): later dates already merged are withdrawn in this date's transaction and
    merged again after it (`remerged`, each document with the prompt version its rows carried), when every
    document they hold has its staged tables; else this date merges out of order and nothing is lost."""
    outcomes: list[MergeOutcome] = []

    def merge_one(d: dt.date) -> list[dt.date]:
        outcomes.append(_merge_day(paths, namespace, d, run_id, backbone=backbone, params=params,
                                   prompt_version=prompt_version if d == day else None))
        return outcomes[-1].stats.withdrawn

    merge_order = day_order.merge_in_order([day], merge_one)
    return outcomes[0].model_copy(update={"remerged": merge_order[1:]})


def _merge_day(paths: DataPaths, namespace: str, day: dt.date, run_id: str, *, backbone: str | None,
               params: KarmaParams | None, prompt_version: str | None) -> MergeOutcome:
    """One date's merge; `prompt_version` None: a date merged again keeps the version each document's rows had."""
    stages, kg = StageStore(paths.stages_dir), kg_store(paths)
    docs: dict = {}
    skipped: dict[str, str] = {}
    keys = staged_documents(paths, namespace, day)
    kept: dict[str, str] = {}
    if prompt_version is None:
        with kg.connect(read_only=True) as con:
            kept = keyed.prompt_versions(con, keys, namespace)
    for key in keys:
        try:
            version = prompt_version if prompt_version is not None else kept.get(key, TOOLS_PROMPT_VERSION)
            docs[key] = collect_document(key, stages.read(namespace, FINAL_STAGE, key),
                                         stages.read(namespace, ENTITIES, key), version)
        except Exception as exc:  # noqa: BLE001 - one bad table skips its document, like the KG asset
            skipped[key] = f"{type(exc).__name__}: {exc}"
    date_sources = Catalog(paths.catalog).date_sources(list(docs)) if paths.catalog.exists() else {}
    with kg.connect(read_only=True) as con:
        _, lost = day_order.withdrawable(con, namespace, day,
                                         lambda d, _held: staged_documents(paths, namespace, d))
    stats = merge.merge_increment(kg, day, backbone or namespace, docs, run_id=run_id, namespace=namespace,
                                  prompt_version=prompt_version or TOOLS_PROMPT_VERSION, params=params,
                                  date_sources=date_sources, withdraw_later=not lost)
    return MergeOutcome(stats=stats, documents=sorted(docs), skipped=skipped)

