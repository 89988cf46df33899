"""The date-partitioned KG increment: the accepted triples of one day's documents, merged with provenance."""

import datetime as dt
from collections.abc import Iterable
from typing import Any

import dagster as dg

from karma_dagster.agents.integration import StageTableInvalid, collect_documents
from karma_dagster.assets.chain import backbone_group, kg_key, stage_key
from karma_dagster.runtime.document_states import evaluated_not_recorded, states_in_stores
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.jobs import KG_WRITER_POOL
from karma_dagster.kg import day_order, invariants, merge
from karma_dagster.kg.merge import IncrementStats, TripleValidationError
from karma_dagster.partitioning.definitions import kg_dates_partitions
from karma_dagster.partitioning.mode import PartitionMode
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.review.merge_inputs import DOC_PREFIX as REVIEW_PREFIX
from karma_dagster.review.merge_inputs import record_merged, review_docs
from karma_dagster.review.queue import ReviewQueue
from karma_dagster.runtime.stage_store import StageStore
from karma_dagster.stages import FINAL_STAGE, SEED_KG, chain_version

DESCRIPTION = (
    "The KG increment of one day: new entities and the accepted triples of that day's documents, merged into "
    "the DuckDB KG with provenance (document, date, segment, evidence sentence, backbone, prompt version). "
    "A triple another paper states again is reinforced, s = 1-(1-s_old)(1-s_new) (a paper counts once, at its "
    "best reading), keeping first- and last-seen dates. "
    "Contradictions between documents of the day are adjudicated here (the loser is discarded or sent to review); "
    "a triple that won against an older edge supersedes it from this day on (the edge stays in history). "
    "Partitions are the dates that have papers (`kg_dates`, added as papers are registered), so selecting this "
    "asset never fans out to empty days; the days of one run merge in date order, and a late paper dated earlier "
    "merges when it arrives. The KG always equals the merge of its dates in ascending order: a date that merges "
    "after later dates were merged withdraws them and merges them again after itself (`merged_dates`). "
    "Re-materializing a day replaces that day's contribution (no double counting). "
    "Review decisions accepted that day (`karma review`) enter with it: provenance 'reviewed by <name> via <source>'."
)


def _collect(
    ns: str, day: dt.date, catalog: Catalog, stages: StageStore, prompt_version: str, also: Iterable[str] = ()
) -> tuple[dict, dict[str, str]]:
    """The day's documents that finished their chain (doc -> (triples, new nodes)), and why others did not.
    `also`: documents the KG held for the day when it was withdrawn (tool-staged ones have no catalog entry)."""
    tables: dict = {}
    skipped: dict[str, str] = {}
    keys = [*catalog.documents_for_dates(day, day), *(k for k in also if not k.startswith(REVIEW_PREFIX))]
    for doc_key in dict.fromkeys(keys):
        if not stages.exists(ns, FINAL_STAGE, doc_key):
            skipped[doc_key] = NOT_YET
            continue
        try:
            tables[doc_key] = (stages.read(ns, FINAL_STAGE, doc_key), stages.read(ns, "entities", doc_key))
        except Exception as exc:  # noqa: BLE001 - an unreadable table skips its document, not the whole day
            skipped[doc_key] = f"{type(exc).__name__}: {exc}"
    docs: dict = {}
    for doc_key, collected in collect_documents(tables, prompt_version).items():  # validated together
        if isinstance(collected, Exception):
            skipped[doc_key] = str(collected) if isinstance(collected, StageTableInvalid) else \
                f"{type(collected).__name__}: {collected}"
        else:
            docs[doc_key] = collected
    return docs, skipped


NOT_YET = "not evaluated yet"


def _log_skipped(context: dg.AssetExecutionContext, date: str, skipped: dict[str, str]) -> None:
    """One line for the documents still being read (normal while a day's inbox is read: the date is merged again
    when they finish), a warning per document that could not be merged (a real problem, named)."""
    waiting = sorted(k for k, why in skipped.items() if why == NOT_YET)
    if waiting:
        context.log.info(f"{date}: {len(waiting)} document(s) not evaluated yet, merged when they are: "
                         + ", ".join(waiting[:5]) + (" ..." if len(waiting) > 5 else ""))
    for doc_key, why in skipped.items():
        if why != NOT_YET:
            context.log.warning(f"{date}: document {doc_key} not merged: {why}")


