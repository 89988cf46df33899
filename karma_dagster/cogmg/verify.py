"""Verification of a completion against the ingested literature: BM25 over ~256-token passages.

Query = the question + the filled triple. The top `TOP_K` passages are kept with the completion. It is
`supported` when one of them names both ends (the KG name or a synonym, whole words, case- and
punctuation-insensitive) and that passage scores at least `MIN_RELATIVE_SCORE` of the best passage's BM25:
a passage that names both ends only in passing, far below what the query itself retrieves first, is not
evidence for the triple. `score` = that passage's BM25 relative to the best one (0 when none names both ends).
"""

from __future__ import annotations

import re
import unicodedata

from karma_dagster.cogmg.models import Completion
from karma_dagster.cogmg.passages import passage_index
from karma_dagster.kg.backends import kg_exists, kg_store
from karma_dagster.paths import DataPaths

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


def verify(completion: Completion, data: DataPaths) -> Completion:
    """The completion with its top passages (ends marked), `supported` and `score` set."""
    names = names_of(data, {completion.head_id: completion.head_name, completion.tail_id: completion.tail_name})
    query = f"{completion.question} {completion.head_name} {completion.relation} {completion.tail_name}"
    passages = passage_index(data, completion.backbone).search(query, TOP_K)
    best = passages[0].score if passages else 0.0
    marked, support = [], None
    for p in passages:
        ends = [mentions(p.text, names[completion.head_id]), mentions(p.text, names[completion.tail_id])]
        marked.append(p.model_copy(update={"entities": [e for e in ends if e]}))
        if support is None and all(ends):
            support = p
    score = round(support.score / best, 4) if support is not None and best > 0 else 0.0
    return completion.model_copy(update={
        "passages": marked, "score": score, "supported": support is not None and score >= MIN_RELATIVE_SCORE,
        "evidence_doc_keys": list(dict.fromkeys(([support.doc_key] if support else []) + completion.evidence_doc_keys)),
    })
