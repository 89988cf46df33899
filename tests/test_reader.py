"""RA: sentence splitting, segmenting, relevance R(s) and the delta filter, on real papers and PubTator abstracts."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from stub_backbones import LexiconBackbone

from karma_dagster.agents.reader import BELOW_DELTA, ReaderError, clean_text, read_document, segment_text
from karma_dagster.backbones.local.reader import boilerplate_share, score_sections
from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import RawSection

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KARMA_SHARED_DATA", REPO.parent / "shared" / "data"))
PAPERS = ["PMC4707348", "PMC4737013", "PMC4736972"]  # research article, case report (with thanks), review

needs_papers = pytest.mark.skipif(not (SHARED / "papers").is_dir(), reason="sample papers not available")


# ---------------------------------------------------------------- real inputs, built here from JATS
_KINDS = [("abstract", "abstract"), ("introduction", "introduction"), ("method", "methods"), ("material", "methods"),
          ("result", "results"), ("discussion", "discussion"), ("conclusion", "conclusion"), ("case", "case"),
          ("conflict", "conflicts"), ("competing", "conflicts")]


def _text(el: ET.Element | None) -> str:
    return re.sub(r"\s+", " ", "".join(el.itertext())).strip() if el is not None else ""


def _reference(ref: ET.Element) -> str:
    """A JATS citation printed the way the journal's PDF prints it: '[2] M. Cnop, N. Welsh, “Title,” J, vol. ...'."""
    cit = ref.find("element-citation")
    if cit is None:
        return _text(ref)
    authors = [f"{n.findtext('given-names', '')} {n.findtext('surname', '')}".strip() for n in cit.iter("name")]
    parts = [", ".join(authors), f"“{_text(cit.find('article-title'))},”" if cit.find("article-title") is not None else "",
             _text(cit.find("source")) + ","]
    if cit.findtext("volume"):
        parts.append(f"vol. {cit.findtext('volume')},")
    if cit.findtext("fpage"):
        parts.append(f"pp. {cit.findtext('fpage')}–{cit.findtext('lpage') or cit.findtext('fpage')},")
    parts.append(f"{cit.findtext('year', '')}.")
    return f"[{ref.findtext('label', '')}] " + " ".join(p for p in parts if p)


def jats_sections(pmcid: str) -> list[RawSection]:
    root = ET.parse(SHARED / "papers" / pmcid / "fulltext.xml").getroot()
    out = [RawSection(kind="title", text=_text(root.find(".//article-meta//article-title")))]
    out += [RawSection(heading="Abstract", kind="abstract", text="\n\n".join(_text(p) for p in ab.iter("p")))
            for ab in root.iter("abstract")]

    def walk(sec: ET.Element, kind: str | None = None) -> None:
        title = sec.findtext("title") or ""
        kind = kind or next((v for k, v in _KINDS if k in title.lower()), "body")
        paras = [_text(p) for p in sec.findall("p")]
        if paras:
            out.append(RawSection(heading=title, kind=kind, text="\n\n".join(paras)))
        for sub in sec.findall("sec"):
            walk(sub, kind)

    for part in ("body", "back"):
        for sec in root.findall(f"{part}/sec"):
            walk(sec)
    out += [RawSection(heading="Acknowledgments", kind="acknowledgements", text=_text(a)) for a in root.iter("ack")]
    refs = [_reference(r) for r in root.iter("ref")]
    out.append(RawSection(heading="References", kind="references", text="\n\n".join(refs)))
    return out




# ---------------------------------------------------------------- sentence splitting
def test_split_sentences_keeps_abbreviations_numbers_and_p_values_together():
    text = ("As shown by Smith et al. (2010), IL-2 levels rose (Fig. 2). Doses, e.g. 2.5 mg/kg i.v., were given vs. "
            "placebo; p < 0.05. Approx. 5% died. Cells were treated with 10 μM drug for 24 h. See Figs. 1 and 2.")
    sents = split_sentences(text)
    assert [s for _, _, s in sents] == [
        "As shown by Smith et al. (2010), IL-2 levels rose (Fig. 2).",
        "Doses, e.g. 2.5 mg/kg i.v., were given vs. placebo; p < 0.05.",
        "Approx. 5% died.",
        "Cells were treated with 10 μM drug for 24 h.",
        "See Figs. 1 and 2.",
    ]
    assert all(text[a:b] == s for a, b, s in sents)


