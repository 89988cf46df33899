"""A non-editable wheel install works outside the checkout: it finds its prompts, data and backbones.yaml
(bundled as package data by setup.py), loads the code location and runs `karma run` on a sample paper; and
`karma init` makes a project folder whose own backbones.yaml `karma run`, `karma status` and the code location use.

Offline: the wheel is built without build isolation (setuptools and wheel come with the dev extras) and the
fresh venv reaches the already-installed dependencies through a .pth line, never a package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd[:4])} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _source_files(folder: str, names: list[str]) -> set[str]:
    """What the wheel is built from: the checkout without its venvs, caches and run-time data (of dagster_home/,
    only the shipped dagster.yaml)."""
    skip = set(shutil.ignore_patterns(".venv", ".venv-*", ".git", "__pycache__", "*.egg-info", "build",
                                      ".pytest_cache")(folder, names))
    if Path(folder) == REPO / "dagster_home":
        skip |= set(names) - {"dagster.yaml"}
    return skip


@dataclass
class Installed:
    """The wheel installed non-editable into a fresh venv (dependencies reached through a .pth line)."""

    python: Path
    site: Path
    env: dict[str, str]
    root: Path
    cache: Path

    def share_cache(self, data_dir: Path) -> None:
        """The data dir's derived, rebuildable files (lexicon, trained models): the run's shared cache
        (conftest's shared_cache), which the wheel's code builds and reads as the checkout's does (same keys, same
        file locks), so its runs skip ~80 s of CPU building them again."""
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "cache").symlink_to(self.cache, target_is_directory=True)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Installed:
    """Built and installed once for the module's tests (about a minute of the two)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = tmp_path / "src"  # a copy, so building leaves nothing in the checkout
    shutil.copytree(REPO, source, ignore=_source_files)
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "PYTHONPATH", "KARMA_PROJECT")}
    env["PIP_NO_INDEX"] = "1"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
          str(source)], tmp_path, env)
    (wheel,) = (tmp_path / "dist").glob("karma_dagster-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path,
                     env).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")  # dependencies only: no .pth inside runs
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)], tmp_path, env)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return Installed(python, site, env, tmp_path, shared_cache)


def test_wheel_install_finds_its_files_loads_the_code_location_and_runs(installed: Installed):
    python, site, tmp_path, env = installed.python, installed.site, installed.root, dict(installed.env)
    work = tmp_path / "elsewhere"  # not the checkout: nothing may be found through the working directory
    (work / "inbox").mkdir(parents=True)
    shutil.copy(REPO / "data" / "inbox" / "visfatin-hypothyroidism-note.txt", work / "inbox")
    env.update(DAGSTER_HOME=str(work / "home"))
    (work / "home").mkdir()
    installed.share_cache(work / "home" / "karma")
    probe = ("import dagster as dg, karma_dagster, karma_dagster.runtime.paths as p\n"
             "from karma_dagster.definitions import defs\n"
             "d = defs(); dg.Definitions.validate_loadable(d)\n"
             "print(karma_dagster.__file__); print(p.project_root()); print(len(d.resolve_asset_graph().get_all_asset_keys()))")
    module_file, root, n_assets = _run([str(python), "-c", probe], work, env).stdout.split()
    assert str(site) in module_file, "the wheel's copy is imported, not the checkout"
    assert root.endswith("_bundled") and (Path(root) / "prompts" / "reader").is_dir()
    assert int(n_assets) > 20

    out = _run([str(python), "-m", "karma_dagster.cli", "run", "--backbone", "local", "--inbox", str(work / "inbox")],
               work, env, timeout=900).stdout
    assert "1 new or changed documents" in out and "karma-dagster run report" in out
    assert (work / "home" / "karma" / "kg.duckdb").exists()
    assert not list(REPO.glob("build")), "building the wheel wrote nothing into the checkout"


def test_a_wheel_install_with_karma_init_runs_the_main_job_with_the_users_own_backbones(installed: Installed):
    """Issue 29's done-when: `karma init`, the user's own backbones.yaml, `karma run` and `dagster dev`'s code
    location from the project folder, with nothing set in the environment (no DAGSTER_HOME, no KARMA_PROJECT)."""
    python, env = str(installed.python), installed.env
    karma = [python, "-m", "karma_dagster.cli"]
    out = _run([*karma, "init", "myproj"], installed.root, env).stdout
    project = installed.root / "myproj"
    assert "wrote 7 file(s) in myproj" in out and "cd myproj" in out
    backbones = project / "backbones.yaml"
    assert "yours to edit" in backbones.read_text()
    data = yaml.safe_load(backbones.read_text())  # one local backbone under a name of the user's, the rest off
    data["backbones"] = {"mine": {"kind": "local", "enabled": True},
                         **{n: {**e, "enabled": False} for n, e in data["backbones"].items() if n != "local"}}
    backbones.write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copy(REPO / "data" / "inbox" / "visfatin-hypothyroidism-note.txt", project / "inbox")
    installed.share_cache(project / "dagster_home" / "karma")

    said = "backbones: backbones.yaml of project 'myproj' (found by the current directory)"
    done = _run([*karma, "run"], project, env, timeout=900)
    assert done.stdout.startswith(said + "\n"), "the output's header names the backbones.yaml read"
    assert "1 new or changed documents" in done.stdout and "karma-dagster run report" in done.stdout
    assert "| mine |" in done.stdout and "| local |" not in done.stdout, "the user's backbone, and only it"
    data_dir = project / "dagster_home" / "karma"
    assert (data_dir / "kg.duckdb").exists() and [p.name for p in (data_dir / "stages").iterdir()] == ["mine"]
    assert not (installed.root / "dagster_home").exists(), "nothing written where `init` was run"
    assert (project / "dagster_home" / "history" / "runs.db").is_file(), "the project's Dagster instance"

    probe = ("from karma_dagster.definitions import defs\n"  # what workspace.yaml has `dagster dev` load here
             "import dagster as dg\n"
             "d = defs(); print(d.resources['backbones'].names())\n"
             "print(d.resolve_asset_graph().get(dg.AssetKey('backbones_status')).description)")
    loaded = _run([python, "-c", probe], project, env).stdout
    assert "['mine']" in loaded and f"Read from: {said.removeprefix('backbones: ')}" in loaded
    assert str(installed.root) not in loaded + done.stdout + done.stderr, "no absolute path in what it says"
