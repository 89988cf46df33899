"""`karma init DIR`: write a starter project folder (discover.py's layout) from the package's shipped files.

Never overwrites: every file is created exclusively, never through a link planted at its name or in place of
one of its folders (safe_files.py), and when any of them exists already nothing is written and the error names
each one. `keep_existing` writes only the missing ones instead (a project
whose workspace.yaml was deleted, a folder of papers becoming a project); there is no overwriting mode, so
an edited backbones.yaml or a run's data cannot be lost to `init`. Dagster-free.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel

from karma_dagster.runtime import paths
from karma_dagster.project import discover
from karma_dagster.project.safe_files import create_new, make_dirs

MARKER_TEXT = f"""\
# A karma-dagster project folder (written by `karma init`). `karma` and `dagster dev` use this folder when they
# run in it, or from anywhere with KARMA_PROJECT set to it. Its files:
#   backbones.yaml            which backbones run: edit it (every `karma` command names the backbones.yaml it read)
#   inbox/                    drop papers here (inbox/README.md says which formats)
#   dagster_home/dagster.yaml Dagster's instance config; Dagster's storage and the pipeline's data (dagster_home/
#                             karma/: KG, stage tables, caches) are written next to it (unless DAGSTER_HOME is set)
#   workspace.yaml            what `dagster dev` loads: the installed karma_dagster package's code location
#   prompts/                  optional: your own copy of all the prompts (`karma init --prompts`), used in place
#                             of the package's; without it, the package's prompts are used
#   .env.example              the environment variables a run may need (key names only)
karma_project: {discover.FORMAT}
"""

BACKBONES_HEADER = """\
# ---------------------------------------------------------------------------------------------------------------
# This project's backbones.yaml (written by `karma init` from the package's default; yours to edit).
# `karma` and `dagster dev` read it when they run in this folder or with KARMA_PROJECT set to it; every `karma`
# command prints on stderr which backbones.yaml it read, and the backbones_status asset shows it in the UI.
# - Switch a backbone on or off with `enabled: true|false` (each enabled backbone is a whole agent chain: fewer
#   is faster).
# - Add one by copying an entry under a new name (a-z, 0-9, '.', '-', '_'). An LLM is `kind: litellm` with a
#   litellm `model` string, an `api_base` for a local server, and for a hosted model `api_key_env`: the NAME of
#   the environment variable holding its key, never the key (.env.example lists them).
# - `karma status` reads it and reports a mistake by file, line and key.
# The package's own notes follow.
# ---------------------------------------------------------------------------------------------------------------
"""

WORKSPACE_TEXT = """\
# What `dagster dev` loads: the code location of the installed karma_dagster package. Run `dagster dev` in this
# folder (so it finds karma.yaml) with DAGSTER_HOME set to this folder's dagster_home (absolute), e.g.
#   DAGSTER_HOME="$PWD/dagster_home" dagster dev
# (or put DAGSTER_HOME in .env: `dagster dev` reads .env in the folder it starts in).
load_from:
  - python_module:
      module_name: karma_dagster.definitions
      location_name: karma_dagster
"""

INBOX_README = """\
# inbox

