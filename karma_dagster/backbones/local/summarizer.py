"""The local backbone's summary: extractive, keeping the sentences the later agents can turn into triples.

Each sentence s of a segment gets

    score(s) = W_ENTITIES * min(hits(s), ENTITY_CAP) + W_RELATION * min(cues(s), CUE_CAP)
             + W_MEASURE * [number with a unit] + W_STAT * [p-value / CI / OR / r] + W_DOSE * [dosage]
             + W_FIRST * [first sentence of the segment]

Sentences that must survive whatever the budget: >= 2 entity hits together with a relation cue (a candidate
triple) and any sentence stating a dosage (a drug-dose fact the KG keeps as a qualifier). The budget
`max_sentences` is filled with the best-scoring remaining sentences that carry some signal (score > W_FIRST), and the
kept sentences are put back in their original order so the text still reads as the paper wrote it.
A segment of at most `max_sentences` sentences is returned whole: cutting it would lose context for nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from karma_dagster.dictionary.cues import relation_cues
from karma_dagster.dictionary.sentences import split_sentences

VERSION = "local-summarizer-v1"

W_ENTITIES = 1.0
ENTITY_CAP = 4
W_RELATION = 1.5
CUE_CAP = 2
W_MEASURE = 1.0
W_STAT = 1.0
W_DOSE = 2.0
W_FIRST = 0.5

_NUM = r"\d+(?:[.,]\d+)?"
_RANGE = rf"{_NUM}(?:\s*(?:-|–|to)\s*{_NUM})?"
# An amount or a concentration of a substance given: 130 mg/kg, 5 to 20 micrograms/kg, 10 μM, 2.5 mg b.i.d.
DOSE_RE = re.compile(
    rf"(?<![\w.]){_RANGE}\s*(?:mg|µg|μg|mcg|ng|micrograms?|milligrams?|IU|[munpµμ]M|g/kg|mL/kg|ml/kg|U/kg|units?/kg)"
    r"(?:\s*/\s*(?:kg|m2|m²|day|d|dose|h|mL|ml|L|min))*(?![\w])",
)
# A number with a unit of measure or a percentage (lab values, durations, sizes, frequencies).
MEASURE_RE = re.compile(
    rf"(?<![\w.]){_RANGE}\s*(?:%|‰|±|(?:[mµμnpk]?(?:g|mol|M|L|l)|dL|mL|IU|U|mmHg|bpm|kDa|Da|bp|kb|°C|"
    r"h|hr|hrs|hours?|min|minutes?|s|sec|days?|weeks?|wk|months?|years?|yr|fold|times)(?![\w]))"
)
# A statistic: p-value, confidence interval, odds/hazard/risk ratio, correlation, AUC.
STAT_RE = re.compile(
    r"\b[pP]\s*(?:[<>=≤≥]|&lt;|&gt;)\s*0?[.,]\d+|\b(?:95\s*%\s*CI|CI|OR|aOR|HR|RR|AUC)\b\s*[=:,]?\s*\(?\d"
    r"|\b[rR]2?\s*=\s*[-−]?0?[.,]\d+|\bp\s*-?values?\b",
)


def sentence_signals(sentence: str, count_hits: Callable[[str], int]) -> dict[str, float]:
    """The signals of one sentence (exposed for explanation and tests)."""
    hits = count_hits(sentence)
    if not isinstance(hits, int) or hits < 0:
        raise ValueError(f"count_hits must return a non-negative int, got {hits!r} for {sentence[:60]!r}")
    return {
        "hits": float(hits),
        "cues": float(len(relation_cues(sentence))),
        "measure": 1.0 if MEASURE_RE.search(sentence) else 0.0,
        "stat": 1.0 if STAT_RE.search(sentence) else 0.0,
        "dose": 1.0 if DOSE_RE.search(sentence) else 0.0,
    }


def sentence_score(signals: dict[str, float], first: bool = False) -> float:
    return (
        W_ENTITIES * min(signals["hits"], ENTITY_CAP)
        + W_RELATION * min(signals["cues"], CUE_CAP)
        + W_MEASURE * signals["measure"]
        + W_STAT * signals["stat"]
        + W_DOSE * signals["dose"]
        + (W_FIRST if first else 0.0)
    )


def must_keep(signals: dict[str, float]) -> bool:
    """A candidate triple (>= 2 entities and a relation cue) or a dosage is never cut."""
    return (signals["hits"] >= 2 and signals["cues"] >= 1) or signals["dose"] > 0


def summarize(text: str, max_sentences: int, count_hits: Callable[[str], int]) -> tuple[str, int, int]:
    """(summary, sentences in, sentences out); the summary's sentences appear in their original order."""
    if not isinstance(text, str):
        raise TypeError(f"summarize expects text as str, got {type(text).__name__}")
    if not isinstance(max_sentences, int) or max_sentences < 1:
        raise ValueError(f"summarize: max_sentences must be an int >= 1, got {max_sentences!r}")
    sentences = [s for _, _, s in split_sentences(text)]
    n_in = len(sentences)
    if n_in <= max_sentences:
        return text.strip(), n_in, n_in

    signals = [sentence_signals(s, count_hits) for s in sentences]
    scores = [sentence_score(sig, first=(i == 0)) for i, sig in enumerate(signals)]
    keep = {i for i, sig in enumerate(signals) if must_keep(sig)}
    ranked = sorted(range(n_in), key=lambda i: (-scores[i], i))
    for i in ranked:
        if len(keep) >= max_sentences:
            break
        if scores[i] > W_FIRST:  # a sentence with no entity, relation, number or dose adds nothing to extract
            keep.add(i)
    if not keep:  # nothing extractable at all: the opening sentence still says what the segment is about
        keep.add(0)
    chosen = [sentences[i] for i in sorted(keep)]
    return " ".join(chosen), n_in, len(chosen)
