"""Tokens and sentences on a model-free spaCy pipeline (no spaCy model can be downloaded here).

`sentence_splitter()` is `spacy.blank("en")` + scispaCy's `combined_rule_tokenizer` (keeps `IL-2-dependent`,
`0.05`, `mg/kg` whole) + the rule `sentencizer` + a small fixer for the cases the sentencizer gets wrong in
biomedical prose ("approx. 5", "i.v., were", "24 h. Then"). Other stages reuse `make_tokenizer(nlp)` so every
component sees the same tokens.
"""

from __future__ import annotations

import re
from functools import lru_cache
from unittest import mock

import spacy
from scispacy.consts import ABBREVIATIONS
from scispacy.custom_tokenizer import combined_rule_tokenizer
from spacy.lang import char_classes
from spacy.language import Language
from spacy.symbols import ORTH
from spacy.tokens import Doc
from spacy.tokenizer import Tokenizer

# Abbreviations with an inner or final period that scispaCy's tokenizer splits off ("i.v" + "."), which
# would make the sentencizer cut a sentence in the middle. Both the lower and the capitalized forms are added.
BIOMED_ABBREVIATIONS: tuple[str, ...] = (
    "approx.", "ca.", "cf.", "resp.", "vs.", "viz.", "incl.", "ref.", "refs.", "suppl.", "vol.", "spp.", "var.",
    "subsp.", "pp.", "vols.", "ed.", "eds.", "chap.", "dr.", "prof.", "mr.", "mrs.", "ms.", "st.", "no.", "nos.", "e.g.", "i.e.", "etc.",
    "i.v.", "i.p.", "i.m.", "s.c.", "p.o.", "b.i.d.", "t.i.d.", "q.i.d.", "q.d.", "o.d.", "u.s.", "u.k.",
)

# Sentence-initial lowercase words that end a bogus split; alphabetic and all-lowercase only, so gene and
# molecule names that start in lower case ("mRNA", "p53", "α-synuclein") still open a sentence.
_CONTINUATION_PUNCT = frozenset({",", ";", ":", ")", "]", "}", "%"})
_OPENING_PUNCT = frozenset({"(", "[", "{", "“", "‘"})
_FINAL_PUNCT = frozenset({".", "!", "?"})
_UNIT_LETTER = re.compile(r"^[a-zµμ]\.$")


def scispacy_tokenizer(nlp: Language) -> Tokenizer:
    """scispaCy's combined rule tokenizer, built from spaCy's quote list without its empty entry.

    scispaCy writes the quotes, joined by '|', inside a character class of one suffix rule; spaCy's LIST_QUOTES
    holds an empty string, so the class gets '||', which Python's re warns about ("FutureWarning: Possible set
    union", once per process that builds a tokenizer: every Dagster run). Without the empty entry the class holds
    exactly the same characters ('|' is still in it) and the prefix rules are unchanged (spaCy drops empty
    pieces), so the tokens are the same and nothing is warned or filtered."""
    quotes = [q for q in char_classes.LIST_QUOTES if q]
    with mock.patch.object(char_classes, "LIST_QUOTES", quotes):
        return combined_rule_tokenizer(nlp)


def make_tokenizer(nlp: Language) -> Tokenizer:
    """scispaCy's rule tokenizer plus special cases for biomedical abbreviations (why: see BIOMED_ABBREVIATIONS)."""
    tokenizer = scispacy_tokenizer(nlp)
    for abbr in set(BIOMED_ABBREVIATIONS) | set(ABBREVIATIONS):
        for form in {abbr, abbr.capitalize(), abbr.upper()}:
            tokenizer.add_special_case(form, [{ORTH: form}])
    return tokenizer


@Language.component("karma_sentence_fixer")
def _sentence_fixer(doc: Doc) -> Doc:
    """Undo the sentencizer's cuts before a continuation; add the cuts it misses ("24 h. Cells", paragraphs)."""
    for i, tok in enumerate(doc):
        if i == 0:
            continue
        prev = doc[i - 1]
        if prev.is_space and "\n\n" in prev.text:
            tok.is_sent_start = True  # a paragraph break always ends a sentence (headings have no period)
        elif tok.is_sent_start:
            # "... i.v. , were given" / "(n = 12) . , and" : a sentence never opens on a comma or a lowercase word
            if not prev.whitespace_ and prev.text.endswith(".") and tok.text[:1].isalnum():
                # "p.Val204Asp/p.Asp70Gly-p.Ala539Thr": a period glued to the next word (HGVS protein and DNA
                # changes) is inside a name; the sentencizer cut there, and a summary joining the pieces with a
                # space no longer matched its segment
                tok.is_sent_start = False
            elif prev.text in _OPENING_PUNCT and i >= 2 and doc[i - 2].text in _FINAL_PUNCT:
                # "2002. [3] J. L. Evans", "died. (b) Effect": the sentencizer leaves the bracket behind
                prev.is_sent_start = True
                tok.is_sent_start = False
            elif tok.text in _CONTINUATION_PUNCT or (tok.is_alpha and tok.is_lower):
                tok.is_sent_start = False
        elif (
            _UNIT_LETTER.match(prev.text)
            and i >= 2
            and doc[i - 2].like_num
            and tok.is_title
            and not tok.is_space
        ):
            # "for 24 h. Cells were": spaCy keeps "h." as one token (an initial), so no cut was made
            tok.is_sent_start = True
    return doc


@lru_cache(maxsize=1)
def sentence_splitter() -> Language:
    """The shared blank English pipeline: tokenizer + sentencizer + fixer (cached: building it costs ~0.3 s)."""
    nlp = spacy.blank("en")
    nlp.tokenizer = make_tokenizer(nlp)
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("karma_sentence_fixer", after="sentencizer")
    nlp.max_length = 5_000_000
    return nlp


def split_sentences(text: str) -> list[tuple[int, int, str]]:
    """Sentences of `text` as (start, end, sentence) with char offsets into `text`, whitespace trimmed."""
    if not isinstance(text, str):
        raise TypeError(f"split_sentences expects a str, got {type(text).__name__}")
    if not text.strip():
        return []
    out: list[tuple[int, int, str]] = []
    for sent in sentence_splitter()(text).sents:
        start, end = sent.start_char, sent.end_char
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            out.append((start, end, text[start:end]))
    return out


def count_tokens(text: str) -> int:
    """Word-like tokens (no punctuation, no whitespace): the denominator of mention densities."""
    return sum(1 for t in sentence_splitter().make_doc(text) if not (t.is_punct or t.is_space))
