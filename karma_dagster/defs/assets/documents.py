"""IA: a document partition -> its normalized text, sections and metadata."""


import dagster as dg

from karma_dagster.agents.ingestion import ingest_document
from karma_dagster.defs.assets.batching import per_document
from karma_dagster.defs.assets.common import StageTimer, agent_errors, finish_stage, stage_asset_kwargs
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.records import DocumentRow


def build(ns: str, code_version: str, pool: str | None) -> dg.AssetsDefinition:
    @dg.asset(**stage_asset_kwargs(ns, "documents", code_version, None, pool, kinds={"python", "pymupdf"}))
    @per_document
    def documents(
        context: dg.AssetExecutionContext, storage: KarmaStorageResource, backbones: BackbonesResource
    ) -> dg.MaterializeResult:
        timer = StageTimer()
        backbone = backbones.get(ns, storage)
        backbone.reset_usage()
        with agent_errors(context, storage.stage_store(), "documents", backbone):
            row = ingest_document(context.partition_key, storage.inbox_dir(), Catalog(storage.catalog_path()), backbone)
        return finish_stage(
            context, storage.stage_store(), ns, "documents", [row], DocumentRow, backbone, timer,
            ["doc_key", "title", "journal", "pub_date", "doi", "pmid", "n_chars"],
            extra={
                "title": row.title,
                "source": row.source_path,
                "source_format": row.source_format,
                "date": str(row.date),
                "date_source": row.date_source,
                "sections": row.n_sections,
                "chars": row.n_chars,
            },
        )

    return documents
