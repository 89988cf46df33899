"""The tools' arguments as pydantic models: the JSON schemas a function-calling model is given, and the check
every call's arguments pass before a tool runs (malformed JSON, a missing or unknown argument, a wrong type:
refused with the field named, nothing run)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from karma_dagster.ingest.keys import KEY_MAX_CHARS
from karma_dagster.kg import names as kg_names
from karma_dagster.kg_tools.bounds import (COMMENT_MAX_CHARS, CONTEXT_BUDGET_DEFAULT, CONTEXT_BUDGET_MAX,
                                           CONTEXT_BUDGET_MIN, EVIDENCE_MAX_CHARS, NEIGHBOURS_LIMIT_MAX, QUESTION_MAX_CHARS,
                                           SEARCH_K_MAX, SEARCH_TEXT_MAX_CHARS)
from karma_dagster.kg_tools.results import Refused

DOCUMENT_TEXT = "the key of the document the evidence comes from, e.g. 2016-02-12_pmc4737013 (writes are staged per document)"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Every field is described and bounded here, once: a function-calling model and an MCP client read these schemas
# blind, and the bounds are bounds.py's (a value past one is refused before any tool runs).
_ID = kg_names.ID_MAX_CHARS
_TYPE = kg_names.TYPE_MAX_CHARS
_LABEL = kg_names.LABEL_MAX_CHARS


def _k(what: str) -> Any:
    return Field(5, ge=1, le=SEARCH_K_MAX, description=f"how many {what} to return (1 to {SEARCH_K_MAX})")


def _search_text(example: str) -> Any:
    return Field(min_length=1, max_length=SEARCH_TEXT_MAX_CHARS,
                 description=f"a name or a few words to look up, e.g. {example}")


def _entity_id(role: str) -> Any:
    return Field(min_length=1, max_length=_ID, description=f"{role}: an instance id as search_instance returns it, "
                                                           "e.g. 'Gene::2099' or 'NEW:Gene:frb1'")


class SearchInstanceArgs(_Args):
    """Find KG instances (entities) by name: top k with ids, labels, types and a short comment. Search before you
    create, and search again under a synonym or the full name when nothing is close."""

    text: str = _search_text("'aspirin' or 'tumor necrosis factor'")
    type: str | None = Field(None, max_length=_TYPE,
                             description="restrict to a class (call search_class), e.g. 'Compound'")
    k: int = _k("instances")


class CreateInstanceArgs(_Args):
    """Stage a new instance of a class in this document (refused when one of that label and class exists)."""

    label: str = Field(min_length=1, max_length=kg_names.NAME_MAX_CHARS, description="its name as the document gives it")
    comment: str = Field(min_length=1, max_length=COMMENT_MAX_CHARS, description="one sentence: what it is")
    type: str = Field(min_length=1, max_length=_TYPE, description="its class label (call search_class), e.g. 'Gene'")


class SearchClassArgs(_Args):
    """Find classes (node kinds) by name or description."""

    text: str = _search_text("'drug' or 'disease'")
    k: int = _k("classes")


class CreateClassArgs(_Args):
    """Add a class; under a super class it can carry instances at once."""

    label: str = Field(min_length=1, max_length=_TYPE, description="the class name, e.g. 'Cell Line'")
    comment: str = Field(min_length=1, max_length=COMMENT_MAX_CHARS, description="one sentence: what its instances are")
    super_class: str | None = Field(None, max_length=_TYPE, description="an existing class it narrows, e.g. 'Gene'")


class SearchPropertyArgs(_Args):
    """Find properties (relations) by name or description, with the classes they join."""

    text: str = _search_text("'treats' or 'binds'")
    k: int = _k("properties")


class CreatePropertyArgs(_Args):
    """Add a property; under a super property it can carry statements at once."""

    label: str = Field(min_length=1, max_length=_LABEL, description="the property name, e.g. 'inhibits'")
    comment: str = Field(min_length=1, max_length=COMMENT_MAX_CHARS, description="one sentence: what it states")
    domain: str | None = Field(None, max_length=_TYPE, description="the class of its subjects")
    range: str | None = Field(None, max_length=_TYPE, description="the class of its objects")
    super_property: str | None = Field(None, max_length=_LABEL,
                                       description="an existing property it narrows, e.g. 'treats'")


class CreateStatementArgs(_Args):
    """Stage a statement subject -predicate-> object with the sentence that states it. Refused, with the reason,
    when an instance is unknown, the predicate does not join their classes or the KG contradicts it."""

    subject: str = _entity_id("the subject")
    predicate: str = Field(min_length=1, max_length=_LABEL, description="a property label (from search_property)")
    object: str = _entity_id("the object")
    evidence: str = Field(min_length=1, max_length=EVIDENCE_MAX_CHARS,
                          description="the sentence of the document that states it, quoted")
    confidence: float | None = Field(None, ge=0.0, le=1.0, description="how sure the document is, 0 to 1 (default 0.5)")
    segment: str | None = Field(None, max_length=_ID, description="the id of the segment the sentence is in, when known")


class NeighboursArgs(_Args):
    """An instance's edges in the KG, strongest first."""

    entity: str = _entity_id("the instance")
    limit: int = Field(25, ge=1, le=NEIGHBOURS_LIMIT_MAX,
                       description=f"how many edges to return (1 to {NEIGHBOURS_LIMIT_MAX})")


