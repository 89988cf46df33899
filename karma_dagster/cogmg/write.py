"""The written answer of a hit: sentences from the retrieved triples only, each claim citing its triple's marker.

Markers [1], [2]... number the answer's triples (a two-hop answer: both hops of its path); each maps to the
triple and its first evidence row (doc_key, date, sentence, backbone, prompt version; "seed KG" for an imported
edge). On `local` a template writes "X is treated by A [1], B [2] ..."; on an LLM backbone the model writes claims
(prompts/cogmg_answer) and the code keeps a claim only when it cites existing markers and names an entity of a
triple it cites: a claim citing nothing, or only markers that do not exist, is dropped and said in the notes, so the
model cannot add an uncited fact silently.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from karma_dagster.cogmg.models import Answer, AnswerTriple, Citation, Completion

ANSWER = "cogmg_answer"
LOCAL_WRITER = "local: template"
COMPLETIONS_WRITER = "local: template over verified completions (not yet in the KG)"
NOT_IN_KG = "Not yet in the KG (read in the literature, awaiting review)"
CITED = 20  # triples numbered for the written answer (the best ranked first)
_MARKER = re.compile(r"\s*\[(\d+(?:\s*,\s*\d+)*)\]")

# how a relation reads with its head as subject (out) and with its tail as subject (in)
_PHRASES: dict[str, tuple[str, str]] = {
    "treats": ("treats", "is treated by"), "palliates": ("palliates", "is palliated by"),
    "causes": ("causes", "is caused by"), "binds": ("binds", "is bound by"),
    "upregulates": ("upregulates", "is upregulated by"), "downregulates": ("downregulates", "is downregulated by"),
    "associates": ("is associated with", "is associated with"), "resembles": ("resembles", "resembles"),
    "interacts": ("interacts with", "interacts with"), "covaries": ("covaries with", "covaries with"),
    "regulates": ("regulates", "is regulated by"), "participates": ("participates in", "involves"),
    "localizes": ("localizes to", "is a site of"), "presents": ("presents with", "is a symptom of"),
    "expresses": ("expresses", "is expressed in"), "includes": ("includes", "is included in"),
}


def phrase(relation: str, subject_is_head: bool) -> str:
    out, back = _PHRASES.get(relation, (relation, f"is the object of {relation}"))
    return out if subject_is_head else back


def cited(answer: Answer) -> list[AnswerTriple]:
    """The answer's first CITED triples, never ending on a first hop whose second hop was cut off."""
    triples = answer.triples[:CITED]
    while triples and triples[-1].hop == 1 and not triples[-1].answer:
        triples.pop()
    return triples


def citations(answer: Answer) -> list[Citation]:
    """Marker n -> the n-th cited triple and its first evidence row."""
    out = []
    for n, t in enumerate(cited(answer), 1):
        ev = next((p for p in t.provenance if p.get("doc_key")), None)
        seed = t.source == "seed"
        out.append(Citation(
            marker=n, head=t.head_name, relation=t.relation, tail=t.tail_name, hop=t.hop, source=t.source,
            doc_key=str(ev.get("doc_key", "")) if ev and not seed else "",
            date=str(ev.get("date", "")) if ev and not seed else "",
            sentence="seed KG" if seed else str((ev or {}).get("evidence", "")) or t.source,
            backbone=str(ev.get("backbone", "")) if ev and not seed else "",
            prompt_version=str(ev.get("prompt_version", "")) if ev and not seed else ""))
    return out


def _plural(verb: str) -> str:
    """"binds" -> "bind", "is bound by" -> "are bound by": the verb after several bridges."""
    if verb.startswith("is "):
        return "are " + verb[3:]
    word, _, rest = verb.partition(" ")
    if word.endswith("ies"):
        word = word[:-3] + "y"
    elif word.endswith(("sses", "shes", "xes")):
        word = word[:-2]
    elif word.endswith("s"):
        word = word[:-1]
    return f"{word} {rest}".strip()


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def write_local(answer: Answer) -> Answer:
    """The templated answer: one sentence per (entity, relation) of one-hop triples, one per path of two hops."""
    if not answer.hit:
        return answer
    cites = citations(answer)
    triples = cited(answer)
    start = {s.entity.entity_id for s in answer.plan.steps}
    sentences: list[str] = []
    groups: dict[tuple[str, str, bool], list[str]] = {}
    firsts: dict[str, int] = {}  # a two-hop path's bridge node -> the index of the first hop that reached it
    for i, t in enumerate(triples):
        subject_is_head = t.head_id in start
        if t.hop == 1 and not t.answer:
            firsts.setdefault(t.tail_id if subject_is_head else t.head_id, i)
        elif t.hop == 1:
            subject = t.head_name if subject_is_head else t.tail_name
            groups.setdefault((subject, t.relation, subject_is_head), []).append(f"{t.answer} [{i + 1}]")
    for (subject, relation, is_head), items in groups.items():
        sentences.append(f"{subject} {phrase(relation, is_head)} {_join(items)}.")
    # two hops: one sentence per answer and pair of relations, naming every bridge that reaches it
    paths: dict[tuple[str, str, str, bool, str, bool], list[tuple[str, int, int]]] = {}
    for i, t in enumerate(triples):
        bridge_id = t.head_id if t.head_id in firsts else t.tail_id
        if t.hop != 2 or bridge_id not in firsts:
            continue
        j = firsts[bridge_id]
        first = triples[j]
        from_head = first.head_id in start
        origin, bridge = (first.head_name, first.tail_name) if from_head else (first.tail_name, first.head_name)
        key = (t.answer, origin, first.relation, from_head, t.relation, t.head_id == bridge_id)
        paths.setdefault(key, []).append((bridge, j + 1, i + 1))
    for (answer_name, origin, r1, from_head, r2, bridge_is_head), via in paths.items():
        verb = phrase(r2, bridge_is_head)
        bridges = _join([f"{b} [{m1}]" for b, m1, _m2 in via])
        marks = ", ".join(str(m2) for _b, _m1, m2 in via)
        sentences.append(f"{origin} {phrase(r1, from_head)} {bridges}, which "
                         f"{_plural(verb) if len(via) > 1 else verb} {answer_name} [{marks}].")
    more = len(answer.answers) - len({t.answer for t in triples if t.answer})
    if more > 0:
        sentences.append(f"The KG holds {more} more answer(s) beyond the {len(triples)} cited triples.")
    return answer.model_copy(update={"text": " ".join(_capital(x) for x in sentences), "citations": cites,
                                     "writer": LOCAL_WRITER})


