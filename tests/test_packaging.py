"""A non-editable wheel install works outside the checkout: it finds its prompts, data and backbones.yaml
(bundled as package data by setup.py), loads the code location and runs `karma run` on a sample paper.

Offline: the wheel is built without build isolation (setuptools and wheel come with the dev extras) and the
fresh venv reaches the already-installed dependencies through a .pth line, never a package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd[:4])} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_wheel_install_finds_its_files_loads_the_code_location_and_runs(tmp_path: Path):
    source = tmp_path / "src"  # a copy, so building leaves nothing in the checkout
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".venv", ".git", "dagster_home", "__pycache__",
                                                                  "*.egg-info", "build", ".pytest_cache"))
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "PYTHONPATH")}
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

    work = tmp_path / "elsewhere"  # not the checkout: nothing may be found through the working directory
    (work / "inbox").mkdir(parents=True)
    shutil.copy(REPO / "data" / "inbox" / "visfatin-hypothyroidism-note.txt", work / "inbox")
    env.update(DAGSTER_HOME=str(work / "home"), LITELLM_LOCAL_MODEL_COST_MAP="True")
    (work / "home").mkdir()
    probe = ("import dagster as dg, karma_dagster, karma_dagster.paths as p\n"
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
