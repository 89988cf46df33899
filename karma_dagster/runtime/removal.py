"""Removing one document (`karma remove <doc_key>`): its KG evidence, its stage tables, its catalog entry.

Why a command: a file replaced by another paper makes a new document, and the old one keeps its results and
KG evidence until the user says otherwise (it was a real paper, perhaps read in error). The steps go in the
order that keeps every intermediate state valid and lets a rerun finish the job: the KG first (one transaction;
edges that only this document supported disappear, reinforced ones keep their other support), then the stage
tables (the `evaluated` table first), then the catalog entry, which is what makes the key unknown.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from karma_dagster.ingest.catalog import Catalog, DocumentEntry
from karma_dagster.kg.backends import kg_store
from karma_dagster.kg.store import DocumentFootprint
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.runtime.stage_store import StageStore


class UnknownDocument(KeyError):
    """Neither the catalog, the stage tables nor the KG know the key."""


class RemovalPlan(BaseModel):
    """What removing one document deletes (dry run) or deleted."""

    doc_key: str
    entry: DocumentEntry | None
    kg: list[DocumentFootprint]
    stage_tables: list[str]  # namespace/stage, relative to the stage folder

    def lines(self) -> list[str]:
        out = []
        if self.entry is not None:
            files = [s.source_path for s in self.entry.sources] + [
                f"{r.source_path} (now holds {r.by_doc_key})" for r in self.entry.replaced]
            out.append(f"catalog: {self.doc_key} ({self.entry.title or 'untitled'}; dated {self.entry.date}); "
                       f"files: {', '.join(files) or 'none'}")
        else:
            out.append(f"catalog: {self.doc_key} is no longer registered (a previous removal stopped midway)")
        for f in self.kg:
            out.append(f"KG {f.namespace}: {f.n_evidence} evidence row(s); {f.n_edges_removed} edge(s) supported "
                       f"only by it disappear, {f.n_edges_weakened} reinforced edge(s) lose its support; "
                       f"{f.n_node_rows} new-entity row(s), {f.n_adjudications} adjudication(s)"
                       + (f"; the other documents of {f.date}, if any, are merged again by the next `karma run`"
                          if f.merged else ""))
        if not self.kg:
            out.append("KG: nothing of it merged")
        out.append(f"stage tables: {len(self.stage_tables)}"
                   + (f" ({', '.join(sorted({t.split('/')[0] for t in self.stage_tables}))})" if self.stage_tables else ""))
        return out


def plan_removal(doc_key: str, data: DataPaths) -> RemovalPlan:
    """What `remove_document` would delete; UnknownDocument when nothing anywhere holds the key."""
    stages = StageStore(data.stages_dir)
    entry = Catalog(data.catalog).lookup(doc_key)
    kg = kg_store(data).document_footprint(doc_key)
    tables = [p.relative_to(stages.root).parent.as_posix() for p in stages.partition_files(doc_key)]
    if entry is None and not kg and not tables:
        raise UnknownDocument(doc_key)
    return RemovalPlan(doc_key=doc_key, entry=entry, kg=kg, stage_tables=tables)


def remove_document(doc_key: str, data: DataPaths) -> RemovalPlan:
    """Remove one document everywhere, KG first, catalog last (see the module docstring); rerun-safe."""
    plan = plan_removal(doc_key, data)
    kg_store(data).remove_document(doc_key)
    StageStore(data.stages_dir).remove_partition(doc_key)
    Catalog(data.catalog).remove_document(doc_key)
    return plan


def retire_rekeyed(data: DataPaths) -> list[tuple[str, str]]:
    """Retire the old keys of documents whose date changed (catalog.rekeyed): their KG evidence (one transaction;
    the other documents of the old date are merged again by the next `karma run` or kg_increments tick) and stage
    tables; the new key runs as a new document and feeds its publication date's increment. Marked retired only
    once both are gone, so a crash in between retries at the next scan. Returns (old key, new key) retired."""
    catalog = Catalog(data.catalog)
    pending = catalog.pending_rekeys()
    if not pending:
        return []
    kg, stages = kg_store(data), StageStore(data.stages_dir)
    for old, _new in pending:
        if kg.exists():
            kg.remove_document(old)
        stages.remove_partition(old)
        catalog.mark_retired(old)
    return pending


def remove_deleted_citations(data: DataPaths) -> list[RemovalPlan]:
    """Carry out the deletions PubMed files asked for (`<DeleteCitation>`, recorded by the inbox scan, which has
    no KG or stage store) that left a document without any source (a paper also held as PDF, JATS, BioC or
    PubTator keeps it: catalog.record_deletions): each removed exactly as `karma remove` removes it, then
    its deletion marked done, so a crash in between retries at the next scan. Returns what was removed; the
    caller deletes the documents' Dagster partitions (it holds the instance)."""
    catalog = Catalog(data.catalog)
    removed: list[RemovalPlan] = []
    for doc_key, pmid in catalog.pending_deletions():
        if doc_key:
            try:
                removed.append(remove_document(doc_key, data))
            except UnknownDocument:
                pass  # removed already (a rerun after a crash)
        catalog.finish_deletion(pmid, doc_key)
    return removed
