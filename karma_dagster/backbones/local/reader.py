"""The local backbone's relevance R(s): a small logistic combination of section type and content signals.

    R(s) = sigmoid( bias
                    + w_prior       * prior[kind(s)]                       in [0, 1], per section kind
                    + w_lexicon     * (1 - exp(-density(s) / LEXICON_SCALE))  density = hits per 100 tokens
                    + w_entities    * (1 - exp(-hits(s) / ENTITY_SCALE))      hits = lexicon hits in the segment
                    + w_cues        * (1 - exp(-cues(s) / CUE_SCALE))         cues = relation cues per sentence
                    + w_kg          * (1 - exp(-kg_hits(s) / KG_SCALE))       mentions of KG-context names
                    + w_boilerplate * boilerplate(s)                          share of citation/thanks/grant sentences
                    + w_short       * [fewer than SHORT_TOKENS tokens and not a title] )

Why these signals: KARMA's reader keeps what can feed the KG, i.e. text that names biomedical entities (lexicon
density, KG overlap) and states relations between them (relation verbs), in the parts of a paper that report
findings (prior). Reference lists and acknowledgements are also dense in entity names (paper titles, grant
names), so a boilerplate term pulls them down whatever their section label says. Each signal saturates, so one
very dense sentence cannot dominate. Weights were set by hand on the sample papers and the shipped training
abstracts (abstracts ~0.9, results/discussion 0.7-0.95, methods 0.3-0.7, reference lists and thanks < 0.1).

Why `entities` besides the density: a long methods paragraph or a table names its drugs, assays and diseases
among many words, so its density stays low and it fell below delta although it carries entities the KG needs
(bench/pdf_text.py --reader: 17 of 28 methods segments with an entity kept). Any named entity now lifts a
segment by up to w_entities; without one, methods and tables stay at their low prior.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from karma_dagster.dictionary.cues import lexicon_hit_counter, relation_cues
from karma_dagster.dictionary.sentence_memo import count_tokens, split_sentences
from karma_dagster.schemas.records import RawSection

VERSION = "local-reader-v2"

KIND_PRIOR: dict[str, float] = {
    "title": 0.9, "abstract": 1.0, "results": 0.9, "discussion": 0.8, "conclusion": 0.9, "case": 0.9,
    "introduction": 0.6, "background": 0.6, "body": 0.6, "methods": 0.5, "figure": 0.45, "table": 0.45,
    "other": 0.4, "references": 0.0, "acknowledgements": 0.0, "affiliations": 0.0, "funding": 0.0, "conflicts": 0.0,
}
WEIGHTS: dict[str, float] = {
    "bias": -3.0, "prior": 3.0, "lexicon": 2.5, "entities": 1.5, "cues": 1.5, "kg": 1.0, "boilerplate": -5.0,
    "short": -1.0,
}
LEXICON_SCALE = 6.0  # hits per 100 tokens at which the lexicon signal reaches 63 %
ENTITY_SCALE = 1.0  # lexicon hits at which the entity signal reaches 63 % (one named entity is enough to count)
CUE_SCALE = 0.6  # relation cues per sentence at which the cue signal reaches 63 %
KG_SCALE = 2.0  # KG-context mentions at which the KG signal reaches 63 %
SHORT_TOKENS = 8

# A sentence is boilerplate when it looks like a bibliography entry, thanks, funding, a conflict statement,
# a licence line or an address. Each pattern was checked against real reference lists of the sample papers.
_BOILERPLATE = [
    re.compile(r"\b(?:19|20)\d{2}\s*;\s*\d+\s*(?:\([\w\s-]+\))?\s*:\s*[A-Za-z]?\d+"),  # 2005;54(2):S97
    re.compile(r"(?:\b[A-Z][\w'-]+,?\s+(?:[A-Z]\.\s*){1,3}(?:,|and\b|&)\s*){2,}"),  # Cnop, M., Welsh, N., and
    re.compile(r"(?:\b[A-Z][\w'-]+\s+[A-Z]{1,3}\s*[,.]\s*){2,}"),  # Cnop M, Welsh N, Jonas JC.
    re.compile(r"(?:\b[A-Z]\.(?:\s*-?[A-Z]\.)*\s+[A-Z][\w'´¨-]+\s*,\s*){2,}"),  # M. Cnop, N. Welsh, J.-C. Jonas,
    re.compile(r"\bvol\.\s*\d+|\bpp\.\s*[A-Za-z]?\d+|^\s*\[\d+\]\s|,”\s*[A-Z]|\bet\s+al\.,\s*[“\"]"),  # Hindawi/IEEE
    re.compile(r"\bdoi\s*:?\s*10\.\d{4,}|\bPMID\s*:?\s*\d+|\bPMC\d{5,}|https?://", re.IGNORECASE),
    re.compile(r"\b(?:thank|grateful|gratitude|acknowledg)\w*", re.IGNORECASE),
    re.compile(r"\b(?:grants?|funded|funding|fellowship|sponsored)\b|\bsupported\s+(?:in\s+part\s+)?by\s+(?:a|the|grants?)\b",
               re.IGNORECASE),
    re.compile(r"\b(?:conflicts?|competing)\s+of\s+interests?\b|\bcompeting\s+interests?\b|\bauthors?\s+declare",
               re.IGNORECASE),
    re.compile(r"\bcopyright\b|©|\bcreative\s+commons\b|\bcorrespond(?:ence|ing\s+author)\b", re.IGNORECASE),
    re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+"),
]


def boilerplate_share(text: str) -> float:
    """Share of the sentences of `text` that look like citations, thanks, funding, conflicts, licences."""
    sentences = [s for _, _, s in split_sentences(text)]
    if not sentences:
        return 0.0
    return sum(1 for s in sentences if any(p.search(s) for p in _BOILERPLATE)) / len(sentences)


def _saturate(x: float, scale: float) -> float:
    return 1.0 - math.exp(-max(x, 0.0) / scale)


def relevance_features(
    section: RawSection, count_hits: Callable[[str], int], kg_hits: Callable[[str], int] | None = None
) -> dict[str, float]:
    """The signals of R(s) for one section, each in [0, 1] (exposed to explain a score)."""
    text = section.text
    n_tokens = count_tokens(text)
    n_sentences = max(1, len(split_sentences(text)))
    hits = count_hits(text)
    if not isinstance(hits, int) or hits < 0:
        raise ValueError(f"count_hits must return a non-negative int, got {hits!r} for {text[:60]!r}")
    density = 100.0 * hits / max(n_tokens, 1)
    return {
        "prior": KIND_PRIOR.get(section.kind, KIND_PRIOR["other"]),
        "lexicon": _saturate(density, LEXICON_SCALE),
        "entities": _saturate(hits, ENTITY_SCALE),
        "cues": _saturate(len(relation_cues(text)) / n_sentences, CUE_SCALE),
        "kg": _saturate(kg_hits(text), KG_SCALE) if kg_hits is not None else 0.0,
        "boilerplate": boilerplate_share(text),
        "short": 1.0 if n_tokens < SHORT_TOKENS and section.kind != "title" else 0.0,
    }


def combine(features: dict[str, float], weights: dict[str, float] = WEIGHTS) -> float:
    """sigmoid(bias + sum of weight * feature)."""
    z = weights["bias"] + sum(weights[name] * value for name, value in features.items())
    return 1.0 / (1.0 + math.exp(-z))


def score_sections(
    sections: list[RawSection],
    count_hits: Callable[[str], int],
    kg_context: Sequence[str] = (),
    weights: dict[str, float] = WEIGHTS,
) -> list[float]:
    """R(s) in [0, 1] for each section (formula in the module docstring); empty text scores 0."""
    missing = set(WEIGHTS) - set(weights)
    if missing:
        raise ValueError(f"score_sections: weights lack {sorted(missing)}")
    try:
        kg_hits = lexicon_hit_counter(n for n in kg_context if isinstance(n, str)) if kg_context else None
    except ValueError:  # only empty or too-short names: no KG signal
        kg_hits = None
    scores: list[float] = []
    for section in sections:
        if not isinstance(section, RawSection):
            raise TypeError(f"score_sections expects RawSection items, got {type(section).__name__}")
        if not section.text.strip():
            scores.append(0.0)
            continue
        scores.append(combine(relevance_features(section, count_hits, kg_hits), weights))
    return scores
