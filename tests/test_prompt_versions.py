"""`prompt_versions`: editing a prompt requests exactly the affected stages' materialized partitions."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._time import get_current_datetime

from karma_dagster.definitions import build_definitions
from karma_dagster.stages import STAGE_NAMES
from karma_dagster.partitioning.definitions import documents_partitions
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource

REPO = Path(__file__).resolve().parent.parent
DOCS = ["2015-12-08_pmc4686705", "2016-02-12_pmc4745298", "2016-03-01_pmid26900000"]
LLM = BackboneConfig(kind="litellm", model="openai/test-model", api_base="http://127.0.0.1:9/v1")


def _defs(tmp_path: Path, prompts: Path) -> dg.Definitions:
    storage = KarmaStorageResource(data_dir=str(tmp_path / "karma"), inbox=str(tmp_path / "inbox"))
    return build_definitions(backbones={"local": BackboneConfig(), "llm": LLM}, storage=storage, prompts_dir=str(prompts))


def _graph_view(instance: dg.DagsterInstance, graph) -> AssetGraphView:
    """What the webserver builds per request to resolve staleness (the UI's 'stale' badge and its causes)."""
    return AssetGraphView(
        temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
        instance=instance, asset_graph=graph,
    )


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None):
    context = dg.SensorEvaluationContext(
        instance_ref=instance.get_ref(), cursor=cursor, repository_def=defs.get_repository_def(),
        resources=defs.resources, sensor_name="prompt_versions",
    )
    with context:
        return defs.resolve_sensor_def("prompt_versions").evaluate_tick(context)


def _requested(result) -> dict[str, set[str]]:
    (request,) = result.run_requests
    assert request.requires_backfill_daemon() and request.tags["karma/trigger"] == "prompt_versions"
    out: dict[str, set[str]] = {}
    for akpk in request.asset_graph_subset.iterate_asset_partitions():
        out.setdefault(akpk.asset_key.to_user_string(), set()).add(akpk.partition_key)
    return out


def test_prompt_edit_requests_exactly_the_affected_stages_where_they_ran(tmp_path):
    prompts = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts", prompts)
    defs = _defs(tmp_path, prompts)
    graph = defs.resolve_asset_graph()
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions(documents_partitions.name, DOCS)
        # docs 0 and 1 ran the whole chain on both backbones; doc 2 stopped after `summaries`.
        for doc in DOCS:
            for stage in STAGE_NAMES if doc != DOCS[2] else STAGE_NAMES[:3]:
                for ns in ("llm", "local"):
                    key = dg.AssetKey([ns, stage])
                    instance.report_runless_asset_event(dg.AssetMaterialization(
                        key, partition=doc, tags={"dagster/code_version": graph.get(key).code_version}))

        first = _tick(defs, instance, None)
        assert not first.run_requests and "baseline" in first.skip_message
        unchanged = _tick(defs, instance, first.cursor)
        assert not unchanged.run_requests and unchanged.cursor == first.cursor

        # Edit the EEA prompt: entities and everything after it, of the LLM backbone, where materialized.
        path = prompts / "entity_extraction" / "entity_extraction.v1.jinja"
        path.write_text(path.read_text() + "\nBe precise.\n")
        edited = _tick(defs, instance, first.cursor)
        llm_from_entities = {f"llm/{s}" for s in STAGE_NAMES[STAGE_NAMES.index("entities"):]}
        assert _requested(edited) == {key: set(DOCS[:2]) for key in llm_from_entities}
        assert "entity_extraction" in edited.run_requests[0].tags["karma/prompt_change"]

        # The reloaded code location: a new code version on `entities` only; the UI shows it stale for that
        # reason and the stages after it stale through it; no code-version cause before it or on local/*.
        reloaded = _defs(tmp_path, prompts).resolve_asset_graph()
        for stage in STAGE_NAMES:
            key = dg.AssetKey(["llm", stage])
            assert (reloaded.get(key).code_version != graph.get(key).code_version) == (stage == "entities")
        resolver = CachingStaleStatusResolver(instance, reloaded, _graph_view(instance, reloaded))
        causes = resolver.get_stale_causes(dg.AssetKey(["llm", "entities"]), DOCS[0])
        assert any("code version" in c.reason for c in causes), causes
        downstream = resolver.get_stale_root_causes(dg.AssetKey(["llm", "evaluated"]), DOCS[0])
        assert downstream and resolver.get_status(dg.AssetKey(["llm", "evaluated"]), DOCS[0]) == StaleStatus.STALE
        for fresh in (dg.AssetKey(["llm", "segments"]), dg.AssetKey(["local", "entities"])):
            # (runless fixture events carry no input versions, so only the code-version cause is meaningful)
            assert not any("code version" in c.reason for c in resolver.get_stale_causes(fresh, DOCS[0]))

        # A new reader version (v2): segments onwards, including doc 2's segments and summaries, nothing else.
        after_edit = _tick(defs, instance, edited.cursor)
        assert not after_edit.run_requests
        reader = prompts / "reader"
        (reader / "reader.v2.jinja").write_text((reader / "reader.v1.jinja").read_text().replace("relevance", "relevance (v2)", 1))
        reader_tick = _tick(defs, instance, after_edit.cursor)
        new_version = _requested(reader_tick)
        assert new_version["llm/segments"] == set(DOCS) and new_version["llm/summaries"] == set(DOCS)
        assert new_version["llm/evaluated"] == set(DOCS[:2])
        assert set(new_version) == {f"llm/{s}" for s in STAGE_NAMES[1:]}  # never documents, never local/*

        # One of the evaluator's prompts (it renders several): only the last stage.
        clarity = next((prompts / "evaluator_clarity").glob("evaluator_clarity.v*.jinja"))
        clarity.write_text(clarity.read_text() + "\nBe brief.\n")
        assert _requested(_tick(defs, instance, reader_tick.cursor)) == {"llm/evaluated": set(DOCS[:2])}


