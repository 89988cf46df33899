"""CogMG's LLM steps on an LLM backbone: decomposition into schema-constrained steps, and completion.

The calls go through the backbone's own client (cache, retries, deadline, JSON repair) with versioned prompts
(prompts/cogmg_decompose, prompts/cogmg_complete). A step whose relation is outside the KG schema is asked again
once with the offending labels named (as CogMG does); what is still outside after that is dropped and noted. A
step may chain a second hop (`then`, cogmg_decompose.v2): never more than two relations.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from karma_dagster.runtime import services
from karma_dagster.cogmg.models import Hop, LinkedEntity, OpenTriple, QueryPlan, QueryStep
from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.runtime.paths import DataPaths

DECOMPOSE, COMPLETE = "cogmg_decompose", "cogmg_complete"
MAX_STEPS = 6  # a plan's steps (each of up to two hops): the model's fan-out is bounded like the lexicon's


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HopOutput(_Out):
    relation: str
    direction: Literal["out", "in"] = "out"
    answer_kind: str = ""


class StepOutput(_Out):
    entity: str
    entity_kind: str = ""
    relation: str
    direction: Literal["out", "in"] = "out"
    answer_kind: str = ""
    then: HopOutput | None = None  # a second hop from the nodes the first reaches (cogmg_decompose.v2)


class DecomposeOutput(_Out):
    steps: list[StepOutput] = []


class FillOutput(_Out):
    triple: int
    answer: str
    answer_kind: str = ""


class CompleteOutput(_Out):
    fills: list[FillOutput] = []


def _ask(backbone: Any, agent: str, model: type[BaseModel], constrain: dict[str, Any] | None = None,
         **variables: Any) -> Any:
    rendered = backbone.prompts.render(agent, None, domain=backbone.domain, **variables)
    parsed, _usage = backbone.client.complete_json(rendered, model, constrain=constrain)
    return parsed


def _schema_terms() -> dict[str, Any]:
    """What a grammar-constrained server may write for a plan's relation and kinds: the KG schema's own terms."""
    schema = services.kg_schema()
    kinds = sorted(schema.node_kinds)
    return {"relation": sorted(schema.relation_names), "entity_kind": kinds, "answer_kind": kinds}


def prompt_id(backbone: Any, agent: str) -> str:
    return backbone.prompts.prompt_id(agent)


def link_name(name: str, kind: str, data: DataPaths, namespace: str, rho: float) -> LinkedEntity:
    """A model's entity name -> the KG node (within rho), else the id the chain gives a new entity of that kind."""
    schema = services.kg_schema()
    kinds = [kind] if kind in schema.node_kinds else None
    hit = services.linkable_index(data, namespace).search([name], kinds, k=1)[0]
    if hit and hit[0].distance <= rho:
        h = hit[0]
        return LinkedEntity(mention=name, entity_id=h.entity_id, name=h.name, kind=h.kind, distance=round(h.distance, 4))
    return LinkedEntity(mention=name, entity_id=f"NEW:{kind or 'Entity'}:{normalize_name(name)}", name=name,
                        kind=kind, distance=round(hit[0].distance, 4) if hit else 1.0, linked=False)


def decompose(question: str, backbone: Any, data: DataPaths, namespace: str, rho: float,
              ungrounded: list[str] | None = None) -> QueryPlan:
    """The model's plan; `ungrounded`: entities its previous plan started from that the question does not name
    (cogmg/grounding.py), told to it when asking again."""
    ungrounded = list(ungrounded or [])
    schema = services.kg_schema()
    metaedges = [{"source": m.source, "relation": m.relation, "target": m.target} for m in schema.metaedges]
    relations = set(schema.relation_names)
    out: DecomposeOutput = _ask(backbone, DECOMPOSE, DecomposeOutput, _schema_terms(), question=question,
                                metaedges=metaedges, invalid=[], ungrounded=ungrounded)
    notes: list[str] = []
    invalid = sorted({r for s in out.steps for r in _relations(s) if r not in relations})
    if invalid:
        notes.append(f"relations outside the schema {invalid}: asked again once")
        out = _ask(backbone, DECOMPOSE, DecomposeOutput, _schema_terms(), question=question, metaedges=metaedges,
                   invalid=invalid, ungrounded=ungrounded)
        still = sorted({r for s in out.steps for r in _relations(s) if r not in relations})
        if still:
            notes.append(f"still outside the schema after asking again, dropped: {still}")
    steps: list[QueryStep] = []
    linked: dict[tuple[str, str], LinkedEntity] = {}
    if len(out.steps) > MAX_STEPS:
        notes.append(f"the model gave {len(out.steps)} steps: the first {MAX_STEPS} are followed")
    for s in out.steps[:MAX_STEPS]:
        if any(r not in relations for r in _relations(s)):
            continue
        key = (s.entity, s.entity_kind)
        if key not in linked:
            linked[key] = link_name(s.entity, s.entity_kind, data, namespace, rho)
        entity = linked[key]
        here = entity.kind or s.entity_kind
        direction = _orient(s.relation, entity.kind or s.entity_kind, s.answer_kind, s.direction)
        kinds = [s.answer_kind] if s.answer_kind in schema.node_kinds else []
        then = None
        if s.then is not None:
            bridge = kinds[0] if kinds else ""
            then_kinds = [s.then.answer_kind] if s.then.answer_kind in schema.node_kinds else []
            then = Hop(relation=s.then.relation, answer_kinds=then_kinds,
                       direction=_orient(s.then.relation, bridge, s.then.answer_kind, s.then.direction))
        steps.append(QueryStep(entity=entity, relation=s.relation, direction=direction, answer_kinds=kinds, then=then))
    if not steps:
        notes.append("the model gave no step within the schema")
    return QueryPlan(question=question, decomposer=prompt_id(backbone, DECOMPOSE), steps=steps, notes=notes)


def _relations(step: StepOutput) -> list[str]:
    return [step.relation] + ([step.then.relation] if step.then is not None else [])


def _orient(relation: str, here: str, answer_kind: str, proposed: str) -> str:
    """The model's direction when a metaedge of the relation has it between the kinds, else one that has."""
    fits = []
    for me in services.kg_schema().metaedges:
        if me.relation != relation:
            continue
        if me.source == here and (not answer_kind or me.target == answer_kind):
            fits.append("out")
        if me.target == here and (not answer_kind or me.source == answer_kind):
            fits.append("in")
    return proposed if proposed in fits or not fits else fits[0]


def complete(question: str, missing: list[OpenTriple], backbone: Any) -> list[FillOutput]:
    """The model's fills of the '?' ends (index into `missing`); fills for an unknown index are dropped."""
    if not missing:
        return []
    triples = [{"index": i, "head": t.head, "relation": t.relation, "tail": t.tail} for i, t in enumerate(missing)]
    kinds = sorted({k for t in missing for k in t.answer_kinds}) or sorted(services.kg_schema().node_kinds)
    out: CompleteOutput = _ask(backbone, COMPLETE, CompleteOutput, {"triple": list(range(len(missing))),
                               "answer_kind": kinds}, question=question, triples=triples)
    return [f for f in out.fills if 0 <= f.triple < len(missing) and f.answer.strip()]
