"""The one registry of the agent chain: document -> segments -> ... -> evaluated, a record per stage.

Everything else iterates `STAGES`: the asset factory (an asset per stage and backbone, its declared deps are
`reads`), the document job, the LLM backbone (the prompts it must find), the prompt sensor and code versions
(`prompts`), backfills and the run report. Adding a stage, or an ablation that switches one off, is an entry
here. Dagster-free: a stage's `run` reads the document's upstream tables through `StageInputs`, calls its
agent and returns rows plus figures for the materialization's metadata.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from karma_dagster.runtime import date_range
from karma_dagster.runtime import services
from karma_dagster.agents.conflict_resolution import resolve_conflicts
from karma_dagster.agents.entity_extraction import extract_entities_counted
from karma_dagster.agents.evaluator import evaluate_triples, kept_and_aligned, triple_contexts
from karma_dagster.agents.ingestion import ingest_document
from karma_dagster.agents.pass_through import unevaluated, unresolved, unsummarized
from karma_dagster.agents.reader import read_document
from karma_dagster.agents.relation_extraction import extract_relations
from karma_dagster.agents.schema_alignment import align_triples
from karma_dagster.agents.single_agent import own_answer_params, paper_chunks
from karma_dagster.agents.summarizer import summarize_segments
from karma_dagster.backbones.base import Backbone
from karma_dagster.backbones.llm.backbone import EVALUATOR_PROMPTS
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.kg_tools import chain as tools_chain
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.schemas.frames import frame_to_records
from karma_dagster.schemas.records import (
    AlignedRow,
    DocumentRow,
    EvaluatedRow,
    MentionRow,
    RawSection,
    ResolvedRow,
    SegmentRow,
    SummaryRow,
    TripleRow,
)
from karma_dagster.schemas.tables import (
    AlignedTable,
    DocumentsTable,
    EntitiesTable,
    EvaluatedTable,
    RelationsTable,
    ResolvedTable,
    SegmentsTable,
    SummariesTable,
)
from karma_dagster.runtime.stage_store import StageStore

LOCAL_CHAIN_VERSION = "local-chain-v2"  # v2: evaluated rows carry evidence_score, C/Cl/R may be n/a (issue 10)
VARIANT_VERSION = "v1"  # of the pass-throughs and the single-agent steps below
KARMA, ABLATED, SINGLE_AGENT = "karma", "ablated", "single_agent"  # what runs in a stage: its agent, a
# pass-through in its place (an ablation, or an agent the single-agent baseline lacks), the baseline's own step
TOOLS = "tools"  # the tools mode's step: a function-calling model and the KG tools (kg_tools/chain.py)
SEED_KG = "seed_kg"  # not a stage: the imported KG a stage may read (entities link against its index)

LOCAL_MODEL_KINDS = frozenset({"scikitlearn"})  # what only the local backbone runs (its relation classifier)
PROVIDER_KINDS = {"anthropic": "claude", "vertex_ai": "gemini", "azure_ai": "azure"}  # litellm prefix -> UI kind


def provider_kind(model: str) -> str:
    """The UI kind of a litellm model string: its provider ("openai/gpt-4o" -> openai), "litellm" without one."""
    prefix = model.split("/", 1)[0].lower() if "/" in model else ""
    prefix = re.sub(r"[^a-z0-9_]", "_", prefix)
    return PROVIDER_KINDS.get(prefix, prefix) or "litellm"


Figures = dict[str, object]  # what a stage reports beside its rows (metadata of its materialization)


class UndeclaredRead(KeyError):
    """A stage read a table it does not list in `reads`: the asset graph would hide that lineage."""


@dataclass
class StageInputs:
    """What a stage's `run` works with: one document of one backbone, and only the tables it declared."""

    stage: Stage
    namespace: str
    document: str
    paths: DataPaths
    backbone: Backbone
    params: KarmaParams

    def table(self, name: str) -> pd.DataFrame:
        if name not in self.stage.reads:
            raise UndeclaredRead(f"stage {self.stage.name!r} reads {name!r} but declares only {list(self.stage.reads)}")
        return StageStore(self.paths.stages_dir).read(self.namespace, name, self.document)

    def records(self, name: str, model: type[BaseModel]) -> list:
        return frame_to_records(self.table(name), model)


