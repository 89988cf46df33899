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


# ---------------------------------------------------------------- scope cues the evaluator weighs around a pair
# Each says the co-mention may not assert a relation: a contrast ("but not X"), a study design word ("we
# examined whether"), a comparison ("X versus Y"), a listing ("drugs such as X, Y"). Matched in the words between
# the pair's two mentions (and the few before the first), so a cue elsewhere in a long sentence weighs less.
CONTRAST_RE = re.compile(r"\b(?:but\s+not|whereas|while|unlike|in\s+contrast|however|although|rather\s+than|"
                         r"instead\s+of|except)\b", re.IGNORECASE)
STUDY_RE = re.compile(r"\b(?:examin\w*|investigat\w*|evaluat\w*|assess\w*|stud(?:y|ied|ies)|whether|aim\w*|"
                      r"determin\w*|compar\w*|analy[sz]\w*|test(?:ed|ing)?|measur\w*|random\w*)\b", re.IGNORECASE)
COMPARISON_RE = re.compile(r"\b(?:versus|vs\.?|compared\s+(?:with|to)|than|relative\s+to|similar\s+to)\b",
                           re.IGNORECASE)
LISTING_RE = re.compile(r"\b(?:such\s+as|including|e\.g\.|i\.e\.|as\s+well\s+as|and|or)\b|[,;]", re.IGNORECASE)
# a chemical named as the cause of a disease: "X-induced Y", "induced by X", "caused by", "toxicity of X"
CAUSE_RE = re.compile(r"(?:-\s*|\b)(?:induc\w*|caus\w*|provok\w*|toxic\w*|associated|after|following|"
                      r"adverse|side[\s-]effects?|overdose|poisoning|exposure|risk)\b", re.IGNORECASE)
TREAT_RE = re.compile(r"\b(?:treat\w*|therap\w*|efficac\w*|effective|prevent\w*|amelior\w*|alleviat\w*|"
                      r"reliev\w*|improv\w*|protect\w*|cur(?:e|ed|es)|manage\w*|control\w*|rescue\w*|benefi\w*|"
                      r"attenuat\w*|revers\w*)\b", re.IGNORECASE)
UP_RE = re.compile(r"\b(?:increas\w*|elevat\w*|up-?regulat\w*|enhanc\w*|activat\w*|stimulat\w*|overexpress\w*|"
                   r"induc\w*|promot\w*|rais\w*|augment\w*)\b", re.IGNORECASE)
DOWN_RE = re.compile(r"\b(?:decreas\w*|reduc\w*|down-?regulat\w*|inhibit\w*|suppress\w*|lower\w*|block\w*|"
                     r"attenuat\w*|diminish\w*|abolish\w*|impair\w*|antagoni\w*)\b", re.IGNORECASE)
# negation that takes the pair's relation away: "did not affect", "no association", "was not associated",
# "independent of", "unrelated to"; a plain "no" before a noun phrase counts too (NEGATION_RE above)
SCOPED_NEGATION_RE = re.compile(
    r"\b(?:no|not|never|neither|nor|without|cannot|failed\s+to|fails?\s+to|absence\s+of|lack\s+of|unaffected|"
    r"independent(?:ly)?\s+of|unrelated\s+to|irrespective\s+of|regardless\s+of)\b|n't\b", re.IGNORECASE)


def count(pattern: re.Pattern[str], text: str) -> int:
    return sum(1 for _ in pattern.finditer(text))
