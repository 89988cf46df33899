"""Typed records of CogMG: questions, query plans, answers, missing triples and their completions.

The review queue adapts `Completion` into review items, so its field names are a contract: add, never rename.
"""
from typing import Literal

from pydantic import BaseModel, field_validator


class Passage(BaseModel):
    passage_id: str
    doc_key: str
    text: str
    score: float
    entities: list[str] = []  # names marked in the passage


class MissingTriple(BaseModel):
    head: str
    relation: str
    tail: str  # '?' for the unknown end; relation in the KG schema


class Completion(BaseModel):
    question_id: str
    question: str
    backbone: str
    head_id: str
    head_name: str
    relation: str
    tail_id: str
    tail_name: str  # a filled MissingTriple
    method: str  # "candidate" (chain extracted, not accepted) | "passage_re" (RE over passages) | "llm"
    passages: list[Passage]  # top-k BM25 passages for question + triple
    supported: bool  # verification verdict
    score: float  # in [0, 1]
    evidence_doc_keys: list[str]
    # additions (the contract above is unchanged)
    head_kind: str = ""
    tail_kind: str = ""
    evidence: str = ""  # the sentence or reply the fill came from (a candidate's evidence, the RE sentence)
    fill_score: float = 0.0  # how sure the filler was (candidate's score, the classifier's p, 0 for an LLM)
    # what verification read (cogmg/verify.py): the sentence that states the relation, and why one does not
    verdict: str = ""  # "states <relation>" | "negated" | "contrasted" | "no cue" | "states <other>" | "refused"
    support_sentence: str = ""  # the passage sentence naming both ends that states the relation
    support_passage: str = ""  # its passage id (<doc_key>#p<n>)
    proposed_relation: str = ""  # the relation the passage states instead (a correction a reviewer may take)
    refused: str = ""  # why it may not be queued at all (one entity at both ends): never reviewed, never in the KG


# ---------------------------------------------------------------- beyond the review queue's contract
class LinkedEntity(BaseModel):
    """A question's mention linked to a KG node (through the entity index)."""

    mention: str
    entity_id: str
    name: str
    kind: str
    distance: float
    linked: bool = True  # False: the KG lacks it (id = the chain's id for a new entity); the KG cannot answer
    span: tuple[int, int] | None = None  # where the question names it (cogmg/grounding.py): a plan uses no other


class OpenTriple(MissingTriple):
    """A missing triple with the known end's id and what the unknown end may be: what completion fills."""

    known_id: str
    known_end: Literal["head", "tail"]
    known_kind: str = ""
    answer_kinds: list[str] = []


def _schema_relations() -> list[str]:
    from karma_dagster.runtime.services import kg_schema

    return kg_schema().relation_names


def _in_schema(relation: str) -> str:
    if relation not in _schema_relations():
        raise ValueError(f"relation {relation!r} is not in the KG schema ({', '.join(_schema_relations())})")
    return relation


class Hop(BaseModel):
    """A step's second hop, from each node the first hop reached (the bridge) to the answer: at most two hops."""

    relation: str
    direction: Literal["out", "in"]
    answer_kinds: list[str] = []

    @field_validator("relation")
    @classmethod
    def _in_schema(cls, relation: str) -> str:
        return _in_schema(relation)