@pytest.mark.skipif(not (SHARED / "biored").is_dir(), reason="BioRED not available")
def test_split_sentences_never_cuts_after_a_period_glued_to_the_next_word():
    """HGVS changes: "p.Val204Asp/p.Asp70Gly-p.Ala539Thr" (BioRED train 25054547) was cut after each "p.". A
    summary joins its sentences with a space, so the variant became "p. Ala539Thr" there and the relation stage
    failed on the document (its mention no longer matched the segment it is read in)."""
    docs = read_pubtator(SHARED / "biored" / "Train.PubTator")
    texts = [d.title + " " + d.abstract for d in docs]
    glued = [text[a - 20:a + 12] for text in texts for a, _, _ in split_sentences(text) if a and text[a - 1] == "."]
    assert len(texts) == 400 and glued == []
    (sentence,) = [s for text in texts for _, _, s in split_sentences(text) if "p.Ala539Thr BChE displays" in s]
    assert sentence.startswith("Kinetic analysis showed that the p.Val204Asp/p.Asp70Gly-p.Ala539Thr")


def test_tokenizer_is_built_without_the_set_union_warning_and_tokenizes_as_scispacys():
    """The FutureWarning once printed by every Dagster run is gone at its source, and the tokens did not move."""
    import warnings

    import spacy
    from scispacy.custom_tokenizer import combined_rule_tokenizer

    from karma_dagster.dictionary.lexicon import make_nlp
    from karma_dagster.dictionary.sentences import scispacy_tokenizer

    nlp = spacy.blank("en")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning, FutureWarning included, fails the build
        ours = scispacy_tokenizer(nlp)
        make_nlp()  # the dictionary NER's pipeline builds on the same tokenizer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        theirs = combined_rule_tokenizer(nlp)
    assert any("set union" in str(w.message) for w in caught)  # scispaCy's own build still warns: the fix is ours
    docs = read_pubtator(REPO / "data" / "inbox" / "abstracts.pubtator")
    text = " ".join(d.title + " " + d.abstract for d in docs) + ' (“IL-2”) 5.0’s «x» 〈y〉 ⟦z⟧ A|B 3.) 4".'
    assert [t.text for t in ours(text)] == [t.text for t in theirs(text)]


@needs_papers
def test_split_sentences_on_real_papers_never_cuts_inside_citations_p_values_or_doses():
    guarded = re.compile(r"et al\.\s*\S+|[pP]\s*[<=>≤]\s*0?\.\d+|\d+(?:\.\d+)?\s*(?:mg|μg|µg|mL|mmol)\b|Fig\.\s*\d+")
    checked = 0
    for pmcid in PAPERS:
        for section in jats_sections(pmcid):
            if section.kind == "references":
                continue
            text = clean_text(section.text)
            spans = [(a, b) for a, b, _ in split_sentences(text)]
            for m in guarded.finditer(text):
                checked += 1
                assert any(a <= m.start() and m.end() <= b for a, b in spans), (pmcid, m.group(0), text[m.start() - 80:m.end() + 40])
    assert checked >= 40  # the three papers hold plenty of these


# ---------------------------------------------------------------- segmenting
def test_segment_text_cuts_long_sections_at_sentence_boundaries():
    text = " ".join(f"Metformin reduced glucose in cohort {i} by {i}.5 mmol/L (p < 0.05)." for i in range(1, 15))
    segs = segment_text(text, max_sentences=12)
    assert [len(split_sentences(s)) for s in segs] == [7, 7]  # balanced, not 12 + 2
    assert " ".join(segs) == text
    assert segment_text("   ") == []
    with pytest.raises(ValueError, match="max_sentences"):
        segment_text(text, max_sentences=0)


# ---------------------------------------------------------------- the reader on real papers
@needs_papers
@pytest.mark.parametrize("pmcid", PAPERS)
def test_reader_drops_references_and_thanks_keeps_abstract_and_findings(pmcid, count_hits):
    sections = jats_sections(pmcid) + [RawSection(heading="Empty", kind="results", text=" \n ")]
    backbone = LexiconBackbone(count_hits)
    rows = read_document(pmcid.lower(), sections, backbone, KarmaParams(), kg_context=[])

    assert [r.order for r in rows] == list(range(len(rows)))
    assert all(r.segment_id == f"{pmcid.lower()}:s{r.order:03d}" for r in rows)
    assert all(r.text.strip() for r in rows)  # the empty section was skipped
    assert all(len(split_sentences(r.text)) <= 12 for r in rows)

    by_kind = {k: [r for r in rows if r.section == k] for k in {r.section for r in rows}}
    for kind in ("references", "acknowledgements", "conflicts"):
        for r in by_kind.get(kind, []):
            assert (r.kept, r.relevance) == (False, 0.0) and kind in r.drop_reason
    assert by_kind["references"], "the reference list must be present as dropped segments"
    assert all(r.kept for r in by_kind["abstract"] + by_kind["title"])
    findings = [r for k in ("results", "discussion", "case", "conclusion") for r in by_kind.get(k, [])]
    assert findings and sum(r.kept for r in findings) / len(findings) >= 0.8
    # non-content kinds never reach the backbone: one call, with only the content segments
    n_content = sum(r.section not in {"references", "acknowledgements", "conflicts", "affiliations", "funding"}
                    for r in rows)
    assert backbone.calls == [n_content]
    for r in rows:
        if r.section not in {"references", "acknowledgements", "conflicts"}:
            assert r.kept == (r.relevance >= 0.35) and (r.kept or r.drop_reason == BELOW_DELTA)


