"""The code location: assembles, for every runnable backbone, its chain of stage assets (stages.py), the shared
seed KG, the KG increments, report and comparison, jobs, sensors and resources. Nothing else happens here.

`build_definitions` is what tests and the CLI call with their own storage, backbones or stage registry; `defs`
is what `dagster dev` / `dg dev` load (backbones.yaml, data under $DAGSTER_HOME/karma), lazily: importing
this module builds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from karma_dagster import jobs
from karma_dagster.runtime import executors
from karma_dagster.assets import knowledge_graph, report
from karma_dagster.assets.chain import check_backbone_groups, stage_asset
from karma_dagster.assets.freshness import freshness_sensor
from karma_dagster.assets.comparison import comparison_assets
from karma_dagster.assets.exports import export_assets
from karma_dagster.assets.questions import question_assets
from karma_dagster.assets.seed_kg import seed_kg
from karma_dagster.runtime.config import BackboneStatus, read_backbones
from karma_dagster.kg.location import install_scrubber
from karma_dagster.partitioning.mode import PartitionMode
from karma_dagster.runtime.paths import backbones_label
from karma_dagster.resources.backbones import (
    BackboneConfig,
    BackbonesResource,
    backbone_configs_from_file,
    settings_of,
)
from karma_dagster.resources.feed import LiteratureFeedResource
from karma_dagster.resources.judge import JudgeResource, judge_from_file
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.sensors.kg_increments import build_kg_increments_sensor
from karma_dagster.sensors.literature_feed import build_literature_feed_sensor
from karma_dagster.sensors.new_papers import build_new_papers_sensor
from karma_dagster.sensors.prompt_versions import build_prompt_versions_sensor
from karma_dagster.sensors.questions import build_questions_sensor
from karma_dagster.sensors.review import build_review_sensor
from karma_dagster.stages import STAGES, Stage, chain_for, check, code_version


def chain_assets(ns: str, config: BackboneConfig, prompts_dir: str = "",  # type: ignore[valid-type]
                 registry: Sequence[Stage] = STAGES, mode: PartitionMode = "document") -> list[dg.AssetsDefinition]:
    settings = settings_of(config)
    pool = jobs.llm_pool(ns) if settings.kind == "litellm" else None
    assets = [stage_asset(ns, stage, code_version(stage, settings, prompts_dir), pool, stage.kinds_for(settings), mode)
              for stage in chain_for(settings, registry)]  # its ablations or the single-agent variants
    return [*assets, knowledge_graph.build(ns, mode)]


def build_definitions(
    backbones: dict[str, BackboneConfig] | None = None,  # type: ignore[valid-type]
    storage: KarmaStorageResource | None = None,
    params: KarmaParamsResource | None = None,
    prompts_dir: str = "",
    judge: JudgeResource | None = None,
    statuses: list[BackboneStatus] | None = None,
    registry: Sequence[Stage] = STAGES,
    backbones_source: str | None = None,
    feed: LiteratureFeedResource | None = None,
) -> dg.Definitions:
    """`backbones_source`: which backbones.yaml the backbones came from, as the UI says it (the project's or the
    package default; paths.backbones_label); default: that file when they are read here, else "given in code"."""
    check(registry)
    install_scrubber()  # every process that serves or runs these assets: no store credential in its log records
    from_file = backbones is None
    if backbones_source is None:
        backbones_source = backbones_label() if from_file else "given in code (no backbones.yaml)"
    backbones = backbones if backbones is not None else backbone_configs_from_file()
    if not backbones:
        raise ValueError("no backbone is enabled: enable at least one in backbones.yaml")
    if statuses is None:
        statuses = read_backbones().statuses() if from_file else [
            BackboneStatus(name=n, kind=c.kind, model=c.model, mode=c.mode, ablate=list(c.ablate), enabled=True,
                           configured=True)
            for n, c in backbones.items()]
    if judge is None:
        judge = judge_from_file(prompts_dir) if from_file else JudgeResource(prompts_dir=prompts_dir)
    names = list(backbones)
    check_backbone_groups(names)
    storage = storage or KarmaStorageResource()
    mode = storage.partition_mode()  # document or date partitions (partitioning/mode.py)
    assets: list = [seed_kg]
    for ns, config in backbones.items():
        assets += chain_assets(ns, config, prompts_dir, registry, mode)
    assets.append(report.build(names))
    assets += comparison_assets(names, statuses, judge.label, backbones_source)
    assets += export_assets(names)
    assets += question_assets(names)  # CogMG: answers, completions and the QA benchmark per backbone
    document_job, kg_jobs = jobs.document_job(names, registry), jobs.kg_jobs(names)
    increments_job = jobs.kg_increments_job(names)
    llm_chains = {ns: chain_for(settings_of(config), registry)
                  for ns, config in backbones.items() if config.kind == "litellm"}
    sensors = [build_new_papers_sensor(document_job, names), build_kg_increments_sensor(names, kg_jobs, increments_job),
               build_prompt_versions_sensor(llm_chains, prompts_dir),  # without LLM chains: a visible no-op
               freshness_sensor(names), build_review_sensor(names, kg_jobs), build_questions_sensor(),
               build_literature_feed_sensor()]  # off by default: a saved query into the inbox, once a day
    return dg.Definitions(
        assets=assets,
        # One process per run, every step in it: the models (spaCy, lexicon, classifiers, index) load once per run,
        # not once per step, and the steps of a document's chain follow each other without process start-ups.
        # Backfills and the UI's "Materialize" use it too (bench/throughput.py measures the difference).
        executor=executors.selected_executor(),  # in_process unless KARMA_EXECUTOR=celery (executors.py)
        jobs=[document_job, increments_job, *kg_jobs.values(), *jobs.other_jobs(names)],
        sensors=sensors,
        resources={
            "storage": storage,
            "backbones": BackbonesResource(backbones=backbones, prompts_dir=prompts_dir, source=backbones_source),
            "karma_params": params or KarmaParamsResource(),
            "judge": judge,
            "literature_feed": feed or LiteratureFeedResource(),
        },
    )


@dg.definitions
def defs() -> dg.Definitions:
    """What `dagster dev -w workspace.yaml` loads: backbones.yaml's runnable backbones, default storage; from
    the project folder when there is one ($KARMA_PROJECT, else the working directory's karma.yaml)."""
    return build_definitions()