class EdgesBetweenArgs(_Args):
    """The KG's edges between two instances, in both directions."""

    a: str = _entity_id("one instance")
    b: str = _entity_id("the other instance")


class EdgeProvenanceArgs(_Args):
    """Who stated an edge, in which document, with which evidence sentence, and its history."""

    subject: str = _entity_id("the subject")
    predicate: str = Field(min_length=1, max_length=_LABEL, description="the edge's property label, e.g. 'treats'")
    object: str = _entity_id("the object")


class KgContextArgs(_Args):
    """What the KG knows that bears on a question, for answering it: the entities it names, their 1- and 2-hop
    triples ranked GraphRAG-local-search style (relevance to the entities, relation words of the question,
    confidence, papers, recency), with the evidence sentences and their documents, cut to a token budget; `text`
    is a ready-to-paste prompt block whose [n] mark the triples."""

    question: str = Field(min_length=1, max_length=QUESTION_MAX_CHARS,
                          description="the question as the user asked it, e.g. 'Which drugs cause thrombocytopenia?'")
    budget: int = Field(CONTEXT_BUDGET_DEFAULT, ge=CONTEXT_BUDGET_MIN, le=CONTEXT_BUDGET_MAX,
                        description=f"the most tokens of context to return ({CONTEXT_BUDGET_MIN} to "
                                    f"{CONTEXT_BUDGET_MAX}; ~3 characters a token)")
    as_of: str | None = Field(None, min_length=10, max_length=10, pattern=r"^\d{4}-\d{2}-\d{2}$",
                              description="read the KG as it was on this date, YYYY-MM-DD (default: now)")


class MergeDocumentArgs(_Args):
    """Merge the document's staged statements (and every other staged document of its date) into the KG, with the
    same validation and transaction as the date increment."""

    document: str = Field(min_length=1, max_length=KEY_MAX_CHARS, description=DOCUMENT_TEXT)


ARGS: dict[str, type[_Args]] = {
    "search_instance": SearchInstanceArgs, "create_instance": CreateInstanceArgs,
    "search_class": SearchClassArgs, "create_class": CreateClassArgs,
    "search_property": SearchPropertyArgs, "create_property": CreatePropertyArgs,
    "create_statement": CreateStatementArgs,
}
READ_ARGS: dict[str, type[_Args]] = {
    "neighbours": NeighboursArgs, "edges_between": EdgesBetweenArgs, "edge_provenance": EdgeProvenanceArgs,
}
ALL_ARGS = {**ARGS, **READ_ARGS}
# Served beside the tools by `karma mcp` (mcp_server/): built by cogmg/kg_context.py, a layer above the tools.
CONTEXT_ARGS: dict[str, type[_Args]] = {"kg_context": KgContextArgs}


def parameters(model: type[_Args]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments (no titles: a model reads names and descriptions)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema["additionalProperties"] = False
    return schema


def description(model: type[_Args]) -> str:
    return " ".join((model.__doc__ or "").split())


def tool_schemas(include_read: bool = False) -> list[dict[str, Any]]:
    """The tools in the OpenAI / litellm function-calling format."""
    chosen = ALL_ARGS if include_read else ARGS
    return [{"type": "function", "function": {"name": name, "description": description(model),
                                              "parameters": parameters(model)}}
            for name, model in chosen.items()]


def parse_arguments(name: str, arguments: str | dict | None) -> dict[str, Any]:
    """A call's arguments, checked against the tool's model; Refused names the problem."""
    model = ALL_ARGS.get(name)
    if model is None:
        raise Refused(f"no tool {name!r}; the tools are: {', '.join(ALL_ARGS)}")
    if arguments is None or arguments == "":
        raw: object = {}
    elif isinstance(arguments, str):
        try:
            raw = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise Refused(f"{name}: the arguments are not valid JSON ({exc.msg} at character {exc.pos}); send "
                          "one JSON object") from exc
    else:
        raw = arguments
    if not isinstance(raw, dict):
        raise Refused(f"{name}: the arguments must be a JSON object, got {type(raw).__name__}")
    try:
        return model.model_validate(raw).model_dump()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())
        raise Refused(f"{name}: malformed arguments ({problems})") from exc
