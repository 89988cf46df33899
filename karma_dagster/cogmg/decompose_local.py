"""The `local` decomposer: a question -> query steps by entity linking and a relation-cue lexicon.

Mentions come from the dictionary NER every backbone uses (KG + MeSH names), linked through the same LanceDB
entity index as the chain's entities (seed + the namespace's merged entities), kept when the distance is within
rho. The cue lexicon (cogmg/cues.py) proposes schema relations; the linked entity's kind and the kinds the
question names for its answer keep the metaedges that can join them, oriented by the schema.

Two hops (entity -r1-> bridge -r2-> answer), never more: when the question names a chain (two cue words of
different relations and a kind word for the node between them: "Which genes are targeted by drugs that treat
Graves' disease?"), or when no single cued relation joins the entity's kind to the answer's but two chain there
through the schema's metaedges.
"""

from __future__ import annotations

from itertools import permutations

from karma_dagster.runtime import services
from karma_dagster.cogmg.cues import answer_kinds, named_kinds, relation_cues, which_span
from karma_dagster.cogmg.models import Hop, LinkedEntity, QueryPlan, QueryStep
from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.kg.schema import KGSchema
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths

DECOMPOSER = "local: dictionary NER + entity index + relation-cue lexicon (cogmg/cues.py)"


class NoLinkableEntity(ValueError):
    """The question names nothing the dictionary NER or the KG knows: no plan can start anywhere."""


def link_mentions(question: str, data: DataPaths, namespace: str, rho: float
                  ) -> tuple[list[LinkedEntity], list[LinkedEntity], list[str], list[tuple[int, int]]]:
    """Linked entities (longest mention first), the mentions that did not link (as the chain would name them:
    their vocabulary id or NEW:<type>:<name>, so a candidate triple the chain extracted about them is found and a
    completion about them enters the KG under the chain's own id), notes, and the mentions' spans."""
    schema = services.kg_schema()
    mentions = services.dictionary(data).recognize(question)
    if not mentions:
        return [], [], ["the dictionary NER found no biomedical name in the question"], []
    index = services.linkable_index(data, namespace)
    hits = index.search([m.long_form or m.text for m in mentions], [m.type for m in mentions], k=1)
    linked, unlinked, notes, spans = [], [], [], []
    for m, found in sorted(zip(mentions, hits), key=lambda p: -(p[0].end - p[0].start)):
        spans.append((m.start, m.end))
        if found and found[0].distance <= rho:
            h = found[0]
            if all(e.entity_id != h.entity_id for e in linked):
                linked.append(LinkedEntity(mention=m.text, entity_id=h.entity_id, name=h.name, kind=h.kind,
                                           distance=round(h.distance, 4), span=(m.start, m.end)))
        else:
            near = f"nearest {found[0].name!r} at {found[0].distance:.2f}" if found else "no KG name near it"
            notes.append(f"mention {m.text!r} not linked ({near} > rho {rho})")
            kind = schema.kind_for_ner_type(m.type)
            new_id = m.vocab_id or f"NEW:{m.type}:{normalize_name(m.long_form or m.text)}"
            if kind and all(e.entity_id != new_id for e in unlinked):
                unlinked.append(LinkedEntity(mention=m.text, entity_id=new_id, name=m.long_form or m.text, kind=kind,
                                             distance=round(found[0].distance, 4) if found else 1.0, linked=False,
                                             span=(m.start, m.end)))
    return linked, unlinked, notes, spans


def steps_for(entity: LinkedEntity, relations: list[str], kinds: list[str], schema: KGSchema) -> list[QueryStep]:
    """One step per metaedge of `relations` that has the entity's kind at one end and an answer kind at the other."""
    steps: list[QueryStep] = []
    for me in schema.metaedges:
        if me.relation not in relations:
            continue
        for direction, here, there in (("out", me.source, me.target), ("in", me.target, me.source)):
            if here != entity.kind or (kinds and there not in kinds):
                continue
            step = next((s for s in steps if s.relation == me.relation and s.direction == direction), None)
            if step is None:
                steps.append(QueryStep(entity=entity, relation=me.relation, direction=direction, answer_kinds=[there]))
            elif there not in step.answer_kinds:
                step.answer_kinds.append(there)
    return steps


