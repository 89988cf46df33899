"""The `tools` chain mode (backbones.yaml `mode: tools`, LLM backbones): a function-calling model grows the KG
through the KG tools in the KARMA chain's place, under the same asset graph, so the comparison shows it beside
the KARMA chain and the single-agent baseline.

Stages (stages.py picks these runs for the mode): documents as usual; segments = paper-sized chunks (no reader
filter); summaries = a pass-through; **entities** = the tool loop: the model gets the tool schemas and each
segment (prompts/tools_agent/), calls tools until it stops or the step limit, and every accepted write is staged in
the document's `tool_statements` / `tool_entities` tables (the final stage's row format), every call in its
`tool_calls` transcript; the stage's rows are the staged instances and its metadata the loop's figures and a
transcript excerpt. relations, aligned, resolved and evaluated carry the staged statements through, each in its
own row model, so the KG increment merges the `evaluated` table exactly as a chain's (collect_document,
merge_increment). A rerun of the entities stage starts the document afresh.

Tool calls are not answered from the LLM response cache (a rerun asks the model again); their tokens and cost go to
the backbone's usage like any agent's (the stage's ledger row).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel

from karma_dagster.runtime import services
from karma_dagster.kg_tools.loop import run_tool_loop
from karma_dagster.kg_tools.session import KGTools
from karma_dagster.kg_tools.staging import DocumentStage
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.schemas.records import SummaryRow
from karma_dagster.runtime.stage_store import StageStore

PROMPT = "tools_agent"
STATEMENTS, ENTITIES = "tool_statements", "tool_entities"  # the tools chain's staging tables
STEP_LIMIT = 40  # tool calls per document: a model that never stops is stopped here
TRANSCRIPT_ROWS = 30  # calls shown in the entities asset's metadata (all of them are in the tool_calls table)
_LOG = logging.getLogger("karma_dagster.tools")


def no_tool_call_warning(model: str, segments: int) -> str:
    """What a run says when the model answered every segment without calling a tool: nothing was written."""
    return (f"WARNING: model {model!r} made no tool call on {segments} segment(s): the document added nothing to "
            "the KG. A model served without a function-calling chat format answers in prose (for `karma llm-serve`, "
            "ask for the `-tools` model name, e.g. hosted_vllm/smollm2-tools)")


class _Inputs(Protocol):
    """What a stage run gets (stages.StageInputs; not imported: stages.py imports this module)."""

    namespace: str
    document: str
    paths: DataPaths
    backbone: Any

    def records(self, name: str, model: type[BaseModel]) -> list: ...


def _llm(backbone: Any) -> Any:
    """The LLM backbone under the tools-mode wrapper (backbones/single_agent.ToolsModeBackbone)."""
    return getattr(backbone, "base", backbone)


def _llm_params(backbone: Any) -> dict[str, Any]:
    """litellm arguments of an LLM backbone's client (model, server, key, limits)."""
    client = getattr(_llm(backbone), "client", None)
    if client is None or not getattr(client, "model", ""):
        raise ValueError(f"backbone {getattr(backbone, 'name', backbone)!r}: the tools mode needs an LLM backbone "
                         "(kind litellm) that calls tools; the local backbone calls none")
    params: dict[str, Any] = {"model": client.model, "temperature": client.temperature,
                              "max_tokens": client.max_tokens, "timeout": client.timeout,
                              "num_retries": client.max_retries}
    if client.api_base:
        params["api_base"] = client.api_base
    key = getattr(client, "_api_key", None)
    if key:
        params["api_key"] = key
    return params


def _openings(x: _Inputs, segments: list[SummaryRow]) -> list[list[dict[str, str]]]:
    schema = services.kg_schema()
    properties = [f"{me.relation} ({me.source} -> {me.target})" for me in schema.metaedges]
    llm = _llm(x.backbone)
    return [llm.prompts.render(PROMPT, llm.prompt_versions.get(PROMPT), domain=llm.domain,
                                      classes=schema.node_kinds, properties=properties, document=x.document,
                                      segment_id=s.segment_id, text=s.text).messages
            for s in segments]


def _stage(x: _Inputs) -> DocumentStage:
    return DocumentStage(StageStore(x.paths.stages_dir), x.namespace, x.document, STATEMENTS, ENTITIES)


def entities(x: _Inputs) -> tuple[list[BaseModel], dict[str, object]]:
    """The tool loop over the document's segments; rows = the instances it staged."""
    segments = x.records("summaries", SummaryRow)
    stage = _stage(x)
    with stage:
        stage.reset()
    tools = KGTools(x.paths, namespace=x.namespace, caller=x.backbone.name, document=x.document,
                    staging=(STATEMENTS, ENTITIES))
    # the stage's usage, booked request by request (a loop that fails half-way keeps what it spent): the cost
    # ledger and the asset's token figures count the tool loop
    result = run_tool_loop(tools, _openings(x, segments), max_steps=STEP_LIMIT,
                           on_usage=getattr(_llm(x.backbone), "_record", None), **_llm_params(x.backbone))
    transcript = tools.transcript()
    rows = stage.mentions()
    figures: dict[str, object] = {
        "tool_calls": result.steps, "model_requests": result.rounds, "stopped": result.stopped,
        "calls_accepted": result.accepted, "calls_refused": result.refused, "step_limit": STEP_LIMIT,
        "calls_repeated": result.repeated, "segments_without_tool_call": result.silent_segments,
        "statements_staged": len(stage.triples()), "instances_staged": sum(r.status == "new" for r in rows),
        "segments": len(segments),
        "transcript": [{"seq": r.seq, "tool": r.tool, "ok": r.ok, "arguments": r.arguments[:300],
                        "answer": r.message[:300]} for r in transcript[:TRANSCRIPT_ROWS]],
    }
    if result.steps == 0:  # kept with the stage's table too: the run report reads it from there (report.py)
        figures["warning"] = no_tool_call_warning(_llm_params(x.backbone)["model"], len(segments))
        _LOG.warning("%s, document %s: %s", x.backbone.name, x.document, figures["warning"])
    return rows, figures


def staged(model: type[BaseModel], what: str) -> Callable[[_Inputs], tuple[list[BaseModel], dict[str, object]]]:
    """A later stage of the tools chain: the staged statements in this stage's row model."""
    fields = list(model.model_fields)

    def run(x: _Inputs) -> tuple[list[BaseModel], dict[str, object]]:
        rows = [model.model_validate({k: v for k, v in r.model_dump().items() if k in fields})
                for r in _stage(x).triples()]
        return rows, {"statements": len(rows), "tools_mode": what}

    return run
