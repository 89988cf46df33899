"""SA: extractive summaries keep entities, relations, numbers and doses, in order, on real text."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from stub_backbones import LexiconBackbone

from karma_dagster.agents.summarizer import SummarizerError, summarize_segments
from karma_dagster.backbones.local.summarizer import (
    DOSE_RE, MEASURE_RE, STAT_RE, must_keep, sentence_signals, summarize,
)
from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import RawSection, SegmentRow

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KARMA_SHARED_DATA", REPO.parent / "shared" / "data"))
PAPERS = ["PMC4707348", "PMC4737013", "PMC4736972"]

needs_papers = pytest.mark.skipif(not (SHARED / "papers").is_dir(), reason="sample papers not available")



def body_paragraph_blocks(pmcid: str) -> list[str]:
    """The body sections of a JATS paper, one text per <sec> (paragraphs joined)."""
    root = ET.parse(SHARED / "papers" / pmcid / "fulltext.xml").getroot()
    out = []
    for sec in root.iter("sec"):
        paras = [re.sub(r"\s+", " ", "".join(p.itertext())).strip() for p in sec.findall("p")]
        if paras:
            out.append(" ".join(paras))
    return out



def _positions(summary: str, text: str) -> list[int]:
    return [text.index(s) for _, _, s in split_sentences(summary)]


# ---------------------------------------------------------------- signals
def test_number_dose_and_statistic_patterns():
    for dose in ("130 mg/kg", "5 to 20 micrograms/kg", "10 μM", "2.5 mg", "0.2 to 2 mg/kg", "500 mg/day"):
        assert DOSE_RE.search(f"given {dose} daily"), dose
    for not_dose in ("in 2005", "group 2", "IL-2", "n = 6"):
        assert not DOSE_RE.search(not_dose), not_dose
    assert MEASURE_RE.search("glucose fell by 1.5 mmol/L") and MEASURE_RE.search("in 45% of cases")
    for stat in ("p < 0.05", "P=0.001", "(95% CI 1.2-3.4)", "OR = 2.1", "r = -0.45"):
        assert STAT_RE.search(stat), stat


# ---------------------------------------------------------------- the local summary
def test_short_segment_is_returned_whole(count_hits):
    text = "Aspirin reduces the risk of myocardial infarction. It was given at 100 mg daily."
    assert summarize(f"  {text} ", 6, count_hits) == (text, 2, 2)
    assert summarize("", 6, count_hits) == ("", 0, 0)
    with pytest.raises(ValueError, match="max_sentences"):
        summarize(text, 0, count_hits)


def test_dosage_and_entity_relation_sentences_survive_a_tight_budget(count_hits):
    doc = next(d for d in read_pubtator(REPO / "data" / "corpora" / "bc5cdr-train.pubtator.gz") if d.pmid == "227508")
    summary, n_in, n_out = summarize(doc.abstract, 2, count_hits)
    assert n_in == 6 and n_out < n_in
    assert "5 to 20 micrograms/kg" in summary and "100 mg/kg alpha-methyldopa" in summary
    for _, _, sent in split_sentences(doc.abstract):
        if must_keep(sentence_signals(sent, count_hits)):
            assert sent in summary
    assert _positions(summary, doc.abstract) == sorted(_positions(summary, doc.abstract))


@needs_papers
@pytest.mark.parametrize("pmcid", PAPERS)
def test_long_real_segments_are_condensed_in_order_keeping_triples_and_numbers(pmcid, count_hits):
    blocks = [b for b in body_paragraph_blocks(pmcid) if 8 <= len(split_sentences(b)) <= 40]
    assert blocks
    total_in = total_out = 0
    for text in blocks:
        summary, n_in, n_out = summarize(text, 6, count_hits)
        total_in, total_out = total_in + len(text), total_out + len(summary)
        positions = _positions(summary, text)  # every summary sentence is a sentence of the text...
        assert positions == sorted(positions)  # ...in the original order
        assert n_out == len(positions) and n_out <= n_in
        for _, _, sent in split_sentences(text):
            sig = sentence_signals(sent, count_hits)
            if must_keep(sig):
                assert sent in summary
            elif sig["hits"] == 0 and sig["cues"] == 0 and not (sig["measure"] or sig["stat"]):
                assert sent not in summary or sent == split_sentences(text)[0][2]
    assert total_out < 0.9 * total_in


# ---------------------------------------------------------------- the agent
def _segment(order: int, text: str, kept: bool, section: str = "results") -> SegmentRow:
    return SegmentRow(doc_key="d1", segment_id=f"d1:s{order:03d}", order=order, section=section, heading="",
                      text=text, relevance=0.9 if kept else 0.1, kept=kept,
                      drop_reason=None if kept else "relevance below delta")


@needs_papers
def test_summarize_segments_only_kept_with_ids_and_counts(count_hits):
    blocks = [b for b in body_paragraph_blocks("PMC4707348") if len(split_sentences(b)) >= 8][:3]
    segments = [_segment(i, b, kept=(i != 1)) for i, b in enumerate(blocks)]
    rows = summarize_segments(segments, LexiconBackbone(count_hits), KarmaParams(summary_max_sentences=4))
    assert [r.segment_id for r in rows] == ["d1:s000", "d1:s002"]
    for row, seg in zip(rows, [segments[0], segments[2]]):
        assert row.summary_id == f"{seg.segment_id}:sum" and row.section == seg.section
        assert row.n_sentences_in == len(split_sentences(seg.text)) > row.n_sentences_out >= 1
        assert len(row.text) < len(seg.text)


def test_summarize_segments_rejects_bad_answers_and_skips_empty(count_hits):
    seg = _segment(0, "Cisplatin causes nephrotoxicity. It is dose dependent.", kept=True)

    class Answer:
        name = "scripted"

        def __init__(self, answer):
            self.answer = answer

        def summarize(self, section, max_sentences):
            return self.answer

    with pytest.raises(SummarizerError, match="returned dict"):
        summarize_segments([seg], Answer({"text": "x"}), KarmaParams())
    assert summarize_segments([seg], Answer("   "), KarmaParams()) == []
    with pytest.raises(SummarizerError, match="duplicate"):
        summarize_segments([seg, seg], Answer("x"), KarmaParams())


def test_a_summary_longer_than_its_segment_gives_way_to_the_segment(caplog):
    # a small real model (SmolLM2-135M) restates a one-sentence title in two or three: that condenses nothing
    # and adds what the paper does not say, so the segment's own text stands in (and the stage's schema holds)
    seg = _segment(0, "Sildenafil attenuates hypoxic pulmonary remodelling.", kept=True)

    class Wordy:
        name = "wordy"

        def summarize(self, section, max_sentences):
            return "Sildenafil is a drug. It attenuates remodelling. Mice were studied."

    [row] = summarize_segments([seg], Wordy(), KarmaParams())
    assert row.text == seg.text and row.n_sentences_in == row.n_sentences_out == 1
    assert "wrote 3 sentences for the 1" in caplog.text


# ---------------------------------------------------------------- the local backbone's summary keeps every pair
@pytest.fixture(scope="module")
def ner():
    from karma_dagster.dictionary.lexicon import Lexicon
    from karma_dagster.dictionary.ner import DictionaryNER

    return DictionaryNER(Lexicon.build(cache_dir=REPO / ".cache" / "lexicon"))


def test_local_summary_keeps_every_mention_the_ner_finds_in_the_segment(ner):
    """Issue 32: the relation model pairs every two entities of a summary, so a cut sentence naming one lost its
    pairs (the full chain scored below its no-summarizer ablation). With the mentions found over the whole
    segment, every sentence naming one stays (an abbreviation defined earlier included); the rest is condensed."""
    docs = [d for d in read_pubtator(REPO / "data" / "corpora" / "biored-train.pubtator.gz")
            if len(split_sentences(d.text)) >= 9][:25]
    assert len(docs) == 25
    cut = 0
    for d in docs:
        spans = ner.recognize(d.text)
        summary, n_in, n_out = summarize(d.text, 3, ner.count_hits, [(m.start, m.end) for m in spans])
        found = {(m.text, m.type, m.vocab_id) for m in spans}
        assert {(m.text, m.type, m.vocab_id) for m in ner.recognize(summary)} == found, d.pmid
        named = [s for start, end, s in split_sentences(d.text) if any(start <= m.start < end for m in spans)]
        assert all(s in summary for s in named), d.pmid
        cut += n_in - n_out
    assert cut > 0  # sentences naming no entity were condensed away
