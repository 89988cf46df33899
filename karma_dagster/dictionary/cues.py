"""Cue words: what states a relation, a hedge or a negation in a sentence, and a plain lexicon hit counter.

One relation-cue lexicon so the reader, the summarizer, the relation extractor and the judge agree on what a
relation word is; per-relation cue words, hedges and negations for the debate and the evaluator signals (the
local judge and the judge metrics read the same rules).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# ---------------------------------------------------------------- relation cues
# Verbs and phrases that state a relation between two biomedical entities (causal, regulatory, therapeutic,
# associative). Inflections are matched by the stems; multiword cues allow one optional adverb.
_RELATION_CUE_PATTERNS: tuple[str, ...] = (
    r"induc(?:e|es|ed|ing|tion)",
    r"inhibit(?:s|ed|ing|ion|or|ors)?",
    r"associat(?:ed|ion|ions)\s+(?:\w+ly\s+)?(?:with|between)",
    r"correlat(?:e|es|ed|ing|ion)",
    r"treat(?:s|ed|ing|ment)?",
    r"therap(?:y|ies|eutic)",
    r"increas(?:e|es|ed|ing)",
    r"decreas(?:e|es|ed|ing)",
    r"reduc(?:e|es|ed|ing|tion)",
    r"elevat(?:e|es|ed|ing|ion)",
    r"lower(?:s|ed|ing)",
    r"suppress(?:es|ed|ing|ion)?",
    r"activat(?:e|es|ed|ing|ion)",
    r"(?:up|down)-?regulat(?:e|es|ed|ing|ion)",
    r"regulat(?:e|es|ed|ing|ion)",
    r"block(?:s|ed|ing|ade)?",
    r"prevent(?:s|ed|ing|ion)?",
    r"caus(?:e|es|ed|ing)",
    r"(?:lead|leads|led)\s+to",
    r"result(?:s|ed)?\s+in",
    r"mediat(?:e|es|ed|ing)",
    r"bind(?:s|ing)?|bound\s+to",
    r"interact(?:s|ed|ing|ion)?\s+with",
    r"attenuat(?:e|es|ed|ing)",
    r"ameliorat(?:e|es|ed|ing)",
    r"exacerbat(?:e|es|ed|ing)",
    r"aggravat(?:e|es|ed|ing)",
    r"improv(?:e|es|ed|ing)",
    r"protect(?:s|ed|ing|ion|ive)?",
    r"convert(?:s|ed|ing)?\s+(?:\w+\s+)?(?:to|into)",
    r"cataly[sz](?:e|es|ed|ing)",
    r"(?:implicated|involved)\s+in",
    r"roles?\s+(?:of|in|for)",
    r"markers?\s+(?:of|for)",
    r"enhanc(?:e|es|ed|ing)",
    r"impair(?:s|ed|ing)?",
    r"promot(?:e|es|ed|ing)",
    r"trigger(?:s|ed|ing)?",
    r"abolish(?:es|ed|ing)?",
    r"stimulat(?:e|es|ed|ing|ion)",
    r"contribut(?:e|es|ed|ing)\s+to",
    r"(?:is|are|was|were)\s+linked\s+to",
    r"risk\s+(?:factor|of|for)",
    r"agonist|antagonist",
    r"toxicity|adverse\s+(?:effect|event|reaction)s?",
    r"target(?:s|ed|ing)?",
    r"express(?:es|ed)?\s+(?:in|by)",
)
RELATION_CUE_RE = re.compile(r"\b(?:" + "|".join(_RELATION_CUE_PATTERNS) + r")\b", re.IGNORECASE)


def relation_cues(text: str) -> list[str]:
    """Relation words/phrases found in `text`, in order (lowercased)."""
    return [m.group(0).lower() for m in RELATION_CUE_RE.finditer(text)]


# ---------------------------------------------------------------- lexicon hit counter
_WORD_RE = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


def lexicon_hit_counter(names: Iterable[str], max_words: int = 6, min_chars: int = 3) -> Callable[[str], int]:
    """A `count_hits` from a list of names: greedy longest-match of lowercased word n-grams, no overlaps.

    A plain dictionary matcher, for when no NER is at hand (tests, a KG lexicon); names shorter than `min_chars`
    are skipped because two-letter names match too much ordinary text.
    """
    lexicon: set[tuple[str, ...]] = set()
    longest = 1
    for name in names:
        words = tuple(_words(name))
        if not words or len(words) > max_words or len(" ".join(words)) < min_chars:
            continue
        lexicon.add(words)
        longest = max(longest, len(words))
    if not lexicon:
        raise ValueError("lexicon_hit_counter: no usable names (all empty, too short or too long)")

    def count_hits(text: str) -> int:
        words = _words(text)
        hits, i = 0, 0
        while i < len(words):
            for n in range(min(longest, len(words) - i), 0, -1):
                if tuple(words[i : i + n]) in lexicon:
                    hits += 1
                    i += n
                    break
            else:
                i += 1
        return hits

    return count_hits


# ---------------------------------------------------------------- hedges, negations, per-relation cues
HEDGE_RE = re.compile(
    r"\b(?:may|might|could|possibl[ey]|suggests?|suggested|suggesting|potential(?:ly)?|likely|perhaps|"
    r"putative(?:ly)?|hypothes[ie][sz]e?d?|appears?\s+to|seems?\s+to|presumabl[ey])\b",
    re.IGNORECASE,
)
NEGATION_RE = re.compile(
    r"\b(?:no|not|without|neither|nor|cannot|failed\s+to|fails?\s+to|absence\s+of|lack\s+of|unaffected)\b|n't\b",
    re.IGNORECASE,
)
# Words that state each KG relation outright; a relation missing here falls back to the shared cue lexicon.
RELATION_CUES: dict[str, re.Pattern[str]] = {
    name: re.compile(r"\b(?:" + pat + r")", re.IGNORECASE)
    for name, pat in {
        "treats": r"treat|therap|reduc|improv|alleviat|amelior|attenuat|prevent|protect|effective|efficac|"
                  r"reliev|benefi|revers|cure|rescue",
        "palliates": r"palliat|reliev|alleviat|sympto",
        "causes": r"induc|caus|lead\w*\s+to|led\s+to|result\w*\s+in|risk|toxic|adverse|side[\s-]effect|provok|"
                  r"trigger|exacerbat|aggravat|develop",
        "upregulates": r"increas|elevat|up-?regulat|induc|enhanc|activat|stimulat|overexpress",
        "downregulates": r"decreas|reduc|down-?regulat|inhibit|suppress|lower|block|attenuat",
        "binds": r"bind|bound|ligand|affinity|dock",
        "associates": r"associat|correlat|link|mutation|variant|polymorphism|risk",
        "interacts": r"interact|bind|complex|combin|co-?administ",
        "regulates": r"regulat|activat|inhibit|induc|suppress|increas|decreas",
    }.items()
}


def hedge_cue(text: str) -> str | None:
    m = HEDGE_RE.search(text)
    return m.group(0).lower() if m else None


def negation_cue(text: str) -> str | None:
    m = NEGATION_RE.search(text)
    return m.group(0).lower() if m else None


def relation_cue(relation: str, text: str) -> str | None:
    """The first word of `text` that states `relation` (KG name or label), or None."""
    pat = RELATION_CUES.get(relation)
    if pat is not None:
        m = pat.search(text)
        return m.group(0).lower() if m else None
    cues = relation_cues(text)
    return cues[0] if cues else None
