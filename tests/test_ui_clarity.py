"""What a Dagster UI user sees (issue 12): backbones told apart in the lineage view, kinds that match the backbone,
report and metrics that refresh when the KG grows, every backbone's state, short runs-list rows, a comparison
chart the browser can show, and a prompt sensor that says why it does nothing without an LLM backbone."""

from __future__ import annotations

import argparse
import base64
import io
import re

import dagster as dg
import pytest

from karma_dagster.runtime import paths
from karma_dagster.definitions import build_definitions
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.stages import STAGE_NAMES

LLM = BackboneConfig(kind="litellm", model="openai/gpt-4o", api_key="unused")
TWO_LOCAL = {"local": BackboneConfig(), "local-single": BackboneConfig(mode="single_agent")}


def _defs(tmp_path, backbones):
    return build_definitions(backbones=backbones, storage=KarmaStorageResource(data_dir=str(tmp_path / "karma")))


def _instance(tmp_path):
    (tmp_path / "home").mkdir(exist_ok=True)
    return dg.instance_for_test(temp_dir=str(tmp_path / "home"))


def _node(defs, *key: str):
    return defs.resolve_asset_graph().get(dg.AssetKey(list(key)))


# ---------------------------------------------------------------- 1. a group per backbone
def test_each_backbone_is_its_own_group_and_the_stage_stays_findable(tmp_path):
    defs = _defs(tmp_path, TWO_LOCAL)
    for ns, group in (("local", "local"), ("local-single", "local_single")):
        for name in (*STAGE_NAMES, "knowledge_graph", "kg_metrics", "gold_evaluation"):
            node = _node(defs, ns, name)
            assert node.group_name == group, (ns, name, node.group_name)
        for stage in STAGE_NAMES:
            assert _node(defs, ns, stage).tags["karma/stage"] == stage
    groups = {_node(defs, ns, "relations").group_name for ns in TWO_LOCAL}
    assert len(groups) == 2, "the two `relations` nodes sit in two boxes"
    with pytest.raises(ValueError, match="would share the Dagster group 'local_single'"):
        _defs(tmp_path, {"local-single": BackboneConfig(), "local.single": BackboneConfig()})


# ---------------------------------------------------------------- 2. kinds per backbone
def test_kinds_match_the_backbone(tmp_path):
    defs = _defs(tmp_path, {"local": BackboneConfig(), "gpt-4o": LLM,
                            "deepseek": BackboneConfig(kind="litellm", model="deepseek/deepseek-chat", api_key="x"),
                            "gpt-4o-no-evaluator": BackboneConfig(kind="litellm", model="openai/gpt-4o",
                                                                  api_key="x", ablate=["evaluator"])})
    assert _node(defs, "local", "relations").kinds >= {"scikitlearn"}
    for stage in STAGE_NAMES:
        kinds = _node(defs, "gpt-4o", stage).kinds
        assert "scikitlearn" not in kinds and "openai" in kinds, (stage, kinds)
        assert "deepseek" in _node(defs, "deepseek", stage).kinds and "openai" not in _node(defs, "deepseek", stage).kinds
    assert _node(defs, "gpt-4o", "documents").kinds >= {"pymupdf"}  # PDFs are parsed by PyMuPDF on every backbone
    assert _node(defs, "gpt-4o", "entities").kinds >= {"spacy", "lancedb"}  # dictionary screen + entity index
    assert _node(defs, "gpt-4o-no-evaluator", "evaluated").kinds == {"python"}  # a pass-through asks no model


# ---------------------------------------------------------------- 3. freshness
def test_report_and_metrics_refresh_when_a_kg_increment_lands(tmp_path):
    defs = _defs(tmp_path, TWO_LOCAL)
    refreshed = {dg.AssetKey("karma_report"), dg.AssetKey(["local", "kg_metrics"]),
                 dg.AssetKey(["local-single", "kg_metrics"])}
    for key in refreshed:
        assert defs.resolve_assets_def(key).automation_conditions_by_key[key] is not None
    sensor = defs.resolve_sensor_def("karma_freshness")
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING  # no click needed in a fresh dagster dev
    with _instance(tmp_path) as instance:
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert first.total_requested == 0, "nothing before the first increment (and no history replay)"
        kg = defs.resolve_assets_def(dg.AssetKey(["local", "knowledge_graph"]))
        instance.add_dynamic_partitions("kg_dates", ["2016-01-14"])  # what registering a paper of that day does
        result = dg.materialize([kg], partition_key="2016-01-14", instance=instance,  # its resources are bound
                                selection=[dg.AssetKey(["local", "knowledge_graph"])])
        assert result.success  # a real increment (a day without documents merges nothing)
        second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        requested = {k for k in refreshed if second.get_num_requested(k)}
        assert requested == {dg.AssetKey("karma_report"), dg.AssetKey(["local", "kg_metrics"])}
        third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=second.cursor)
        assert third.total_requested == 0, "requested once per increment, not on every tick"


# ---------------------------------------------------------------- 4. every backbone's state, also from `karma run`
BACKBONES_YAML = """\
judge: local
backbones:
  local: {kind: local, enabled: true}
  local-single: {kind: local, mode: single_agent, enabled: true}
  gpt-4o: {kind: litellm, model: openai/gpt-4o, api_key_env: KARMA_TEST_UNSET_KEY_A, enabled: false}
  deepseek-v3: {kind: litellm, model: deepseek/deepseek-chat, api_key_env: KARMA_TEST_UNSET_KEY_B, enabled: true}
"""


