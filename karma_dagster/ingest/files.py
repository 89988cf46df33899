"""File names as the catalog stores them and the errors report them, and where a symbolic link may lead.

A link inside the inbox is followed and the file is known by its real name (the name it can be read back
by); a link that leads out of the inbox is refused, so dropping a link into the inbox never sends a file
from elsewhere on the machine into the KG or to an LLM provider.
"""

from __future__ import annotations

import os
from pathlib import Path

from karma_dagster.ingest.errors import IngestError


def relative_name(path: Path, inbox: Path | None) -> str:
    """The path as stored and reported: relative to the inbox (never an absolute machine path)."""
    if inbox is not None:
        try:
            return path.resolve().relative_to(inbox.resolve()).as_posix()
        except ValueError:
            pass
    return path.name


def given_name(path: Path, inbox: Path) -> str:
    """The path as the user placed it (links not followed), relative to the inbox: how a refusal names it."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(inbox)).as_posix()
    except ValueError:
        return path.name


def _link_text(path: Path, inbox: Path) -> str:
    """Where the first link on the way to `path` points, as written in the link (for the refusal message)."""
    current = Path(os.path.abspath(inbox))
    for part in Path(os.path.abspath(path)).relative_to(current).parts:
        current = current / part
        if current.is_symlink():
            return os.readlink(current)
    return str(path)


def real_path_in_inbox(path: Path, inbox: Path) -> Path:
    """`path` with its links resolved; an IngestError naming it when a link is broken or leads out of the inbox.

    A path that does not lie under the inbox to begin with is returned resolved, unchecked: callers that parse
    a file outside any inbox (tests, tools) are not concerned with links.
    """
    root = inbox.resolve()
    name = given_name(path, inbox)
    lexically_inside = Path(os.path.abspath(path)).is_relative_to(os.path.abspath(inbox))
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise IngestError(name, "broken symbolic link (its target does not exist)") from None
        raise IngestError(name, "no such file") from None
    except (OSError, RuntimeError) as exc:
        raise IngestError(name, f"cannot follow symbolic link ({getattr(exc, 'strerror', None) or exc})") from exc
    if lexically_inside and not real.is_relative_to(root):
        raise IngestError(name, f"symbolic link to {_link_text(path, inbox)!r}, which lies outside the inbox: "
                                "refused, not read (copy or move the file into the inbox instead)")
    return real
