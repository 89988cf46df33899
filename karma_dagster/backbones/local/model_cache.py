"""A trained model kept in the cache folder: trained once (parallel runs wait on a lock beside the file), written
atomically, and a truncated or foreign file set aside and retrained instead of trusted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import joblib
from filelock import FileLock

from karma_dagster.integrity import quarantine

T = TypeVar("T")


def load_or_train(path: Path, kind: type[T], what: str, train: Callable[[], T]) -> tuple[T, bool]:
    """(the model in `path`, or `train()`'s, saved there; whether it came from the cache). `what` names the model
    in the quarantine message ("relation model")."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            try:
                fitted = joblib.load(path)
                if not isinstance(fitted, kind):
                    raise TypeError(f"holds a {type(fitted).__name__}, not a {what}")
                return fitted, True
            except Exception as exc:  # noqa: BLE001 - a truncated or foreign cache file: kept aside, retrained
                quarantine(path, f"{what} cache", f"{type(exc).__name__}: {exc}")
        fitted = train()
        tmp = path.with_suffix(".tmp")
        joblib.dump(fitted, tmp, compress=3)
        tmp.replace(path)
        return fitted, False
