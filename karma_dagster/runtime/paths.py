"""Where things live: the project's shipped files (prompts/, data/, backbones.yaml) and the run-time data.

The one module that computes a path from `__file__`. Shipped files are found in the project checkout (an
editable install or a run from the repo) or, in a wheel, in the copy `setup.py` bundles as package data under
`karma_dagster/_bundled/`, so a non-editable install finds them too. Run-time data goes under `$DAGSTER_HOME`.
A project folder (`karma init`; found by project/discover.py) takes precedence for backbones.yaml, the inbox,
DAGSTER_HOME and, when it has its own, prompts/. $KARMA_INBOX and $KARMA_DATA choose the inbox and the data folder
without code (before the project's; a resource config that names a folder wins over both). Nothing here runs at import time beyond resolving this file's folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from karma_dagster.project.discover import Project, find

PACKAGE_DIR = Path(__file__).resolve().parent.parent
BUNDLED = "_bundled"  # the folder name inside the package that a wheel carries the shipped files in


def _checkout_root() -> Path | None:
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() and (root / "prompts").is_dir() else None


def project_root() -> Path:
    """The folder that holds prompts/, data/ and backbones.yaml: the checkout, else the wheel's bundled copy."""
    checkout = _checkout_root()
    if checkout is not None:
        return checkout
    bundled = PACKAGE_DIR / BUNDLED
    if (bundled / "prompts").is_dir():
        return bundled
    raise FileNotFoundError(
        f"karma_dagster finds neither a project checkout nor its bundled files ({BUNDLED}/): reinstall the package"
    )


def shipped(*parts: str) -> Path:
    """A shipped project file, e.g. shipped('data', 'seed_kg', 'nodes.tsv')."""
    return project_root().joinpath(*parts)


def data_file(*parts: str) -> Path:
    return shipped("data", *parts)


def project() -> Project | None:
    """The project folder in effect ($KARMA_PROJECT, else the current directory's karma.yaml), or None."""
    return find()


def prompts_dir() -> Path:
    """The project's own prompts/ when it has one (used whole), else the shipped prompts."""
    here = project()
    own = here.prompts if here is not None else None
    return own if own is not None else shipped("prompts")


def backbones_file() -> Path:
    """The project's backbones.yaml, else the package default (the checkout's or the wheel's bundled copy)."""
    here = project()
    if here is not None and here.backbones.is_file():
        return here.backbones
    return shipped("backbones.yaml")


def backbones_label(path: Path | None = None) -> str:
    """Which backbones.yaml `path` (default: the one in effect) is, as logs and the UI say it: by the project
    folder's name or as the package default, never by an absolute path."""
    path = Path(path) if path is not None else backbones_file()
    here = project()
    if here is not None and _same(path, here.backbones):
        return f"backbones.yaml of project '{here.name}' (found by {here.found_by})"
    if _same(path, shipped("backbones.yaml")):
        lacks = f"; project '{here.name}' has none" if here is not None else ""
        return f"the package default backbones.yaml{lacks}"
    return display_path(path)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


INBOX_ENV = "KARMA_INBOX"  # the folder watched for new papers, chosen without code (`dagster dev`, `karma run`)
DATA_ENV = "KARMA_DATA"  # the folder of all run-time data (stage tables, catalog, KG, index, caches)


