"""A separate OS process that runs one job of the karma definitions against a test's data folder and instance.

    python run_child.py SPEC_JSON

SPEC: {"data_dir", "inbox", "cache_dir", "dagster_home", "namespaces": [...], "job", "partitions": [...],
"stall_signal": path or null, "barrier": path or null}. With `stall_signal`, the KG merge stops after inserting its
rows (inside the open transaction), writes that file and sleeps: the parent then SIGKILLs this process.
With `barrier`, the process waits until that file exists before it starts (so two processes start together).
Exit code 0 when every run succeeded.

With "cli": [argv] instead of "job", the child runs `karma <argv>` (cli.main, its signal handling included)
against the spec's folders, optionally paused at a named point ("pause": scan | stage | merge, see
`install_pause`): it writes the file "signal" there and sleeps until the parent SIGKILLs or interrupts it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


SPEC_ENV = "KARMA_RELIABILITY_CHILD_SPEC"
PARALLEL_KG_JOB = "kg_all_namespaces"


def parallel_kg_job():  # noqa: ANN201 - reconstructable target: the multiprocess executor's steps rebuild it
    """Every namespace's KG increment in one run, each in its own process (multiprocess executor)."""
    import dagster as dg

    from karma_dagster.definitions import build_definitions
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource

    spec = json.loads(os.environ[SPEC_ENV])
    storage = KarmaStorageResource(data_dir=spec["data_dir"], inbox=spec["inbox"], cache_dir=spec["cache_dir"])
    defs = build_definitions(backbones={ns: BackboneConfig() for ns in spec["namespaces"]}, storage=storage)
    job = dg.define_asset_job(
        PARALLEL_KG_JOB,
        selection=dg.AssetSelection.assets(*[dg.AssetKey([ns, "knowledge_graph"]) for ns in spec["namespaces"]]),
        executor_def=dg.multiprocess_executor.configured({"max_concurrent": len(spec["namespaces"])}),
    )
    return dg.Definitions(assets=list(defs.assets or []), resources=defs.resources, jobs=[job]).resolve_job_def(
        PARALLEL_KG_JOB)


def main(spec: dict) -> int:
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    from karma_dagster.definitions import build_definitions
    from karma_dagster.kg import merge
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource

    if spec.get("stall_signal"):
        original = merge.merge_increment

        def stalling(*args, **kwargs):  # noqa: ANN002, ANN003
            def on_doc(doc_key: str, i: int, n: int) -> None:
                if i == 1:
                    Path(spec["stall_signal"]).write_text(f"{doc_key} {i}/{n}")
                    time.sleep(300)  # killed here, rows inserted, transaction open

            return original(*args, **{**kwargs, "on_doc": on_doc})

        merge.merge_increment = stalling  # the KG asset looks it up as merge.merge_increment at call time

    storage = KarmaStorageResource(data_dir=spec["data_dir"], inbox=spec["inbox"], cache_dir=spec["cache_dir"])
    defs = build_definitions(backbones={ns: BackboneConfig() for ns in spec["namespaces"]}, storage=storage)
    job = defs.resolve_job_def(spec["job"]) if spec["job"] != PARALLEL_KG_JOB else None
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(spec["dagster_home"]))
    if spec.get("barrier"):
        Path(spec["ready"]).write_text("ready")
        while not Path(spec["barrier"]).exists():
            time.sleep(0.02)
    ok = True
    for partition in spec["partitions"]:
        if spec["job"] == PARALLEL_KG_JOB:
            os.environ[SPEC_ENV] = json.dumps(spec)
            with dg.execute_job(dg.reconstructable(parallel_kg_job), instance=instance,
                                tags={"dagster/partition": partition}, raise_on_error=False) as result:
                ok = ok and result.success
        else:
            result = job.execute_in_process(partition_key=partition, instance=instance, raise_on_error=False)
            ok = ok and result.success
    return 0 if ok else 1


# ------------------------------------------------------------------ `karma run` in a child, paused at a named point
PAUSE_POINTS = ("scan", "stage", "merge", "seed-index", "seed-index-mid")