def _metadata(
    ns: str, prompt_version: str, merged: list[tuple[IncrementStats, dict[str, str]]], adjudications: list[dict]
) -> dict:
    first, last = merged[0][0], merged[-1][0]
    rows = "\n".join(
        f"| {s.date} | {s.n_docs} | {len(skipped)} | {s.n_evidence} | {s.n_new_nodes} | {s.n_new_edges} "
        f"| {s.n_reinforced} | {s.nodes_after} | {s.edges_after} |"
        for s, skipped in merged
    )
    return {
        "dates": len(merged),
        "documents_merged": sum(s.n_docs for s, _ in merged),
        "same_day_discarded": sum(s.n_discarded for s, _ in merged),
        "same_day_review": sum(s.n_review for s, _ in merged),
        "edges_superseded": sum(s.n_superseded for s, _ in merged),
        "refused_by_admission_rules": sum(s.n_refused for s, _ in merged),  # kept out, waiting in review
        "documents_skipped": dg.MetadataValue.json({str(s.date): sk for s, sk in merged if sk}),
        "accepted_triples": sum(s.n_evidence for s, _ in merged),
        "new_entities": sum(s.n_new_nodes for s, _ in merged),
        "new_edges": sum(s.n_new_edges for s, _ in merged),
        "reinforced_edges": sum(s.n_reinforced for s, _ in merged),
        "kg_nodes_before": first.nodes_before,
        "kg_edges_before": first.edges_before,
        "kg_nodes_after": last.nodes_after,
        "kg_edges_after": last.edges_after,
        "backbone": ns,
        "prompt_version": prompt_version,
        "increments": dg.MetadataValue.md(
            "| date | docs | skipped | triples | new nodes | new edges | reinforced | nodes | edges |\n"
            "|---|---|---|---|---|---|---|---|---|\n" + rows
        ),
        "adjudications": dg.MetadataValue.md(_adjudications_table(adjudications)),
    }


def _cell(value: object) -> str:
    """A markdown table cell: ids or reasons with a pipe would break the row."""
    return str(value).replace("|", "/")


def _adjudications_table(adjudications: list[dict]) -> str:
    """What the merged days adjudicated (same-day contradictions kept out, edges superseded), as a markdown table."""
    if not adjudications:
        return "no contradiction between documents of these days, no edge superseded"
    rows = "\n".join(
        f"| {a['date']} | {_cell(a['doc_key'])} | {a['action']} | {_cell(a['head_id'])} -{a['relation']}-> "
        f"{_cell(a['tail_id'])} | {_cell(a['against'])} | {_cell(a['reason'])} |"
        for a in adjudications[:50]
    )
    more = (f"\n\n... and {len(adjudications) - 50} more (KGStore.merge_adjudications)"
            if len(adjudications) > 50 else "")
    return "| date | document | action | triple | against | reason |\n|---|---|---|---|---|---|\n" + rows + more


MERGED_CHECK = "documents_merged"
ADMISSION_CHECK = "admission_rule"


def admission_check(ns: str, kg: Any) -> dg.AssetCheckResult:
    """After a merge: no row the backbone's merges wrote (its evidence and extracted nodes) breaks an admission rule
    (kg/admission_rules.py); what `karma check --backbone` reports for it (the seed is checked by its import)."""
    report = invariants.check_store(kg, ns, one_node=False)  # the merge kept one node per entity as it wrote
    mine = report.violations
    counts: dict[str, int] = {}
    for v in mine:
        counts[v.rule] = counts.get(v.rule, 0) + 1
    return dg.AssetCheckResult(
        passed=not mine, asset_key=kg_key(ns), check_name=ADMISSION_CHECK, severity=dg.AssetCheckSeverity.ERROR,
        metadata={"rows checked": dg.MetadataValue.int(report.n_rows), "violations": dg.MetadataValue.json(counts),
                  "first violations": dg.MetadataValue.json([f"{v.table} {v.key}: {v.message}" for v in mine[:20]])},
        description=(f"{len(mine)} KG rows break an admission rule ({', '.join(f'{r} {n}' for r, n in counts.items())}"
                     "); `karma check` lists them" if mine else
                     f"all {report.n_rows} rows pass the admission rules"),
    )


