"""The tools' arguments as pydantic models: the JSON schemas a function-calling model is given, and the check
every call's arguments pass before a tool runs (malformed JSON, a missing or unknown argument, a wrong type:
refused with the field named, nothing run)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from karma_dagster.kg_tools.bounds import NEIGHBOURS_LIMIT_MAX, SEARCH_K_MAX
from karma_dagster.kg_tools.results import Refused


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchInstanceArgs(_Args):
    """Find KG instances (entities) by name: top k with ids, labels, types and a short comment. Search before you
    create, and search again under a synonym or the full name when nothing is close."""

    text: str = Field(description="a name or a few words, e.g. 'aspirin' or 'tumor necrosis factor'")
    type: str | None = Field(None, description="restrict to a class (call search_class), e.g. 'Compound'")
    k: int = Field(5, ge=1, le=SEARCH_K_MAX, description="how many results")


class CreateInstanceArgs(_Args):
    """Stage a new instance of a class in this document (refused when one of that label and class exists)."""

    label: str = Field(description="its name as the document gives it")
    comment: str = Field(description="one sentence: what it is")
    type: str = Field(description="its class label (call search_class)")


class SearchClassArgs(_Args):
    """Find classes (node kinds) by name or description."""

    text: str
    k: int = Field(5, ge=1, le=SEARCH_K_MAX)


class CreateClassArgs(_Args):
    """Add a class; under a super class it can carry instances at once."""

    label: str
    comment: str = Field(description="one sentence: what its instances are")
    super_class: str | None = Field(None, description="an existing class it narrows, e.g. 'Gene'")


class SearchPropertyArgs(_Args):
    """Find properties (relations) by name or description, with the classes they join."""

    text: str
    k: int = Field(5, ge=1, le=SEARCH_K_MAX)


class CreatePropertyArgs(_Args):
    """Add a property; under a super property it can carry statements at once."""

    label: str
    comment: str = Field(description="one sentence: what it states")
    domain: str | None = Field(None, description="the class of its subjects")
    range: str | None = Field(None, description="the class of its objects")
    super_property: str | None = Field(None, description="an existing property it narrows, e.g. 'treats'")


class CreateStatementArgs(_Args):
    """Stage a statement subject -predicate-> object with the sentence that states it. Refused, with the reason,
    when an instance is unknown, the predicate does not join their classes or the KG contradicts it."""

    subject: str = Field(description="an instance id (from search_instance or create_instance)")
    predicate: str = Field(description="a property label (from search_property)")
    object: str = Field(description="an instance id")
    evidence: str = Field(description="the sentence of the document that states it")
    confidence: float | None = Field(None, ge=0.0, le=1.0, description="how sure the document is (default 0.5)")
    segment: str | None = Field(None, description="the id of the segment the sentence is in, when known")


class NeighboursArgs(_Args):
    """An instance's edges in the KG, strongest first."""

    entity: str
    limit: int = Field(25, ge=1, le=NEIGHBOURS_LIMIT_MAX)


class EdgesBetweenArgs(_Args):
    """The KG's edges between two instances, in both directions."""

    a: str
    b: str


class EdgeProvenanceArgs(_Args):
    """Who stated an edge, in which document, with which evidence sentence, and its history."""

    subject: str
    predicate: str
    object: str


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
