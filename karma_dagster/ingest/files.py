"""File names as the catalog stores them and the errors report them."""

from __future__ import annotations

from pathlib import Path


def relative_name(path: Path, inbox: Path | None) -> str:
    """The path as stored and reported: relative to the inbox (never an absolute machine path)."""
    if inbox is not None:
        try:
            return path.resolve().relative_to(inbox.resolve()).as_posix()
        except ValueError:
            pass
    return path.name
