"""Where things live: the project's shipped files (prompts/, data/, backbones.yaml) and the run-time data.

The one module that computes a path from `__file__`. Shipped files are found in the project checkout (an
editable install or a run from the repo) or, in a wheel, in the copy `setup.py` bundles as package data under
`karma_dagster/_bundled/`, so a non-editable install finds them too. Run-time data goes under `$DAGSTER_HOME`.
Nothing here runs at import time beyond resolving this file's folder.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
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


def prompts_dir() -> Path:
    return shipped("prompts")


def backbones_file() -> Path:
    return shipped("backbones.yaml")


def dagster_home() -> Path:
    """$DAGSTER_HOME; else the checkout's dagster_home/ (README), else ./dagster_home."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    checkout = _checkout_root()
    return (checkout if checkout is not None else Path.cwd()) / "dagster_home"


def default_data_dir() -> Path:
    return dagster_home() / "karma"


def display_path(path: Path | str, base: Path | None = None) -> str:
    """A path as it may appear in logs and metadata: relative to a known base, never absolute (a URL as is)."""
    if "://" in str(path):
        return str(path)
    p = Path(path)
    roots = [base, default_data_dir(), dagster_home(), _checkout_root(), PACKAGE_DIR / BUNDLED]
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
    shipped sample inbox, rebuildable caches in <data>/cache.
    """

    def __init__(self, data_dir: Path | str = "", inbox: Path | str = "", cache_dir: Path | str = "",
                 storage_url: str = "") -> None:
        from karma_dagster.shared_storage import storage_url as configured_url

        self.root = Path(data_dir) if str(data_dir) else default_data_dir()
        # stage tables and entity index: under this URL when set (argument, else $KARMA_STORAGE_URL), else in root
        self.shared_url = configured_url(storage_url)
        self.inbox = Path(inbox) if str(inbox) else data_file("inbox")
        self._cache = Path(cache_dir) if str(cache_dir) else self.root / "cache"

    def __repr__(self) -> str:
        return f"DataPaths(root={display_path(self.root)!r})"

    def _shared(self, name: str):  # noqa: ANN202 - a Path, or a UPath under KARMA_STORAGE_URL
        from karma_dagster.shared_storage import storage_root

        return storage_root(f"{self.shared_url}/{name}") if self.shared_url else self.root / name

    @property
    def stages_dir(self) -> Path:
        return self._shared("stages")

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
