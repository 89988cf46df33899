"""Exports of a backbone's KG as of a KG date: RDF/Turtle, KGX TSV (Biolink) and Neo4j import CSVs.

An asset per format and backbone on the KG's date partitions: the partition D is the KG as merged up to and
including D (export/snapshot.py), written under <data_dir>/exports/<backbone>/<format>/<D>/. Materialized on
request only (no automation): an export is a deliverable, not something the chain waits for. The work is in the
Dagster-free karma_dagster.export package; `karma export` runs the same code for any date.
"""

import datetime as dt

import dagster as dg

from karma_dagster.assets.chain import backbone_group, kg_key
from karma_dagster.export import FORMATS
from karma_dagster.export.cli_export import export_dir
from karma_dagster.export.run import ExportError, export_kg
from karma_dagster.partitioning.definitions import kg_dates_partitions as EXPORT_PARTITIONS  # the KG's dates
from karma_dagster.resources.storage import KarmaStorageResource

KINDS = {"turtle": {"rdf"}, "kgx": {"kgx", "biolink"}, "neo4j": {"neo4j"}}
DESCRIPTIONS = {
    "turtle": "RDF/Turtle (rdflib): schema kinds as owl:Class, relations and metaedges as owl:ObjectProperty "
              "(domain, range), nodes as labelled instances, edges as statements with provenance on reified "
              "rdf:Statements (confidence, first/last seen, evidence sentences, documents, backbone); superseded "
              "edges described, not asserted.",
    "kgx": "KGX TSV (nodes.tsv, edges.tsv) with Biolink categories and predicates (export/biolink_map.yaml, checked "
           "by bmt against the packaged Biolink Model), validated on write; unmapped kinds and relations in the "
           "metadata.",
    "neo4j": "neo4j-admin database import CSVs (nodes.csv with :ID/:LABEL, relationships.csv with "
             ":START_ID/:END_ID/:TYPE and typed properties) plus the import command; ids and ends checked on write.",
}


def export_key(namespace: str, fmt: str) -> dg.AssetKey:
    return dg.AssetKey([namespace, f"kg_export_{fmt}"])


def _build(namespace: str, fmt: str) -> dg.AssetsDefinition:
    @dg.asset(
        key=export_key(namespace, fmt),
        partitions_def=EXPORT_PARTITIONS,
        deps=[kg_key(namespace)],
        group_name=backbone_group(namespace),
        kinds=KINDS[fmt],
        description=f"The KG of {namespace} as of the partition's date. " + DESCRIPTIONS[fmt],
        tags={"karma/stage": "export", "karma/backbone": namespace},
    )
    def _export(context: dg.AssetExecutionContext, storage: KarmaStorageResource) -> dg.MaterializeResult:
        as_of = dt.date.fromisoformat(context.partition_key)
        root = storage.root()
        out = export_dir(root, namespace, fmt, as_of)
        try:
            result = export_kg(storage.kg_store(), fmt, namespace, as_of, out, data=storage.paths())
        except ExportError as exc:
            raise dg.Failure(description=f"{fmt} export of {namespace} as of {as_of}: {exc}") from exc
        report = dict(result.report)
        unmapped = {k: report.pop(k) for k in ("unmapped_kinds", "unmapped_metaedges", "unmapped_other_relations")
                    if k in report}
        metadata: dict[str, object] = {
            "folder": str(out.relative_to(root)),  # relative to the data folder: no machine path in metadata
            "files": dg.MetadataValue.json(result.files),
            **{f"n_{k}": v for k, v in result.counts.items()},
            "kg_as_of": dg.MetadataValue.json(result.snapshot),
            "seconds": result.seconds,
        }
        if unmapped:
            metadata["unmapped"] = dg.MetadataValue.json(unmapped)
        if report:
            metadata["report"] = dg.MetadataValue.json(report)
        context.log.info(result.summary())
        return dg.MaterializeResult(metadata=metadata)

    return _export


def export_assets(namespaces: list[str]) -> list[dg.AssetsDefinition]:
    """Every export format of every backbone."""
    return [_build(ns, fmt) for ns in namespaces for fmt in FORMATS]