def _capital(sentence: str) -> str:
    """A sentence opening with an all-lowercase name ("glaucoma") starts with a capital; "mTOR" stays."""
    first = sentence.split(" ", 1)[0]
    return sentence[0].upper() + sentence[1:] if first.isalpha() and first.islower() else sentence


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ClaimOutput(_Out):
    text: str
    cites: list[int] = []


class AnswerOutput(_Out):
    claims: list[ClaimOutput] = []


def check_claims(claims: list[ClaimOutput], cites: list[Citation]) -> tuple[str, list[str]]:
    """The kept claims as text (each ending with its valid markers) and notes on what was dropped or cut."""
    by_marker = {c.marker: c for c in cites}
    kept, notes = [], []
    for claim in claims:
        text = claim.text.strip()
        inline = [int(n) for m in _MARKER.finditer(text) for n in m.group(1).split(",")]
        bare = _MARKER.sub("", text).strip()
        cited = list(dict.fromkeys(claim.cites + inline))
        unknown = [n for n in cited if n not in by_marker]
        valid = [n for n in cited if n in by_marker]
        if unknown:
            notes.append(f"markers {unknown} do not exist (there are {len(cites)}): "
                         + ("removed from the claim" if valid else f"dropped the claim {bare[:120]!r}"))
        if not bare:
            continue
        if not valid:
            if not unknown:
                notes.append(f"the model added an uncited claim, dropped: {bare[:120]!r}")
            continue
        names = {n.lower() for m in valid for n in (by_marker[m].head, by_marker[m].tail)}
        if not any(n in bare.lower() for n in names):
            notes.append(f"a claim names no entity of the triples it cites {valid}, dropped: {bare[:120]!r}")
            continue
        kept.append(bare.rstrip(".") + " " + "".join(f"[{n}]" for n in valid) + ".")
    return " ".join(kept), notes


def write_llm(answer: Answer, backbone: Any) -> Answer:
    """The model's answer from the numbered triples only (prompts/cogmg_answer), checked by `check_claims`."""
    if not answer.hit:
        return answer
    cites = citations(answer)
    triples = [{"marker": c.marker, "head": c.head, "relation": c.relation, "tail": c.tail,
                "evidence": c.sentence[:300]} for c in cites]
    rendered = backbone.prompts.render(ANSWER, None, domain=backbone.domain, question=answer.question,
                                       triples=triples)
    constrain = {"cites": {"type": "array", "items": {"enum": [c.marker for c in cites]}}}
    parsed, _usage = backbone.client.complete_json(rendered, AnswerOutput, constrain=constrain)
    text, notes = check_claims(parsed.claims, cites)
    if not text:
        notes.append("no claim of the model's answer survived the citation check")
    return answer.model_copy(update={"text": text, "citations": cites, "writer_notes": notes,
                                     "writer": backbone.prompts.prompt_id(ANSWER)})


def write_completions(answer: Answer, completions: list[Completion]) -> Answer:
    """A miss answered from its verified completions (CogMG's answer after completion): one templated sentence per
    (entity, relation), marked as not yet in the KG, each fill citing the passage sentence that states it. A hit,
    or a miss without a verified completion, is returned as it is."""
    good = [c for c in completions if c.supported and not c.refused][:CITED]
    if answer.hit or not good:
        return answer
    known = {m.known_id for m in answer.missing}
    cites, groups = [], {}
    for n, c in enumerate(good, 1):
        doc = c.support_passage.partition("#")[0] or (c.evidence_doc_keys or [""])[0]
        cites.append(Citation(marker=n, head=c.head_name, relation=c.relation, tail=c.tail_name, source="completion",
                              doc_key=doc, passage_id=c.support_passage, sentence=c.support_sentence or c.evidence,
                              backbone=c.backbone, prompt_version=f"cogmg:{c.method}"))
        subject_is_head = c.head_id in known or c.tail_id not in known
        subject, other = (c.head_name, c.tail_name) if subject_is_head else (c.tail_name, c.head_name)
        groups.setdefault((subject, c.relation, subject_is_head), []).append(f"{other} [{n}]")
    sentences = [f"{_capital(subject)} {phrase(relation, is_head)} {_join(items)}."
                 for (subject, relation, is_head), items in groups.items()]
    return answer.model_copy(update={"text": f"{NOT_IN_KG}: " + " ".join(sentences), "citations": cites,
                                     "writer": COMPLETIONS_WRITER})
