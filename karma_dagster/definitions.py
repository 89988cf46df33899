"""The code location: one agent chain per enabled backbone, the shared seed KG, sensors and jobs.

`build_definitions` is what tests and the CLI call with their own storage and backbones; the module-level
`defs` is what `dagster dev` / `dg dev` load (backbones.yaml, data under $DAGSTER_HOME/karma).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from karma_dagster.defs.assets import (
    aligned,
    documents,
    entities,
    evaluated,
    knowledge_graph,
    relations,
    report,
    resolved,
    segments,
    summaries,
)
from karma_dagster.defs.assets.common import STAGE_ORDER, stage_key
from karma_dagster.defs.assets.seed_kg import seed_kg
from karma_dagster.defs.sensors.kg_increments import build_kg_increments_sensor
from karma_dagster.defs.sensors.new_papers import build_new_papers_sensor
from karma_dagster.resources.backbones import BackboneConfig, BackbonesResource, load_backbones_file
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource

STAGE_BUILDERS = [documents, segments, summaries, entities, relations, aligned, resolved, evaluated]
DOCUMENT_JOB = "document_chain"
IMPORT_KG_JOB = "import_kg"
REPORT_JOB = "report"


def kg_job_name(ns: str) -> str:
    return f"kg_increment__{ns.replace('-', '_').replace('.', '_')}"


def backbone_configs_from_file(path: Path | None = None) -> dict[str, BackboneConfig]:
    """backbones.yaml -> resource configs; keys stay in the environment (EnvVar), read only at run time."""
    configs: dict[str, BackboneConfig] = {}
    for name, raw in load_backbones_file(path).items():
        raw = dict(raw)
        raw.pop("enabled", None)
        key_env = raw.pop("api_key_env", None)
        if key_env:
            raw["api_key"] = dg.EnvVar(key_env)
        configs[name] = BackboneConfig(**raw)
    return configs


def chain_assets(ns: str, config: BackboneConfig) -> list[dg.AssetsDefinition]:
    from karma_dagster import runtime

    pool = "llm" if config.kind == "litellm" else None
    out = []
    for stage, module in zip(STAGE_ORDER, STAGE_BUILDERS):
        out.append(module.build(ns, runtime.code_version(config.kind, stage), pool))
    out.append(knowledge_graph.build(ns))
    return out


def build_definitions(
    backbones: dict[str, BackboneConfig] | None = None,
    storage: KarmaStorageResource | None = None,
    params: KarmaParamsResource | None = None,
    prompts_dir: str = "",
) -> dg.Definitions:
    backbones = backbones if backbones is not None else backbone_configs_from_file()
    if not backbones:
        raise ValueError("no backbone is enabled: enable at least one in backbones.yaml")
    assets: list = [seed_kg]
    for ns, config in backbones.items():
        assets += chain_assets(ns, config)
    assets.append(report.build(list(backbones)))
    document_job = dg.define_asset_job(
        DOCUMENT_JOB,
        selection=dg.AssetSelection.assets(*[stage_key(ns, s) for ns in backbones for s in STAGE_ORDER]),
        description="The agent chain (documents -> evaluated) of every enabled backbone for one document.",
        tags={"karma/job": "document_chain"},
    )
    kg_jobs = {
        ns: dg.define_asset_job(
            kg_job_name(ns),
            selection=dg.AssetSelection.assets(dg.AssetKey([ns, "knowledge_graph"])),
            description=f"The KG increment of one date for backbone {ns}.",
        )
        for ns in backbones
    }
    import_kg_job = dg.define_asset_job(
        IMPORT_KG_JOB, selection=dg.AssetSelection.assets("seed_kg"), description="Import the existing KG and index it."
    )
    report_job = dg.define_asset_job(REPORT_JOB, selection=dg.AssetSelection.assets("karma_report"))
    return dg.Definitions(
        assets=assets,
        jobs=[document_job, *kg_jobs.values(), import_kg_job, report_job],
        sensors=[build_new_papers_sensor(document_job), build_kg_increments_sensor(list(backbones), kg_jobs)],
        resources={
            "storage": storage or KarmaStorageResource(),
            "backbones": BackbonesResource(backbones=backbones, prompts_dir=prompts_dir),
            "karma_params": params or KarmaParamsResource(),
        },
    )


defs = build_definitions()
