"""Bundles the project's shipped files (prompts/, data/, backbones.yaml, dagster_home/dagster.yaml) into the wheel
as package data.

They live at the project root (prompts/ is a required top-level name) and `karma_dagster.runtime.paths` finds them
there in a checkout; a non-editable install finds this copy under karma_dagster/_bundled/ instead.
Everything else about the package is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# what karma_dagster.runtime.paths.project_root() must hold; dagster_home/dagster.yaml is the instance config `karma init`
# copies into a new project (only that file: the rest of dagster_home/ is run-time data)
SHIPPED = ("prompts", "data", "backbones.yaml", "dagster_home/dagster.yaml")


class BuildWithShippedFiles(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout
            return
        target = Path(self.build_lib) / "karma_dagster" / "_bundled"
        for name in SHIPPED:
            src, dst = ROOT / name, target / name
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)


setup(cmdclass={"build_py": BuildWithShippedFiles})
