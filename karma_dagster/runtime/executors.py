"""Which executor runs a job's steps: the run's own process (default) or Celery workers on any machine.

`KARMA_EXECUTOR` (read when the code location loads; set it alike on the webserver, daemon and workers):
- `in_process` (default, or unset): every step in the run's one process; the models load once per run.
- `celery`: each step is a Celery task (dagster-celery) sent through the broker `KARMA_CELERY_BROKER`
  (e.g. redis://host:6379/0; results in `KARMA_CELERY_BACKEND`, default the broker) to workers started with
  `dagster-celery worker start -A dagster_celery.app -y deploy/celery.yaml`. Steps still claim their concurrency
  pool from the instance before they are sent (dagster-celery's loop uses the instance's concurrency context), so
  `llm_<backbone>` and `kg_writer` hold across all workers when they share the instance storage (Postgres).
  Stage tables and the entity index must then be storage every worker reaches (KARMA_STORAGE_URL).
"""

import os

import dagster as dg

EXECUTOR_ENV = "KARMA_EXECUTOR"
BROKER_ENV = "KARMA_CELERY_BROKER"
BACKEND_ENV = "KARMA_CELERY_BACKEND"
CHOICES = ("in_process", "celery")
# A step runs minutes over a batch of documents: a worker takes one task at a time, acknowledged when done
# (a worker killed mid-step leaves its task to another worker), so a long step never holds a second one back.
CELERY_SETTINGS = {"worker_prefetch_multiplier": 1, "task_acks_late": True, "broker_connection_retry_on_startup": True}


def executor_choice() -> str:
    choice = os.environ.get(EXECUTOR_ENV, "").strip() or "in_process"
    if choice not in CHOICES:
        raise ValueError(f"{EXECUTOR_ENV}={choice!r}: expected one of {', '.join(CHOICES)}")
    return choice


def celery_config() -> dict:
    """The executor's config, the same block deploy/celery.yaml gives the workers (broker and backend from env)."""
    broker = os.environ.get(BROKER_ENV, "").strip()
    if not broker:
        raise ValueError(f"{EXECUTOR_ENV}=celery needs {BROKER_ENV} (the Celery broker URL, e.g. redis://host:6379/0)")
    backend = BACKEND_ENV if os.environ.get(BACKEND_ENV, "").strip() else BROKER_ENV
    return {"broker": {"env": BROKER_ENV}, "backend": {"env": backend}, "config_source": dict(CELERY_SETTINGS)}


def selected_executor() -> dg.ExecutorDefinition:
    if executor_choice() == "in_process":
        return dg.in_process_executor
    from dagster_celery import celery_executor

    return celery_executor.configured(celery_config(), name="celery")
