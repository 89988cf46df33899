"""Gene and protein symbols written the many ways papers write them: FGFR-4 = FGFR4, SOCS-3 = SOCS3,
HNF4alpha = HNF4α = HNF4A, TNF-alpha = TNFα.

The dictionary matches symbols case-sensitively and token by token, so a hyphen or a spelled-out Greek letter the
vocabulary does not list misses the gene. A *symbol key* folds those differences (lowercase, Greek letters to
their Latin initial, hyphens and spaces dropped); the NER looks up a hyphenated or Greek-suffixed word's key
among the lexicon's gene symbols when no dictionary span covers it.
"""

from __future__ import annotations

import re
import weakref

from karma_dagster.dictionary.lexicon import Lexicon

GREEK_INITIAL = {"alpha": "a", "beta": "b", "gamma": "g", "delta": "d", "kappa": "k", "epsilon": "e",
                 "α": "a", "β": "b", "γ": "g", "δ": "d", "κ": "k", "ε": "e"}
_GREEK = re.compile(r"(alpha|beta|gamma|delta|kappa|epsilon|[αβγδκε])", re.IGNORECASE)
_DROP = re.compile(r"[-\s.‐]")
# a hyphenated word with a digit or Greek letter (FGFR-4, SOCS-3, TIM-3, IL-1beta), a word ending in a Greek
# letter (HNF4alpha, PPARγ), or a mixed-case word with two capitals (CaSR for CASR); the candidates the symbol
# keys are looked up for
CANDIDATE = re.compile(
    r"(?<![\w-])[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9αβγδκε]+)*"
    r"(?:-(?:\d+[A-Za-z]?|alpha|beta|gamma|delta|kappa|[αβγδκε])|(?<=[A-Za-z0-9])(?:alpha|beta|gamma|delta|kappa|[αβγδκε]))"
    r"(?![\w-])"
    r"|(?<![\w-])(?=[a-z0-9]*[A-Z][a-z0-9]*[A-Z])(?=\w*[a-z])[A-Za-z][A-Za-z0-9]{2,}(?![\w-])")  # CaSR = CASR
MIN_KEY = 3


def symbol_key(text: str) -> str:
    """FGFR-4 -> fgfr4, HNF4alpha -> hnf4a, TNF-α -> tnfa."""
    return _DROP.sub("", _GREEK.sub(lambda m: GREEK_INITIAL[m.group(1).lower()], text)).lower()


_SYMBOLS: "weakref.WeakKeyDictionary[Lexicon, list[tuple[int, str, str]]]" = weakref.WeakKeyDictionary()


def _gene_symbols(lexicon: Lexicon) -> list[tuple[int, str, str]]:
    """(row, term, symbol key) of each one-word, case-sensitive gene symbol whose key is long enough, in table
    order; once per lexicon (the NER's symbol keys and the per-taxon ids both read it). Read as column lists:
    pandas' per-cell access cost ~5 us a row over ~70,000 rows in every process."""
    got = _SYMBOLS.get(lexicon)
    if got is not None:
        return got
    t = lexicon.table
    mask = ((t["type"] == "Gene") & t["case_sensitive"].astype(bool) & ~t["term"].str.contains(" ")).tolist()
    out = []
    for i, (term, keep) in enumerate(zip(t["term"].tolist(), mask)):
        if keep and len(key := symbol_key(term)) >= MIN_KEY:
            out.append((i, term, key))
    _SYMBOLS[lexicon] = out
    return out


def gene_symbol_keys(lexicon: Lexicon) -> dict[str, int]:
    """symbol key -> lexicon row of a gene symbol (one-word, case-sensitive); a key two genes share is left out."""
    vocab_ids = lexicon.table["vocab_id"].tolist()
    out: dict[str, int] = {}
    ambiguous: set[str] = set()
    for i, _term, key in _gene_symbols(lexicon):
        if key in out and vocab_ids[out[key]] != vocab_ids[i]:
            ambiguous.add(key)
        out.setdefault(key, i)
    return {k: v for k, v in out.items() if k not in ambiguous}


_TAXA: "weakref.WeakKeyDictionary[Lexicon, dict[str, dict[str, str]]]" = weakref.WeakKeyDictionary()


def _taxa_by_key(lexicon: Lexicon) -> dict[str, dict[str, str]]:
    """symbol key -> per-taxon ids merged over every gene symbol spelled so (IGF-1 mouse, IGF1 human); a taxon
    whose spellings disagree on the id is left out."""
    merged: dict[str, dict[str, str]] = {}
    clash: set[tuple[str, str]] = set()
    for _i, term, key in _gene_symbols(lexicon):
        slot = merged.setdefault(key, {})
        for taxon, vid in lexicon.taxon_ids(term).items():
            if slot.setdefault(taxon, vid) != vid:
                clash.add((key, taxon))
    for key, taxon in clash:
        merged[key].pop(taxon, None)
    return merged


def symbol_taxon_ids(lexicon: Lexicon, text: str) -> dict[str, str]:
    """The per-taxon ids of the gene symbols `text` is a spelling of (IGF-1 -> IGF1's human id, IGF-1's mouse one),
    empty when it spells none."""
    taxa = _TAXA.get(lexicon)
    if taxa is None:
        taxa = _TAXA[lexicon] = _taxa_by_key(lexicon)
    return dict(taxa.get(symbol_key(text), {}))
