"""The run report: documents, segments kept/dropped, mentions linked/new, triples proposed/accepted/
contradicting, KG size before and after, per backbone; printed by `karma run` and kept here as metadata."""


import dagster as dg
from pydantic import Field

from karma_dagster.assets.chain import kg_key
from karma_dagster.assets.freshness import kg_grew
from karma_dagster.assets.notices import judge_notice
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.metrics.judge import judge_chain_overlap
from karma_dagster.report import build_report, name_papers
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.judge import JudgeResource
from karma_dagster.resources.storage import KarmaStorageResource


class ReportConfig(dg.Config):
    wall_time_s: float = Field(-1.0, description="wall time of the run being reported (set by `karma run`)")
    failed_documents: dict[str, str] = Field(default_factory=dict, description="document -> why it failed")


def build(namespaces: list[str]) -> dg.AssetsDefinition:
    @dg.asset(
        key="karma_report",
        group_name="reports",
        kinds={"python"},
        automation_condition=kg_grew(),  # refreshes when a KG increment lands (freshness.py)
        deps=[kg_key(ns) for ns in namespaces],
        description="What the agent chains did to the papers and the KG, per backbone (the main job's report).",
    )
    def karma_report(
        context: dg.AssetExecutionContext,
        config: ReportConfig,
        storage: KarmaStorageResource,
        backbones: BackbonesResource,
        judge: JudgeResource,
    ) -> dg.MaterializeResult:
        catalog = Catalog(storage.catalog_path()) if storage.catalog_path().exists() else None
        report = build_report(storage.stage_store(), storage.kg_store(), backbones.names(), catalog=catalog)
        report.documents_failed = dict(config.failed_documents)
        if catalog is not None:
            name_papers(report, catalog)  # the documents it names, by title
        report.wall_time_s = config.wall_time_s if config.wall_time_s >= 0 else None
        overlaps = {ns: judge_chain_overlap(judge, backbones.settings(ns)) for ns in backbones.names()}
        report.judge_warnings = {ns: why for ns, why in overlaps.items() if why}
        report.calibration = {ns: state for ns in backbones.names()
                              if (state := backbones.calibration_state(ns, storage))}
        # one line, not the report: refreshed after each KG increment, its text (judge section included) would
        # fill the terminal with the same lines run after run; the UI shows it as this asset's `report` metadata
        context.log.info(f"karma_report: {len(report.backbones)} backbone(s); the report is this materialization's "
                         "`report` metadata (`karma run` prints it)")
        metadata: dict[str, object] = {"report": dg.MetadataValue.md(report.markdown())}
        for b in report.backbones:
            for field, value in b.figures.items():
                metadata[f"{b.backbone}/{field}"] = value
        metadata["documents_failed"] = len(report.documents_failed)
        metadata["documents_warned"] = sum(len(d) for d in report.stage_warnings.values())
        for ns, by_doc in report.stage_warnings.items():
            context.log.warning(f"karma_report: backbone {ns}: {len(by_doc)} document(s) with a warning, e.g. "
                                f"{next(iter(by_doc.values()))}")
        if report.dates is not None:  # dates never invented silently (ingest/dates.py)
            metadata["documents_undated"] = len(report.dates.undated)
            metadata["documents_skipped_undated"] = len(report.dates.skipped)
        metadata["judge_is_chain_model"] = bool(report.judge_warnings)
        metadata["judge_is_chain_model_backbones"] = dg.MetadataValue.json(sorted(report.judge_warnings))
        # warned once per backbone and reason (notices.py); the report's judge section and this metadata keep it
        metadata |= judge_notice(context, context.asset_key, report.judge_warnings,
                                 "the judge is not independent of backbone")
        metadata["report_json"] = dg.MetadataValue.json(report.model_dump(mode="json"))  # what `karma run` prints
        if report.wall_time_s is not None:
            metadata["wall_time_s"] = round(report.wall_time_s, 2)
        return dg.MaterializeResult(metadata=metadata)

    return karma_report