def test_backbones_status_from_karma_run_lists_every_backbone_with_its_state(tmp_path, monkeypatch):
    from karma_dagster import cli

    shipped = tmp_path / "backbones.yaml"
    shipped.write_text(BACKBONES_YAML)
    monkeypatch.setattr(paths, "backbones_file", lambda: shipped)
    monkeypatch.delenv("KARMA_TEST_UNSET_KEY_B", raising=False)
    args = argparse.Namespace(backbone=["local"], inbox="", data_dir=str(tmp_path / "karma"))
    defs = cli._defs(args)  # what `karma run --backbone local` builds
    asset = defs.resolve_assets_def(dg.AssetKey("backbones_status"))
    with _instance(tmp_path) as instance:
        result = dg.materialize([asset], instance=instance)
    meta = result.asset_materializations_for_node("backbones_status")[0].metadata
    table = meta["backbones"].value
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| backbone")}
    assert rows == {"local": "enabled", "local-single": "enabled, not in this run (--backbone)",
                    "gpt-4o": "disabled", "deepseek-v3": "NOT CONFIGURED: set KARMA_TEST_UNSET_KEY_B"}
    assert meta["not_configured"].value == {"deepseek-v3": "KARMA_TEST_UNSET_KEY_B"}
    assert meta["disabled"].value == ["gpt-4o"]


# ---------------------------------------------------------------- 5. one or two CCA tags per run
def test_controller_runs_carry_two_cca_tags_at_most():
    from karma_dagster.runtime.params import ControllerParams
    from karma_dagster.scheduling.controller import Candidate, order
    from karma_dagster.scheduling.tiers import controller_tiers
    from karma_dagster.sensors.new_papers import plan_runs

    found = [Candidate(doc_key=f"d{i}", tau=tau, novelty=0.1 * i, recency=0.5, urgency=0.2, cost=0.1)
             for i, tau in enumerate(["Gene", "Disease", "Gene", "Chemical"])]
    decisions = order(found, ControllerParams())
    requests = plan_runs([(d.doc_key, "abc") for d in decisions], "document_chain",
                         {d.doc_key: d.tags() for d in decisions})
    for r in requests:
        cca = [t for t in r.tags if t.startswith("karma/cca")]
        assert 1 <= len(cca) <= 2, cca
        assert r.tags["dagster/priority"]
    for d in decisions:  # the rest is one log line of the tick
        assert f"eq4 {d.eq4:.4f}" in d.summary() and f"bonus {d.bonus:.4f}" in d.summary()
    tiers = controller_tiers({d.doc_key: d for d in decisions}, {d.doc_key: i for i, d in enumerate(found)}, 1)
    for _, tags in tiers:
        assert len([t for t in tags if t.startswith("karma/cca")]) <= 2


# ---------------------------------------------------------------- 6. the comparison chart in the browser
def test_comparison_chart_is_an_embedded_image_and_no_machine_path(tmp_path):
    from PIL import Image

    storage = KarmaStorageResource(data_dir=str(tmp_path / "karma"))
    defs = build_definitions(backbones=TWO_LOCAL, storage=storage)
    asset = defs.resolve_assets_def(dg.AssetKey("backbone_comparison"))
    with _instance(tmp_path) as instance:
        result = dg.materialize([asset], instance=instance)  # with the gold evaluations: one step (issue 31)
    [meta] = [m.metadata for m in result.asset_materializations_for_node("backbone_comparison")
              if m.asset_key == dg.AssetKey("backbone_comparison")]
    chart = meta["chart"].value
    found = re.fullmatch(r"!\[backbone comparison\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", chart)
    assert found, chart[:80]
    png = base64.b64decode(found.group(1))
    assert Image.open(io.BytesIO(png)).format == "PNG" and len(png) < 400_000
    assert re.match(r"\| backbone +\| mode +\|", meta["csv"].value)  # the CSV's rows, readable in the UI
    root = str(tmp_path)
    for name, value in meta.items():
        assert not isinstance(value, dg.PathMetadataValue), name
        assert root not in str(value.value), f"{name} shows a machine path"
    assert "metrics/backbone_comparison.csv" in meta["files"].value


def test_a_large_chart_is_scaled_down_to_fit(tmp_path):
    import numpy as np
    from PIL import Image

    from karma_dagster.assets.comparison import MAX_EMBEDDED_PNG, chart_markdown

    noise = np.random.default_rng(0).integers(0, 255, (900, 900, 3), dtype=np.uint8)  # does not compress
    big = tmp_path / "big.png"
    Image.fromarray(noise).save(big)
    assert big.stat().st_size > MAX_EMBEDDED_PNG
    data = base64.b64decode(chart_markdown(big).value.split("base64,", 1)[1].rstrip(")"))
    shown = Image.open(io.BytesIO(data))
    assert len(data) <= MAX_EMBEDDED_PNG and shown.format == "PNG" and shown.width < 900


# ---------------------------------------------------------------- 7. the prompt sensor without an LLM backbone
def test_prompt_sensor_says_no_llm_backbone_is_enabled(tmp_path):
    defs = _defs(tmp_path, TWO_LOCAL)
    sensor = defs.resolve_sensor_def("prompt_versions")
    note = "no LLM backbone is enabled in backbones.yaml: editing a prompt re-runs nothing"
    assert note.lower() in sensor.description.lower()
    with _instance(tmp_path) as instance:
        context = dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
        result = sensor.evaluate_tick(context)
    assert result.skip_message == note and not result.run_requests
    with_llm = _defs(tmp_path, {"local": BackboneConfig(), "gpt-4o": LLM}).resolve_sensor_def("prompt_versions")
    assert "no LLM backbone" not in with_llm.description and with_llm.asset_selection is not None
