"""The strings a mention may be under a grammar (backbones/llm/spans.py): every short word run of the text, never
one that crosses a clause or carries a character that breaks the server's grammar conversion."""

from __future__ import annotations

from pathlib import Path

from karma_dagster.backbones.llm.spans import text_spans
from karma_dagster.ingest.pubtator import read_pubtator

REPO = Path(__file__).resolve().parents[1]


def test_spans_cover_the_gold_mentions_of_real_abstracts():
    docs = read_pubtator(REPO / "data" / "inbox" / "abstracts.pubtator")
    found = total = 0
    for doc in docs:
        spans = set(text_spans(doc.text))
        for m in doc.mentions:
            total += 1
            found += m.text in spans
    assert total > 100 and found / total >= 0.9, (found, total)  # what is left: mentions of 7+ words, or split ones


def test_spans_never_cross_a_clause_or_carry_quotes():
    text = 'Pallidal stimulation improves the "on" symptoms of PD, such as dyskinesias; 1,2-dichloroethane and IL-6/STAT3.'
    spans = text_spans(text)
    assert {"Pallidal stimulation", "1,2-dichloroethane", "IL-6/STAT3", "symptoms of PD", "dyskinesias"} <= set(spans)
    assert not [s for s in spans if '"' in s or ", " in s or "; " in s or "\\" in s]
    assert not [s for s in spans if s.split()[0].lower() in ("the", "of", "and") or s.split()[-1] in ("of", "the")]
    assert len(spans) == len(set(spans)) and len(text_spans(text, limit=5)) == 5
