"""Which project folder is in effect: $KARMA_PROJECT when set, else the current directory when it holds the
marker `karma.yaml`, else none (the package's defaults).

The marker is its own file, not backbones.yaml: the checkout has a backbones.yaml at its root, and running
`karma` there must keep the checkout's defaults (data/inbox), not turn the checkout into a project without
an inbox. Only the folder itself is looked at (not its parents), so what a command uses never depends on
where above it a marker happens to lie. Read on every call (cheap: one stat, one small file): tests and
processes that change the variable or the directory see the change. Dagster-free and `__file__`-free.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

ENV = "KARMA_PROJECT"
MARKER = "karma.yaml"
FORMAT = 1  # karma.yaml's `karma_project:` value this code reads
BACKBONES, DAGSTER_HOME, INBOX, PROMPTS = "backbones.yaml", "dagster_home", "inbox", "prompts"


class ProjectError(ValueError):
    """$KARMA_PROJECT names no project, or a karma.yaml is wrong; the message names it and what to do."""


class ProjectFile(BaseModel):
    """karma.yaml: the marker; its one key says which layout of the folder it describes."""

    model_config = ConfigDict(extra="forbid")
    karma_project: Literal[1] = FORMAT


class Project(BaseModel):
    """A project folder and how it was found. Its files sit at fixed places in it (karma.yaml's comment says
    which): backbones.yaml, dagster_home/, inbox/, and optionally prompts/."""

    model_config = ConfigDict(frozen=True)
    root: Path
    found_by: Literal["KARMA_PROJECT", "the current directory"]

    @property
    def backbones(self) -> Path:
        return self.root / BACKBONES

    @property
    def dagster_home(self) -> Path:
        return self.root / DAGSTER_HOME

    @property
    def inbox(self) -> Path:
        return self.root / INBOX

    @property
    def prompts(self) -> Path | None:
        """The project's own prompts/ when it has one (used whole, in place of the package's), else None."""
        folder = self.root / PROMPTS
        return folder if folder.is_dir() else None

    @property
    def name(self) -> str:
        """How logs name the project: the folder's own name, never its absolute path."""
        return self.root.name or str(self.root)


def read_marker(path: Path) -> ProjectFile:
    """Parse karma.yaml; an error names the file by its project folder's name (no absolute path) and the problem."""
    shown = f"{path.parent.name}/{path.name}"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ProjectError(f"{shown}: cannot be read: {exc.__class__.__name__}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ProjectError(f"{shown}: not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ProjectError(f"{shown}: expected a mapping such as `karma_project: {FORMAT}`, got a {type(data).__name__}")
    try:
        return ProjectFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}" for e in exc.errors())
        raise ProjectError(f"{shown}: {problems} (this karma reads `karma_project: {FORMAT}`)") from None


def find(cwd: Path | None = None, environ: dict[str, str] | None = None) -> Project | None:
    """The project in effect, or None. $KARMA_PROJECT naming a folder without karma.yaml is an error (a typo
    must not silently fall back to the defaults); a current directory without one simply is no project."""
    env = os.environ if environ is None else environ
    given = (env.get(ENV) or "").strip()
    if given:
        root = Path(given).expanduser().resolve()
        if not (root / MARKER).is_file():
            what = "no such folder" if not root.exists() else f"no {MARKER} in that folder"
            raise ProjectError(f"{ENV}={given}: {what}; `karma init {given}` makes it a project folder, "
                               f"or unset {ENV}")
        read_marker(root / MARKER)
        return Project(root=root, found_by="KARMA_PROJECT")
    try:
        here = (cwd or Path.cwd()).resolve()
    except FileNotFoundError:  # the working directory was deleted under the process: no project there
        return None
    if (here / MARKER).is_file():
        read_marker(here / MARKER)
        return Project(root=here, found_by="the current directory")
    return None
