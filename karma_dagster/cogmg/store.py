"""Answers and completions per backbone and question, as JSON files written atomically.

`<data_dir>/cogmg/<backbone>/answers/<question key>.json` holds an Answer, `.../completions/<key>.json` the list
of its Completions: files, like the stage tables, so question partitions materialize in parallel.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from pydantic import TypeAdapter

from karma_dagster.cogmg.models import Answer, Completion
from karma_dagster.runtime.paths import DataPaths

_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")
_COMPLETIONS = TypeAdapter(list[Completion])


class CogmgStore:
    def __init__(self, data: DataPaths) -> None:
        self.root = data.root / "cogmg"

    def _path(self, backbone: str, what: str, key: str) -> Path:
        for label, part in (("backbone", backbone), ("question key", key)):
            if not _SAFE.match(part):
                raise ValueError(f"unsafe {label} for a CogMG file name: {part!r}")
        return self.root / backbone / what / f"{key}.json"

    def _write(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def write_answer(self, key: str, answer: Answer) -> Path:
        path = self._path(answer.backbone, "answers", key)
        self._write(path, answer.model_dump_json(indent=1))
        return path

    def read_answer(self, backbone: str, key: str) -> Answer:
        path = self._path(backbone, "answers", key)
        if not path.exists():
            raise FileNotFoundError(f"no answer of {backbone} for question {key}: materialize {backbone}/answers first")
        return Answer.model_validate_json(path.read_text(encoding="utf-8"))

    def write_completions(self, backbone: str, key: str, completions: list[Completion]) -> Path:
        path = self._path(backbone, "completions", key)
        self._write(path, json.dumps([c.model_dump(mode="json") for c in completions], indent=1))
        return path

    def read_completions(self, backbone: str, key: str) -> list[Completion]:
        path = self._path(backbone, "completions", key)
        if not path.exists():
            return []
        return _COMPLETIONS.validate_json(path.read_text(encoding="utf-8"))

    def keys(self, backbone: str, what: str) -> list[str]:
        folder = self.root / backbone / what
        return sorted(p.stem for p in folder.glob("*.json")) if folder.exists() else []
