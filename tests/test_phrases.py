"""The dictionary NER's phrase tables (dictionary/phrases.py): every n-gram that is a lexicon row, as spaCy's
PhraseMatcher found them, without a Doc per pattern."""

import pytest

from karma_dagster.dictionary.phrases import PhraseTable


def test_every_phrase_span_is_found_overlaps_included_in_order():
    t = PhraseTable()
    t.add(0, ["type", "2", "diabetes"])
    t.add(1, ["diabetes"])
    t.add(2, ["type", "2", "diabetes", "mellitus"])
    t.add(3, ["diabetes"])  # a second row with the same tokens: both are answered
    words = "patients with type 2 diabetes mellitus and diabetes".split()
    assert list(t.matches(words)) == [(0, 2, 5), (2, 2, 6), (1, 4, 5), (3, 4, 5), (1, 7, 8), (3, 7, 8)]


def test_a_prefix_that_is_no_phrase_is_not_a_match_and_a_break_in_it_stops_the_scan():
    t = PhraseTable()
    t.add(0, ["tumour", "necrosis", "factor"])
    assert list(t.matches(["tumour", "necrosis"])) == []
    assert list(t.matches(["tumour", "growth", "factor"])) == []
    assert list(t.matches(["a", "tumour", "necrosis", "factor"])) == [(0, 1, 4)]
    assert len(t) == 1


def test_a_row_without_tokens_is_refused():
    with pytest.raises(ValueError, match="row 7 has no tokens"):
        PhraseTable().add(7, [])
