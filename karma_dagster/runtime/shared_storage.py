"""Storage every worker can reach: the stage tables and the entity index under an fsspec URL.

Empty `KARMA_STORAGE_URL` (the default) keeps them on the local disk under the data dir. `s3://bucket/prefix`
puts them in an S3 bucket (any S3-compatible store: MinIO, moto) so workers on other machines share them;
credentials, region and endpoint come from the standard AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION / AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL), read by s3fs and passed to LanceDB.

Writes stay atomic: S3 makes an object visible only once its PUT (or multipart upload) completes, so a whole
table is sent in one upload and a crash leaves either the old object or the new one, never half of one.
Processes that change the index one after another take `shared_lock`: a file lock on one machine, a Redis
lock (`KARMA_LOCK_URL=redis://...`) across machines.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

STORAGE_URL_ENV = "KARMA_STORAGE_URL"
LOCK_URL_ENV = "KARMA_LOCK_URL"
SUPPORTED = ("s3", "file", "memory")  # memory: fsspec's in-process store, for tests of one process


class StorageURLError(ValueError):
    """KARMA_STORAGE_URL is not a URL this project can store in (the CLI: one line, exit 2)."""


class S3Settings(BaseModel):
    """What the S3 clients need beyond the URL, from the standard AWS variables (never written anywhere)."""

    endpoint_url: str | None = None
    region: str | None = None

    @classmethod
    def from_env(cls) -> "S3Settings":
        env = os.environ
        return cls(endpoint_url=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
                   region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None)


def storage_url(explicit: str = "") -> str:
    """The configured shared-storage URL ('' = local disk), checked: a typo fails here, naming the variable.

    Credentials never belong in it (s3fs reads them from the AWS variables and would take `key:secret@` for part
    of the bucket name), nor a query or fragment: such a URL is refused, and the message shows only its scheme,
    since whatever else it holds may be a secret. A URL without any of them is echoed as it is."""
    url = (explicit or os.environ.get(STORAGE_URL_ENV, "")).strip().rstrip("/")
    if not url:
        return ""
    scheme, sep, rest = url.partition("://")
    if any(c in rest for c in "@?#") or ":" in rest.split("/")[0]:
        shown = f"{STORAGE_URL_ENV} (a {scheme.lower()}:// URL, the rest not shown)" if sep else STORAGE_URL_ENV
        raise StorageURLError(f"{shown}: holds a user name, password, query or fragment; give credentials in "
                              f"the AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), never in the URL")
    if not sep:  # not a URL at all (a pasted key?): not echoed
        raise StorageURLError(f"{STORAGE_URL_ENV} (value not shown) is no URL: expected s3://bucket[/prefix] "
                              f"(or a local path: leave it empty and set the data dir)")
    if scheme.lower() not in SUPPORTED or (scheme.lower() == "s3" and not rest.split("/")[0]):
        raise StorageURLError(f"{STORAGE_URL_ENV}={url!r}: expected s3://bucket[/prefix] (or a local path: leave "
                              f"it empty and set the data dir)")
    return url


def is_url(location: str | os.PathLike) -> bool:
    return "://" in str(location)


def storage_root(location: str | os.PathLike) -> Any:
    """A pathlib-like handle: `Path` for a local folder, a `UPath` (universal_pathlib over fsspec) for a URL."""
    if not is_url(location):
        return Path(location)
    from upath import UPath

    url = str(location)
    if urlsplit(url).scheme == "s3":
        s3 = S3Settings.from_env()
        client_kwargs = {k: v for k, v in (("endpoint_url", s3.endpoint_url), ("region_name", s3.region)) if v}
        return UPath(url, client_kwargs=client_kwargs)
    return UPath(url)


def put_whole(target: Any, data: bytes) -> None:
    """Write one object in a single upload: S3 shows it only when complete (atomic replace, no temp key)."""
    target.fs.pipe_file(target.path, data)


def lance_storage_options(uri: str) -> dict[str, str] | None:
    """LanceDB's object-store options for an s3:// URI (endpoint, region, plain HTTP for a local store)."""
    if urlsplit(str(uri)).scheme != "s3":
        return None
    s3 = S3Settings.from_env()
    options: dict[str, str] = {}
    if s3.endpoint_url:
        options["aws_endpoint"] = s3.endpoint_url
        if s3.endpoint_url.startswith("http://"):
            options["allow_http"] = "true"
    if s3.region:
        options["aws_region"] = s3.region
    for var, key in (("AWS_ACCESS_KEY_ID", "aws_access_key_id"), ("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"),
                     ("AWS_SESSION_TOKEN", "aws_session_token")):
        if os.environ.get(var):
            options[key] = os.environ[var]
    return options


def shared_lock(name: str, timeout_s: float = 600.0) -> AbstractContextManager:
    """A lock held by one process at a time among all that share `name` (a path or URL of what it guards).

    A local path: a file lock beside it (as before). A URL: a Redis lock when KARMA_LOCK_URL names a Redis
    server (every machine), else a file lock in the temp dir, which serialises the processes of one machine only."""
    import filelock

    if not is_url(name):
        return filelock.FileLock(name)
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    lock_url = os.environ.get(LOCK_URL_ENV, "").strip()
    if lock_url:
        import redis

        return redis.Redis.from_url(lock_url).lock(f"karma:lock:{digest}", timeout=timeout_s, blocking=True)
    return filelock.FileLock(os.path.join(tempfile.gettempdir(), f"karma-{digest}.lock"))
