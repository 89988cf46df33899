"""What a passage says between a completion's two ends: the relation, its negation, or another relation.

Co-occurrence is not evidence: "lithium did not cause arrhythmia" names both ends. So verification reads each
sentence naming both ends with the cues the chain's evaluator reads (dictionary/cues.py through
backbones/local/triple_features.py): a negation or contrast governing the pair takes the relation away; a sentence
whose words state the opposite polarity ("X-induced Y" for a completion "X treats Y", "decreased" for
"upregulates") states another relation, proposed as a correction when the schema joins the two kinds by it; a
sentence with no word for the relation states nothing. A sentence opening with a pronoun ("It also causes ...")
names the end its previous sentence named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from karma_dagster.runtime import services
from karma_dagster.backbones.local.triple_features import contrasted_pair, negated_pair
from karma_dagster.cogmg.grounding import find_span
from karma_dagster.dictionary import cues
from karma_dagster.dictionary.sentences import split_sentences

_PRONOUN = re.compile(r"^(?:it|they|this|these|its|their)\b(?:\s+(?:drug|drugs|compound|agent|treatment|gene|"
                      r"protein|disease|condition))?", re.IGNORECASE)
_WORD = re.compile(r"\w+")
# a chemical named as the cause: attached ("lithium-induced") or stated between the pair ("induced by", "toxicity")
_ATTACHED_CAUSE = re.compile(r"\s*-?\s*(?:induc|associat|relat|caus)\w*", re.IGNORECASE)


@dataclass(frozen=True)
class Reading:
    """One sentence's reading of the completion's relation."""

    verdict: str  # "states <relation>" | "negated" | "contrasted" | "no cue for <relation>"
    sentence: str
    proposed: str = ""  # another relation the sentence states between the two kinds
    states: bool = False  # it states the completion's relation


def _opposite(relation: str, head_kind: str, tail_kind: str, between: str, after_head: str) -> str:
    """The relation the words between the pair state instead of `relation`, when the schema joins the kinds by it."""
    caused = bool(cues.CAUSE_RE.search(between)) or bool(_ATTACHED_CAUSE.match(after_head))
    treated = bool(cues.TREAT_RE.search(between))
    up, down = bool(cues.UP_RE.search(between)), bool(cues.DOWN_RE.search(between))
    if relation in ("treats", "palliates") and caused and not treated:
        wanted = ["causes"]
    elif relation == "causes" and treated and not caused:
        wanted = ["treats", "palliates"]
    elif relation == "upregulates" and down and not up:
        wanted = ["downregulates"]
    elif relation == "downregulates" and up and not down:
        wanted = ["upregulates"]
    else:
        return ""
    joined = {me.relation for me in services.kg_schema().metaedges if (me.source, me.target) == (head_kind, tail_kind)}
    return next((r for r in wanted if r in joined), "")


def _units(text: str, head: list[str], tail: list[str]) -> list[tuple[str, tuple[int, int], tuple[int, int]]]:
    """(sentence, head span, tail span) for each sentence naming both ends; an end a sentence-initial pronoun
    stands for when the previous sentence named it."""
    out = []
    previous = ""
    for _s, _e, sentence in split_sentences(text):
        h, t = find_span(sentence, head), find_span(sentence, tail)
        pronoun = _PRONOUN.match(sentence)
        if pronoun is not None and (h is None) != (t is None):
            if h is None and find_span(previous, head) is not None:
                h = pronoun.span()
            elif t is None and find_span(previous, tail) is not None:
                t = pronoun.span()
        if h is not None and t is not None and (h[1] <= t[0] or t[1] <= h[0]):
            out.append((sentence, h, t))
        previous = sentence
    return out


def read(text: str, relation: str, head: list[str], tail: list[str], head_kind: str = "",
         tail_kind: str = "") -> list[Reading]:
    """Each sentence of `text` naming both ends (`head` / `tail`: an end's names), read for `relation`."""
    readings = []
    for sentence, h, t in _units(text, head, tail):
        first, second = sorted((h, t))
        between = sentence[first[1]: second[0]]
        before = " ".join(_WORD.findall(sentence[: first[0]])[-6:])
        if negated_pair(between, before):
            readings.append(Reading("negated", sentence))
            continue
        if contrasted_pair(between):
            readings.append(Reading("contrasted", sentence))
            continue
        proposed = _opposite(relation, head_kind, tail_kind, between, sentence[h[1]: h[1] + 16])
        if proposed:
            readings.append(Reading(f"states {proposed}", sentence, proposed=proposed))
        elif cues.relation_cue(relation, sentence):
            readings.append(Reading(f"states {relation}", sentence, states=True))
        else:
            readings.append(Reading(f"no cue for {relation}", sentence))
    return readings
