"""Issue 31: the comparison complete in one click, and a quiet log.

- "Materialize" on `backbone_comparison` in the UI brings every backbone's `gold_evaluation` with it (what the UI
  adds to the selection is the asset graph's execution set), so the gold columns are filled by that one run;
- "the judge is not independent" is warned once, then kept as metadata: not once per materialization;
- the shipped dagster.yaml sets Dagster's python log level to INFO, which drops DEBUG lines from the run's
  console but keeps Dagster's DEBUG events (STEP_START, ...) in the event log the UI shows.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from karma_dagster import runner
from karma_dagster.jobs import REPORT_JOB
from karma_dagster.assets import notices
from karma_dagster.resources.backbones import BackboneConfig

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "data" / "inbox" / "abstracts.pubtator"  # PubTator abstracts with gold mentions and relations
BACKBONES = {"local": BackboneConfig(), "local-single": BackboneConfig(mode="single_agent")}
COMPARISON = dg.AssetKey("backbone_comparison")
GOLD = [dg.AssetKey([ns, "gold_evaluation"]) for ns in BACKBONES]
JUDGE_WARNING = "the judge is not independent"


def first_documents(n: int) -> str:
    """The first `n` documents of the shipped PubTator file (documents end with a blank line)."""
    return "\n\n".join(SHIPPED.read_text().split("\n\n")[:n]).strip() + "\n\n"


@pytest.fixture(scope="module")
def evaluated(make_module_pipeline):
    """Two backbones' chains over two shipped abstracts with gold: every stage done, no metric asset yet."""
    p = make_module_pipeline(backbones=BACKBONES)
    (p.inbox / "abstracts.pubtator").write_text(first_documents(2))
    assert runner.import_kg(p.defs, p.instance)
    keys, failed = runner.register_inbox(p.defs, p.instance)
    assert len(keys) == 2 and not failed
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    return p


def click_materialize(p, key: dg.AssetKey) -> dg.ExecuteInProcessResult:
    """What the UI's "Materialize" on `key` launches: the key plus the keys the asset graph says must come along
    (the webserver's assetNodeAdditionalRequiredKeys reads the same execution set), in one run."""
    selection = p.defs.resolve_asset_graph().get(key).execution_set_asset_keys
    return p.defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=p.instance, asset_selection=list(selection), raise_on_error=False)


def warnings_of(p, result) -> list[str]:
    return [e.user_message for e in p.instance.all_logs(result.run_id)
            if e.level == logging.WARNING and JUDGE_WARNING in e.user_message]


def test_materializing_the_comparison_brings_every_gold_evaluation(evaluated, monkeypatch):
    p = evaluated
    metrics = p.storage.root() / "metrics"
    assert not any((metrics / ns / "gold.json").exists() for ns in BACKBONES), "no gold scored before the click"
    assert p.defs.resolve_asset_graph().get(COMPARISON).execution_set_asset_keys == {COMPARISON, *GOLD}
    monkeypatch.setattr(notices, "_said", set())  # this process has warned about nothing yet
    result = click_materialize(p, COMPARISON)
    assert result.success
    by_key = {m.asset_key: m for m in result.get_asset_materialization_events()}
    assert set(by_key) == {COMPARISON, *GOLD}, "one run: the table and both backbones' gold scores"
    csv = pd.read_csv(metrics / "backbone_comparison.csv").set_index("backbone")
    for ns in BACKBONES:
        gold = by_key[dg.AssetKey([ns, "gold_evaluation"])].step_materialization_data.materialization.metadata
        assert gold["documents_with_gold"].value == 2
        for column in ("gold_mention_f1", "gold_id_f1", "gold_pair_f1"):
            value = csv.loc[ns, column]
            assert not math.isnan(value) and 0.0 <= value <= 1.0, (ns, column, value)
            assert value == pytest.approx(gold[column].value, abs=1e-4), (ns, column)
    assert csv.loc["local", "gold_mention_f1"] > 0, "the dictionary finds gold mentions in these abstracts"
    table = by_key[COMPARISON].step_materialization_data.materialization.metadata
    # kg_metrics was never materialized: its columns are n/a, and one line says what to click
    hint = table["missing"].value
    assert "no kg_metrics yet for local, local-single" in hint and "compare_backbones" in hint
    assert "\n" not in hint
    # the table's gold columns are filled: neither row says n/a under gold mention F1
    header = table["table"].value.splitlines()[0].split("|")
    column = [h.strip() for h in header].index("gold mention F1 ↑")
    for row in table["table"].value.splitlines()[2:4]:
        assert row.split("|")[column].strip() not in ("", "n/a"), row
    # clicking one backbone's gold evaluation refreshes the comparison as well (one step)
    again = click_materialize(p, GOLD[1])
    assert again.success and {m.asset_key for m in again.get_asset_materialization_events()} == {COMPARISON, *GOLD}


