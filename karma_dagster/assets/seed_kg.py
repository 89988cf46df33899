"""The existing KG: imported into the DuckDB store, its entity names indexed in LanceDB for normalization."""


import dagster as dg
from pydantic import Field

from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster import services
from karma_dagster.paths import data_file, display_path
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.stages import SEED_KG


class SeedKGConfig(dg.Config):
    nodes: str = Field("", description="node table; empty = the shipped demo subset data/seed_kg/nodes.tsv")
    edges: str = Field("", description="edge table; empty = data/seed_kg/edges.sif.gz")
    format: str = Field("hetionet", description="'hetionet' (id/name/kind + sif) or 'generic' (see README)")


@dg.asset(
    key=SEED_KG,
    group_name="existing_kg",
    kinds={"duckdb", "lancedb"},
    description="The KG you start from (Hetionet format first; your own node/edge tables with format=generic): "
    "imported into the DuckDB KG store (seed rows only; extracted knowledge is kept) and every entity name "
    "and synonym indexed in LanceDB, where the entity-extraction agent normalizes mentions.",
)
def seed_kg(
    context: dg.AssetExecutionContext,
    config: SeedKGConfig,
    storage: KarmaStorageResource,
    karma_params: KarmaParamsResource,
) -> dg.MaterializeResult:
    stats, index_rows = services.import_seed_kg(
        storage.paths(),
        config.nodes or data_file("seed_kg", "nodes.tsv"),
        config.edges or data_file("seed_kg", "edges.sif.gz"),
        config.format,
        karma_params.params().seed_edge_confidence,
    )
    return dg.MaterializeResult(
        metadata={
            "nodes": stats.n_nodes,
            "edges": stats.n_edges,
            "synonyms": stats.n_synonyms,
            "edges_dropped_missing_node": stats.n_edges_filtered,
            "indexed_names": index_rows,
            "nodes_by_kind": dg.MetadataValue.json(stats.nodes_by_kind),
            "edges_by_metaedge": dg.MetadataValue.json(stats.edges_by_metaedge),
            "source_nodes": display_path(config.nodes or data_file("seed_kg", "nodes.tsv")),
            "seconds": stats.seconds,
        }
    )
