"""The date-partitioned KG increment: the accepted triples of one day's documents, merged with provenance."""


import datetime as dt

import dagster as dg

from karma_dagster.agents.integration import StageTableInvalid, collect_document
from karma_dagster.defs.assets.common import stage_key
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.kg.merge import TripleValidationError
from karma_dagster.kg.store import KGStore
from karma_dagster.partitions import dates_partitions
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.storage import KarmaStorageResource

DESCRIPTION = (
    "The KG increment of one day: new entities and the accepted triples of that day's documents, merged into "
    "the DuckDB KG with provenance (document, date, segment, evidence sentence, backbone, prompt version). "
    "A triple seen again is reinforced, s = 1-(1-s_old)(1-s_new), keeping first- and last-seen dates. "
    "Day D builds on day D-1; re-materializing a day replaces that day's contribution (no double counting)."
)


def build(ns: str) -> dg.AssetsDefinition:
    key = dg.AssetKey([ns, "knowledge_graph"])

    @dg.asset(
        key=key,
        partitions_def=dates_partitions,
        deps=[
            dg.AssetDep(stage_key(ns, "evaluated"), partition_mapping=dg.AllPartitionMapping()),
            dg.AssetDep(key, partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)),
            dg.AssetDep("seed_kg"),
        ],
        group_name="knowledge_graph",
        kinds={"duckdb"},
        pool="kg_writer",
        description=DESCRIPTION,
        tags={"karma/stage": "knowledge_graph", "karma/backbone": ns},
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def knowledge_graph(
        context: dg.AssetExecutionContext, storage: KarmaStorageResource, backbones: BackbonesResource
    ) -> dg.MaterializeResult:
        from karma_dagster import runtime

        stages = storage.stage_store()
        kg = KGStore(storage.kg_path())
        catalog = Catalog(storage.catalog_path())
        backbone = backbones.get(ns, storage)
        prompt_version = runtime.chain_version(backbone)
        results: dict[str, object] = {}
        dates = sorted(context.partition_keys)
        for date in dates:  # a single-run backfill carries many dates: merge them in date order
            docs: dict = {}
            skipped: dict[str, str] = {}
            for doc_key in catalog.documents_for_dates(dt.date.fromisoformat(date), dt.date.fromisoformat(date)):
                if not stages.exists(ns, "evaluated", doc_key):
                    skipped[doc_key] = "not evaluated yet"
                    continue
                try:
                    docs[doc_key] = collect_document(
                        doc_key, stages.read(ns, "evaluated", doc_key), stages.read(ns, "entities", doc_key), prompt_version
                    )
                except StageTableInvalid as exc:
                    skipped[doc_key] = str(exc)
            for doc_key, why in skipped.items():
                context.log.warning(f"{date}: document {doc_key} not merged: {why}")
            try:
                stats = kg.merge_increment(
                    dt.date.fromisoformat(date), ns, docs, run_id=context.run_id, prompt_version=prompt_version
                )
            except TripleValidationError as exc:
                raise dg.Failure(description=f"KG increment {date} ({ns}) rejected, KG unchanged: {exc}") from exc
            results[date] = (stats, skipped, docs)
        last_stats, _, _ = results[dates[-1]]  # type: ignore[misc]
        table = "\n".join(
            f"| {d} | {s.n_docs} | {len(sk)} | {s.n_evidence} | {s.n_new_nodes} | {s.n_new_edges} | {s.n_reinforced} "
            f"| {s.nodes_after} | {s.edges_after} |"
            for d, (s, sk, _) in results.items()  # type: ignore[misc]
        )
        first_stats = results[dates[0]][0]  # type: ignore[index]
        return dg.MaterializeResult(
            metadata={
                "dates": len(dates),
                "documents_merged": sum(r[0].n_docs for r in results.values()),  # type: ignore[index]
                "documents_skipped": dg.MetadataValue.json({d: r[1] for d, r in results.items() if r[1]}),  # type: ignore[index]
                "accepted_triples": sum(r[0].n_evidence for r in results.values()),  # type: ignore[index]
                "new_entities": sum(r[0].n_new_nodes for r in results.values()),  # type: ignore[index]
                "new_edges": sum(r[0].n_new_edges for r in results.values()),  # type: ignore[index]
                "reinforced_edges": sum(r[0].n_reinforced for r in results.values()),  # type: ignore[index]
                "kg_nodes_before": first_stats.nodes_before,
                "kg_edges_before": first_stats.edges_before,
                "kg_nodes_after": last_stats.nodes_after,
                "kg_edges_after": last_stats.edges_after,
                "backbone": ns,
                "prompt_version": prompt_version,
                "increments": dg.MetadataValue.md(
                    "| date | docs | skipped | triples | new nodes | new edges | reinforced | nodes | edges |\n"
                    "|---|---|---|---|---|---|---|---|---|\n" + table
                ),
            }
        )

    return knowledge_graph
