"""The existing KG: imported into the DuckDB store, its entity names indexed in LanceDB for normalization."""


import hashlib
from pathlib import Path

import dagster as dg
from pydantic import Field

from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.runtime import services
from karma_dagster.runtime.paths import data_file, display_path
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.stages import SEED_KG


class SeedKGConfig(dg.Config):
    nodes: str = Field("", description="node table; empty = the shipped demo subset data/seed_kg/nodes.tsv")
    edges: str = Field("", description="edge table; empty = data/seed_kg/edges.sif.gz")
    format: str = Field("hetionet", description="'hetionet' (id/name/kind + sif), 'generic' or 'kgx' (KGX TSV "
                                                "nodes/edges with Biolink categories and predicates); "
                                                "see docs/kg-formats.md")
    reimport: bool = Field(False, description="import again even when the KG already holds this very seed")
    if_grown: str = Field("refuse", description="a KG that already grew (evidence, extracted nodes): 'refuse' (the "
                                                "run fails, nothing changed), 'replace' (the KG kept aside, restorable;"
                                                " the seed replaced, grown rows emptied) or 'add' (the file added to "
                                                "the seed, nothing deleted)")


@dg.asset(
    key=SEED_KG,
    group_name="existing_kg",
    kinds={"duckdb", "lancedb"},
    description="The KG you start from (Hetionet format first; your own node/edge tables with format=generic, a "
    "KGX graph such as Monarch's with format=kgx): "
    "imported into the DuckDB KG store (seed rows only; extracted knowledge is kept) and every entity name "
    "and synonym indexed in LanceDB, where the entity-extraction agent normalizes mentions.",
)
def seed_kg(
    context: dg.AssetExecutionContext,
    config: SeedKGConfig,
    storage: KarmaStorageResource,
    karma_params: KarmaParamsResource,
) -> dg.MaterializeResult:
    nodes, edges = config.nodes or data_file("seed_kg", "nodes.tsv"), config.edges or data_file("seed_kg", "edges.sif.gz")
    confidence = karma_params.params().seed_edge_confidence
    source = source_fingerprint(nodes, edges, config.format, confidence)
    if not config.reimport and (kept := _already_imported(context, storage, source)) is not None:
        return kept
    stats, index_rows = services.import_seed_kg(storage.paths(), nodes, edges, config.format, confidence,
                                                config.if_grown)  # a grown KG without if_grown: the step fails
    if stats.kept_aside:
        context.log.warning(f"the KG as it was is kept at {stats.kept_aside}; to restore it: {stats.restore}")
    if stats.dangling:
        context.log.warning(stats.dangling)
    return dg.MaterializeResult(
        metadata={
            "if_grown": config.if_grown,
            **({"kept_aside": stats.kept_aside, "restore": stats.restore} if stats.kept_aside else {}),
            **({"nodes_added": stats.n_nodes_added, "edges_added": stats.n_edges_added}
               if stats.n_nodes_added is not None else {}),
            **({"dangling_evidence": stats.dangling} if stats.dangling else {}),
            "source_sha256": source,
            "kg_seed_fingerprint": services.seed_fingerprint(storage.paths()),
            "nodes": stats.n_nodes,
            "edges": stats.n_edges,
            "synonyms": stats.n_synonyms,
            "edges_dropped_missing_node": stats.n_edges_filtered,
            "synonyms_rejected": stats.synonyms_rejected.get("names_rejected", 0),
            "synonyms_rejected_by_reason": dg.MetadataValue.json(stats.synonyms_rejected.get("names_rejected_by_reason", {})),
            "indexed_names": index_rows,
            "nodes_by_kind": dg.MetadataValue.json(stats.nodes_by_kind),
            "edges_by_metaedge": dg.MetadataValue.json(stats.edges_by_metaedge),
            # a KGX import: nodes and edges left out, per reason with examples (export/kgx_import.py)
            "nodes_refused": _count(stats.refused.get("nodes")),
            "edges_refused": _count(stats.refused.get("edges")),
            "refused": dg.MetadataValue.json(stats.refused),
            "source_nodes": display_path(nodes),
            "seconds": stats.seconds,
        }
    )


def _count(reasons: dict | None) -> int:
    return sum(int(v["count"]) for v in (reasons or {}).values())


def source_fingerprint(nodes: str | Path, edges: str | Path, fmt: str, confidence: float) -> str:
    """What the import reads: both files' bytes, the format and the seed edges' confidence."""
    digest = hashlib.sha256(f"{fmt}|{confidence}".encode())
    for path in (nodes, edges):
        with open(path, "rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:32]


def _already_imported(
    context: dg.AssetExecutionContext, storage: KarmaStorageResource, source: str
) -> dg.MaterializeResult | None:
    """A "Materialize all" selects the seed too: re-importing the same files would rebuild the index and mark
    every stage stale for nothing. Skipped when this instance's last import read the same files and the KG
    still holds what it imported (same seed fingerprint); `reimport: true` forces it."""
    event = context.instance.get_latest_materialization_event(dg.AssetKey(SEED_KG))
    last = event.asset_materialization.metadata if event and event.asset_materialization else {}
    recorded = {k: getattr(last.get(k), "value", None) for k in ("source_sha256", "kg_seed_fingerprint")}
    if recorded["source_sha256"] != source or not services.seed_present(storage.paths()) \
            or recorded["kg_seed_fingerprint"] != services.seed_fingerprint(storage.paths()):
        return None
    context.log.info("seed KG already imported from these files: not imported again (config reimport: true forces it)")
    return dg.MaterializeResult(metadata={
        **{k: v for k, v in last.items() if k not in ("seconds", "skipped")},
        "skipped": "already imported from the same files; set reimport: true in the run config to import again",
        "seconds": 0.0,
    })


def import_summary(instance: dg.DagsterInstance) -> list[str]:
    """What the latest seed import says (counts, and for KGX what it left out, with examples): `karma import-kg`."""
    from karma_dagster.export.kgx_import import refusal_lines
    from karma_dagster.kg.seed_import import SeedImportStats

    event = instance.get_latest_materialization_event(dg.AssetKey(SEED_KG))
    md = event.asset_materialization.metadata if event and event.asset_materialization else {}
    value = {k: getattr(v, "value", v) for k, v in md.items()}
    if "nodes" not in value:
        return []
    kinds = ", ".join(f"{k} {n}" for k, n in (value.get("nodes_by_kind") or {}).items())
    lines = [f"nodes {value['nodes']}, edges {value['edges']}, synonyms {value.get('synonyms', 0)} ({kinds})"]
    if value.get("nodes_added") is not None:
        lines.append(f"added to the seed: {value['nodes_added']} nodes, {value['edges_added']} edges "
                     "(the rest were in it already)")
    if value.get("kept_aside"):
        lines.append(f"the KG as it was is kept at {value['kept_aside']}; to restore it (no karma process "
                     f"running): {value['restore']}")
    if value.get("dangling_evidence"):
        lines.append(f"WARNING {value['dangling_evidence']}")
    refused = value.get("refused") or {}
    stats = SeedImportStats(n_nodes=0, n_edges=0, n_synonyms=0, n_edges_filtered=0, nodes_by_kind={},
                            edges_by_metaedge={}, seconds=0.0, refused=refused)
    return lines + refusal_lines(stats)
