"""A separate OS process that runs one job of the karma definitions against a test's data folder and instance.

    python run_child.py SPEC_JSON

SPEC: {"data_dir", "inbox", "cache_dir", "dagster_home", "namespaces": [...], "job", "partitions": [...],
"stall_signal": path or null, "barrier": path or null}. With `stall_signal`, the KG merge stops after inserting its
rows (inside the open transaction), writes that file and sleeps: the parent then SIGKILLs this process.
With `barrier`, the process waits until that file exists before it starts (so two processes start together).
Exit code 0 when every run succeeded.
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


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
