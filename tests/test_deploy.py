"""The deployment files (deploy/), checked as far as this machine can: no Docker engine, compose plugin, Helm or
Kubernetes runs here. The compose file is validated against the Compose Specification's JSON schema and for
consistency (services, shared environment, volumes, the settings the code reads); the Helm values and the
worker manifest for the names the code reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from karma_dagster.runtime import executors, shared_storage

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
KARMA_SERVICES = ("webserver", "daemon", "worker1", "worker2")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def _env_names(path: Path) -> set[str]:
    """The environment variables a Dagster YAML reads through `env:`."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "env" and isinstance(v, str):
                    found.add(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(yaml.safe_load(path.read_text()))
    return found


def test_compose_file_is_valid_compose(compose: dict) -> None:
    schema = json.loads((REPO / "tests" / "fixtures" / "compose" / "compose-spec.json").read_text())
    jsonschema.validate(compose, schema)


def test_compose_has_the_whole_stack(compose: dict) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "minio", "minio-init", *KARMA_SERVICES} <= set(services)
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
        for vol in svc.get("volumes", []):
            source = vol.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in compose["volumes"], f"{name} mounts undeclared volume {source}"
            else:
                assert (DEPLOY / source).resolve().exists(), f"{name} mounts missing path {source}"
    workers = [n for n in KARMA_SERVICES if n.startswith("worker")]
    assert len(workers) == 2
    for w in workers:
        cmd = services[w]["command"]
        assert cmd[:3] == ["dagster-celery", "worker", "start"]
        assert (REPO / cmd[cmd.index("-y") + 1].removeprefix("/opt/karma/")).is_file()
    assert services["webserver"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (REPO / "workspace.yaml").is_file()


def test_dagster_tables_are_created_once_before_any_process_opens_the_instance(compose: dict) -> None:
    """Each Dagster process creates the Postgres tables it misses when it starts; started together on an empty
    database, one fails on 'type run_tags already exists' (two workers did, in CI). A one-shot migrate runs first."""
    services = compose["services"]
    assert services["migrate"]["command"] == ["dagster", "instance", "migrate"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["migrate"]["environment"] == services["daemon"]["environment"]
    for name in KARMA_SERVICES:
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name


def test_every_karma_process_gets_the_same_settings(compose: dict) -> None:
    services = compose["services"]
    envs = [services[n]["environment"] for n in KARMA_SERVICES]
    assert all(e == envs[0] for e in envs)  # one shared block: a worker can never disagree with the daemon
    env = envs[0]
    wanted = (_env_names(DEPLOY / "dagster.postgres.yaml") | _env_names(DEPLOY / "celery.yaml")
              | {executors.EXECUTOR_ENV, shared_storage.STORAGE_URL_ENV, shared_storage.LOCK_URL_ENV,
                 "DAGSTER_HOME", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})
    assert wanted <= set(env), sorted(wanted - set(env))
    assert env[executors.EXECUTOR_ENV] == "celery"
    shared_storage.storage_url(env[shared_storage.STORAGE_URL_ENV])  # a valid shared-storage URL
    pg = services["postgres"]["environment"]
    assert (env["DAGSTER_PG_USER"], env["DAGSTER_PG_DB"]) == (pg["POSTGRES_USER"], pg["POSTGRES_DB"])
    assert env["DAGSTER_PG_PASSWORD"] == pg["POSTGRES_PASSWORD"]
    for url in (env["KARMA_CELERY_BROKER"], env["KARMA_LOCK_URL"], env["AWS_ENDPOINT_URL"]):
        host = re.match(r"\w+://([^:/]+)", url).group(1)
        assert host in services, f"{url} names no service"
    bucket = env[shared_storage.STORAGE_URL_ENV].split("/")[2]
    assert f"store/{bucket}" in " ".join(services["minio-init"]["entrypoint"])


def test_no_secret_in_the_files(compose: dict) -> None:
    """Passwords come from deploy/.env (required variables), never from the files."""
    text = (DEPLOY / "docker-compose.yml").read_text()
    for var in ("POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD", "MINIO_ROOT_USER"):
        assert re.search(rf"\$\{{{var}:\?", text)
        assert f"{var}=" in (DEPLOY / ".env.example").read_text()
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    assert values["postgresql"]["postgresqlPassword"] == ""
    assert not any("SECRET" in k or "PASSWORD" in k
                   for k in values["dagster-user-deployments"]["deployments"][0]["env"])


def test_helm_values_and_workers_agree_with_the_code() -> None:
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    deployment = values["dagster-user-deployments"]["deployments"][0]
    assert deployment["dagsterApiGrpcArgs"] == ["-m", "karma_dagster.definitions"]
    env = deployment["env"]
    assert env[executors.EXECUTOR_ENV] in executors.CHOICES
    shared_storage.storage_url(env[shared_storage.STORAGE_URL_ENV])
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert {"rabbitmq", "redis", "postgresql"} <= set(values) and not values["redis"]["enabled"]
    workers = yaml.safe_load((DEPLOY / "helm" / "karma-workers.yaml").read_text())
    container = workers["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e["value"] for e in container["env"]} == env  # the workers see what the code location sees
    assert container["command"][:3] == ["dagster-celery", "worker", "start"]