def test_no_llm_backbone_prompt_sensor_targets_nothing_and_says_so(tmp_path):
    storage = KarmaStorageResource(data_dir=str(tmp_path / "karma"))
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=storage)
    sensor = defs.resolve_sensor_def("prompt_versions")  # built, so the UI can say why a prompt edit does nothing
    assert "LLM backbone is enabled in backbones.yaml" in sensor.description and not sensor.targets


def test_each_llm_backbone_follows_its_own_chain(tmp_path):
    """An ablated stage renders no prompt (its edit reruns nothing there); the single-agent baseline renders
    `single_agent` (its edit reruns it, and only it)."""
    from karma_dagster.resources.backbones import settings_of
    from karma_dagster.sensors.prompt_versions import affected_stages, current_versions
    from karma_dagster.stages import chain_for

    chains = {
        "llm": chain_for(settings_of(LLM)),
        "llm-no-evaluator": chain_for(settings_of(LLM.model_copy(update={"ablate": ["evaluator"]}))),
        "llm-single": chain_for(settings_of(LLM.model_copy(update={"mode": "single_agent"}))),
    }
    prompts = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts", prompts)
    before = current_versions(chains, str(prompts))
    assert "evaluator_clarity" in before["llm"] and "evaluator_clarity" not in before["llm-no-evaluator"]
    assert "single_agent" in before["llm-single"] and "single_agent" not in before["llm"]

    clarity = next((prompts / "evaluator_clarity").glob("evaluator_clarity.v*.jinja"))
    clarity.write_text(clarity.read_text() + "\nBe brief.\n")
    assert affected_stages(before, current_versions(chains, str(prompts)), chains) == {"llm": ["evaluated"]}

    before = current_versions(chains, str(prompts))
    single = max((prompts / "single_agent").glob("single_agent.v*.jinja"))
    single.write_text(single.read_text() + "\nBe exhaustive.\n")
    changed = affected_stages(before, current_versions(chains, str(prompts)), chains)
    assert set(changed) == {"llm-single"} and changed["llm-single"][-1] == "evaluated"