def test_the_judge_warning_is_said_once_then_kept_as_metadata(evaluated, monkeypatch):
    p = evaluated
    monkeypatch.setattr(notices, "_said", set())  # a fresh process
    report = p.defs.resolve_job_def(REPORT_JOB)
    first = report.execute_in_process(instance=p.instance, raise_on_error=False)
    second = report.execute_in_process(instance=p.instance, raise_on_error=False)
    assert first.success and second.success
    said = warnings_of(p, first)
    # the rule-based judge and both local chains share the cues: one line per backbone, the first time only
    assert len(said) == 2 and any("local-single:" in w for w in said), said
    assert warnings_of(p, second) == []
    for result in (first, second):  # ... while every materialization keeps the reasons
        meta = result.asset_materializations_for_node("karma_report")[0].metadata
        assert set(meta[notices.JUDGE_KEY].value) == set(BACKBONES)
    # the comparison in the same process: the same facts, already said
    assert warnings_of(p, click_materialize(p, COMPARISON)) == []
    # a new process (a daemon-launched run): the previous materialization carried the reasons, no new warning
    monkeypatch.setattr(notices, "_said", set())
    assert warnings_of(p, report.execute_in_process(instance=p.instance, raise_on_error=False)) == []
    # a changed reason is news again
    assert notices.news({"local": "another reason"}, {"local": "the old reason"}) == {"local": "another reason"}


def test_shipped_instance_logs_at_info_and_keeps_debug_events(tmp_path, capfd):
    """dagster_home/dagster.yaml: python_logs.python_log_level INFO. The run's console logger follows it (no DEBUG
    lines in the run worker's output); Dagster's own events (STEP_START and the rest, DEBUG) stay in the event log."""
    (tmp_path / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    assert instance.python_log_level == "INFO"

    @dg.asset
    def chatty(context) -> None:  # noqa: ANN001 - a string annotation (future import) is refused here
        context.log.debug("a debug line")
        context.log.info("an info line")

    capfd.readouterr()
    result = dg.materialize([chatty], instance=instance)
    assert result.success
    logs = instance.all_logs(result.run_id)
    messages = [e.user_message for e in logs if not e.is_dagster_event]
    assert "an info line" in messages and "a debug line" not in messages
    step_start = [e for e in logs if e.is_dagster_event and e.dagster_event_type == dg.DagsterEventType.STEP_START]
    assert step_start and step_start[0].level == logging.DEBUG, "Dagster's DEBUG events stay in the event log"
    err = capfd.readouterr().err  # the run's console logger writes to stderr
    assert " - INFO - " in err and "an info line" in err, "the console keeps INFO"
    assert " - DEBUG - " not in err, "no DEBUG line on the run worker's console"
    instance.dispose()


def test_an_unreadable_inbox_file_is_reported_once_not_on_every_tick(make_pipeline, capfd):
    """The new_papers sensor ticks every 15 s: a file that stays unreadable is warned about on the tick it starts
    failing, then only listed in the cursor (it used to be a warning per tick, 5,760 a day)."""
    from sensor_ticks import tick

    p = make_pipeline()
    (p.inbox / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    capfd.readouterr()
    first = tick(p, "new_papers")
    assert "skipped unreadable file: " in capfd.readouterr().err
    second = tick(p, "new_papers", first.cursor)
    assert "broken.pdf" in second.cursor and "skipped unreadable file" not in capfd.readouterr().err
    (p.inbox / "broken.pdf").unlink()
    third = tick(p, "new_papers", second.cursor)  # gone: forgotten, so a new failure of it would warn again
    assert "broken.pdf" not in third.cursor


def test_a_judge_reason_kept_by_one_asset_is_not_said_again_by_another():
    """The dagster dev log of the sample inbox said each backbone's judge warning twice: once from its kg_metrics,
    once from the report refreshed after it, each asset's first time. What any of them keeps is not news."""
    why = "the rule-based judge uses the chain's cues"

    @dg.asset(key=dg.AssetKey(["local", "kg_metrics"]))
    def kg_metrics() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={notices.JUDGE_KEY: dg.MetadataValue.json({"local": why})})

    with dg.instance_for_test() as instance:
        assert notices._recorded(instance, dg.AssetKey("karma_report"), ["local"]) == {}  # noqa: SLF001
        assert dg.materialize([kg_metrics], instance=instance).success
        recorded = notices._recorded(instance, dg.AssetKey("karma_report"), ["local"])  # noqa: SLF001
        assert recorded == {"local": why}
        assert notices.news({"local": why}, recorded) == {}  # the report's first run: not said again
        assert notices.news({"local-single": why}, recorded) == {"local-single": why}  # another backbone is news
