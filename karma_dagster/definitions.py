"""The code location: one agent chain per enabled backbone, the shared seed KG, sensors and jobs.

`build_definitions` is what tests and the CLI call with their own storage and backbones; the module-level
`defs` is what `dagster dev` / `dg dev` load (backbones.yaml, data under $DAGSTER_HOME/karma).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from karma_dagster.backbones.registry import BackboneStatus, backbone_statuses, judge_config, key_missing
from karma_dagster.assets import (
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
from karma_dagster.assets.common import STAGE_ORDER, stage_key
from karma_dagster.assets.comparison import comparison_assets
from karma_dagster.assets.seed_kg import seed_kg
from karma_dagster.sensors.kg_increments import build_kg_increments_sensor
from karma_dagster.sensors.new_papers import build_new_papers_sensor
from karma_dagster.sensors.prompt_versions import build_prompt_versions_sensor
from karma_dagster.resources.backbones import BackboneConfig, BackbonesResource, load_backbones_file
from karma_dagster.resources.judge import JudgeResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource

STAGE_BUILDERS = [documents, segments, summaries, entities, relations, aligned, resolved, evaluated]
DOCUMENT_JOB = "document_chain"
IMPORT_KG_JOB = "import_kg"
REPORT_JOB = "report"
COMPARE_JOB = "compare_backbones"


def llm_pool(ns: str) -> str:
    """Each LLM backbone's model-calling steps share one concurrency pool across all runs (its rate limit)."""
    return f"llm_{ns}"


def kg_job_name(ns: str) -> str:
    return f"kg_increment__{ns.replace('-', '_').replace('.', '_')}"


def backbone_configs_from_file(path: Path | None = None) -> dict[str, BackboneConfig]:
    """backbones.yaml -> resource configs; keys stay in the environment (EnvVar), read only at run time."""
    configs: dict[str, BackboneConfig] = {}
    for name, raw in load_backbones_file(path).items():
        raw = dict(raw)
        raw.pop("enabled", None)
        key_env = raw.pop("api_key_env", None)
        if key_missing(key_env):
            continue  # NOT CONFIGURED: no chain; shown with the variable to set (backbones_status, karma run)
        if key_env:
            raw["api_key"] = dg.EnvVar(key_env)
        configs[name] = BackboneConfig(**raw)
    return configs


def chain_assets(ns: str, config: BackboneConfig, prompts_dir: str = "") -> list[dg.AssetsDefinition]:
    from karma_dagster import runtime

    pool = llm_pool(ns) if config.kind == "litellm" else None
    out = []
    for stage, module in zip(STAGE_ORDER, STAGE_BUILDERS):
        version = runtime.code_version(config.kind, stage, prompts_dir) + mode_version(config, prompts_dir)
        out.append(module.build(ns, version, pool))
    out.append(knowledge_graph.build(ns))
    return out


def mode_version(config: BackboneConfig, prompts_dir: str = "") -> str:
    """The single-agent baseline's stages are other code (and, over an LLM, another prompt file)."""
    if config.mode == "multi_agent":
        return ""
    if config.kind == "litellm":
        from karma_dagster.prompts import PromptStore

        return f"+{config.mode}:" + PromptStore(prompts_dir or None).code_version_for(["single_agent"])
    return f"+{config.mode}"


def judge_from_file(prompts_dir: str = "") -> JudgeResource:
    """The `judge:` of backbones.yaml; an LLM judge whose key is missing judges nothing and says why."""
    name, raw, why = judge_config()
    if raw is None:
        return JudgeResource(name=name, unavailable=why, prompts_dir=prompts_dir)
    key_env = raw.get("api_key_env")
    raw = {k: v for k, v in raw.items() if k not in ("enabled", "api_key_env")}
    if key_env:
        raw["api_key"] = dg.EnvVar(key_env)
    return JudgeResource(name=name, backbone=BackboneConfig(**raw), prompts_dir=prompts_dir)


def build_definitions(
    backbones: dict[str, BackboneConfig] | None = None,
    storage: KarmaStorageResource | None = None,
    params: KarmaParamsResource | None = None,
    prompts_dir: str = "",
    judge: JudgeResource | None = None,
    statuses: list[BackboneStatus] | None = None,
) -> dg.Definitions:
    from_file = backbones is None
    backbones = backbones if backbones is not None else backbone_configs_from_file()
    if statuses is None:
        statuses = backbone_statuses() if from_file else [
            BackboneStatus(name=n, kind=c.kind, model=c.model, mode=c.mode, enabled=True, configured=True)
            for n, c in backbones.items()]
    if judge is None:
        judge = judge_from_file(prompts_dir) if from_file else JudgeResource(prompts_dir=prompts_dir)
    if not backbones:
        raise ValueError("no backbone is enabled: enable at least one in backbones.yaml")
    assets: list = [seed_kg]
    for ns, config in backbones.items():
        assets += chain_assets(ns, config, prompts_dir)
    assets.append(report.build(list(backbones)))
    judge_label = judge.name + (f" ({judge.unavailable})" if judge.unavailable else "")
    assets += comparison_assets(list(backbones), statuses, judge_label)
    llm_namespaces = [ns for ns, config in backbones.items() if config.kind == "litellm"]
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
    compare_job = dg.define_asset_job(
        COMPARE_JOB,
        selection=dg.AssetSelection.assets(
            *[dg.AssetKey([ns, n]) for ns in backbones for n in ("kg_metrics", "gold_evaluation")],
            "backbone_comparison", "backbones_status",
        ),
        description="KARMA's metrics and gold scores of every backbone, side by side (backbone_comparison).",
    )
    return dg.Definitions(
        assets=assets,
        jobs=[document_job, *kg_jobs.values(), import_kg_job, report_job, compare_job],
        sensors=[build_new_papers_sensor(document_job, list(backbones)), build_kg_increments_sensor(list(backbones), kg_jobs)]
        + ([build_prompt_versions_sensor(llm_namespaces, prompts_dir)] if llm_namespaces else []),
        resources={
            "storage": storage or KarmaStorageResource(),
            "backbones": BackbonesResource(backbones=backbones, prompts_dir=prompts_dir),
            "karma_params": params or KarmaParamsResource(),
            "judge": judge,
        },
    )


defs = build_definitions()
