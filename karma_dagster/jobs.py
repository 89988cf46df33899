"""Job and pool names, and the builders of the jobs: importing a name here never builds the code location."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from karma_dagster.assets.chain import kg_key, stage_key
from karma_dagster.stages import SEED_KG, STAGES, Stage

DOCUMENT_JOB = "document_chain"
IMPORT_KG_JOB = "import_kg"
REPORT_JOB = "report"
COMPARE_JOB = "compare_backbones"
KG_INCREMENTS_JOB = "kg_increments"
KG_WRITER_POOL = "kg_writer"
KG_WRITER_POOL_LIMIT = 1  # DuckDB allows one writing process; the store's file lock is the second line
# The run queue starts higher priorities first (dagster/priority): a KG increment before any paper run, whose
# priority is the Central Controller's score x 100 (scheduling/controller.py), so the KG grows while the inbox is read.
INCREMENT_PRIORITY = 1_000_000
# The runs that read papers (the new_papers sensor's) and the freshness refreshes (karma_report, kg_metrics) share
# one lane of the run queue, which dagster_home/dagster.yaml caps below max_concurrent_runs: whatever else waits,
# one place stays free for a KG increment.
LANE_TAG = "karma/lane"
READING_LANE = {LANE_TAG: "reading"}


def llm_pool(ns: str) -> str:
    """Each LLM backbone's model-calling steps share one concurrency pool across all runs (its rate limit)."""
    return f"llm_{ns}"


def kg_job_name(ns: str) -> str:
    return f"kg_increment__{ns.replace('-', '_').replace('.', '_')}"


def chain_keys(namespaces: Sequence[str], registry: Sequence[Stage] = STAGES) -> list[dg.AssetKey]:
    """Every stage asset of these backbones: what a document's run or a documents backfill selects."""
    return [stage_key(ns, s.name) for ns in namespaces for s in registry]


def document_job(namespaces: Sequence[str], registry: Sequence[Stage] = STAGES) -> UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        DOCUMENT_JOB,
        selection=dg.AssetSelection.assets(*chain_keys(namespaces, registry)),
        description="The agent chain (documents -> evaluated) of every enabled backbone for one document.",
        tags={"karma/job": DOCUMENT_JOB},
    )


def kg_jobs(namespaces: Sequence[str]) -> dict[str, UnresolvedAssetJobDefinition]:
    return {
        ns: dg.define_asset_job(
            kg_job_name(ns),
            selection=dg.AssetSelection.assets(kg_key(ns)),
            description=f"The KG increment of one date for backbone {ns}.",
            tags={"dagster/priority": str(INCREMENT_PRIORITY)},
        )
        for ns in namespaces
    }


def kg_increments_job(namespaces: Sequence[str]) -> UnresolvedAssetJobDefinition:
    """Every backbone's KG increment of one date in one run: the `kg_increments` sensor selects the backbones whose
    documents are ready (a run's asset selection), so a day's inbox costs a run per date and merge, not one per
    backbone (each run is a process that loads the code location: ~10-30 s on 2 cores)."""
    return dg.define_asset_job(
        KG_INCREMENTS_JOB,
        selection=dg.AssetSelection.assets(*[kg_key(ns) for ns in namespaces]),
        description="The KG increments of one date, for the backbones the kg_increments sensor found ready.",
        tags={"dagster/priority": str(INCREMENT_PRIORITY)},
    )


def merges(run_job: str, asset_selection: frozenset[dg.AssetKey] | None, ns: str) -> bool:
    """Whether a run (of a per-backbone KG job or of the all-backbones one) merges backbone `ns`'s increment."""
    if run_job == kg_job_name(ns):
        return True
    return run_job == KG_INCREMENTS_JOB and (asset_selection is None
                                             or kg_key(ns) in asset_selection)


def other_jobs(namespaces: Sequence[str]) -> list[UnresolvedAssetJobDefinition]:
    """Import the seed KG, the report, the comparison."""
    return [
        dg.define_asset_job(IMPORT_KG_JOB, selection=dg.AssetSelection.assets(SEED_KG),
                            description="Import the existing KG and index it."),
        dg.define_asset_job(REPORT_JOB, selection=dg.AssetSelection.assets("karma_report")),
        dg.define_asset_job(
            COMPARE_JOB,
            selection=dg.AssetSelection.assets(
                *[dg.AssetKey([ns, n]) for ns in namespaces for n in ("kg_metrics", "gold_evaluation")],
                "backbone_comparison", "backbones_status",
            ),
            description="KARMA's metrics and gold scores of every backbone, side by side (backbone_comparison).",
        ),
    ]
