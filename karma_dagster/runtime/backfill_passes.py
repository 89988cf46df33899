"""How often Dagster's backfill daemon looks at the backfills: a `backfills:` setting of dagster.yaml.

The backfill daemon creates a backfill's runs, and marks a backfill done, in passes 30 s apart. That pause is a
constant of Dagster's (`dagster._daemon.controller.DEFAULT_DAEMON_INTERVAL_SECONDS`), which neither dagster.yaml
nor the CLI sets. A UI backfill of a day of papers therefore waits up to 30 s before its first run exists and up
to 30 s after its last run before the UI shows it done: on 200 abstracts that made a backfill 0.41-0.62 as fast as
`karma run` on the same papers (docs/benchmarks.md).

`KarmaInstance` reads `backfills: pass_interval_seconds` and sets that constant in its process. The backfill loop
reads it when it starts, after the daemon process has made its instance, so `dagster-daemon run` and `dagster dev`
pass at the configured interval. A pass that takes longer than the interval is followed by the next at once, as
in Dagster. Dagster's other use of the constant (the asset daemon's interval outside sensors) keeps its 30 s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import dagster._daemon.controller as daemon_controller
from dagster import Field
from dagster._core.instance.config import backfills_daemon_config

SETTING: Final = "pass_interval_seconds"
DAGSTER_PASS_SECONDS: Final[int] = daemon_controller.DEFAULT_DAEMON_INTERVAL_SECONDS  # 30, read before any change


def backfills_config_field() -> Field:
    """Dagster's `backfills:` section with the pass interval added (the rest validated as Dagster does)."""
    fields = dict(backfills_daemon_config().config_type.fields)  # type: ignore[attr-defined]
    fields[SETTING] = Field(
        int, is_required=False,
        description=("Seconds between the backfill daemon's passes: how long a launched backfill may wait for its "
                     f"first run, and a finished one to be marked done. Dagster's is {DAGSTER_PASS_SECONDS}."))
    return Field(fields, is_required=False)


def apply_pass_interval(backfill_settings: Mapping[str, Any]) -> None:
    """Set this process's backfill pass interval from the instance's `backfills:` settings (unset: Dagster's)."""
    seconds = backfill_settings.get(SETTING)
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= 3600:
        raise ValueError(f"dagster.yaml: backfills.{SETTING} is {seconds!r}; give whole seconds from 1 to 3600 "
                         f"(Dagster's own is {DAGSTER_PASS_SECONDS})")
    daemon_controller.DEFAULT_DAEMON_INTERVAL_SECONDS = seconds
