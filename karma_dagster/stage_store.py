"""Per-partition stage tables as parquet files: one file per (namespace, stage, document).

Files, not the DuckDB KG file, hold the intermediate stages so that any number of partitions can be
materialized in parallel (DuckDB allows one writing process); the single-writer KG store is touched only
by the date-partitioned increment. Writes are atomic (temp file + rename): a crash never leaves half a table.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pandas as pd

_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


class StageStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, namespace: str, stage: str, partition: str) -> Path:
        for label, part in (("namespace", namespace), ("stage", stage), ("partition", partition)):
            if not _SAFE.match(part):
                raise ValueError(f"unsafe {label} for a stage file name: {part!r}")
        return self.root / namespace / stage / f"{partition}.parquet"

    def write(self, namespace: str, stage: str, partition: str, frame: pd.DataFrame) -> Path:
        target = self.path(namespace, stage, partition)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{partition}.", suffix=".tmp")
        os.close(fd)
        try:
            frame.to_parquet(tmp, index=False)
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
        return pd.read_parquet(path)

    def exists(self, namespace: str, stage: str, partition: str) -> bool:
        return self.path(namespace, stage, partition).exists()

    def partitions(self, namespace: str, stage: str) -> list[str]:
        folder = self.root / namespace / stage
        return sorted(p.stem for p in folder.glob("*.parquet")) if folder.exists() else []
