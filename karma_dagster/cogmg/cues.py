"""The `local` decomposer's lexicon: question words -> KG schema relations, and words naming the answer's kind.

Written for the schema in kg/schema.yaml (a test checks every relation named here is in it). A cue proposes
relations; the linked entity's kind and the answer's kind then keep only the metaedges that can join them.
"""

from __future__ import annotations

import re

# (pattern, relations it may mean): order does not matter, every matching cue contributes.
RELATION_CUES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"caus\w*|induc\w*|adverse|side[- ]effects?|toxicit\w*|reactions?|produc\w*|provok\w*|precipitat\w*"
     r"|(?:linked|exposed|exposure)\b|preced\w*|trigger\w*", ("causes",)),
    (r"treat\w*|therap\w*|cur\w+|used (?:for|in|to)|indicat\w*|against|attenuat\w*|reverse\w*|potentiat\w*",
     ("treats", "palliates")),
    (r"palliat\w*|reliev\w*", ("palliates",)),
    (r"bind\w*|bound|block\w*|antagoni[sz]\w*|agonist\w*|target\w*|inhibit\w*|act on", ("binds", "downregulates")),
    (r"up-?regulat\w*|rais\w*|increas\w*|elevat\w*|activat\w*|overexpress\w*|potentiat\w*", ("upregulates",)),
    (r"down-?regulat\w*|decreas\w*|lower\w*|reduc\w*|suppress\w*|degrad\w*", ("downregulates",)),
    (r"associat\w*|implicat\w*|linked|predispos\w*|polymorphism\w*|variants?|variation|mutat\w*|SNPs?|deletion"
     r"|genes?|prognos\w*|risk|expressed|enriched|relates?", ("associates",)),
    (r"interact\w*|complex|cleav\w*|ubiquitin\w*|phosphorylat\w*|ligands?|receptors?|modulat\w*|combin\w*",
     ("interacts",)),
    (r"regulat\w*|activat\w*|drives?|signall?ing|pathway|impair\w*|protects?", ("regulates",)),
    (r"present\w*|manifest\w*|symptoms?|signs?", ("presents",)),
    (r"resembl\w*|similar", ("resembles",)),
    (r"participat\w*|involved in|process", ("participates",)),
    (r"localiz\w*|affect\w* (?:the )?(?:organ|tissue)", ("localizes",)),
    (r"expressed in|express\w*", ("expresses",)),
)

# words naming what kind of thing the answer is
ANSWER_KIND_CUES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"drugs?|compounds?|chemicals?|medications?|antibod\w*|inhibitors?|antagonists?|agonists?|antipsychotic\w*"
     r"|antioestrogens?|antiestrogens?|chelators?|combination|antifibrinolytic", ("Compound",)),
    (r"genes?|proteins?|receptors?|enzymes?|ligands?|molecules?|adipokines?|transcription factors?|kinases?",
     ("Gene",)),
    (r"diseases?|disorders?|conditions?|cancers?|syndromes?|adverse|reactions?|side[- ]effects?|effects?"
     r"|injur\w*|toxicit\w*|manifestations?", ("Disease", "Side Effect", "Symptom")),
    (r"symptoms?|signs?", ("Symptom",)),
    (r"pathways?", ("Pathway", "Gene")),
    (r"tissues?|organs?|anatom\w*", ("Anatomy",)),
)

_COMPILED = [(re.compile(rf"\b(?:{p})\b", re.I), rels) for p, rels in RELATION_CUES]
_KIND_COMPILED = [(re.compile(rf"\b(?:{p})\b", re.I), kinds) for p, kinds in ANSWER_KIND_CUES]
# "Which X ..." / "In which X" / "Abnormalities of which X": the noun after `which` names the answer's kind first
_WHICH_RE = re.compile(r"\bwh(?:ich|at|ose)\s+((?:[\w'/-]+\s+){0,3}[\w'/-]+)", re.I)


def relation_cues(text: str, exclude: list[tuple[int, int]] = ()) -> list[tuple[str, str]]:
    """(cue word, relation) pairs in the text, outside the `exclude` spans (the linked entities' mentions)."""
    out: list[tuple[str, str]] = []
    for pattern, rels in _COMPILED:
        for m in pattern.finditer(text):
            if any(s < m.end() and m.start() < e for s, e in exclude):
                continue
            out.extend((m.group(0).lower(), r) for r in rels)
    seen: set[tuple[str, str]] = set()
    return [c for c in out if not (c in seen or seen.add(c))]


def answer_kinds(text: str) -> list[str]:
    """KG kinds the answer may have, from the words after which/what (else anywhere); [] when none is named."""
    m = _WHICH_RE.search(text)
    for scope in ([m.group(1)] if m else []) + [text]:
        kinds: list[str] = []
        for pattern, ks in _KIND_COMPILED:
            if pattern.search(scope):
                kinds += [k for k in ks if k not in kinds]
        if kinds:
            return kinds
    return []


def which_span(text: str) -> tuple[int, int] | None:
    """Where the words after which/what (the answer's kind) are, or None."""
    m = _WHICH_RE.search(text)
    return m.span(1) if m else None


def named_kinds(text: str, exclude: list[tuple[int, int]] = ()) -> list[str]:
    """KG kinds a word of the text names outside the `exclude` spans: a chain's bridge ("... by drugs that treat X")."""
    kinds: list[str] = []
    for pattern, ks in _KIND_COMPILED:
        for m in pattern.finditer(text):
            if not any(s < m.end() and m.start() < e for s, e in exclude):
                kinds += [k for k in ks if k not in kinds]
    return kinds