@dataclass(frozen=True)
class Stage:
    name: str  # the table and asset name (`<backbone>/<name>`)
    agent: str  # the KARMA agent that computes it (its assets are grouped per backbone: assets/chain.py)
    reads: tuple[str, ...]  # stage tables it reads (its asset deps); `seed_kg` when it reads the KG index
    prompts: tuple[str, ...]  # prompt files its agent renders on an LLM backbone
    row_model: type[BaseModel]
    preview: tuple[str, ...]  # columns of the materialization's markdown preview
    description: str  # what a UI user reads under the asset
    run: Callable[[StageInputs], tuple[list[BaseModel], Figures]]
    table_model: type  # the pandera model of its table: the blocking asset check
    kinds: frozenset[str] = frozenset({"python"})
    report: Callable[[pd.DataFrame], dict[str, int]] = field(default=lambda t: {"rows": len(t)})
    variant: str = KARMA  # KARMA, ABLATED or SINGLE_AGENT (chain_for picks it from a backbone's settings)

    @property
    def tables_read(self) -> tuple[str, ...]:
        return tuple(r for r in self.reads if r != SEED_KG)

    def kinds_for(self, settings: BackboneSettings) -> frozenset[str]:
        """The kinds its asset shows on a backbone with these settings: `kinds` are the local backbone's; on an
        LLM backbone the local model (the relation classifier) gives way to the model provider, in every stage
        that prompts it. spaCy (sentence splitting, dictionary screening), PyMuPDF (PDF parsing) and the entity
        index (lancedb) run on every backbone."""
        if settings.kind != "litellm":
            return self.kinds
        kinds = self.kinds - LOCAL_MODEL_KINDS
        return kinds | {provider_kind(settings.model)} if self.prompts else kinds


