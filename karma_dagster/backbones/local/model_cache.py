"""A trained model kept in the cache folder: trained once (parallel runs wait on a lock beside the file), written
atomically, and a truncated or foreign file set aside and retrained instead of trusted. With `key`, the model
carries the key it was trained under (its `cache_key`), and a file holding another key's model (copied or renamed
into place) is set aside too: a model trained from other data is never reused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import joblib
from filelock import FileLock

from karma_dagster.runtime.integrity import quarantine

T = TypeVar("T")


def load_or_train(path: Path, kind: type[T], what: str, train: Callable[[], T], key: str | None = None
                  ) -> tuple[T, bool]:
    """(the model in `path`, or `train()`'s, saved there; whether it came from the cache). `what` names the model
    in the quarantine message ("relation model"); `key`: what the model must have been trained under (set on the
    trained model as `cache_key`, checked on the cached one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            try:
                fitted = joblib.load(path)
                if not isinstance(fitted, kind):
                    raise TypeError(f"holds a {type(fitted).__name__}, not a {what}")
                if key is not None and getattr(fitted, "cache_key", None) != key:
                    raise ValueError(f"trained under key {getattr(fitted, 'cache_key', None)!r}, not {key!r}")
                return fitted, True
            except Exception as exc:  # noqa: BLE001 - a truncated or foreign cache file: kept aside, retrained
                quarantine(path, f"{what} cache", f"{type(exc).__name__}: {exc}")
        fitted = train()
        if key is not None:
            fitted.cache_key = key  # type: ignore[attr-defined]
        tmp = path.with_suffix(".tmp")
        joblib.dump(fitted, tmp, compress=3)
        tmp.replace(path)
        return fitted, False
