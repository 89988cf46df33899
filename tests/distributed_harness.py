"""The distributed stack on 127.0.0.1, for tests/test_distributed.py and bench/distributed.py.

Real servers, each a child process of the caller, on free loopback ports: Redis (Debian's redis-server: the
Celery broker and the cross-machine lock), an S3 server (moto's server mode: the shared stage tables and entity
index), PostgreSQL (tests/pg_server.py: Dagster's instance storage), Celery workers (`dagster-celery worker
start`, each its own process) and a real `dagster-daemon` over a generated code location. Every process gets its
settings from the environment only, as on separate machines (deploy/README.md); here they share the disk for
the catalog, the KG file and the caches, which in a deployment sit on a shared volume.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BUCKET = "karma-shared"
S3_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

sys.path.insert(0, str(REPO / "tests"))
import daemon_harness  # noqa: E402
from pg_server import PostgresServer, start_postgres  # noqa: E402,F401 - re-exported


class Unavailable(RuntimeError):
    """A server binary this stack needs is not installed (the message says which and how to install it)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


@dataclass
class Child:
    """A child process in its own session (so its own children, e.g. the celery pool, stop with it)."""

    name: str
    proc: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # the group this helper created for it, nothing else
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=timeout)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def spawn(name: str, argv: list[str], env: dict[str, str], cwd: Path, log_dir: Path) -> Child:
    log = log_dir / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return Child(name, proc, log)


def start_redis(work: Path) -> tuple[Child, str]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise Unavailable("redis-server not found: `apt-get install -y redis-server` (Debian)")
    port = free_port()
    child = spawn("redis", [exe, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                            "--protected-mode", "yes", "--dir", str(work)], dict(os.environ), work, work)
    wait_port(port, child.proc, "redis-server", child.log)
    return child, f"redis://127.0.0.1:{port}"


def start_s3(work: Path) -> tuple[Child, str]:
    """moto's S3 server and an empty bucket; returns the endpoint URL."""
    port = free_port()
    child = spawn("s3", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                  {**os.environ, **S3_KEYS}, work, work)
    wait_port(port, child.proc, "moto server", child.log)
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name=S3_KEYS["AWS_DEFAULT_REGION"],
                 aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=BUCKET)
    return child, endpoint


@dataclass
class Stack:
    """The servers of one distributed deployment and the environment every process of it gets."""

    work: Path
    env: dict[str, str]
    children: list[Child] = field(default_factory=list)
    postgres: PostgresServer | None = None
    # Seconds between the backfill daemon's passes; None = the deployed dagster.yaml's (`backfills:
    # pass_interval_seconds`, 5 s). A backfill waits for a pass to launch its runs and for another to be marked done.
    backfill_pass_seconds: int | None = None

    def start_workers(self, n: int, concurrency: int = 1) -> list[Child]:
        workers = []
        for i in range(n):
            argv = [str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app",
                    "-y", str(REPO / "deploy" / "celery.yaml"), "-n", f"karma{i + 1}", "--",
                    f"--concurrency={concurrency}", "--pool=prefork"]
            workers.append(spawn(f"worker{i + 1}", argv, self.env, self.work, self.work))
        self.children += workers
        self.wait_workers(n)
        return workers

    def wait_workers(self, n: int, timeout: float = 120.0) -> None:
        from celery import Celery

        app = Celery(broker=self.env["KARMA_CELERY_BROKER"])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in self.children:
                if c.name.startswith("worker") and not c.alive():
                    raise RuntimeError(f"{c.name} exited: {c.tail()}")
            replies = app.control.ping(timeout=1.0) or []
            if len(replies) >= n:
                return
        raise TimeoutError(f"{n} celery workers did not answer within {timeout:.0f} s")

    def start_daemon(self, folder: Path) -> Child:
        if self.backfill_pass_seconds is not None:  # the instance's setting, as a deployment would change it
            config = Path(self.env["DAGSTER_HOME"]) / "dagster.yaml"
            text, n = re.subn(r"(?m)^  pass_interval_seconds: \d+$",
                              f"  pass_interval_seconds: {self.backfill_pass_seconds}", config.read_text())
            assert n == 1, f"{config}: no backfills.pass_interval_seconds to set"
            config.write_text(text)
        argv = [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"]
        child = spawn("daemon", argv, self.env, folder, self.work)
        self.children.append(child)
        return child

    def check_alive(self) -> None:
        for c in self.children:
            if not c.alive():
                raise RuntimeError(f"{c.name} exited ({c.proc.returncode}): {c.tail()}")

    def stop(self) -> None:
        for c in reversed(self.children):
            c.stop()
        self.children.clear()
        if self.postgres is not None:
            self.postgres.stop()


def start_stack(work: Path, *, postgres: bool = True, s3: bool = True, celery: bool = True) -> Stack:
    """Servers only (no worker, no daemon yet). DAGSTER_HOME is work/home with deploy/dagster.postgres.yaml
    (postgres=True) or the repo's SQLite dagster.yaml."""
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DAGSTER_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO)}
    stack = Stack(work, env)
    try:
        if postgres:
            stack.postgres = start_postgres()
            stack.postgres.new_database("dagster")
            shutil.copy(REPO / "deploy" / "dagster.postgres.yaml", home / "dagster.yaml")
            env.update(DAGSTER_PG_HOST=stack.postgres.host, DAGSTER_PG_PORT=str(stack.postgres.port),
                       DAGSTER_PG_USER="postgres", DAGSTER_PG_PASSWORD="unused-trust-auth", DAGSTER_PG_DB="dagster")
            # Dagster's tables once, before workers and the daemon start (deploy/docker-compose.yml's `migrate`):
            # two workers creating them at once on the empty database failed with "type run_tags already exists".
            subprocess.run([str(BIN / "dagster"), "instance", "migrate"], env=env, cwd=work, check=True,
                           capture_output=True, timeout=300)
        else:
            shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        if celery or s3:
            redis_child, redis_url = start_redis(work)
            stack.children.append(redis_child)
            env.update(KARMA_LOCK_URL=f"{redis_url}/2")
            if celery:
                env.update(KARMA_EXECUTOR="celery", KARMA_CELERY_BROKER=f"{redis_url}/0",
                           KARMA_CELERY_BACKEND=f"{redis_url}/1")
        if s3:
            s3_child, endpoint = start_s3(work)
            stack.children.append(s3_child)
            env.update(S3_KEYS, AWS_ENDPOINT_URL=endpoint, KARMA_STORAGE_URL=f"s3://{BUCKET}/karma")
    except BaseException:
        stack.stop()
        raise
    return stack


