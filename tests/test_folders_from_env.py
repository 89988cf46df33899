"""The inbox and the data folder chosen without code: with $KARMA_INBOX and $KARMA_DATA set, the Definitions that
`dagster dev` loads (definitions.defs) watch that inbox, keep the catalog in that data folder, and the `storage`
resource's description (what the UI shows) names both folders and the variables that chose them."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest
from sensor_ticks import tick

from karma_dagster.runtime import paths

PAPER = "PMC4686705.xml"


@pytest.fixture()
def chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    inbox, data = tmp_path / "lab-papers", tmp_path / "lab-data"
    inbox.mkdir()
    shutil.copy(paths.data_file("inbox", PAPER), inbox / PAPER)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(paths.INBOX_ENV, str(inbox))
    monkeypatch.setenv(paths.DATA_ENV, str(data))
    monkeypatch.delenv("KARMA_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)  # no project folder here
    return inbox, data


def test_definitions_loaded_with_the_variables_set_watch_that_inbox_and_keep_data_there(chosen, tmp_path, monkeypatch):
    from karma_dagster.definitions import defs
    from karma_dagster.sensors import new_papers

    # the run order (the controller) would build the lexicon in this fresh data folder: minutes, beside the point
    monkeypatch.setattr(new_papers, "controller_tags", lambda *a, **k: {})

    inbox, data = chosen
    loaded = defs()
    storage = loaded.resources["storage"]
    assert storage.inbox_dir() == inbox and storage.root() == data
    described = loaded.get_repository_def().get_top_level_resources()["storage"].description
    assert "Inbox: lab-papers (set by $KARMA_INBOX)" in described, described
    assert "Data: lab-data (set by $KARMA_DATA)" in described, described

    (tmp_path / "instance").mkdir()

    class _Pipeline:
        defs = loaded
        instance = dg.DagsterInstance.local_temp(str(tmp_path / "instance"))

    try:
        result = tick(_Pipeline, "new_papers")
    finally:
        _Pipeline.instance.dispose()
    assert result.run_requests, "the paper in $KARMA_INBOX was found and requested"
    assert (data / "catalog.sqlite").is_file() and not paths.data_file("inbox", "catalog.sqlite").exists()


def test_without_the_variables_the_description_names_the_defaults(monkeypatch, tmp_path):
    from karma_dagster.resources.storage import KarmaStorageResource

    monkeypatch.delenv(paths.INBOX_ENV, raising=False)
    monkeypatch.delenv(paths.DATA_ENV, raising=False)
    monkeypatch.delenv("KARMA_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)
    text = KarmaStorageResource().get_resource_definition().description
    assert "Inbox: data/inbox (the shipped sample inbox). Data: $DAGSTER_HOME/karma." in text, text
    assert "(set in this resource's config)" in KarmaStorageResource(inbox=str(tmp_path)).__doc__
