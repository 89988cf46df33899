"""Materialize the comparison (kg_metrics, gold_evaluation per backbone, backbone_comparison) in process and
return its markdown; what `karma run` prints after its report and `karma compare` prints alone."""

from __future__ import annotations

import dagster as dg

from karma_dagster.definitions import COMPARE_JOB

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def run_comparison(defs: dg.Definitions, inst: dg.DagsterInstance) -> tuple[bool, str]:
    """(success, the comparison table or the failure); the table also lands in <data_dir>/metrics/."""
    result = defs.resolve_job_def(COMPARE_JOB).execute_in_process(instance=inst, raise_on_error=False, run_config=QUIET)
    storage = defs.resources["storage"]  # type: ignore[index]
    path = storage.root() / "metrics" / "backbone_comparison.md"  # type: ignore[union-attr]
    if result.success and path.exists():
        return True, path.read_text()
    failures = [e.step_key for e in result.all_events if e.is_step_failure]
    return False, f"comparison FAILED at {failures} (see the {COMPARE_JOB} run in the Dagster UI)"


def enable_hint(statuses) -> str:  # noqa: ANN001 - list[BackboneStatus]
    """How to get a second backbone, said once, when fewer than two are running."""
    running = [s for s in statuses if s.runnable]
    lines = []
    for s in statuses:
        if s.enabled and not s.configured:
            lines.append(f"- {s.name}: NOT CONFIGURED: set {s.key_env} (export {s.key_env}=...) to run it")
    if len(running) < 2:
        lines.append("- only one backbone runs: enable `local-single` (the single-agent baseline, no key) or an LLM "
                     "backbone in backbones.yaml (`enabled: true` and its key variable) to compare two")
    return "\n".join(lines)
