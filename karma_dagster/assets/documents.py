"""IA: a document partition -> its normalized text, sections and metadata."""

from karma_dagster.agents.ingestion import ingest_document
from karma_dagster.assets.stage_factory import StageCall, StageSpec, stage_asset
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.schemas.records import DocumentRow

SPEC = StageSpec(
    "documents", upstream=None, model=DocumentRow, kinds=frozenset({"python", "pymupdf"}),
    preview=("doc_key", "title", "journal", "pub_date", "doi", "pmid", "n_chars"),
)


def compute(call: StageCall) -> tuple[list, dict]:
    storage = call.storage
    row = ingest_document(call.document, storage.inbox_dir(), Catalog(storage.catalog_path()), call.backbone)
    return [row], {
        "title": row.title, "source": row.source_path, "source_format": row.source_format, "date": str(row.date),
        "date_source": row.date_source, "sections": row.n_sections, "chars": row.n_chars,
    }


def build(ns: str, code_version: str, pool: str | None):
    return stage_asset(ns, code_version, pool, SPEC, compute)
