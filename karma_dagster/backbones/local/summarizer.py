"""The local backbone's summary: extractive, keeping every sentence the later agents can turn into triples.

The relation model (doc_relations.py) pairs every two entities of a summary, across sentences, from all their
mentions; a summary that cuts a sentence naming an entity loses that entity's pairs, or the co-mention that
carried one (issue 32: on the sample inbox the full chain scored gold pairs 0.318 against 0.358 without the
summarizer, mentions 0.706 against 0.769). So the summary keeps, whatever the budget:
- every sentence naming an entity, when its segment names at least two (mentions are found over the whole
  segment, so an abbreviation defined in one sentence counts where it is used later);
- a candidate triple (>= 2 entity hits with a relation cue) and any sentence stating a dosage (a drug-dose fact
  the KG keeps as a qualifier).
The budget `max_sentences` is then filled with the best-scoring other sentences that carry some signal, each
sentence scored

    score(s) = W_ENTITIES * min(hits(s), ENTITY_CAP) + W_RELATION * min(cues(s), CUE_CAP)
             + W_MEASURE * [number with a unit] + W_STAT * [p-value / CI / OR / r] + W_DOSE * [dosage]
             + W_FIRST * [first sentence of the segment]

(score > W_FIRST), and the kept sentences are put back in their original order so the text still reads as the
paper wrote it. What it condenses away: sentences naming no entity (background, methods prose), beyond the budget.
A segment of at most `max_sentences` sentences is returned whole: cutting it would lose context for nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from karma_dagster.dictionary.cues import relation_cues
from karma_dagster.dictionary.sentence_memo import split_sentences

VERSION = "local-summarizer-v2"  # v2: every sentence naming an entity of a segment with two stays

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


def sentence_signals(sentence: str, count_hits: Callable[[str], int], hits: int | None = None) -> dict[str, float]:
    """The signals of one sentence (exposed for explanation and tests); `hits` when counted over the segment."""
    hits = count_hits(sentence) if hits is None else hits
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


def must_keep(signals: dict[str, float], segment_hits: float = 0) -> bool:
    """Never cut: a sentence naming an entity of a segment naming >= 2 (`segment_hits`: the relation model pairs
    them), a candidate triple (>= 2 entities and a relation cue) or a dosage."""
    return ((signals["hits"] >= 1 and segment_hits >= 2) or (signals["hits"] >= 2 and signals["cues"] >= 1)
            or signals["dose"] > 0)


def hits_per_sentence(sentences: list[tuple[int, int, str]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """How many of `spans` (mention offsets in the segment) start in each sentence."""
    return [sum(1 for a, _b in spans if start <= a < end) for start, end, _s in sentences]


def summarize(text: str, max_sentences: int, count_hits: Callable[[str], int],
              spans: Sequence[tuple[int, int]] | None = None) -> tuple[str, int, int]:
    """(summary, sentences in, sentences out); the summary's sentences appear in their original order.

    `spans`: the mentions the NER finds in the whole of `text` (start, end); without them each sentence's hits
    are counted alone by `count_hits`."""
    if not isinstance(text, str):
        raise TypeError(f"summarize expects text as str, got {type(text).__name__}")
    if not isinstance(max_sentences, int) or max_sentences < 1:
        raise ValueError(f"summarize: max_sentences must be an int >= 1, got {max_sentences!r}")
    split = split_sentences(text)
    sentences = [s for _, _, s in split]
    n_in = len(sentences)
    if n_in <= max_sentences:
        return text.strip(), n_in, n_in

    hits: list[int | None] = list(hits_per_sentence(split, spans)) if spans is not None else [None] * n_in
    signals = [sentence_signals(s, count_hits, h) for s, h in zip(sentences, hits, strict=True)]
    scores = [sentence_score(sig, first=(i == 0)) for i, sig in enumerate(signals)]
    segment_hits = sum(sig["hits"] for sig in signals)
    keep = {i for i, sig in enumerate(signals) if must_keep(sig, segment_hits)}
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
