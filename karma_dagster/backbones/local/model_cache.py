"""A trained model kept in the cache folder: trained once (parallel runs wait on a lock beside the file), written
atomically, and a truncated or foreign file set aside and retrained instead of trusted. With `key`, the model
carries the key it was trained under (its `cache_key`), and a file holding another key's model (copied or renamed
into place) is set aside too: a model trained from other data is never reused.

A process unpickles each version of the file once: after `services.clear()` a new backbone gets the model already
made (a load is ~0.2-0.9 s) while the file holds the same bytes (a 2.7 MB file hashes in ~4 ms), and a new one
when anything rewrote it."""

from __future__ import annotations

import hashlib
import io
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import joblib
from filelock import FileLock

from karma_dagster.runtime.integrity import quarantine

T = TypeVar("T")

_READ: OrderedDict[str, tuple[bytes, object]] = OrderedDict()  # path -> (its bytes' digest when read, the model)
_READ_KEPT = 8
_READ_LOCK = threading.Lock()


def _digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


def _read(path: Path) -> tuple[object, bytes]:
    """(the model in `path`, the digest of the bytes it came from): the object this process already made of the
    same bytes, else the bytes unpickled. Bytes, not the file's times: a rewrite within one clock tick keeps them."""
    raw = path.read_bytes()
    digest = _digest(raw)
    with _READ_LOCK:
        known = _READ.get(str(path))
        if known is not None and known[0] == digest:
            _READ.move_to_end(str(path))
            return known[1], digest
    return joblib.load(io.BytesIO(raw)), digest


def _remember(path: Path, digest: bytes, model: object) -> None:
    with _READ_LOCK:
        _READ[str(path)] = (digest, model)
        while len(_READ) > _READ_KEPT:
            _READ.popitem(last=False)


def load_or_train(path: Path, kind: type[T], what: str, train: Callable[[], T], key: str | None = None
                  ) -> tuple[T, bool]:
    """(the model in `path`, or `train()`'s, saved there; whether it came from the cache). `what` names the model
    in the quarantine message ("relation model"); `key`: what the model must have been trained under (set on the
    trained model as `cache_key`, checked on the cached one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            try:
                fitted, digest = _read(path)
                if not isinstance(fitted, kind):
                    raise TypeError(f"holds a {type(fitted).__name__}, not a {what}")
                if key is not None and getattr(fitted, "cache_key", None) != key:
                    raise ValueError(f"trained under key {getattr(fitted, 'cache_key', None)!r}, not {key!r}")
                _remember(path, digest, fitted)
                return fitted, True
            except Exception as exc:  # noqa: BLE001 - a truncated or foreign cache file: kept aside, retrained
                quarantine(path, f"{what} cache", f"{type(exc).__name__}: {exc}")
        fitted = train()
        if key is not None:
            fitted.cache_key = key  # type: ignore[attr-defined]
        tmp = path.with_suffix(".tmp")
        joblib.dump(fitted, tmp, compress=3)
        tmp.replace(path)
        _remember(path, _digest(path.read_bytes()), fitted)
        return fitted, False
