"""The code location loads as the UI sees it, with the promised shape."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml
from partition_views import BY_DATE

from karma_dagster.definitions import build_definitions
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.resources.backbones import BackboneConfig, BackbonesResource, backbone_configs_from_file, settings_of
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.stages import STAGE_NAMES, by_name

REPO = Path(__file__).resolve().parent.parent


def test_module_definitions_load_with_every_stage_grouped_and_partitioned():
    from karma_dagster.definitions import defs as load_defs

    defs = load_defs()  # lazy (@dg.definitions): importing the module built nothing
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    groups = set()
    for stage in STAGE_NAMES:
        node = graph.get(dg.AssetKey(["local", stage]))
        assert isinstance(node.partitions_def, dg.DynamicPartitionsDefinition)
        assert node.partitions_def.name == ("kg_dates" if BY_DATE else "documents")  # partitioning/mode.py
        assert node.group_name == "local" and node.tags["karma/stage"] == by_name(stage).name
        assert node.description and node.kinds
        groups.add(node.group_name)
    assert groups == {"local"}, "a group per backbone (the stage is its karma/stage tag)"
    kg = graph.get(dg.AssetKey(["local", "knowledge_graph"]))
    assert isinstance(kg.partitions_def, dg.DynamicPartitionsDefinition) and kg.partitions_def.name == "kg_dates"
    assert kg.key not in kg.parent_keys, "no self-dependency: the days of a run merge in date order in the asset"
    assert dg.AssetKey(["local", "evaluated"]) in kg.parent_keys
    checks = {k.name for k in graph.asset_check_keys}
    assert {f"{s}_table_schema" for s in STAGE_NAMES} <= checks
    # the stage tables' schema checks block what follows; the KG's "documents_merged" only warns (an unmerged
    # document is merged by the next run or sensor tick, it must not stop the increment)
    assert all(graph.get_check_spec(k).blocking for k in graph.asset_check_keys if k.name.endswith("_table_schema"))
    assert "documents_merged" in checks
    assert not graph.get_check_spec(dg.AssetCheckKey(kg.key, "documents_merged")).blocking
    assert dg.AssetCheckKey(kg.key, "admission_rule") in graph.asset_check_keys  # what `karma check` reports
    assert {s.name for s in defs.sensors} == {"new_papers", "kg_increments", "prompt_versions", "karma_freshness",
                                              "review_decisions", "questions", "literature_feed"}


def test_backbones_file_keeps_keys_out_and_each_backbone_gets_its_own_chain():
    configs = backbone_configs_from_file()
    assert "local" in configs and configs["local"].kind == "local"
    text = (REPO / "backbones.yaml").read_text()
    assert "sk-" not in text and "api_key:" not in text
    defs = build_definitions(backbones={"local": BackboneConfig(), "gpt-4o": BackboneConfig(kind="litellm", model="openai/gpt-4o")})
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"local/entities", "gpt-4o/entities", "gpt-4o/knowledge_graph"} <= keys
    key = dg.AssetKey(["gpt-4o", "relations"])
    assert defs.resolve_assets_def(key).op.pool == "llm_gpt-4o"  # a pool per LLM backbone (its rate limit)
    version = defs.resolve_asset_graph().get(key).code_version
    assert version and version != defs.resolve_asset_graph().get(dg.AssetKey(["local", "relations"])).code_version


def test_dagster_home_config_is_a_valid_instance(tmp_path):
    cfg = yaml.safe_load((REPO / "dagster_home" / "dagster.yaml").read_text())
    assert cfg["telemetry"]["enabled"] is False
    assert cfg["concurrency"]["runs"]["max_concurrent_runs"] >= 1
    (tmp_path / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    assert instance.run_coordinator.__class__.__name__ == "QueuedRunCoordinator"
    ws = yaml.safe_load((REPO / "workspace.yaml").read_text())
    assert ws["load_from"][0]["python_module"]["module_name"] == "karma_dagster.definitions"


def test_the_run_queue_keeps_a_place_for_kg_increments_while_papers_are_read(tmp_path):
    """Issue 31: with a day's inbox queued, the shipped dagster.yaml runs at most 2 paper runs at once and keeps
    the third place for the KG increments, which outrank papers (Dagster's own dequeue selection decides)."""
    import logging

    from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    from karma_dagster.jobs import INCREMENT_PRIORITY, kg_job_name

    (tmp_path / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    queue = QueuedRunCoordinatorDaemon(interval_seconds=5)
    queue._logger = logging.getLogger("test.run_queue")  # noqa: SLF001 - set by the daemon controller

    def add(run_id: str, status: dg.DagsterRunStatus, tags: dict[str, str], job: str = "document_chain") -> None:
        code = InProcessCodeLocationOrigin(LoadableTargetOrigin(python_file=__file__), location_name="karma")
        origin = RemoteJobOrigin(repository_origin=RemoteRepositoryOrigin(code, "__repository__"), job_name=job)
        if instance.has_run(run_id):
            instance.delete_run(run_id)
        instance.add_run(DagsterRun(job_name=job, run_id=run_id, status=status, tags=tags, remote_job_origin=origin))

    def next_up() -> list[str]:
        return [r.run_id for r in queue._get_runs_to_dequeue(  # noqa: SLF001 - the queue's selection, no launch
            instance, instance.get_concurrency_config(), fixed_iteration_time=None)]

    paper = {"karma/trigger": "new_papers", "dagster/priority": "100"}
    for i in range(4):
        add(f"paper-{i}", dg.DagsterRunStatus.QUEUED, paper)
    assert next_up() == ["paper-0", "paper-1"]  # two papers at once, the third place stays free
    for i in range(2):  # started: they hold the two paper places
        add(f"paper-{i}", dg.DagsterRunStatus.STARTED, paper)
    assert next_up() == []
    kg = {"dagster/priority": str(INCREMENT_PRIORITY), "dagster/partition": "2026-12-02"}
    add("kg-1", dg.DagsterRunStatus.QUEUED, kg, kg_job_name("local"))
    assert next_up() == ["kg-1"]  # the increment starts now, ahead of the queued papers
    add("kg-1", dg.DagsterRunStatus.STARTED, kg, kg_job_name("local"))
    add("backfill-0", dg.DagsterRunStatus.QUEUED, {"dagster/backfill": "abcdefgh"})
    assert next_up() == []  # 3 in progress: the cap holds
    add("kg-1", dg.DagsterRunStatus.SUCCESS, kg, kg_job_name("local"))
    assert next_up() == ["backfill-0"]  # no increment waiting: a backfill's run may take the free place
    for i in range(4):  # the inbox is read
        add(f"paper-{i}", dg.DagsterRunStatus.SUCCESS, paper)
    add("backfill-1", dg.DagsterRunStatus.STARTED, {"dagster/backfill": "abcdefgh"})
    add("backfill-2", dg.DagsterRunStatus.QUEUED, {"dagster/backfill": "ijklmnop"})
    assert next_up() == ["backfill-0"]  # backfills, of any id, read at most 2 papers at once too
def test_each_llm_backbone_gets_its_own_pool_limited_to_its_concurrency():
    from karma_dagster import runner

    backbones = {"local": BackboneConfig(), "gpt-4o": BackboneConfig(kind="litellm", model="openai/gpt-4o", concurrency=3)}
    defs = build_definitions(backbones=backbones)
    with dg.instance_for_test() as instance:
        runner.setup_pools(instance, defs.resources["backbones"])
        assert instance.event_log_storage.get_concurrency_info("llm_gpt-4o").slot_count == 3
        assert instance.event_log_storage.get_concurrency_info("kg_writer").slot_count == 1


def test_resources_carry_the_cores_defaults_into_a_run():
    """The resources mirror KarmaParams and BackboneSettings (defaults declared once); inside a run Dagster
    builds them from its config schema, nested evaluator weights included."""
    seen = {}

    @dg.asset(required_resource_keys={"karma_params", "backbones"})
    def probe(context) -> None:  # noqa: ANN001 - unannotated: this module uses string annotations
        res = context.resources
        seen["params"], seen["settings"] = res.karma_params.params(), settings_of(res.backbones.backbones["local"])

    assert dg.materialize([probe], resources={"karma_params": KarmaParamsResource(),
                                              "backbones": BackbonesResource()}).success
    assert seen["params"] == KarmaParams() and seen["params"].llm_weights != seen["params"].weights
    assert seen["settings"] == BackboneSettings()
    tuned = KarmaParamsResource(delta=0.5).params()
    assert tuned.delta == 0.5 and tuned.llm_weights == KarmaParams().llm_weights


def test_backbones_file_is_read_strictly_and_errors_name_the_file_and_the_key(tmp_path):
    import pytest

    from karma_dagster.runtime.config import ConfigError, read_backbones

    f = tmp_path / "backbones.yaml"
    f.write_text("backbones:\n  ollama: {kind: litellm, model: ollama/x, api_bse: 'http://127.0.0.1:1'}\n")
    with pytest.raises(ConfigError) as err:
        read_backbones(f)
    assert "backbones.yaml" in str(err.value) and "api_bse" in str(err.value) and "'api_base'" in str(err.value)
    f.write_text("backbones: [local\n")
    with pytest.raises(ConfigError, match="backbones.yaml: not valid YAML"):
        read_backbones(f)
    f.write_text("backbones:\n  local: {kind: local, api_key: sk-secret}\n")
    with pytest.raises(ConfigError, match="never put a key in a file"):
        read_backbones(f)
    f.write_text("judge: local\nbackbones:\n  local: {kind: local}\n")
    assert list(read_backbones(f).runnable()) == ["local"]
