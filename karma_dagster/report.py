"""The main job's report: what the chain did to the papers and to the KG, per backbone.

Its rows come from the stage registry (each stage says what it adds: segments kept/dropped, mentions
linked/new, triples proposed/accepted, ...) followed by the KG's size before and after, so a new stage shows
up here without an edit.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from pydantic import BaseModel

from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.undated import UndatedSummary, undated_summary
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.stage_store import StageStore
from karma_dagster.stages import STAGES, Stage

KG_FIGURES = ("kg_nodes_before", "kg_edges_before", "kg_nodes_after", "kg_edges_after", "kg_evidence")


class BackboneReport(BaseModel):
    backbone: str
    figures: dict[str, int] = {}  # insertion order = the report's row order

    def __getattr__(self, name: str) -> int:
        figures = self.__dict__.get("figures") or {}
        if name in figures:
            return figures[name]
        raise AttributeError(name)


class RunReport(BaseModel):
    backbones: list[BackboneReport]
    documents_failed: dict[str, str] = {}
    wall_time_s: float | None = None
    # backbone -> why the configured judge is not independent of its chain (metrics.judge.judge_chain_overlap)
    judge_warnings: dict[str, str] = {}
    # documents without a publication date (dated by arrival or the `undated` setting) and those it skipped
    dates: UndatedSummary | None = None
    # backbone -> document -> the `warning` a stage reported for it (e.g. a tools-mode model that called no tool)
    stage_warnings: dict[str, dict[str, str]] = {}
    # doc_key -> "title — first author et al., journal, date" of the documents the report names (name_papers)
    papers: dict[str, str] = {}
    # backbone -> what its evaluator's confidence is: "calibrated ..." or "uncalibrated ..." (calibration_state)
    calibration: dict[str, str] = {}

    def named(self, doc_key: str) -> str:
        """A document as the report names it: its paper's label with the key after it, else the key."""
        label = self.papers.get(doc_key)
        return f"{label} (`{doc_key}`)" if label else f"`{doc_key}`"

    def markdown(self) -> str:
        names = list(dict.fromkeys(f for b in self.backbones for f in b.figures))
        head = "| figure | " + " | ".join(b.backbone for b in self.backbones) + " |"
        sep = "|---|" + "---|" * len(self.backbones)
        rows = [f"| {f.replace('_', ' ')} | " + " | ".join(str(b.figures.get(f, 0)) for b in self.backbones) + " |"
                for f in names]
        out = [head, sep, *rows]
        if self.calibration:
            out += ["", "Confidence: " + "; ".join(f"{name} {state}" for name, state in self.calibration.items())]
            if any(state.startswith("uncalibrated") for state in self.calibration.values()):
                out.append("(uncalibrated: the evaluator's scores are no probabilities of being right; `karma "
                           "calibrate --backbone NAME --pubtator GOLD` fits them)")
        if self.dates is not None and (lines := self.dates.lines(named=self.named)):
            out += ["", *lines]
        if self.documents_failed:
            out += ["", "Documents that failed (their partitions only; the KG is unchanged by them):"]
            out += [f"- {self.named(k)}: {v}" for k, v in sorted(self.documents_failed.items())]
        for name, by_doc in self.stage_warnings.items():
            out += ["", f"WARNING, backbone {name}: {len(by_doc)} document(s) ran without error but say:"]
            out += [f"- {self.named(k)}: {why}" for k, why in sorted(by_doc.items())]
        if self.judge_warnings:
            out += ["", "Warning: the judge is not independent of these backbones' chains (their LLM correctness "
                    "grades a chain with its own model or rules; name another model as `judge:` in backbones.yaml):"]
            by_reason: dict[str, list[str]] = {}
            for name, why in self.judge_warnings.items():
                by_reason.setdefault(why, []).append(name)
            out += [f"- {', '.join(names)}: {why}" for why, names in by_reason.items()]
        if self.wall_time_s is not None:
            out += ["", f"Wall time: {self.wall_time_s:.1f} s"]
        return "\n".join(out)


def _stage_figures(stages: StageStore, ns: str, stage: Stage, keys: list[str]) -> dict[str, int]:
    empty = pd.DataFrame(columns=list(stage.row_model.model_fields))
    totals: dict[str, int] = {name: int(value) for name, value in stage.report(empty).items()}  # zeros, in order
    for key in keys:
        if stages.exists(ns, stage.name, key):
            for name, value in stage.report(stages.read(ns, stage.name, key)).items():
                totals[name] = totals.get(name, 0) + int(value)
    return totals


def _stage_warnings(stages: StageStore, ns: str, registry: Sequence[Stage], keys: list[str]) -> dict[str, str]:
    """Each document's `warning` figure, as its stage recorded it with the table (StageStore.recorded): a run
    that succeeded yet did nothing useful is never reported as a silent `ok`."""
    out: dict[str, str] = {}
    for key in keys:
        for stage in registry:
            if stages.exists(ns, stage.name, key) and (why := stages.recorded(ns, stage.name, key).get("warning")):
                out[key] = f"{stage.name}: {why}" if key not in out else f"{out[key]}; {stage.name}: {why}"
    return out


def build_report(stages: StageStore, kg: KGStore, namespaces: list[str], documents: list[str] | None = None,
                 registry: Sequence[Stage] = STAGES, catalog: Catalog | None = None) -> RunReport:
    """`catalog`: also say which documents have no publication date, and why (ingest/undated.py)."""
    reports = []
    warnings: dict[str, dict[str, str]] = {}
    for ns in namespaces:
        first = registry[0].name
        keys = [k for k in (documents if documents is not None else stages.partitions(ns, first))
                if stages.exists(ns, first, k)]
        figures: dict[str, int] = {}
        for stage in registry:
            figures.update(_stage_figures(stages, ns, stage, keys))
        seed = kg.seed_counts()
        now = kg.snapshot_counts(as_of=None, namespace=ns)
        figures.update(zip(KG_FIGURES, (seed.n_nodes, seed.n_edges, now.n_nodes, now.n_edges, now.n_evidence)))
        reports.append(BackboneReport(backbone=ns, figures=figures))
        if warned := _stage_warnings(stages, ns, registry, keys):
            warnings[ns] = warned
    return RunReport(backbones=reports, dates=undated_summary(catalog) if catalog is not None else None,
                     stage_warnings=warnings)


def name_papers(report: RunReport, catalog: Catalog) -> RunReport:
    """Fill `report.papers` for the documents it names (failed, undated, warned) from the catalog; returns the report."""
    keys = [*report.documents_failed, *(u.doc_key for u in (report.dates.undated if report.dates else [])),
            *(k for by_doc in report.stage_warnings.values() for k in by_doc)]
    report.papers = {k: p.label() for k, p in catalog.papers(keys).items() if p.title}
    return report
