"""Verification of a completion against the ingested literature: BM25 over ~256-token passages, then the relation.

Query = the question + the filled triple. The top `TOP_K` passages are kept with the completion. It is
`supported` when a sentence of one of them names both ends (the KG name or a synonym, whole words, case- and
punctuation-insensitive) and states the relation (cogmg/relation_reading.py: not negated, not contrasted, a word
for the relation, not one for its opposite), in a passage scoring at least `MIN_RELATIVE_SCORE` of the best
passage's BM25: a passage that names both ends only in passing, far below what the query itself retrieves first,
is not evidence for the triple. `score` = that passage's BM25 relative to the best one (0 when none states it).
A passage stating another relation between the ends proposes it (`proposed_relation`); a completion naming one
entity twice is refused before any search.
"""

from __future__ import annotations

import re
import unicodedata

from karma_dagster.cogmg.models import Completion
from karma_dagster.cogmg.passages import passage_index
from karma_dagster.cogmg.relation_reading import read
from karma_dagster.kg import admission_rules as rules
from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.kg.backends import kg_exists, kg_store
from karma_dagster.runtime.paths import DataPaths

TOP_K = 5
MIN_RELATIVE_SCORE = 0.5


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'").lower()
    return " " + " ".join(re.sub(r"[^\w']+", " ", text).split()) + " "


def names_of(data: DataPaths, ids_names: dict[str, str]) -> dict[str, list[str]]:
    """id -> its name and KG synonyms (a new entity: the name it was filled with)."""
    out = {i: [n] for i, n in ids_names.items()}
    if kg_exists(data):
        with kg_store(data).connect(read_only=True) as con:
            rows = con.execute("SELECT id, name FROM seed_nodes WHERE list_contains(?, id) UNION ALL "
                               "SELECT id, synonym FROM node_synonyms WHERE list_contains(?, id)",
                               [list(ids_names), list(ids_names)]).fetchall()
        for i, name in rows:
            if name not in out[i]:
                out[i].append(name)
    return out


def mentions(text: str, names: list[str]) -> str | None:
    """The first of `names` the text names as whole words, else None."""
    norm = _norm(text)
    for name in names:
        n = _norm(name).strip()
        if len(n) >= 2 and f" {n} " in norm:
            return name
    return None


def self_reference(c: Completion) -> str:
    """'' when the completion joins two entities, else why it names one entity twice (refused, never queued): one
    id, one normalized name, or one identity by the admission rule self_edge (kg/admission_rules.py)."""
    if c.head_id == c.tail_id:
        return f"names one entity twice: both ends are {c.head_id}"
    if normalize_name(c.head_name) == normalize_name(c.tail_name):
        return f"names one entity twice: both ends are named {c.head_name!r}"
    same = rules.same_identity(rules.Fact(head_id=c.head_id, relation=c.relation, tail_id=c.tail_id,
                                          head_kind=c.head_kind or None, tail_kind=c.tail_kind or None,
                                          head_name=c.head_name, tail_name=c.tail_name))
    return f"names one entity twice: {same} (admission rule self_edge)" if same else ""


_RANK = {"proposed": 0, "negated": 1, "contrasted": 2}  # which non-supporting reading to report first


def verify(completion: Completion, data: DataPaths) -> Completion:
    """The completion with its top passages (ends marked), `supported`, `score` and the `verdict` of the sentence
    read (a `proposed_relation` when a passage states another); `refused` when it names one entity twice."""
    c = completion
    why = self_reference(c)
    if why:
        return c.model_copy(update={"supported": False, "score": 0.0, "verdict": "refused", "refused": why})
    names = names_of(data, {c.head_id: c.head_name, c.tail_id: c.tail_name})
    query = f"{c.question} {c.head_name} {c.relation} {c.tail_name}"
    passages = passage_index(data, c.backbone).search(query, TOP_K)
    best = passages[0].score if passages else 0.0
    marked, support, other = [], None, None
    for p in passages:
        ends = [mentions(p.text, names[c.head_id]), mentions(p.text, names[c.tail_id])]
        marked.append(p.model_copy(update={"entities": [e for e in ends if e]}))
        if support is not None or not all(ends):
            continue
        readings = read(p.text, c.relation, names[c.head_id], names[c.tail_id], c.head_kind, c.tail_kind)
        stating = next((r for r in readings if r.states), None)
        if stating is not None and best > 0 and p.score / best >= MIN_RELATIVE_SCORE:
            support = (p, stating)
            continue
        for r in readings:
            rank = 0 if r.proposed else _RANK.get(r.verdict, 3)
            if other is None or rank < other[0]:
                other = (rank, p, r)
    if support is not None:
        p, r = support
        return c.model_copy(update={
            "passages": marked, "score": round(p.score / best, 4), "supported": True, "verdict": r.verdict,
            "support_sentence": r.sentence, "support_passage": p.passage_id, "proposed_relation": "",
            "evidence_doc_keys": list(dict.fromkeys([p.doc_key] + c.evidence_doc_keys))})
    update = {"passages": marked, "score": 0.0, "supported": False,
              "verdict": "no retrieved passage names both ends in one sentence"}
    if other is not None:
        _rank, p, r = other
        update.update(verdict=f"{r.verdict} in {p.passage_id}", support_sentence=r.sentence,
                      support_passage=p.passage_id, proposed_relation=r.proposed)
    return c.model_copy(update=update)