class QueryStep(BaseModel):
    """One hop: from the linked entity along a KG relation; `out` = the entity is the head, the answer the tail.
    With `then`, a chain of two (entity -relation-> bridge -then.relation-> answer): `answer_kinds` are then the
    bridge's kinds and the answers are the second hop's ends."""

    entity: LinkedEntity
    relation: str
    direction: Literal["out", "in"]
    answer_kinds: list[str] = []  # the answer node's kinds (empty: any)
    then: Hop | None = None

    @field_validator("relation")
    @classmethod
    def _in_schema(cls, relation: str) -> str:
        return _in_schema(relation)

    def first_hop(self) -> Hop:
        return Hop(relation=self.relation, direction=self.direction, answer_kinds=self.answer_kinds)

    def describe(self) -> str:
        """`Graves' disease <-treats- ? -binds-> ?` style: the arrows a reader checks the plan by."""
        e, r = self.entity.name, self.relation
        if self.then is None:
            return f"{e} -{r}-> ?" if self.direction == "out" else f"? -{r}-> {e}"
        first = f"{e} -{r}-> ?" if self.direction == "out" else f"{e} <-{r}- ?"
        t = self.then
        return first + (f" -{t.relation}-> ?" if t.direction == "out" else f" <-{t.relation}- ?")

    def open_triple(self) -> OpenTriple:
        name = self.entity.name
        if self.direction == "out":
            return OpenTriple(head=name, relation=self.relation, tail="?", known_id=self.entity.entity_id,
                              known_end="head", known_kind=self.entity.kind, answer_kinds=self.answer_kinds)
        return OpenTriple(head="?", relation=self.relation, tail=name, known_id=self.entity.entity_id,
                          known_end="tail", known_kind=self.entity.kind, answer_kinds=self.answer_kinds)


class QueryPlan(BaseModel):
    """What a question becomes: typed steps, executed over the KG's tables with bound parameters only.
    Answers are the union of the steps' answers (the shipped questions are one hop; a step may chain two)."""

    question: str
    decomposer: str  # "local: entity index + relation cues" or the prompt id that decomposed it
    steps: list[QueryStep] = []
    notes: list[str] = []  # what the decomposer could not use (an unlinked mention, a relation it dropped)


class AnswerTriple(BaseModel):
    head_id: str
    head_name: str
    relation: str
    tail_id: str
    tail_name: str
    confidence: float | None = None
    source: str  # "seed" | "extracted" (a chain's merge) | "completion" (not yet in the KG)
    provenance: list[dict] = []  # evidence rows: doc_key, date, evidence, backbone, prompt_version
    hop: int = 1  # 2: the second hop of a two-hop step (its first hop's triple is in the answer too)
    answer: str = ""  # the answer node this triple gives ('' for a first hop that only reaches the bridge)


class Citation(BaseModel):
    """A written answer's marker [n] -> its triple and where the triple comes from (the first evidence row)."""

    marker: int
    head: str
    relation: str
    tail: str
    hop: int = 1
    source: str  # seed | extracted | completion
    doc_key: str = ""  # '' for a seed edge
    passage_id: str = ""  # a completion's supporting passage
    date: str = ""
    sentence: str = ""  # the evidence sentence; "seed KG" for an imported edge
    backbone: str = ""
    prompt_version: str = ""

    def label(self) -> str:
        if self.source == "completion":
            where = ", ".join(x for x in (self.passage_id or self.doc_key, "not yet in the KG") if x)
            return f"[{self.marker}] {self.head} -{self.relation}-> {self.tail} ({where})"
        where = ("seed KG" if self.source == "seed" and not self.doc_key else
                 ", ".join(x for x in (self.doc_key, self.date, self.backbone, self.prompt_version) if x)
                 or self.source)
        return f"[{self.marker}] {self.head} -{self.relation}-> {self.tail} ({where})"


class Answer(BaseModel):
    question_id: str
    question: str
    backbone: str
    plan: QueryPlan
    hit: bool  # the KG query returned at least one answer
    answers: list[str] = []  # names of the answer nodes
    triples: list[AnswerTriple] = []
    missing: list[OpenTriple] = []
    error: str = ""  # why there is no plan (no linkable entity, no relation the schema allows)
    understood: bool = True  # False: the question names no entity a plan could start from; the KG was not queried
    # the written answer (cogmg/write.py): sentences whose every claim cites a marker of `citations`
    text: str = ""
    citations: list[Citation] = []
    writer: str = ""  # "local: template" or the prompt id that wrote it
    writer_notes: list[str] = []  # what the writer's checks dropped (claims citing nothing, unknown markers)

