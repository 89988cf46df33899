"""The one exception every ingest step raises, so the sensor can report a bad file and go on with the others."""

from __future__ import annotations

from pathlib import Path


class IngestError(ValueError):
    """A source file that cannot be read; the message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