def write_workspace(folder: Path, storage: dict[str, str]) -> Path:
    """The code location the daemon, its run workers and the Celery workers all load (local backbone only);
    the executor is whatever KARMA_EXECUTOR selects in the loading process."""
    code = daemon_harness.write_code_location(folder, {"local": {}}, storage, in_process=False)
    (folder / "workspace.yaml").write_text(f"load_from:\n  - python_file:\n      relative_path: {code.name}\n"
                                           "      location_name: karma\n")
    return code


# ------------------------------------------------------------------ the runs compared
# The abstracts both runs read: the same helper as bench/throughput.py's (tests/daemon_harness.py).
from daemon_harness import write_abstracts  # noqa: E402,F401 - bench/distributed.py calls h.write_abstracts


@dataclass
class Outcome:
    """A backfill's result: where its KG is, how long it took, and the instance's per-run bookkeeping."""

    kg_path: Path
    documents: int
    seconds: float
    statuses: dict[str, str]
    runs: int
    run_overhead_s: float  # summed over runs: run wall time minus the time its steps executed


def environ(env: dict[str, str]):  # noqa: ANN201 - a context manager
    """os.environ = env for the block (the caller's own process plays the deployment's launcher)."""
    from contextlib import contextmanager

    @contextmanager
    def scope():
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)

    return scope()


def storage_config(work: Path, inbox: Path, cache_dir: Path) -> dict[str, str]:
    return {"data_dir": str(work / "karma"), "inbox": str(inbox), "cache_dir": str(cache_dir)}