MAX_CHAINS = 4  # two-hop steps per plan: each follows up to plan.BRIDGES first-hop nodes


def chains_for(entity: LinkedEntity, cues: list[tuple[str, str]], kinds: list[str], bridge_kinds: list[str] | None,
               schema: KGSchema) -> list[QueryStep]:
    """Two-hop steps: two cue words (different words, not synonyms) whose relations chain the entity's kind
    through a bridge kind (`bridge_kinds`; None: any the schema has) to an answer kind."""
    steps: list[QueryStep] = []
    means: dict[str, set[str]] = {}
    for word, relation in cues:
        means.setdefault(word, set()).add(relation)
    for (w1, r1), (w2, r2) in permutations(cues, 2):
        if w1 == w2 or means[w1] & means[w2]:  # one word, or two synonyms ("used to" ... "treat"): one relation
            continue
        for first, bridge_kind in ((f, k) for f in steps_for(entity, [r1], bridge_kinds or [], schema)
                                   for k in f.answer_kinds):
            bridge = LinkedEntity(mention="?", entity_id="?", name="?", kind=bridge_kind, distance=0.0)
            for second in steps_for(bridge, [r2], kinds, schema):
                hop = Hop(relation=second.relation, direction=second.direction, answer_kinds=second.answer_kinds)
                same = next((s for s in steps if (s.relation, s.direction, s.then) == (first.relation,
                             first.direction, hop)), None)
                if same is None and len(steps) < MAX_CHAINS:
                    steps.append(first.model_copy(update={"answer_kinds": [bridge.kind], "then": hop}))
                elif same is not None and bridge.kind not in same.answer_kinds:
                    same.answer_kinds.append(bridge.kind)
    return steps


def decompose(question: str, data: DataPaths, namespace: str, params: KarmaParams | None = None) -> QueryPlan:
    """The plan; raises NoLinkableEntity when the question names no biomedical entity at all (a named entity the
    KG lacks still gives a plan: the KG cannot answer it, so it is a miss with its missing triples)."""
    params = params or KarmaParams()
    schema = services.kg_schema()
    linked, unlinked, notes, spans = link_mentions(question, data, namespace, params.rho)
    if not linked and not unlinked:
        raise NoLinkableEntity(f"no linkable entity in {question!r}: " + "; ".join(notes))
    entities = linked + unlinked  # an entity the KG lacks only when no KG entity gives a step
    kinds = answer_kinds(question)
    cues = relation_cues(question, exclude=spans)
    cue_relations = list(dict.fromkeys(r for _cue, r in cues))
    which = which_span(question)
    # a bridge is a node the question does not name: a kind word that describes a named entity ("the HDAC
    # inhibitor depsipeptide, combined with 5-FU") names no chain
    bridge_kinds = [k for k in named_kinds(question, exclude=spans + ([which] if which else []))
                    if all(e.kind != k for e in entities)]
    chained = next((found for e in entities if bridge_kinds
                    and (found := chains_for(e, cues, kinds, bridge_kinds, schema))), [])
    if chained:
        notes.append(f"the question names a chain through {', '.join(bridge_kinds)}: two hops")
        return QueryPlan(question=question, decomposer=DECOMPOSER, steps=chained, notes=notes)
    # the first entity (KG entities first, longest mention first) that the cue relations can start from: the
    # others are mostly words naming the answer's kind ("adverse reaction", "receptor")
    steps = next((found for e in entities if (found := steps_for(e, cue_relations, kinds, schema))), [])
    if not steps and kinds:
        steps = next((found for e in entities if (found := chains_for(e, cues, kinds, None, schema))), [])
        if steps:
            notes.append(f"no cued relation joins {[e.kind for e in entities]} and {kinds} in one hop: the schema "
                         "chains two of them through a bridge")
    if not steps:
        notes.append(f"no cue word names a relation joining {[e.kind for e in entities]} and {kinds or 'any kind'}"
                     f" (cues: {cue_relations or 'none'}): every relation the schema allows there is followed")
        steps = next((found for e in entities if (found := steps_for(e, schema.relation_names, kinds, schema))), [])
    if not steps:
        notes.append(f"the schema has no relation from {[e.kind for e in entities]} to {kinds or 'any kind'}")
    return QueryPlan(question=question, decomposer=DECOMPOSER, steps=steps, notes=notes)
