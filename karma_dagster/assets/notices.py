"""Warnings said once, then kept as metadata: a fact that holds run after run is no news on every run.

"The judge is not independent of this chain" is true of every `kg_metrics`, `karma_report` and
`backbone_comparison` materialization as long as backbones.yaml stays as it is: a day's inbox refreshes them
after each KG increment, and a warning on each would bury the warnings that are news. So each of these assets
keeps the reasons in its metadata (`judge_not_independent`: backbone -> why, {} when the judge is independent),
and its log warns about a backbone only when
- this process has not warned about that backbone for that reason yet (`karma run` materializes all of them in
  one process: one warning per backbone, not one per asset), and
- the asset's previous materialization did not carry that reason (every run the daemon launches is its own
  process: the process's memory alone would warn on every run; a new or changed reason warns again).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import dagster as dg

JUDGE_KEY = "judge_not_independent"

_lock = threading.Lock()
_said: set[tuple[str, str]] = set()  # (backbone, why) this process warned about


def _recorded_by(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, str]:
    """The reasons the asset's latest materialization carried ({} when none, or when it predates the key)."""
    event = instance.get_latest_materialization_event(key)
    materialization = event.asset_materialization if event is not None else None
    value = materialization.metadata.get(JUDGE_KEY) if materialization is not None else None
    data = getattr(value, "value", None)
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _recorded(instance: dg.DagsterInstance, key: dg.AssetKey, backbones: list[str]) -> dict[str, str]:
    """The reasons already kept by this asset or by any other asset that says them (each backbone's kg_metrics,
    the report, the comparison): a day's inbox refreshes all of them, and each would otherwise say it once."""
    keys = [key, dg.AssetKey("karma_report"), dg.AssetKey("backbone_comparison"),
            *[dg.AssetKey([ns, "kg_metrics"]) for ns in backbones]]
    recorded: dict[str, str] = {}
    for k in dict.fromkeys(keys):
        for ns, why in _recorded_by(instance, k).items():
            recorded.setdefault(ns, why)
    return recorded


def news(reasons: Mapping[str, str], recorded: Mapping[str, str]) -> dict[str, str]:
    """The (backbone, why) of `reasons` not warned about in this process nor in `recorded`; remembered as said."""
    with _lock:
        fresh = {ns: why for ns, why in reasons.items() if (ns, why) not in _said and recorded.get(ns) != why}
        _said.update(reasons.items())
    return fresh


def judge_notice(context: dg.AssetExecutionContext, key: dg.AssetKey, reasons: Mapping[str, str],
                 headline: str) -> dict[str, dg.MetadataValue]:
    """Warn (one line per backbone, after `headline`) about the reasons that are news; the metadata to keep."""
    for ns, why in sorted(news(reasons, _recorded(context.instance, key, sorted(reasons)) if reasons else {}).items()):
        context.log.warning(f"{headline} {ns}: {why}. Name another model as `judge:` in backbones.yaml (said once; "
                            f"the `{JUDGE_KEY}` metadata keeps it)")
    return {JUDGE_KEY: dg.MetadataValue.json(dict(sorted(reasons.items())))}
