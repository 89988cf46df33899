"""What keeps `karma_report` and each backbone's `kg_metrics` fresh: they refresh when a KG increment lands.

`AutomationCondition.eager()` would never fire here: the KG is partitioned by day since 1990 and most days have
no document, so "any dependency missing" is always true. This condition is eager without that clause: any KG
date materialized since the asset was last requested or materialized, no KG date in progress, the asset not
in progress. Nothing is requested before the first increment, and a refresh during a backfill of many dates
waits for its end. The `karma_freshness` sensor evaluates it; it starts RUNNING (cheap: it only reads the
event log) so the report is fresh without a click; stop it in the UI to refresh by hand. Its runs go in the
paper runs' lane of the run queue (jobs.READING_LANE), never in the place kept for the KG increments.
"""


from collections.abc import Sequence

import dagster as dg

from karma_dagster.jobs import READING_LANE

FRESHNESS_SENSOR = "karma_freshness"


def kg_grew() -> dg.AutomationCondition:
    return (
        dg.AutomationCondition.any_deps_updated().since_last_handled()
        & ~dg.AutomationCondition.any_deps_in_progress()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("refresh when a KG increment lands")


def refreshed_keys(namespaces: Sequence[str]) -> list[dg.AssetKey]:
    return [dg.AssetKey("karma_report"), *(dg.AssetKey([ns, "kg_metrics"]) for ns in namespaces)]


def freshness_sensor(namespaces: Sequence[str], interval_s: int = 30) -> dg.AutomationConditionSensorDefinition:
    return dg.AutomationConditionSensorDefinition(
        FRESHNESS_SENSOR,
        target=dg.AssetSelection.assets(*refreshed_keys(namespaces)),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=interval_s,
        run_tags=READING_LANE,  # the paper runs' lane: a refresh never takes the place kept for the KG increments
        description="Refreshes karma_report and each backbone's kg_metrics when a KG increment lands (their "
                    "automation condition). Running by default; kg_metrics asks the judge about the new triples "
                    "(an LLM judge costs tokens): stop this sensor to refresh by hand.",
    )
