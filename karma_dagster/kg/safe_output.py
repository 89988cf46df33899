"""Where a command may write KG files (an export, a seed subset) into a folder the user named: never over something
it did not write.

A target is valid when it is a new folder, an empty one, or one that holds only an earlier output of the same
kind (an export: its report file with the same format, listing every entry of the folder; another writer: only
the file names it writes). Never valid, whatever it holds: the data dir, $DAGSTER_HOME, the inbox, the project
checkout, the home folder, / and every folder that contains one of them; nor a folder inside a store (stage
tables, entity index, LLM cache, caches) or inside $DAGSTER_HOME outside the data dir. Paths are compared resolved,
so a symlink (or `..`) to any of them is refused the same. The check runs before anything is written, and the
export re-runs it right before it swaps its folder in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterable
from pathlib import Path


class TargetRefused(ValueError):
    """The output folder is not one this command may write into; the message names the folder and why."""


def _resolved(path: Path | str) -> Path:
    return Path(os.path.expanduser(str(path))).resolve(strict=False)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def protected_folders(data=None, extra: Iterable[Path | str] = ()) -> tuple[list[tuple[str, Path]], list[Path]]:  # noqa: ANN001
    """([(what, folder)] never written and never inside the target, [folders the target must not be inside]).
    `data`: the command's DataPaths, if it has one."""
    from karma_dagster.runtime.paths import _checkout_root, dagster_home

    never: list[tuple[str, Path | str]] = []
    stores: list[Path] = []
    if data is not None:
        never += [("the data dir", data.root), ("the inbox", data.inbox)]
        stores += [data.llm_cache, data._cache]
        if not data.shared_url:
            stores += [data.stages_dir, data.index]
    never += [("$DAGSTER_HOME", dagster_home())]
    checkout = _checkout_root()
    if checkout is not None:
        never.append(("the project checkout", checkout))
    never += [("the home folder", Path.home()), ("/", Path("/")), *((str(p), p) for p in extra)]
    return [(what, _resolved(p)) for what, p in never], [_resolved(p) for p in stores]


def check_output_folder(out: Path | str, *, kind: str, data=None, report: str | None = None,  # noqa: ANN001
                        own_files: Collection[str] = (), others_stay: bool = False,
                        extra_protected: Iterable[Path | str] = ()) -> Path:
    """The resolved folder `out` if this command may write its `kind` output there, else TargetRefused.

    report: the file an earlier output of this kind left (JSON with "format" == kind and "files" listing what it
    wrote): a folder with it may be replaced if it holds nothing else. own_files: the names this writer writes
    (for writers with no report): a folder holding nothing else may be written into, or, with others_stay (a
    writer that overwrites its own names and deletes nothing), a folder where each of those names is a file."""
    shown = str(out)
    path = _resolved(out)
    never, stores = protected_folders(data, extra_protected)
    data_root = _resolved(data.root) if data is not None else None
    for what, p in never:
        if _inside(p, path):  # the target is that folder or contains it
            raise TargetRefused(f"{shown}: is or contains {what}, which this command never writes into; "
                                f"give a new folder")
    for p in stores:
        if _inside(path, p):
            raise TargetRefused(f"{shown}: inside a store of the data dir ({p.name}); give a new folder elsewhere")
    from karma_dagster.runtime.paths import dagster_home

    home = _resolved(dagster_home())
    if _inside(path, home) and not (data_root is not None and _inside(path, data_root)):
        raise TargetRefused(f"{shown}: inside $DAGSTER_HOME (Dagster's own files); give a new folder elsewhere")
    if path.is_symlink() or not path.exists():
        if path.is_symlink():  # a dangling link: resolve(strict=False) left it; writing would follow it
            raise TargetRefused(f"{shown}: a symlink to nothing; give a new folder")
        return path
    if not path.is_dir():
        raise TargetRefused(f"{shown}: exists and is not a folder")
    entries = sorted(os.listdir(path))
    if not entries:
        return path
    if report is not None:
        problem = _not_a_previous_output(path, entries, kind, report)
    else:
        others = [e for e in entries if (e in own_files or not others_stay) and not (e in own_files
                                                                                  and _plain_file(path / e))]
        problem = f"holds {_names(others)}, which no {kind} output wrote" if others else None
    if problem:
        raise TargetRefused(f"{shown}: {problem}; nothing was changed. Give a new folder, or one an earlier "
                            f"{kind} output wrote")
    return path


def _plain_file(path: Path) -> bool:
    return path.is_symlink() or path.is_file()  # a link is removed, never followed; a folder would be emptied


def _names(entries: list[str]) -> str:
    return ", ".join(repr(e) for e in entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")


def _not_a_previous_output(path: Path, entries: list[str], kind: str, report: str) -> str | None:
    """None when `path` holds only what an earlier `kind` output listed in its report; else why not."""
    if report not in entries:
        return f"not empty ({_names(entries)}) and no earlier export ({report} missing)"
    try:
        meta = json.loads((path / report).read_text(encoding="utf-8"))
        fmt, files = meta.get("format"), meta.get("files")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return f"its {report} is unreadable, so it is no export this command can tell it wrote"
    if fmt != kind:
        return f"holds a {fmt!r} export, not a {kind} one"
    if not isinstance(files, list):
        return f"its {report} lists no files"
    others = [e for e in entries if e not in files or not _plain_file(path / e)]
    if others:
        return f"holds {_names(others)} beside the earlier {kind} export (not written by it)"
    return None
