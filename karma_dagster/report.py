"""The main job's report: what the chain did to the papers and to the KG, per backbone."""

from __future__ import annotations

from pydantic import BaseModel

from karma_dagster.kg.store import KGStore
from karma_dagster.stage_store import StageStore


class BackboneReport(BaseModel):
    backbone: str
    documents: int = 0
    segments_kept: int = 0
    segments_dropped: int = 0
    summaries: int = 0
    mentions: int = 0
    mentions_linked: int = 0
    mentions_new: int = 0
    triples_proposed: int = 0
    triples_schema_review: int = 0
    triples_contradicting: int = 0
    triples_accepted: int = 0
    kg_nodes_before: int = 0
    kg_edges_before: int = 0
    kg_nodes_after: int = 0
    kg_edges_after: int = 0
    kg_evidence: int = 0


class RunReport(BaseModel):
    backbones: list[BackboneReport]
    documents_failed: dict[str, str] = {}
    wall_time_s: float | None = None

    def markdown(self) -> str:
        fields = [f for f in BackboneReport.model_fields if f != "backbone"]
        head = "| figure | " + " | ".join(b.backbone for b in self.backbones) + " |"
        sep = "|---|" + "---|" * len(self.backbones)
        rows = [f"| {f.replace('_', ' ')} | " + " | ".join(str(getattr(b, f)) for b in self.backbones) + " |" for f in fields]
        out = [head, sep, *rows]
        if self.documents_failed:
            out += ["", "Documents that failed (their partitions only; the KG is unchanged by them):"]
            out += [f"- `{k}`: {v}" for k, v in sorted(self.documents_failed.items())]
        if self.wall_time_s is not None:
            out += ["", f"Wall time: {self.wall_time_s:.1f} s"]
        return "\n".join(out)


def build_report(stages: StageStore, kg: KGStore, namespaces: list[str], documents: list[str] | None = None) -> RunReport:
    reports = []
    for ns in namespaces:
        r = BackboneReport(backbone=ns)
        keys = documents if documents is not None else stages.partitions(ns, "documents")
        for key in keys:
            if not stages.exists(ns, "documents", key):
                continue
            r.documents += 1
            if stages.exists(ns, "segments", key):
                seg = stages.read(ns, "segments", key)
                r.segments_kept += int(seg["kept"].sum())
                r.segments_dropped += int((~seg["kept"]).sum())
            if stages.exists(ns, "summaries", key):
                r.summaries += len(stages.read(ns, "summaries", key))
            if stages.exists(ns, "entities", key):
                ent = stages.read(ns, "entities", key)
                r.mentions += len(ent)
                r.mentions_linked += int((ent["status"] == "linked").sum())
                r.mentions_new += int((ent["status"] == "new").sum())
            if stages.exists(ns, "evaluated", key):
                ev = stages.read(ns, "evaluated", key)
                r.triples_proposed += len(ev)
                r.triples_schema_review += int((ev["schema_status"] == "review").sum())
                r.triples_contradicting += int(ev["conflict"].sum())
                r.triples_accepted += int(ev["accepted"].sum())
        seed = kg.seed_counts()
        now = kg.snapshot_counts(as_of=None, namespace=ns)
        r.kg_nodes_before, r.kg_edges_before = seed.n_nodes, seed.n_edges
        r.kg_nodes_after, r.kg_edges_after, r.kg_evidence = now.n_nodes, now.n_edges, now.n_evidence
        reports.append(r)
    return RunReport(backbones=reports)