def reference_run(work: Path, inbox: Path, cache_dir: Path) -> Outcome:
    """What `karma run` does on one machine: SQLite instance, local disk, every step in process."""
    import dagster as dg

    from karma_dagster import runner
    from karma_dagster.runtime import services
    from karma_dagster.definitions import build_definitions
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KARMA_", "DAGSTER_PG_"))}
    (work / "home").mkdir(parents=True, exist_ok=True)
    with environ({**env, "DAGSTER_HOME": str(work / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}):
        services.clear()
        cfg = storage_config(work, inbox, cache_dir)
        defs = build_definitions(backbones={"local": BackboneConfig()}, storage=KarmaStorageResource(**cfg))
        with dg.instance_for_test(temp_dir=str(work / "home")) as inst:
            t0 = time.perf_counter()
            outcome = runner.run_main(defs, inst, log=lambda _m: None)
            seconds = time.perf_counter() - t0
            runs = len(inst.get_runs())
        services.clear()
    if outcome.failed:
        raise RuntimeError(f"reference run: {dict(list(outcome.failed.items())[:3])}")
    documents = len(KarmaStorageResource(**cfg).stage_store().partitions("local", "evaluated"))
    return Outcome(work / "karma" / "kg.duckdb", documents, seconds, {}, runs, 0.0)


def days_of(document_keys: list[str]) -> list[str]:
    """The days (KG dates; by date the stage partitions) these documents are dated on, in order."""
    from karma_dagster.ingest.keys import date_of_document_key

    return sorted({date_of_document_key(k) for k in document_keys})


def distributed_backfill(stack: Stack, inbox: Path, cache_dir: Path, workers: int, warmup: int = 0,
                         timeout_s: float = 3600.0) -> Outcome:
    """Seed import and inbox scan here, then `karma backfill`'s path: a backfill of the documents' chains, then one
    of their dates' KG increments, run by the real daemon, their steps on `workers` Celery workers (when
    KARMA_EXECUTOR=celery). `warmup` documents go first, untimed (every worker process loads its models once)."""
    import dagster as dg

    from karma_dagster import runner
    from karma_dagster.runtime import services
    from karma_dagster.definitions import build_definitions
    from karma_dagster.jobs import chain_keys
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource

    cfg = storage_config(stack.work, inbox, cache_dir)
    folder = stack.work / "location"
    folder.mkdir(exist_ok=True)
    write_workspace(folder, cfg)
    with environ(stack.env):
        services.clear()
        defs = build_definitions(backbones={"local": BackboneConfig()}, storage=KarmaStorageResource(**cfg))
        with dg.DagsterInstance.get() as inst:
            runner.setup_pools(inst, defs.resources["backbones"])  # type: ignore[arg-type]
            if not runner.import_kg(defs, inst):
                raise RuntimeError("seed import failed")
            keys, failed_files = runner.register_inbox(defs, inst)
            if failed_files or len(keys) <= warmup:
                raise RuntimeError(f"inbox scan: {len(keys)} documents, failed files {failed_files}")
            if "KARMA_EXECUTOR" in stack.env:
                stack.start_workers(workers)
            stack.start_daemon(folder)
            stages = chain_keys(["local"])

            def backfill(assets: list, partitions: list[str], title: str) -> str:
                return _wait(stack, inst, runner.launch_backfill(defs, inst, assets, partitions, title), timeout_s)

            statuses = {}
            by_date = defs.resources["storage"].partition_mode() == "date"  # a run per day (partitioning/mode.py)
            timed = keys[warmup:]
            if warmup and by_date:  # date partitions run whole days: the warm-up documents need days of their own
                warm_days = days_of(keys[:warmup])
                shared = set(warm_days) & set(days_of(timed))
                if shared:
                    raise ValueError(f"warmup={warmup}: by date a warm-up runs whole days, and {sorted(shared)} also "
                                     "hold timed documents (a dates file can give the warm-up a day of its own)")
                statuses["warm-up"] = backfill(stages, warm_days, "warm-up")
            elif warmup:
                statuses["warm-up"] = backfill(stages, keys[:warmup], "warm-up")
            dates = days_of(keys)
            t0 = time.perf_counter()
            statuses["documents"] = backfill(stages, days_of(timed) if by_date
                                             else timed, f"{len(timed)} documents")
            statuses["increments"] = backfill([dg.AssetKey(["local", "knowledge_graph"])], dates, "KG increments")
            seconds = time.perf_counter() - t0
            ids = {b.backfill_id for b in inst.get_backfills() if b.title != "warm-up"}
            runs = [r for r in inst.get_runs() if r.tags.get("dagster/backfill") in ids]
            overhead = sum(_run_overhead(inst, r.run_id) for r in runs)
        services.clear()
    return Outcome(stack.work / "karma" / "kg.duckdb", len(timed), seconds, statuses, len(runs), overhead)


def _wait(stack: Stack, inst, backfill_id: str, timeout_s: float) -> str:  # noqa: ANN001
    import dagster as dg
    from dagster._core.storage.dagster_run import IN_PROGRESS_RUN_STATUSES

    in_flight = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, *IN_PROGRESS_RUN_STATUSES]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stack.check_alive()
        backfill = inst.get_backfill(backfill_id)
        status = backfill.status.value if backfill else "MISSING"
        if status.startswith(("COMPLETED", "FAILED", "CANCELED")) and not inst.get_runs(
                filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}, statuses=in_flight)):
            return status
        time.sleep(1.0)
    raise TimeoutError(f"backfill {backfill_id} not done after {timeout_s:.0f} s")


def _run_overhead(inst, run_id: str) -> float:  # noqa: ANN001
    """A run's wall time (start to end) minus the seconds its steps executed: launch, planning, event writes,
    dispatch to the workers and their code loads, i.e. the orchestration's own cost."""
    stats = inst.get_run_stats(run_id)
    if not stats.start_time or not stats.end_time:
        return 0.0
    steps = inst.get_run_step_stats(run_id)
    busy = sum((s.end_time or 0) - (s.start_time or 0) for s in steps if s.start_time and s.end_time)
    return max(0.0, stats.end_time - stats.start_time - busy)