def merged_check(ns: str, paths: DataPaths, catalog: Catalog, days: set[dt.date]) -> dg.AssetCheckResult:
    """After a merge: every evaluated document of the merged days is in the KG with its current table (states
    read from the tables), and no evaluated document of another day waits without any merge record (a cheap
    listing: a crash or a failed merge left it; the next `karma run` or the kg_increments sensor merges it)."""
    docs = [k for day in sorted(days) for k in catalog.documents_for_dates(day, day)]
    (state,) = states_in_stores(paths, [ns], documents=docs).values()
    elsewhere = sorted(set(evaluated_not_recorded(paths, ns)) - set(docs))
    unmerged = sorted(set(state.unmerged) | set(elsewhere))
    waiting = sorted({date_of_document_key(k) for k in unmerged})
    metadata = {**{f"{name} (merged days)": dg.MetadataValue.int(n) for name, n in state.counts().items()},
                "unmerged documents": dg.MetadataValue.json(unmerged[:50]),
                "failed documents": dg.MetadataValue.json(dict(list(state.failed.items())[:50])),
                "dates to merge": dg.MetadataValue.json(waiting[:50])}
    problems = bool(unmerged or state.failed)
    return dg.AssetCheckResult(
        passed=not problems, asset_key=kg_key(ns), check_name=MERGED_CHECK,
        severity=dg.AssetCheckSeverity.WARN, metadata=metadata,
        description=(f"{len(unmerged)} evaluated documents not merged (dates {', '.join(waiting[:5])}"
                     f"{' ...' if len(waiting) > 5 else ''}), {len(state.failed)} that cannot be merged"
                     if problems else f"all {len(state.merged)} evaluated documents of the merged days are in the KG; "
                                      "no other evaluated document waits"),
    )