@needs_papers
def test_relevance_of_references_and_thanks_is_below_abstract_whatever_the_label(count_hits):
    sections = jats_sections("PMC4737013")
    get = {s.kind: s.text for s in sections}
    refs = segment_text(clean_text(get["references"]))
    for label in ("other", "abstract"):  # content alone must order them, even when mislabelled
        abstract, ack, *ref_scores = score_sections(
            [RawSection(kind=label, text=get["abstract"]), RawSection(kind=label, text=get["acknowledgements"])]
            + [RawSection(kind=label, text=t) for t in refs], count_hits)
        assert ack < abstract - 0.4, label
        assert max(ref_scores) < abstract - 0.4, label
    assert boilerplate_share(refs[0]) > 0.8
    assert boilerplate_share(get["abstract"]) == 0.0


def test_relevance_rises_with_kg_context_and_stays_in_unit_interval(count_hits):
    doc = read_pubtator(REPO / "data" / "corpora" / "bc5cdr-train.pubtator.gz")[0]
    section = RawSection(kind="methods", text=doc.abstract)
    names = sorted({m.text for m in doc.mentions})
    plain, with_kg, unrelated = (score_sections([section], count_hits, ctx)[0]
                                 for ctx in ([], names, ["Hepatocyte nuclear factor-6"]))
    assert 0.0 <= plain < with_kg <= 1.0
    assert unrelated == plain


@needs_papers
def test_delta_is_monotone(count_hits):
    sections = jats_sections("PMC4707348")
    backbone = LexiconBackbone(count_hits)
    kept_sets = []
    for delta in (0.0, 0.2, 0.35, 0.5, 0.7, 0.9, 1.0):
        rows = read_document("pmc4707348", sections, backbone, KarmaParams(delta=delta))
        kept_sets.append({r.segment_id for r in rows if r.kept})
    assert all(later <= earlier for earlier, later in zip(kept_sets, kept_sets[1:]))
    # every content segment of this paper names an entity, so the default delta keeps them all; higher ones cut
    assert len(kept_sets[0]) == len(kept_sets[2]) > len(kept_sets[4]) > len(kept_sets[5]) and kept_sets[-1] == set()
    content = sum(r.section not in {"references", "conflicts", "acknowledgements"} for r in rows)
    assert len(kept_sets[0]) == content  # delta 0 keeps every content segment


def test_pubtator_abstracts_are_kept(count_hits):
    docs = read_pubtator(REPO / "data" / "corpora" / "biored-train.pubtator.gz")[:40]
    backbone = LexiconBackbone(count_hits)
    kept = total = 0
    for doc in docs:
        rows = read_document(f"pmid{doc.pmid}", [RawSection(kind="title", text=doc.title),
                                                RawSection(kind="abstract", text=doc.abstract)], backbone, KarmaParams())
        kept += sum(r.kept for r in rows)
        total += len(rows)
    assert kept / total >= 0.95


# ---------------------------------------------------------------- bad input and bad backbone answers
def test_reader_rejects_bad_input_and_bad_scores(count_hits):
    sections = [RawSection(kind="abstract", text="Aspirin reduces the risk of myocardial infarction.")]
    with pytest.raises(ReaderError, match="doc_key"):
        read_document("", sections, LexiconBackbone(count_hits), KarmaParams())
    with pytest.raises(ReaderError, match="RawSection"):
        read_document("d1", [{"kind": "nonsense", "text": "x"}], LexiconBackbone(count_hits), KarmaParams())

    class Broken:
        name = "broken"

        def __init__(self, answer):
            self.answer = answer

        def score_relevance(self, sections, kg_context):
            return self.answer

    with pytest.raises(ReaderError, match="returned 2 relevance scores for 1"):
        read_document("d1", sections, Broken([0.5, 0.5]), KarmaParams())
    with pytest.raises(ReaderError, match="outside"):
        read_document("d1", sections, Broken([1.7]), KarmaParams())
