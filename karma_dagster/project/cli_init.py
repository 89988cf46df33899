"""`karma init DIR`: write a starter project folder (starter.py) and say what was written and what to run next."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path


def cmd_init(args: argparse.Namespace) -> int:
    from karma_dagster.project.starter import init_project

    folder = Path(args.folder)
    done = init_project(folder, keep_existing=args.keep_existing, prompts=args.prompts)
    shown = shlex.quote(args.folder)
    print(f"karma init: wrote {len(done.written)} file(s) in {args.folder}:")
    for rel in done.written:
        print(f"  {rel}")
    if done.kept:
        print(f"kept as they were ({len(done.kept)}): {', '.join(done.kept)}")
    print("\nnext:\n"
          f"  cd {shown}\n"
          "  # edit backbones.yaml (which backbones run) and put papers in inbox/\n"
          "  karma run                                      # the main job over inbox/, data in dagster_home/karma/\n"
          "  karma status                                   # what is registered, merged, failed\n"
          '  DAGSTER_HOME="$PWD/dagster_home" dagster dev   # the UI over the same project and instance')
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="write a starter project folder: backbones.yaml, inbox/, dagster_home/, "
                                    "workspace.yaml (karma and dagster dev then use it from there)")
    p.add_argument("folder", help="the project folder (created when missing; existing files are never overwritten)")
    p.add_argument("--keep-existing", action="store_true",
                   help="write only the missing starter files and keep the existing ones as they are")
    p.add_argument("--prompts", action="store_true",
                   help="also copy the package's prompts into prompts/ to edit them (used whole, in place of "
                        "the package's)")
    p.set_defaults(func=cmd_init)