def build(ns: str, mode: PartitionMode = "document") -> dg.AssetsDefinition:
    """`mode` date: the evaluated table's date partitions map one to one onto the KG's (the lineage per day)."""
    key = kg_key(ns)
    evaluated = dg.AssetDep(stage_key(ns, FINAL_STAGE), partition_mapping=dg.AllPartitionMapping()) \
        if mode == "document" else dg.AssetDep(stage_key(ns, FINAL_STAGE))

    @dg.asset(
        key=key,
        partitions_def=kg_dates_partitions,
        deps=[evaluated, dg.AssetDep(SEED_KG)],
        group_name=backbone_group(ns),
        kinds={"duckdb"},
        check_specs=[dg.AssetCheckSpec(
            MERGED_CHECK, asset=key,
            description="Every evaluated document of the merged days is in the KG with its current table, and no "
                        "evaluated document of another day waits unmerged (a crash or a failed merge; `karma run` "
                        "or the kg_increments sensor merges what is left). Metadata: `karma status`'s counts.",
        ), dg.AssetCheckSpec(
            ADMISSION_CHECK, asset=key,
            description="No row of the backbone's graph breaks an admission rule (self-edge, metaedge, "
                        "domain/range, id kind, evidence, date): what `karma check` reports.",
        )],
        pool=KG_WRITER_POOL,
        description=DESCRIPTION,
        tags={"karma/stage": "knowledge_graph", "karma/backbone": ns},
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def knowledge_graph(
        context: dg.AssetExecutionContext, storage: KarmaStorageResource, backbones: BackbonesResource,
        karma_params: KarmaParamsResource,
    ) -> dg.MaterializeResult:
        stages, catalog, kg = storage.stage_store(), Catalog(storage.catalog_path()), storage.kg_store()
        prompt_version = chain_version(backbones.get(ns, storage))
        params = karma_params.params()
        queue = ReviewQueue.for_data(storage.paths())  # accepted review items enter with their decision's date
        merged: list[tuple[IncrementStats, dict[str, str]]] = []
        undated: dict[str, str] = {}  # merged documents whose date is not a publication date -> its source
        requested = {dt.date.fromisoformat(d) for d in context.partition_keys}
        waiting: set[dt.date] = set()  # withdrawn, not merged again yet
        held: dict[dt.date, list[str]] = {}  # the documents the KG held for each withdrawn date

        def may_withdraw(day: dt.date) -> bool:
            """Whether the later dates already merged can be merged again after `day`: every document they hold
            has its table (else they stay, out of order, with a warning: nothing the KG holds is lost)."""
            with kg.connect(read_only=True) as con:
                later, lost = day_order.withdrawable(con, ns, day, lambda _d, keys: [
                    k for k in keys if k.startswith(REVIEW_PREFIX) or stages.exists(ns, FINAL_STAGE, k)])
            if lost:
                context.log.warning(f"{day} merged after later dates of {ns} it cannot merge again (no evaluated "
                                    f"table for {', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''}): "
                                    "they stay as they are, out of date order")
                return False
            held.update(later)
            return True

        def merge_one(day: dt.date) -> list[dt.date]:
            """Merge one date; the later dates already merged are withdrawn first and returned (merged again)."""
            date = day.isoformat()
            docs, skipped = _collect(ns, day, catalog, stages, prompt_version, held.pop(day, []))
            _log_skipped(context, date, skipped)
            docs.update(review_docs(queue, kg, ns, day))  # merged before or not: a re-merge keeps them
            try:
                date_sources = catalog.date_sources(list(docs))
                undated.update({k: v for k, v in date_sources.items() if v != "publication"})
                stats = merge.merge_increment(kg, day, ns, docs, run_id=context.run_id, prompt_version=prompt_version,
                                              params=params, date_sources=date_sources,
                                              withdraw_later=may_withdraw(day))
            except TripleValidationError as exc:
                later = (f"; later dates withdrawn before it and not merged again yet (the kg_increments sensor or "
                         f"`karma run` merges them): {', '.join(str(d) for d in sorted(waiting))}" if waiting else "")
                raise dg.Failure(description=f"KG increment {date} ({ns}) rejected, "
                                             f"{'this date' if waiting else 'KG'} unchanged: {exc}"
                                 + later) from exc
            waiting.discard(day)
            waiting.update(stats.withdrawn)
            record_merged(queue, docs, day, backbone=ns)
            merged.append((stats, skipped))
            if stats.withdrawn:
                context.log.info(f"{date} merged after {len(stats.withdrawn)} later date(s) of {ns}: "
                                 + ", ".join(str(d) for d in stats.withdrawn[:5])
                                 + (" ..." if len(stats.withdrawn) > 5 else "")
                                 + " withdrawn, merged again after it (the KG keeps its dates in order)")
            return stats.withdrawn

        # a single-run backfill carries many days, and a later date may have merged first: earliest first
        order = day_order.merge_in_order(requested, merge_one)
        days = {s.date for s, _ in merged}
        adjudications = [a for a in kg.merge_adjudications(ns) if a["date"] in days]
        return dg.MaterializeResult(
            # dates never invented silently: the merged documents dated by arrival or the `undated` setting
            metadata={**_metadata(ns, prompt_version, merged, adjudications),
                      # the dates this run merged, in merge order: the partitions asked, then each later date
                      # already merged that an earlier one withdrew (merged again after it)
                      "merged_dates": dg.MetadataValue.json([d.isoformat() for d in order]),
                      "remerged_dates": dg.MetadataValue.json([d.isoformat() for d in order if d not in requested]),
                      "documents_undated": dg.MetadataValue.json(dict(sorted(undated.items())[:50])),
                      "documents_undated_count": len(undated)},
            check_results=[merged_check(ns, storage.paths(), catalog, days), admission_check(ns, kg)],
        )

    return knowledge_graph