def _pause(spec: dict, where: str) -> None:
    """Write the spec's `signal` file (the parent's cue to send its signal) and sleep: the parent kills or
    interrupts the process here. With `stubborn`, the sleep swallows the first interrupt (a step stuck in C
    code), so only a second signal ends the process."""
    Path(spec["signal"]).write_text(where)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            time.sleep(deadline - time.monotonic())
        except BaseException:  # noqa: BLE001 - Dagster's interrupt: the stubborn step goes on sleeping
            if not spec.get("stubborn"):
                raise


def install_pause(spec: dict) -> None:
    """Test-only monkeypatches in this child process (the product has no hook):
    scan: after the first file's documents are registered in the catalog (before its file record is written);
    stage: before the `stage` table of the `nth` document to reach it is written (inside the asset's step);
    merge: inside the first KG increment, after its first document's rows are inserted (transaction open);
    seed-index: in the seed import, the KG's seed tables committed, before the entity index is built;
    seed-index-mid: inside the index build, rows streaming into LanceDB (500-entity batches, at the 5th)."""
    where = spec["pause"]
    assert where in PAUSE_POINTS, where
    if where.startswith("seed-index"):
        from karma_dagster.kg import entity_index

        if where == "seed-index":
            build = entity_index.EntityIndex.build

            def pausing_build(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
                _pause(spec, where)
                return build(self, *args, **kwargs)

            entity_index.EntityIndex.build = pausing_build
        else:
            entity_index.BUILD_CHUNK = 500
            vector_array, calls = entity_index._vector_array, []

            def pausing_vector_array(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
                calls.append(1)
                if len(calls) == 5:
                    _pause(spec, where)
                return vector_array(*args, **kwargs)

            entity_index._vector_array = pausing_vector_array
    elif where == "scan":
        from karma_dagster.ingest.catalog import Catalog

        register = Catalog.register_batch  # every registration's one transaction (`register` calls it too)

        def pausing_register(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            out = register(self, *args, **kwargs)
            _pause(spec, "scan")
            return out

        Catalog.register_batch = pausing_register
    elif where == "stage":
        from karma_dagster.runtime.stage_store import StageStore

        write, seen = StageStore.write, []

        def pausing_write(self, namespace, stage, partition, frame, **kwargs):  # noqa: ANN001, ANN003, ANN202
            if stage == spec["stage"]:
                seen.append(partition)
                if len(seen) == spec.get("nth", 1):
                    _pause(spec, f"stage {stage} {partition}")
            return write(self, namespace, stage, partition, frame, **kwargs)

        StageStore.write = pausing_write
    else:
        from karma_dagster.kg import merge

        original = merge.merge_increment

        def stalling(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            def on_doc(doc_key: str, i: int, n: int) -> None:
                if i == 1:
                    _pause(spec, f"merge {doc_key}")

            return original(*args, **{**kwargs, "on_doc": on_doc})

        merge.merge_increment = stalling


def install_full_disk(spec: dict) -> None:
    """A full disk during the entity index build (test-only): while EntityIndex.build runs, no file of this process
    may grow past `index_fsize_limit` bytes (RLIMIT_FSIZE; writes past it fail with EFBIG as on a full disk)."""
    import resource
    import signal

    from karma_dagster.kg import entity_index

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing the process
    build = entity_index.EntityIndex.build

    def full_disk_build(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        before = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (spec["index_fsize_limit"], before[1]))
        try:
            return build(self, *args, **kwargs)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, before)

    entity_index.EntityIndex.build = full_disk_build


def run_cli(spec: dict) -> int:
    """`karma <argv>` against the spec's folders (its cache, so nothing is rebuilt), after `install_pause`."""
    from karma_dagster import cli
    from karma_dagster.definitions import build_definitions
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource

    os.environ["DAGSTER_HOME"] = spec["dagster_home"]
    if spec.get("pause"):
        install_pause(spec)
    if spec.get("index_fsize_limit"):
        install_full_disk(spec)
    storage = KarmaStorageResource(data_dir=spec["data_dir"], inbox=spec["inbox"], cache_dir=spec["cache_dir"])
    defs = build_definitions(backbones={ns: BackboneConfig() for ns in spec["namespaces"]}, storage=storage)
    cli._defs = lambda _args: defs
    return cli.main(spec["cli"])


if __name__ == "__main__":
    _spec = json.loads(sys.argv[1])
    sys.exit(run_cli(_spec) if "cli" in _spec else main(_spec))
