"""`prompt_versions`: a new or edited prompt reruns the stages it feeds, and their downstream, where they ran.

The cursor holds `prompt_id@sha256` per prompt and LLM backbone. When one changes, the stage that renders it
and every later stage up to `evaluated` are requested for the document partitions each of them already has
materialized (nothing upstream, nothing never run). The request is one backfill (the daemon runs it with the
stages' backfill policy, many documents per run) so a tick costs the same for 10 or 100,000 documents; the
rerun stages' `evaluated` materializations then drive the KG increments of their dates (`kg_increments`).
The assets' code_version carries the same hashes, so the UI marks those partitions stale ("code version
changed") once the code location is reloaded. The first tick only records the versions it finds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.partitions.subset.default import DefaultPartitionsSubset

from karma_dagster.assets.chain import stage_key
from karma_dagster.runtime.prompts import PromptStore
from karma_dagster.stages import Stage

PromptVersions = dict[str, dict[str, str]]  # backbone -> prompt -> "reader.v2@1a2b3c4d5e6f"
Chains = Mapping[str, Sequence[Stage]]  # backbone -> the stages it runs (stages.chain_for: ablations, baseline)


def current_versions(chains: Chains, prompts_root: str) -> PromptVersions:
    """Each backbone's prompts as its own chain renders them: an ablated stage renders none, the single-agent
    baseline renders `single_agent`."""
    store = PromptStore(prompts_root or None)
    ids: dict[str, str] = {}
    out: PromptVersions = {}
    for ns, chain in chains.items():
        names = sorted({name for stage in chain for name in stage.prompts})
        out[ns] = {name: ids.setdefault(name, store.prompt_id(name)) for name in names}
    return out


def affected_stages(previous: PromptVersions, current: PromptVersions, chains: Chains) -> dict[str, list[str]]:
    """backbone -> the first stage whose prompt changed and every stage after it (through `evaluated`)."""
    out: dict[str, list[str]] = {}
    for ns, agents in current.items():  # agents: prompt name -> versioned id
        before = previous.get(ns)
        if before is None:
            continue  # a backbone seen for the first time: its baseline, nothing to rerun
        chain = list(chains[ns])
        changed = [i for i, stage in enumerate(chain) if any(before.get(name) != agents[name] for name in stage.prompts)]
        if changed:
            out[ns] = [stage.name for stage in chain[min(changed):]]
    return out


def rerun_targets(
    stages: Mapping[str, list[str]], materialized: Callable[[dg.AssetKey], set[str]]
) -> dict[dg.AssetKey, list[str]]:
    """Each affected asset with the partitions it has materialized (assets with none are left out)."""
    targets: dict[dg.AssetKey, list[str]] = {}
    for ns, names in stages.items():
        for stage in names:
            key = stage_key(ns, stage)
            if done := sorted(materialized(key)):
                targets[key] = done
    return targets


NO_LLM_BACKBONE = "no LLM backbone is enabled in backbones.yaml: editing a prompt re-runs nothing"


def build_prompt_versions_sensor(chains: Chains, prompts_root: str, interval_s: int = 60) -> dg.SensorDefinition:
    """`chains`: the LLM backbones' chains (local backbones have no prompts). Without any, the sensor is still
    built, so the UI says why editing a prompt does nothing (its description and every tick's skip reason)."""
    if not chains:
        return _no_llm_backbone_sensor(interval_s)

    @dg.sensor(
        name="prompt_versions",
        asset_selection=dg.AssetSelection.assets(*[stage_key(ns, s.name) for ns, chain in chains.items() for s in chain]),
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="A new or edited prompt version reruns, as one backfill, the stages that use it and everything "
        "downstream (through evaluated), for the document partitions already materialized; nothing upstream.",
    )
    def prompt_versions(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        current = current_versions(chains, prompts_root)
        previous: PromptVersions = json.loads(context.cursor) if context.cursor else {}
        stages = affected_stages(previous, current, chains)
        cursor = json.dumps(current, sort_keys=True)
        if not stages:
            reason = "prompt versions recorded (baseline)" if not previous else "no prompt changed"
            return dg.SensorResult(skip_reason=reason, cursor=cursor)
        targets = rerun_targets(stages, context.instance.get_materialized_partitions)
        if not targets:
            return dg.SensorResult(skip_reason=f"prompts changed for {sorted(stages)}, nothing materialized yet", cursor=cursor)
        subset = AssetGraphSubset(
            partitions_subsets_by_asset_key={key: DefaultPartitionsSubset(set(keys)) for key, keys in targets.items()}
        )
        changed = {ns: sorted(v for a, v in current[ns].items() if previous[ns].get(a) != v) for ns in stages}
        context.log.info(f"prompt change {changed}: rerunning {[k.to_user_string() for k in targets]}")
        tags = {
            "karma/trigger": "prompt_versions",
            "karma/prompt_change": json.dumps(changed, sort_keys=True)[:250],
        }
        return dg.SensorResult(run_requests=[dg.RunRequest.for_asset_graph_subset(subset, tags=tags)], cursor=cursor)

    return prompt_versions


def _no_llm_backbone_sensor(interval_s: int) -> dg.SensorDefinition:
    @dg.sensor(
        name="prompt_versions",
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"{NO_LLM_BACKBONE[0].upper()}{NO_LLM_BACKBONE[1:]} (prompts are rendered by LLM backbones "
        "only; the local backbones run classic NLP). Enable one (kind: litellm, its key variable set) and reload "
        "the code location: then a new or edited prompt version reruns the stages that use it.",
    )
    def prompt_versions(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        return dg.SkipReason(NO_LLM_BACKBONE)

    return prompt_versions
