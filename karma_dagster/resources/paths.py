"""Where things live by default: everything under `$DAGSTER_HOME` (the repo's dagster_home/ in the README).

Resolved at run time, never at import time, and never written into the repo or metadata as absolute paths.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or REPO_ROOT / "dagster_home")


def default_data_dir() -> Path:
    return dagster_home() / "karma"


def repo_data(*parts: str) -> Path:
    return REPO_ROOT.joinpath("data", *parts)


def display_path(path: Path | str, base: Path | None = None) -> str:
    """A path as it may appear in logs and metadata: relative to a known base, never absolute."""
    p = Path(path)
    for root in [base, default_data_dir(), dagster_home(), REPO_ROOT]:
        if root is None:
            continue
        try:
            return str(p.resolve().relative_to(Path(root).resolve()))
        except ValueError:
            continue
    return p.name
