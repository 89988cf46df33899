"""A project folder of one's own: `karma init` writes it and never overwrites; `karma` finds it through
$KARMA_PROJECT or the current directory and reads its backbones.yaml, inbox and dagster_home, and says which
backbones.yaml it read (the wheel-install run is in test_packaging.py)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from karma_dagster import cli
from karma_dagster.runtime import paths
from karma_dagster.runtime.config import read_backbones
from karma_dagster.ingest.inbox import inbox_files
from karma_dagster.project.discover import ENV, MARKER, ProjectError, find
from karma_dagster.project.starter import InitError, init_project

REPO = Path(__file__).resolve().parent.parent
STARTER = {"karma.yaml", "backbones.yaml", "dagster_home/dagster.yaml", "workspace.yaml", "inbox/README.md",
           ".env.example", ".gitignore"}


@pytest.fixture(autouse=True)
def _no_project_around(monkeypatch, tmp_path):
    """Each test starts outside any project, with no DAGSTER_HOME of its own."""
    for name in (ENV, "DAGSTER_HOME"):  # set first, so that what a command sets is undone after the test too
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def own_backbones(project: Path) -> None:
    """What a user does first: keep one local backbone, under a name of their own, and switch the rest off."""
    data = yaml.safe_load((project / "backbones.yaml").read_text())
    data["backbones"] = {"mine": {"kind": "local", "enabled": True},
                         **{n: {**e, "enabled": False} for n, e in data["backbones"].items() if n != "local"}}
    (project / "backbones.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def test_init_writes_a_starter_project_from_the_shipped_files(tmp_path):
    project = tmp_path / "proj"
    done = init_project(project)
    assert set(done.written) == STARTER and not done.kept
    assert {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()} == STARTER, "nothing else"
    backbones = (project / "backbones.yaml").read_text()
    assert backbones.startswith("# ---") and "yours to edit" in backbones
    assert backbones.endswith((REPO / "backbones.yaml").read_text()), "the shipped file below the header"
    assert read_backbones(project / "backbones.yaml").model_dump() == read_backbones(REPO / "backbones.yaml").model_dump()
    assert (project / "dagster_home" / "dagster.yaml").read_text() == (REPO / "dagster_home" / "dagster.yaml").read_text()
    workspace = yaml.safe_load((project / "workspace.yaml").read_text())
    assert workspace == yaml.safe_load((REPO / "workspace.yaml").read_text()), "the package's code location"
    assert yaml.safe_load((project / MARKER).read_text()) == {"karma_project": 1}
    env = (project / ".env.example").read_text()
    assert "OPENAI_API_KEY=\n" in env and "DEEPSEEK_API_KEY=\n" in env
    assert all(line.endswith("=") for line in env.splitlines() if line and not line.startswith("#")), "names, no values"
    sources, skipped = inbox_files(project / "inbox")
    assert not sources and [p.name for p in skipped] == ["README.md"], "the inbox's note is never read as a paper"


def test_init_never_overwrites_and_keep_existing_writes_only_what_is_missing(tmp_path):
    project = tmp_path / "proj"
    init_project(project)
    own_backbones(project)
    edited = (project / "backbones.yaml").read_text()
    (project / "workspace.yaml").unlink()
    with pytest.raises(InitError) as refused:
        init_project(project)
    assert "backbones.yaml" in str(refused.value) and "--keep-existing" in str(refused.value)
    assert not (project / "workspace.yaml").exists(), "a refused init writes nothing"
    done = init_project(project, keep_existing=True)
    assert done.written == ["workspace.yaml"] and set(done.kept) == STARTER - {"workspace.yaml"}
    assert (project / "backbones.yaml").read_text() == edited, "the user's file is kept as it is"
    assert not [p for p in project.rglob(".*karma-init*")], "no temporary file left"
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(InitError, match="a file, not a folder"):
        init_project(tmp_path / "a-file")


def test_karma_init_prints_what_it_wrote_and_the_next_commands_and_refuses_a_second_time(tmp_path, capsys):
    assert cli.main(["init", "my proj"]) == 0  # relative to the working directory (tmp_path)
    out = capsys.readouterr().out
    assert "wrote 7 file(s) in my proj" in out and "  backbones.yaml" in out
    assert "cd 'my proj'" in out and "karma run" in out and "dagster dev" in out
    assert str(tmp_path) not in out, "no absolute path"
    assert cli.main(["init", "my proj"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("karma init: my proj: karma.yaml, backbones.yaml") and "never overwrites" in err
    assert "backbones:" not in captured.out, "init reads no backbones.yaml to run: it says none"
    assert len(err.splitlines()) == 1


def test_the_project_is_karma_project_else_the_current_directory_else_the_package(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    init_project(project)
    assert find() is None and paths.backbones_file() == REPO / "backbones.yaml", "outside a project: the package"
    assert paths.backbones_label() == "the package default backbones.yaml"
    assert paths.DataPaths().inbox == REPO / "data" / "inbox"

    monkeypatch.setenv(ENV, str(project))
    here = find()
    assert here is not None and here.root == project.resolve() and here.found_by == "KARMA_PROJECT"
    assert paths.backbones_file() == here.backbones
    assert paths.backbones_label() == "backbones.yaml of project 'proj' (found by KARMA_PROJECT)"
    assert paths.dagster_home() == here.dagster_home and paths.DataPaths().root == here.dagster_home / "karma"
    assert paths.DataPaths().inbox == here.inbox
    assert paths.display_path(here.inbox / "a.pdf") == "inbox/a.pdf"
    assert paths.prompts_dir() == REPO / "prompts", "no prompts/ of its own: the package's"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))
    assert paths.dagster_home() == tmp_path / "elsewhere", "DAGSTER_HOME set wins"
    monkeypatch.delenv("DAGSTER_HOME")

    monkeypatch.delenv(ENV)
    monkeypatch.chdir(project / "inbox")
    assert find() is None, "only the folder itself is looked at, not its parents"
    monkeypatch.chdir(project)
    assert find().found_by == "the current directory" and paths.backbones_file() == project.resolve() / "backbones.yaml"
    assert "found by the current directory" in paths.backbones_label()

    (project / "backbones.yaml").unlink()
    assert paths.backbones_file() == REPO / "backbones.yaml"
    assert paths.backbones_label() == "the package default backbones.yaml; project 'proj' has none"


def test_a_project_with_its_own_prompts_uses_them(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    done = init_project(project, prompts=True)
    assert "prompts/reader/reader.v1.jinja" in done.written
    monkeypatch.setenv(ENV, str(project))
    assert paths.prompts_dir() == project.resolve() / "prompts"
    from karma_dagster.runtime.prompts import PromptStore

    assert PromptStore().latest("reader").path.is_relative_to(project.resolve())


def test_a_wrong_karma_project_is_an_error_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV, str(tmp_path / "nope"))
    with pytest.raises(ProjectError, match="no such folder"):
        find()
    (tmp_path / "plain").mkdir()
    monkeypatch.setenv(ENV, str(tmp_path / "plain"))
    with pytest.raises(ProjectError, match="no karma.yaml in that folder; `karma init"):
        paths.backbones_file()
    assert paths.display_path(tmp_path / "plain" / "x.pdf") == "x.pdf", "error paths still show, without it"
    assert cli.main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("karma status: KARMA_PROJECT=") and len(err.strip().splitlines()) == 1
    (tmp_path / "plain" / MARKER).write_text("karma_project: 2\n")
    with pytest.raises(ProjectError, match=r"plain/karma.yaml: karma_project"):
        find()


def test_karma_status_reads_and_reports_the_projects_own_backbones(tmp_path, monkeypatch, capsys, shared_cache):
    project = tmp_path / "proj"
    init_project(project)
    own_backbones(project)
    monkeypatch.chdir(project)
    assert cli.main(["status"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("backbones:") == 1, "said once, however often the file is read"
    assert captured.out.startswith("backbones: backbones.yaml of project 'proj' (found by the current directory)\n")
    rows = [line.split("|")[1].strip() for line in captured.out.splitlines() if line.startswith("| ")]
    assert rows == ["backbone", "mine"], "the project's backbones, not the package's"
    assert (project / "dagster_home" / "history" / "runs.db").is_file(), "the project's Dagster instance"

    from karma_dagster.definitions import build_definitions

    defs = build_definitions()  # what `dagster dev` loads in the project folder
    assert defs.resources["backbones"].names() == ["mine"]
    assert "project 'proj'" in defs.resources["backbones"].source
    node = defs.resolve_asset_graph().get(dg.AssetKey("backbones_status"))
    assert "Read from: backbones.yaml of project 'proj'" in node.description
    assert str(tmp_path) not in node.description
    with dg.instance_for_test() as instance:
        result = dg.materialize([defs.resolve_assets_def(dg.AssetKey("backbones_status"))], instance=instance)
    meta = result.asset_materializations_for_node("backbones_status")[0].metadata
    assert meta["backbones_file"].value == "backbones.yaml of project 'proj' (found by the current directory)"


def test_a_project_without_its_dagster_home_says_how_to_restore_it(tmp_path, monkeypatch, capsys):
    project = tmp_path / "proj"
    init_project(project)
    (project / "dagster_home" / "dagster.yaml").unlink()
    (project / "dagster_home").rmdir()
    monkeypatch.chdir(project)
    assert cli.main(["status"]) == 2
    assert "project 'proj' has no dagster_home/" in capsys.readouterr().err
    assert init_project(project, keep_existing=True).written == ["dagster_home/dagster.yaml"]