# ---------------------------------------------------------------- what each stage computes
def _documents(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    date_range.check_document(x.document)  # no KG date partition for its date: fail this document alone, say why
    catalog = Catalog(x.paths.catalog)
    row = ingest_document(x.document, x.paths.inbox, catalog, x.backbone)
    entry = catalog.lookup(x.document)
    return [row], {
        "title": row.title, "source": row.source_path, "source_format": row.source_format, "date": str(row.date),
        "date_source": row.date_source, "undated": row.date_source != "publication",  # dates never invented silently
        "date_note": (entry.date_note if entry is not None else None) or "", "sections": row.n_sections,
        "chars": row.n_chars,
    }


def _segments(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    doc = x.table("documents").iloc[0]
    sections = [RawSection.model_validate(s) for s in json.loads(doc["sections_json"])]
    kg_context = services.kg_context(x.paths, doc["text"])
    rows = read_document(x.document, sections, x.backbone, x.params, kg_context)
    kept = sum(r.kept for r in rows)
    return rows, {"kg_context": ", ".join(kg_context[:15]), "kept": kept, "dropped": len(rows) - kept,
                  "delta": x.params.delta}


def _summaries(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    rows = summarize_segments(x.records("segments", SegmentRow), x.backbone, x.params)
    return rows, {"sentences_in": sum(r.n_sentences_in for r in rows),
                  "sentences_out": sum(r.n_sentences_out for r in rows)}


def _entities(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    # the seed's names + what this backbone's increments merged before the paper's date (the index grows)
    before = dt.date.fromisoformat(date_of_document_key(x.document))
    index = services.linkable_index(x.paths, x.namespace, before=before)
    found = extract_entities_counted(x.records("summaries", SummaryRow), x.backbone, services.dictionary(x.paths),
                                     index, x.params, services.kg_schema(),
                                     identity=services.identity_index(x.paths, x.namespace, before=before))
    rows, counts = found.rows, found.counts
    return rows, {"mentions": len(rows), "linked": counts.linked, "new": counts.new, "rho": x.params.rho,
                  **counts.figures(), "index_namespace_entities": index.count_extracted()}


def _relations(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    rows = extract_relations(x.records("summaries", SummaryRow), x.records("entities", MentionRow), x.backbone,
                             x.params, segments=x.records("segments", SegmentRow))
    sampled = [r.sample_confidence for r in rows if r.sample_confidence is not None]
    return rows, {"triples": len(rows), "by_relation": dict(Counter(r.relation for r in rows)),
                  "relation_samples": x.params.relation_samples,
                  "mean_sample_confidence": round(sum(sampled) / len(sampled), 4) if sampled else None}


def _aligned(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    rows = align_triples(x.records("relations", TripleRow), x.records("entities", MentionRow), x.backbone,
                         services.kg_schema(), x.params, services.kg_kind_lookup(x.paths))
    review = sum(r.schema_status == "review" for r in rows)
    return rows, {"aligned": len(rows) - review, "schema_review": review}


def _resolved(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    # checked in time: the KG as of the day before the paper's date (its own documents row), and its own triples
    day = pd.Timestamp(x.table("documents").iloc[0]["date"]).date()
    kg_as_of = day - dt.timedelta(days=1)
    existing = services.existing_relations_lookup(x.paths, x.namespace, as_of=kg_as_of)
    rows = resolve_conflicts(x.records("aligned", AlignedRow), existing, x.backbone, services.kg_schema(), x.params,
                             on=day, sentences=services.edge_sentences_lookup(x.paths, x.namespace, as_of=kg_as_of))
    actions = {f"action_{a}": sum(r.action == a for r in rows) for a in ("keep", "discard", "replace", "review")}
    clashes = {f"against_{a}": sum(r.conflict and r.against == a for r in rows) for a in ("kg", "same_document")}
    verdicts = {f"verdict_{v}": sum(r.verdict == v for r in rows) for v in ("agree", "contradict")}
    return rows, {"conflicts": sum(r.conflict for r in rows), **actions, **clashes, **verdicts,
                  "kg_as_of": str(kg_as_of)}


def _evaluated(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    segments, entities = x.table("segments"), x.table("entities")
    relevance = dict(zip(segments["segment_id"], segments["relevance"].astype(float)))
    linked = set(entities.loc[entities["status"] == "linked", "entity_id"])
    resolved = x.records("resolved", ResolvedRow)
    contexts = triple_contexts(resolved, x.records("entities", MentionRow), x.records("segments", SegmentRow))
    rows = evaluate_triples(resolved, relevance, x.backbone, x.params, is_linked=linked, contexts=contexts)
    accepted = sum(r.accepted for r in rows)
    figures: Figures = {"accepted": accepted, "rejected": len(rows) - accepted}
    threshold = x.backbone.admission_threshold(x.params.admission_precision)
    if callable(state := getattr(x.backbone, "calibration_state", None)):  # (duck-typed stand-ins have none)
        figures["confidence"] = state()  # a calibrated probability, or an uncalibrated score
    if callable(holds := getattr(x.backbone, "holds_uncalibrated", None)) and holds():
        figures["to_review_uncalibrated"] = sum(r.accepted is False and (r.admission or "").startswith("held for review")
                                                for r in rows)
    elif threshold is None:
        figures["theta"] = x.params.integrate_threshold_for(x.backbone.judge_signals == "llm")
    else:  # a calibrated model decided: its operating point, and what was held back for review
        figures.update({"admission_precision": x.params.admission_precision, "admission_threshold": round(threshold, 4),
                        "to_review_below_point": sum(r.accepted is False and (r.admission or "").startswith("below")
                                                     for r in rows),
                        "to_review_blocked": sum(r.accepted is False and kept_and_aligned(r)
                                                 and not (r.admission or "").startswith("below") for r in rows)})
    return rows, figures


# ---------------------------------------------------------------- variants: pass-throughs and the single-agent steps
def _unsummarized(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    rows = unsummarized(x.records("segments", SegmentRow))
    return rows, {"pass_through": "each kept segment's text unchanged",
                  "sentences_in": sum(r.n_sentences_in for r in rows),
                  "sentences_out": sum(r.n_sentences_out for r in rows)}


def _unresolved(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    rows = unresolved(x.records("aligned", AlignedRow))
    return rows, {"pass_through": "no conflict check: verdict skipped, aligned triples kept",
                  "conflicts": 0, **{f"action_{a}": sum(r.action == a for r in rows) for a in ("keep", "review")}}


def _unevaluated(x: StageInputs) -> tuple[list[BaseModel], Figures]:
    rows = unevaluated(x.records("resolved", ResolvedRow))
    accepted = sum(r.accepted for r in rows)
    return rows, {"pass_through": "no C, Cl, R (n/a), no Theta: aligned and kept triples accepted",
                  "accepted": accepted, "rejected": len(rows) - accepted}


def _paper_chunks(max_chars: int) -> Callable[[StageInputs], tuple[list[BaseModel], Figures]]:
    def run(x: StageInputs) -> tuple[list[BaseModel], Figures]:
        doc = x.table("documents").iloc[0]
        sections = [RawSection.model_validate(s) for s in json.loads(doc["sections_json"])]
        rows = paper_chunks(x.document, sections, max_chars)
        kept = sum(r.kept for r in rows)
        return rows, {"chunks": kept, "dropped": len(rows) - kept, "max_chars": max_chars,
                      "reader_filter": "none (single-agent baseline)"}

    return run


def _own_answer(relations: Callable[[StageInputs], tuple[list[BaseModel], Figures]]
                ) -> Callable[[StageInputs], tuple[list[BaseModel], Figures]]:
    """The relation stage with the backbone's own answer in place of theta_r (no tuned threshold)."""
    def run(x: StageInputs) -> tuple[list[BaseModel], Figures]:
        own = own_answer_params(x.params, x.backbone)
        rows, figures = relations(replace(x, params=own))
        return rows, {**figures, "theta": f"none: the model's own answer (p >= {own.theta_for('any')})"}

    return run


# What runs instead of an agent: per stage name, the pass-through and what the UI says about it.
PASS_THROUGHS: dict[str, tuple[Callable[[StageInputs], tuple[list[BaseModel], Figures]], str]] = {
    "summaries": (_unsummarized, "ABLATED (no summarizer): each kept segment's text passes unchanged."),
    "resolved": (_unresolved, "ABLATED (no conflict resolution): no clash with the KG is looked for; every aligned "
                              "triple is kept (verdict skipped)."),
    "evaluated": (_unevaluated, "ABLATED (no evaluator): no confidence, clarity, relevance (n/a) and no Theta; "
                                "aligned and kept triples are accepted."),
}


# ---------------------------------------------------------------- what each stage adds to the run report
def _report_documents(t: pd.DataFrame) -> dict[str, int]:
    return {"documents": len(t)}


def _report_segments(t: pd.DataFrame) -> dict[str, int]:
    return {"segments_kept": int(t["kept"].sum()), "segments_dropped": int((~t["kept"].astype(bool)).sum())}


def _report_summaries(t: pd.DataFrame) -> dict[str, int]:
    return {"summaries": len(t)}


def _report_entities(t: pd.DataFrame) -> dict[str, int]:
    return {"mentions": len(t), "mentions_linked": int((t["status"] == "linked").sum()),
            "mentions_new": int((t["status"] == "new").sum())}


def _report_evaluated(t: pd.DataFrame) -> dict[str, int]:
    return {"triples_proposed": len(t), "triples_schema_review": int((t["schema_status"] == "review").sum()),
            "triples_contradicting": int(t["conflict"].sum()), "triples_accepted": int(t["accepted"].sum())}


def _nothing(_t: pd.DataFrame) -> dict[str, int]:
    return {}


STAGES: tuple[Stage, ...] = (
    Stage("documents", "ingestion", reads=(), prompts=("ingestion",), row_model=DocumentRow,
          preview=("doc_key", "title", "journal", "pub_date", "doi", "pmid", "n_chars"),
          description="IA: the paper's normalized text, sections and metadata (title, authors, journal, date, DOI, "
                      "PMID).",
          run=_documents, table_model=DocumentsTable, kinds=frozenset({"python", "pymupdf"}), report=_report_documents),
    Stage("segments", "reader", reads=("documents", SEED_KG), prompts=("reader",), row_model=SegmentRow,
          preview=("segment_id", "section", "relevance", "kept", "drop_reason", "text"),
          description="RA: the paper cut into sections; references and acknowledgements dropped; relevance R(s) per "
                      "segment against the KG's entities, kept when R(s) >= delta.",
          run=_segments, table_model=SegmentsTable, kinds=frozenset({"python", "spacy"}), report=_report_segments),
    Stage("summaries", "summarizer", reads=("segments",), prompts=("summarizer",),
          row_model=SummaryRow, preview=("summary_id", "section", "n_sentences_in", "n_sentences_out", "text"),
          description="SA: each kept segment condensed, keeping entities, numbers and relation words.",
          run=_summaries, table_model=SummariesTable, report=_report_summaries),
    Stage("entities", "entity_extraction", reads=("summaries", SEED_KG),
          prompts=("entity_extraction",), row_model=MentionRow,
          preview=("text", "type", "kind", "long_form", "status", "linked_to", "in_dictionary", "kg_name",
                   "entity_id", "distance"),
          description="EEA: mentions (NER screened by the KG/MeSH dictionary, abbreviations resolved; names the "
                      "dictionary lacks kept as unlisted unless garbage, every drop counted by reason), each linked "
                      "to the nearest KG entity (seed, or one this backbone's earlier increments merged) or new "
                      "(distance > rho) with the schema kind of its type (KARMA Eq. 14).",
          run=_entities, table_model=EntitiesTable, kinds=frozenset({"python", "spacy", "lancedb"}), report=_report_entities),
    Stage("relations", "relation_extraction", reads=("entities", "summaries", "segments"),
          prompts=("relation_extraction",), row_model=TripleRow,
          preview=("head_name", "relation", "tail_name", "probability", "evidence"),
          description="REA: candidate triples between entities of one sentence, every relation type with "
                      "p >= theta_r, with the evidence sentence (the local backbone: every pair of the entities "
                      "the summaries kept, read in their whole segments).",
          run=_relations, table_model=RelationsTable, kinds=frozenset({"python", "scikitlearn"}), report=_nothing),
    Stage("aligned", "schema_alignment", reads=("relations", "entities", SEED_KG),
          prompts=("schema_alignment",), row_model=AlignedRow,
          preview=("head_name", "head_kg_type", "kg_relation", "metaedge", "tail_name", "tail_kg_type",
                   "alignment_prob", "schema_status"),
          description="SAA: entity kinds and relations mapped onto the KG schema; no match is flagged for schema "
                      "review.",
          run=_aligned, table_model=AlignedTable, kinds=frozenset({"python", "duckdb"}), report=_nothing),
    Stage("resolved", "conflict_resolution", reads=("aligned", "documents", SEED_KG),
          prompts=("conflict_resolution", "conflict_advocate"), row_model=ResolvedRow,
          preview=("head_name", "kg_relation", "tail_name", "against", "contradicts", "verdict", "debate_confidence",
                   "action", "adjudication"),
          description="CRA, checked in time: triples that contradict the namespace's KG as of the day before the "
                      "paper's date (seed + earlier increments, minus superseded edges) or another triple of the "
                      "same paper are debated, then adjudicated on both sides' support and dates: keep, discard, "
                      "replace the older edge (kept in history) or review. Papers of the same day meet at the merge.",
          run=_resolved, table_model=ResolvedTable, kinds=frozenset({"python", "duckdb"}), report=_nothing),
    Stage("evaluated", "evaluator", reads=("resolved", "segments", "entities"),
          prompts=EVALUATOR_PROMPTS, row_model=EvaluatedRow,
          preview=("head_name", "kg_relation", "tail_name", "confidence", "clarity", "relevance", "score",
                   "accepted"),
          description="EA: confidence, clarity and relevance per triple; accepted for the KG when their mean >= "
                      "Theta.",
          run=_evaluated, table_model=EvaluatedTable, report=_report_evaluated),
)
STAGE_NAMES = tuple(s.name for s in STAGES)
FINAL_STAGE = "evaluated"  # what the KG increment merges


def names(stages: Sequence[Stage] = STAGES) -> list[str]:
    return [s.name for s in stages]


def by_name(name: str, stages: Sequence[Stage] = STAGES) -> Stage:
    for stage in stages:
        if stage.name == name:
            return stage
    raise KeyError(f"no stage {name!r}; stages: {names(stages)}")


def ablated(stage: Stage) -> Stage:
    """The stage with its agent switched off: same name, reads and table (the asset graph keeps its shape), a
    pass-through in place of the agent, no prompts."""
    if stage.name not in PASS_THROUGHS:
        raise KeyError(f"stage {stage.name!r} has no pass-through; ablatable stages: {sorted(PASS_THROUGHS)}")
    run, description = PASS_THROUGHS[stage.name]
    return replace(stage, run=run, prompts=(), description=description, kinds=frozenset({"python"}), variant=ABLATED)


def _single_agent(stage: Stage, settings: BackboneSettings) -> Stage:
    """The single-agent baseline's version of a stage: no reader filter, summarizer, theta_r, debate or Theta."""
    if stage.name in ("summaries", "resolved", "evaluated"):
        return ablated(stage)
    one_generation = ("single_agent",) if settings.kind == "litellm" else stage.prompts
    if stage.name == "segments":
        return replace(stage, run=_paper_chunks(settings.single_agent_chunk_chars), prompts=(), variant=SINGLE_AGENT,
                       description="Single-agent baseline: the paper's content as one segment (paper-sized chunks "
                                   f"over {settings.single_agent_chunk_chars} characters); no reader filter.")
    if stage.name == "entities":
        return replace(stage, prompts=one_generation, variant=SINGLE_AGENT,
                       description="Single-agent baseline: the entities of the one generation per paper (or chunk), "
                                   "linked to the nearest KG entity or new.")
    if stage.name == "relations":
        return replace(stage, run=_own_answer(stage.run), prompts=one_generation, variant=SINGLE_AGENT,
                       description="Single-agent baseline: the triples of the one generation per paper (or chunk), "
                                   "as the model answers them (no theta_r).")
    return stage


def _tools_mode(stage: Stage, settings: BackboneSettings) -> Stage:
    """The tools mode's version of a stage: paper chunks, no summarizer, the tool loop in the entities stage, and
    its staged statements carried through relations .. evaluated (each in its own row model)."""
    if stage.name == "summaries":
        return ablated(stage)
    if stage.name == "segments":
        return replace(stage, run=_paper_chunks(settings.single_agent_chunk_chars), prompts=(), variant=TOOLS,
                       description="Tools mode: the paper's content as one segment (paper-sized chunks over "
                                   f"{settings.single_agent_chunk_chars} characters); no reader filter.")
    if stage.name == "entities":
        return replace(stage, run=tools_chain.entities, prompts=(tools_chain.PROMPT,), variant=TOOLS,
                       kinds=frozenset({"python", "lancedb", "duckdb"}),
                       description="Tools mode: a function-calling model reads each segment and grows the KG "
                                   "only through the validated KG tools (search / create instances, classes, "
                                   "properties, statements); refused calls are answered with the reason. Rows: "
                                   "the instances it created; metadata: the loop's figures and transcript.")
    if stage.name in ("relations", "aligned", "resolved", "evaluated"):
        return replace(stage, run=tools_chain.staged(stage.row_model, stage.name), prompts=(), variant=TOOLS,
                       kinds=frozenset({"python"}),
                       description="Tools mode: the statements the model staged through create_statement (validated "
                                   "against the schema and the KG when called), carried through unchanged.")
    return stage


def chain_for(settings: BackboneSettings, registry: Sequence[Stage] = STAGES) -> tuple[Stage, ...]:
    """The stages a backbone with these settings runs: `registry` with each ablated agent's stage replaced by its
    pass-through (multi_agent), or the single-agent baseline's variants (single_agent). Same names, same reads:
    every backbone's chain is the same asset graph, so the comparison compares stage by stage."""
    agents = {s.agent for s in registry}
    missing = [a for a in settings.ablate if a not in agents]
    if missing:
        raise ValueError(f"ablate {missing}: no stage of the chain runs that agent (agents: {sorted(agents)})")
    chain = tuple(variant_of(s, settings) for s in registry)
    check(chain)
    return chain


def variant_of(stage: Stage, settings: BackboneSettings) -> Stage:
    """What runs in `stage` for a backbone with these settings (a variant stays itself)."""
    if stage.variant != KARMA:
        return stage
    if settings.mode == "single_agent":
        return _single_agent(stage, settings)
    if settings.mode == TOOLS:
        return _tools_mode(stage, settings)
    return ablated(stage) if stage.agent in settings.ablate else stage


def all_prompts(stages: Sequence[Stage] = STAGES) -> list[str]:
    """Every prompt an LLM backbone renders for these stages (it checks they exist when it is built)."""
    return sorted({p for s in stages for p in s.prompts})


def check(stages: Sequence[Stage]) -> None:
    """A stage may read only stages listed before it (or the seed KG): the chain is a DAG in list order."""
    seen: set[str] = set()
    for stage in stages:
        if stage.name in seen:
            raise ValueError(f"stage {stage.name!r} is listed twice")
        unknown = [r for r in stage.tables_read if r not in seen]
        if unknown:
            raise ValueError(f"stage {stage.name!r} reads {unknown}, which no earlier stage writes")
        seen.add(stage.name)


def code_version(stage: Stage, settings: BackboneSettings, prompts_root: Path | str | None = None) -> str:
    """An asset's code_version: its prompt files' hash on LLM backbones, the algorithm versions on local;
    a pass-through or a single-agent step is other code (`variant`), and every stage of the single-agent baseline
    runs on another backbone (over an LLM, another prompt file; its chunk size cuts the papers)."""
    from karma_dagster.runtime.prompts import PromptStore

    stage = variant_of(stage, settings)
    if settings.kind == "litellm":
        version = PromptStore(prompts_root or None).code_version_for(list(stage.prompts))
        if "conflict_advocate" in stage.prompts:  # the advocates' rounds are part of what answers the stage
            version += f"+rounds{settings.debate_rounds}"
    else:
        version = f"{LOCAL_CHAIN_VERSION}:{stage.name}"
    if stage.variant != KARMA:
        version += f"+{stage.variant}-{VARIANT_VERSION}"
    if settings.mode == "multi_agent":
        return version
    version += f"+chunk{settings.single_agent_chunk_chars}"
    if settings.kind == "litellm":
        mode_prompt = tools_chain.PROMPT if settings.mode == TOOLS else "single_agent"
        return version + f"+{settings.mode}:" + PromptStore(prompts_root or None).code_version_for([mode_prompt])
    return version + f"+{settings.mode}"


def chain_version(backbone: Backbone) -> str:
    """The provenance 'prompt version' of a triple: what answered extraction and evaluation."""
    return ";".join(backbone.prompt_id(a) for a in ("entity_extraction", "relation_extraction", "evaluator"))


check(STAGES)
