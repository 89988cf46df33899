"""Which backbones need llama.cpp (the `[llm]` extra) here: scripts/bootstrap.sh asks before it installs.

Why: the `[llm]` extra compiles llama.cpp from source (tens of minutes on two cores) and only backbones served by
`karma llm-serve` use it; the default backbones.yaml enables none, so a first `scripts/main.sh` should not build it.
A backbone needs it when its `api_base` is the local server's address (127.0.0.1 or localhost, port 8088): enabled,
named with `--backbone` on the command line, or named as `judge:` / `controller:` (those run though disabled).
Run as `python -m karma_dagster.backbones.llm.runtime_needed [karma run's arguments]`: prints one line per such
backbone and exits 0 when any needs it, 1 when none does, 2 when backbones.yaml cannot be read (said on stderr).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from urllib.parse import urlsplit

from karma_dagster.backbones.llm.local_server import DEFAULT_PORT  # importing it loads no llama.cpp
from karma_dagster.runtime.config import BackboneEntry, BackbonesFile, ConfigError, read_backbones

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def served_locally(entry: BackboneEntry) -> bool:
    """The entry's model is answered by `karma llm-serve` (llama.cpp on this machine, its default port)."""
    if entry.kind != "litellm" or not entry.api_base:
        return False
    url = urlsplit(entry.api_base if "://" in entry.api_base else f"http://{entry.api_base}")
    try:
        port = url.port
    except ValueError:
        return False
    return (url.hostname or "") in _LOCAL_HOSTS and port == DEFAULT_PORT


def named_backbones(argv: Sequence[str]) -> list[str]:
    """The `--backbone NAME` / `--backbone=NAME` values of a `karma run` command line."""
    names, args = [], list(argv)
    for i, arg in enumerate(args):
        if arg == "--backbone" and i + 1 < len(args):
            names.append(args[i + 1])
        elif arg.startswith("--backbone="):
            names.append(arg.split("=", 1)[1])
    return names


def needing_llama_cpp(file: BackbonesFile, argv: Sequence[str] = ()) -> list[str]:
    """Names of the backbones that will run and need the local llama.cpp server, each with why it runs."""
    chosen = named_backbones(argv)
    runs = {n: "named with --backbone" for n in chosen} if chosen else {n: "enabled" for n in file.enabled()}
    for role, name in (("judge", file.judge), ("controller", file.controller)):
        if name and name in file.backbones:
            runs.setdefault(name, f"the {role}")
    return [f"{name} ({why})" for name, why in runs.items()
            if name in file.backbones and served_locally(file.backbones[name])]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        needing = needing_llama_cpp(read_backbones(), sys.argv[1:] if argv is None else argv)
    except (ConfigError, ValueError) as exc:  # a broken file (or $KARMA_PROJECT): `karma run` will say it too
        print(f"backbones.yaml: {exc}", file=sys.stderr)
        return 2
    for line in needing:
        print(line)
    return 0 if needing else 1


if __name__ == "__main__":
    sys.exit(main())
