"""Per-partition stage tables as parquet files: one file per (namespace, stage, document).

Files, not the DuckDB KG file, hold the intermediate stages so that any number of partitions can be
materialized in parallel (DuckDB allows one writing process); the single-writer KG store is touched only
by the date-partitioned increment. Writes are atomic (temp file + rename; on S3 one whole-object upload, which
S3 shows only when complete): a crash never leaves half a table; a file damaged later fails its read with
StoreCorrupt naming it (footer, and page checksums since they are written). The root is a local folder or an
fsspec URL (`s3://bucket/prefix/stages`, shared_storage.py) that workers on other machines reach too.
"""

from __future__ import annotations

import io
import json
import os
import re
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from karma_dagster.runtime.integrity import PARQUET_READ, PARQUET_WRITE, StoreCorrupt, read_parquet_checked
from karma_dagster.runtime.shared_storage import is_url, put_whole, storage_root

STAGE_REMEDY = "the table is derived from the paper: move it away and materialize this document's stages again"
RECORDED_KEY = b"karma.recorded"  # footer key of what the stage reported for the document (StageStore.recorded)
_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


class StageStore:
    def __init__(self, root: Any) -> None:
        """`root`: a folder, or a URL / UPath (remote: every path this store hands out is then a UPath)."""
        self.remote = is_url(root)
        self.root = storage_root(root) if isinstance(root, (str, os.PathLike)) and not hasattr(root, "fs") else root

    def path(self, namespace: str, stage: str, partition: str) -> Path:
        for label, part in (("namespace", namespace), ("stage", stage), ("partition", partition)):
            if not _SAFE.match(part):
                raise ValueError(f"unsafe {label} for a stage file name: {part!r}")
        return self.root / namespace / stage / f"{partition}.parquet"

    def write(self, namespace: str, stage: str, partition: str, frame: pd.DataFrame,
              recorded: dict[str, Any] | None = None) -> Path:
        """`recorded`: what the stage reported for this document (rows, seconds, tokens, cost, figures), kept in
        the file's footer with the table it describes (recorded()): with date partitions a day's materialization
        sums thousands of documents, and each document's own figures must still be there to read."""
        target = self.path(namespace, stage, partition)
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if recorded is not None:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                   RECORDED_KEY: json.dumps(recorded, default=str).encode()})
        if self.remote:
            buffer = io.BytesIO()
            pq.write_table(table, buffer, **PARQUET_WRITE)
            put_whole(target, buffer.getvalue())
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{partition}.", suffix=".tmp")
        os.close(fd)
        try:
            pq.write_table(table, tmp, **PARQUET_WRITE)  # page checksums: a damaged page fails its read
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target

    def read(self, namespace: str, stage: str, partition: str) -> pd.DataFrame:
        path = self.path(namespace, stage, partition)
        if not path.exists():
            raise FileNotFoundError(
                f"stage {namespace}/{stage} has no table for document {partition}: materialize it first"
            )
        if self.remote:
            return _read_object(path)
        return _read_local(path, self.root.parent)

    def recorded(self, namespace: str, stage: str, partition: str) -> dict[str, Any]:
        """What the stage reported for this document when it wrote the table ({} for a table written without),
        read from the footer alone."""
        path = self.path(namespace, stage, partition)
        if not path.exists():
            raise FileNotFoundError(f"stage {namespace}/{stage} has no table for document {partition}")
        try:
            with path.open("rb") as fh:  # a local Path or an S3 UPath alike
                meta = pq.read_metadata(fh).metadata or {}
        except (pa.ArrowException, OSError) as exc:
            raise StoreCorrupt("stage table", str(path), str(exc), STAGE_REMEDY) from exc
        return json.loads(meta[RECORDED_KEY]) if RECORDED_KEY in meta else {}

    def exists(self, namespace: str, stage: str, partition: str) -> bool:
        return self.path(namespace, stage, partition).exists()

    def partitions(self, namespace: str, stage: str) -> list[str]:
        folder = self.root / namespace / stage
        return sorted(p.stem for p in folder.glob("*.parquet")) if folder.exists() else []

    def partition_files(self, partition: str) -> list[Path]:
        """Every stage table of one document, in every namespace (enabled backbone or not)."""
        self.path("x", "x", partition)  # the same name check as every other access
        return sorted(self.root.glob(f"*/*/{partition}.parquet")) if self.root.exists() else []

    def remove_partition(self, partition: str) -> list[Path]:
        """Delete one document's stage tables in every namespace (`karma remove`); returns what was deleted.

        The `evaluated` table goes first, so a crash midway never leaves a chain that looks finished."""
        files = sorted(self.partition_files(partition), key=lambda p: (p.parent.name != "evaluated", str(p)))
        for path in files:
            path.unlink(missing_ok=True)
        return files


READ_CACHE_TABLES = 64  # a document's stage tables, read by several later stages of its chain
_READ_CACHE: OrderedDict[tuple, pd.DataFrame] = OrderedDict()
_READ_LOCK = threading.Lock()


def _read_local(path: Path, base: Path) -> pd.DataFrame:
    """A local table, read and checked once per version of its file in this process: later stages of a chain read
    the same upstream tables again (the relations, aligned and evaluated stages all read the entities). A version is
    the file's inode, size and change times: a write replaces the file (a new inode), damage changes its ctime."""
    key = _version(path)
    if key is not None:
        with _READ_LOCK:
            cached = _READ_CACHE.get(key)
            if cached is not None:
                _READ_CACHE.move_to_end(key)
        if cached is not None:
            return cached.copy()
    frame = read_parquet_checked(path, "stage table", STAGE_REMEDY, base=base)
    if key is not None and _version(path) == key:  # not replaced while it was read
        with _READ_LOCK:
            _READ_CACHE[key] = frame.copy()
            while len(_READ_CACHE) > READ_CACHE_TABLES:
                _READ_CACHE.popitem(last=False)
    return frame


def forget_reads() -> None:
    """Drop the remembered tables (services.clear: as in a fresh process)."""
    with _READ_LOCK:
        _READ_CACHE.clear()


def _version(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _read_object(path: Any) -> pd.DataFrame:
    """A remote table, fetched whole, with the same checks as a local one (footer, page checksums)."""
    import pyarrow as pa

    data = path.read_bytes()
    try:
        return pd.read_parquet(io.BytesIO(data), **PARQUET_READ)
    except (pa.ArrowException, OSError) as exc:
        raise StoreCorrupt("stage table", str(path), str(exc), STAGE_REMEDY) from exc