Drop papers here (subfolders too). `karma run` in the project folder, or the `new_papers` sensor under
`dagster dev`, registers what is new or changed and runs it: PDF, PMC JATS XML (.xml, .nxml), PubMed/MEDLINE
XML (.xml, .xml.gz), BioC XML and JSON, PubTator (.pubtator, .pubtator.gz) and plain text (.txt); the package's
README says what is read from each. A `<name>.json` beside a paper (a Europe PMC search record) supplies its
PMID, DOI and publication date.
A changed file is processed again; `karma remove KEY` removes a document; `karma status` counts them.
Hidden files and files no reader takes (such as this README.md) are skipped.
"""

GITIGNORE_TEXT = """\
# Written at run time: Dagster's storage and the pipeline's data (KG, stage tables, caches). dagster.yaml is config.
dagster_home/*
!dagster_home/dagster.yaml
.tmp_dagster_home_*
# Keys
.env
"""

OPTIONAL_VARIABLES = """\
#
# Only when you need them:
# DAGSTER_HOME=/absolute/path/to/this/folder/dagster_home   # `dagster dev` needs it absolute; `karma` finds it alone
# KARMA_PROJECT=/absolute/path/to/this/folder               # to use this project from another folder
# NCBI_API_KEY=                                             # the literature feed (`karma fetch`): 10 requests/s, not 3
# KARMA_STORAGE_URL=s3://bucket/prefix                      # stage tables and entity index on shared storage
# KARMA_KG_URL=postgresql://user@host/db                    # the KG in Postgres (password in ~/.pgpass or PGPASSWORD)
"""


class InitError(ValueError):
    """`karma init` cannot write its starter: which file or folder, and why."""


class Written(BaseModel):
    """What `init` did, relative to the project folder."""

    written: list[str] = []
    kept: list[str] = []  # existing files left as they are (keep_existing)


def env_example() -> str:
    """.env.example: the key variables the shipped backbones.yaml names (names only), then the optional ones."""
    shipped = yaml.safe_load(paths.shipped("backbones.yaml").read_text(encoding="utf-8"))  # the package's own
    names = sorted({str(e["api_key_env"]) for e in shipped["backbones"].values() if e.get("api_key_env")})
    lines = ["# Environment variables of this project: copy to .env and fill in what you use. `dagster dev` reads",
             "# .env in the folder it starts in; for `karma`, export them (e.g. `set -a; . ./.env; set +a`).",
             "# .env holds keys: never commit it (.gitignore leaves it out).",
             "#",
             "# Keys of the LLM backbones in backbones.yaml (their api_key_env); only the enabled ones need theirs:"]
    lines += [f"{name}=" for name in names]
    return "\n".join(lines) + "\n" + OPTIONAL_VARIABLES


def starter_files() -> dict[str, str]:
    """Relative path -> text of every starter file (the shipped backbones.yaml and dagster.yaml, as they are)."""
    backbones = paths.shipped("backbones.yaml").read_text(encoding="utf-8")
    instance = paths.shipped(discover.DAGSTER_HOME, "dagster.yaml").read_text(encoding="utf-8")
    return {
        discover.MARKER: MARKER_TEXT,
        discover.BACKBONES: BACKBONES_HEADER + backbones,
        f"{discover.DAGSTER_HOME}/dagster.yaml": instance,
        "workspace.yaml": WORKSPACE_TEXT,
        f"{discover.INBOX}/README.md": INBOX_README,
        ".env.example": env_example(),
        ".gitignore": GITIGNORE_TEXT,
    }


def _prompt_files() -> dict[str, Path]:
    root = paths.shipped("prompts")
    return {f"{discover.PROMPTS}/{p.relative_to(root).as_posix()}": p for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def init_project(folder: Path, *, keep_existing: bool = False, prompts: bool = False) -> Written:
    """Write the starter into `folder` (created when missing). Refuses, writing nothing, when any starter file
    exists already, naming them all; `keep_existing` writes the missing ones and keeps the others."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InitError(f"{folder}: a file, not a folder; give a new or existing folder")
    texts: dict[str, str | Path] = dict(starter_files())
    if prompts:
        texts.update(_prompt_files())
    linked = sorted({d.relative_to(folder).as_posix() for rel in texts for d in (folder / rel).parents
                     if d.is_relative_to(folder) and d != folder and d.is_symlink()})
    if linked:
        raise InitError(f"{folder}: {', '.join(linked)}: a symbolic link stands where `karma init` makes a folder; "
                        "nothing was written (files are never written through a link: remove it if it is yours)")
    existing = [rel for rel in texts if (folder / rel).exists() or (folder / rel).is_symlink()]
    if existing and not keep_existing:
        shown = ", ".join(existing[:8]) + (f" and {len(existing) - 8} more" if len(existing) > 8 else "")
        raise InitError(f"{folder}: {shown} exist(s) already; nothing was written. `karma init` never overwrites: "
                        "move them away, or add --keep-existing to write only the missing files")
    done = Written(kept=existing)
    for rel, content in texts.items():
        if rel in existing:
            continue
        data = content.read_bytes() if isinstance(content, Path) else content.encode("utf-8")
        if _create(folder / rel, data, folder):
            done.written.append(rel)
        else:  # appeared since the check: still never overwritten
            done.kept.append(rel)
    return done


def _create(target: Path, data: bytes, folder: Path) -> bool:
    """Create `target` holding `data` whole, or not at all: written to a new file beside it (a random name,
    created exclusively), then hard-linked into place (a link never replaces an existing file nor follows a
    symbolic link at the name). False when anything is at `target`; PlantedLink when a folder on the way inside
    `folder` is a symbolic link."""
    make_dirs(target.parent, folder)
    tmp = target.with_name(f".{target.name}.karma-init-{os.getpid()}-{os.urandom(6).hex()}")
    try:
        create_new(tmp, data)
        os.link(tmp, target, follow_symlinks=False)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True