def _from_env(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


def inbox_choice() -> tuple[Path, str]:
    """(the default inbox, how it was chosen): $KARMA_INBOX, else the project's inbox/, else the shipped sample."""
    given = _from_env(INBOX_ENV)
    if given is not None:
        return given, f"set by ${INBOX_ENV}"
    here = project()
    if here is not None:
        return here.inbox, f"project '{here.name}'"
    return data_file("inbox"), "the shipped sample inbox"


def default_inbox() -> Path:
    """$KARMA_INBOX, else the project's inbox/, else the shipped sample inbox (data/inbox)."""
    return inbox_choice()[0]


def dagster_home() -> Path:
    """$DAGSTER_HOME; else the project's dagster_home/, else the checkout's (README), else ./dagster_home."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    here = project()
    if here is not None:
        return here.dagster_home
    checkout = _checkout_root()
    return (checkout if checkout is not None else Path.cwd()) / "dagster_home"


def data_choice() -> tuple[Path, str]:
    """(the default data folder, how it was chosen): $KARMA_DATA, else $DAGSTER_HOME/karma."""
    given = _from_env(DATA_ENV)
    if given is not None:
        return given, f"set by ${DATA_ENV}"
    return dagster_home() / "karma", "$DAGSTER_HOME/karma"


def default_data_dir() -> Path:
    """$KARMA_DATA, else $DAGSTER_HOME/karma."""
    return data_choice()[0]


def display_path(path: Path | str, base: Path | None = None) -> str:
    """A path as it may appear in logs and metadata: relative to a known base, never absolute (a URL as is)."""
    if "://" in str(path):
        return str(path)
    p = Path(path)
    try:
        here = project()
        homes = [default_data_dir(), dagster_home(), here.root if here else None]
    except ValueError:  # a wrong $KARMA_PROJECT: its own error says so; a path is still shown without it
        homes = []
    roots = [base, *homes, _checkout_root(), PACKAGE_DIR / BUNDLED]
    for root in roots:
        if root is None:
            continue
        try:
            return str(p.resolve().relative_to(Path(root).resolve()))
        except ValueError:
            continue
    return p.name


class DataPaths:
    """The run-time data of one pipeline: stage tables, catalog, KG, entity index, caches, ledger, metrics.

    Built from the storage resource's settings (or the CLI's flags); plain paths, so agents, services,
    metrics and tests use it without Dagster. Empty settings mean: data under $DAGSTER_HOME/karma, the
    project's inbox/ (else the shipped sample inbox), rebuildable caches in <data>/cache.
    """

    def __init__(self, data_dir: Path | str = "", inbox: Path | str = "", cache_dir: Path | str = "",
                 storage_url: str = "") -> None:
        from karma_dagster.runtime.shared_storage import storage_url as configured_url

        self.root = Path(data_dir) if str(data_dir) else default_data_dir()
        # stage tables, entity index and calibrations: under this URL when set (argument, else
        # $KARMA_STORAGE_URL), else in root
        self.shared_url = configured_url(storage_url)
        self.inbox = Path(inbox) if str(inbox) else default_inbox()
        self._cache = Path(cache_dir) if str(cache_dir) else self.root / "cache"

    def __repr__(self) -> str:
        return f"DataPaths(root={display_path(self.root)!r})"

    def _shared(self, name: str):  # noqa: ANN202 - a Path, or a UPath under KARMA_STORAGE_URL
        from karma_dagster.runtime.shared_storage import storage_root

        return storage_root(f"{self.shared_url}/{name}") if self.shared_url else self.root / name

    @property
    def stages_dir(self) -> Path:
        return self._shared("stages")

    @property
    def calibration_dir(self) -> Path:
        """LLM backbones' evaluator calibrations (`karma calibrate`): shared like the stage tables, so a worker on
        another machine admits by the same map the calibrating machine stored."""
        return self._shared("calibration")

    @property
    def catalog(self) -> Path:
        return self.root / "catalog.sqlite"

    @property
    def kg(self) -> Path:
        return self.root / "kg.duckdb"

    @property
    def index(self) -> Path:
        return self._shared("entity_index.lance")

    @property
    def llm_cache(self) -> Path:
        """Run data, not a derived file: what the models answered."""
        return self.root / "llm_cache"

    @property
    def controller(self) -> Path:
        return self.root / "controller.sqlite"

    def cache(self) -> Path:
        """Derived, rebuildable files (lexicon, trained models); created on first use."""
        self._cache.mkdir(parents=True, exist_ok=True)
        return self._cache

    def metrics_dir(self, namespace: str | None = None) -> Path:
        path = self.root / "metrics" / (namespace or "")
        path.mkdir(parents=True, exist_ok=True)
        return path
