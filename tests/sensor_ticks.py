"""One sensor tick evaluated the way the daemon does it (an instance_ref context: STACK.md), for tests."""

from __future__ import annotations

from typing import Any

import dagster as dg


def tick(p: Any, name: str, cursor: str | None = None) -> dg.SensorExecutionData:
    """`p` is a test pipeline (tests/conftest.py make_pipeline): its definitions, instance and resources."""
    sensor = p.defs.resolve_sensor_def(name)
    context = dg.SensorEvaluationContext(instance_ref=p.instance.get_ref(), cursor=cursor,
                                         repository_def=p.defs.get_repository_def(), resources=p.defs.resources,
                                         sensor_name=name)
    with context:
        return sensor.evaluate_tick(context)
