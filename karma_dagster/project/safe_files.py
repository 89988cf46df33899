"""Creating files without following a link someone else planted.

A folder the product writes into (a project folder, the inbox, the data dir) may be shared, or hold what another
program left there. A symbolic link standing at the name of a file about to be written would make an ordinary
`open(path, "w")` write wherever the link points (another user's file, a system file, the KG), and a predictable
temporary name is a place to plant one. So every file the product creates goes through here:

- a new file is opened with O_CREAT | O_EXCL | O_NOFOLLOW: anything at its name, a link to nowhere included,
  makes the creation fail (`create_new`, `open_new`);
- a file rewritten whole is written to a fresh temporary file beside it (`tempfile.mkstemp`: a random name, O_EXCL)
  and renamed over its name: a rename replaces a link standing there, it never writes through it (`replace_file`);
- a folder made inside one of the product's own folders is refused when a link stands in its place or in the
  place of any folder between them (`make_dirs`), so nothing is written through a planted folder link either.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class PlantedLink(FileExistsError):
    """A symbolic link stands where the product was about to create a file or a folder."""

    def __init__(self, path: Path, what: str = "file") -> None:
        super().__init__(f"{path}: a symbolic link stands where a {what} was to be created; nothing was written "
                         "through it (remove the link if it is yours)")
        self.path = path


def make_dirs(path: Path, root: Path | None = None) -> Path:
    """`path` and its missing parents as folders; with `root`, every folder from below `root` down to `path` must be
    a real folder, not a link (PlantedLink otherwise, before anything is made through it). `root` itself is the
    user's choice and may be a link."""
    path = Path(path)
    if root is None:
        path.mkdir(parents=True, exist_ok=True)
        return path
    root = Path(root)
    if not path.is_relative_to(root):
        raise ValueError(f"{path} is not inside {root}")
    root.mkdir(parents=True, exist_ok=True)
    here = root
    for part in path.relative_to(root).parts:
        here = here / part
        if here.is_symlink():
            raise PlantedLink(here, "folder")
        try:
            here.mkdir()
        except FileExistsError:
            if here.is_symlink():  # planted between the check and the mkdir
                raise PlantedLink(here, "folder") from None
    return path


def create_new(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Create `path` holding `data`; FileExistsError when anything (a file, a folder, a link) is at its name."""
    with open_new(path, "wb", mode) as fh:
        fh.write(data)


def open_new(path: Path, how: str = "wb", mode: int = 0o644, encoding: str | None = None) -> IO:
    """A new file opened for writing (`how`: "wb" or "w"), never through a link: FileExistsError when anything is
    at its name, PlantedLink when that is a link."""
    try:
        fd = os.open(path, _NEW, mode)
    except FileExistsError:
        if os.path.islink(path):
            raise PlantedLink(Path(path)) from None
        raise
    return os.fdopen(fd, how, encoding=encoding if "b" not in how else None)


def open_fresh(path: Path, how: str = "wb", mode: int = 0o644, encoding: str | None = None) -> IO:
    """A file the product owns and starts afresh (a log): whatever is at its name (a link included: the link is
    removed, never followed) is replaced by a new file opened with O_EXCL | O_NOFOLLOW."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return open_new(path, how, mode, encoding)


def replace_file(path: Path, data: bytes | str, encoding: str = "utf-8") -> Path:
    """Write `data` to `path` whole: a fresh temporary file in its folder, flushed to disk, renamed over `path`
    (a link at `path` is replaced, never written through; a reader sees the old file or the new one)."""
    payload = data.encode(encoding) if isinstance(data, str) else data
    return replace_with(path, lambda fh: fh.write(payload))


def replace_with(path: Path, write: Callable[[IO[bytes]], object]) -> Path:
    """`replace_file` for a writer that takes an open binary file (a DataFrame's `to_csv`, a figure's `savefig`)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the file from the other users of a shared folder
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
