"""Document-level normalization (species, abbreviations, one id per name) and the gene ids the lexicon keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from karma_dagster.agents.entity_extraction import extract_entities_counted
from karma_dagster.dictionary.lexicon import HUMAN, Lexicon
from karma_dagster.dictionary.ner import DictionaryNER
from karma_dagster.dictionary.normalization import (NormalizationConfig, document_taxon, mesh_head_id,
                                                    normalize_document)
from karma_dagster.kg.entity_index import EntityIndex, KGEntity
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import MentionSpan, SummaryRow

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "lexicon"
MOUSE, RAT = "10090", "10116"


@pytest.fixture(scope="module")
def lexicon() -> Lexicon:
    return Lexicon.build(cache_dir=CACHE)


@pytest.fixture(scope="module")
def ner(lexicon) -> DictionaryNER:
    return DictionaryNER(lexicon)


def span(text: str, type_: str, vocab_id: str | None, start: int = 0, long_form: str | None = None) -> MentionSpan:
    return MentionSpan(start=start, end=start + len(text), text=text, type=type_, vocab_id=vocab_id,
                       long_form=long_form)


def test_gene_ids_are_ncbi_gene_ids_with_a_species(lexicon):
    """A gene name's id is an NCBI Gene id (no MeSH protein descriptor), human by default, one per species."""
    genes = lexicon.table[lexicon.table["type"] == "Gene"]
    ids = genes["vocab_id"].dropna()
    assert len(ids) > 10_000 and ids.str.startswith("NCBIGene:").all()
    tnf = lexicon.taxon_ids("TNF-alpha")  # BioRED train names human, mouse and rat TNF so
    assert {HUMAN, MOUSE} <= set(tnf) and tnf[HUMAN] != tnf[MOUSE]
    assert lexicon.lookup("TNF-alpha").vocab_id == tnf[HUMAN] == "NCBIGene:7124"
    assert lexicon.taxon_ids("BRCA1") == {HUMAN: "NCBIGene:672"}  # a Hetionet gene: human
    assert lexicon.taxon_ids("metformin") == {}


def test_species_ids_through_a_human_genes_other_names():
    """A species a name was never seen in takes the id train gave the same human gene under another name."""
    from collections import Counter

    from karma_dagster.dictionary.lexicon import _gene_ids

    votes = Counter({(HUMAN, "NCBIGene:7124"): 3, (RAT, "NCBIGene:24835"): 1})
    orthologs = {"NCBIGene:7124": Counter({(MOUSE, "NCBIGene:21926"): 2, (MOUSE, "NCBIGene:1"): 1,
                                           (RAT, "NCBIGene:2"): 5})}
    default, taxa = _gene_ids(votes, orthologs)
    assert default == "NCBIGene:7124"
    assert dict(p.split("=") for p in taxa.split(";")) == {HUMAN: "NCBIGene:7124", MOUSE: "NCBIGene:21926",
                                                             RAT: "NCBIGene:24835"}  # the name's own rat id stays
    assert _gene_ids(votes) == ("NCBIGene:7124", f"{RAT}=NCBIGene:24835;{HUMAN}=NCBIGene:7124")  # no orthologs


def test_a_name_seen_only_in_mouse_papers_gets_the_linked_human_id():
    """A name train saw only with a mouse id takes, for human papers, the human gene train linked that mouse id to;
    its default id stays the mouse one, and two candidate human genes give none."""
    from collections import Counter

    from karma_dagster.dictionary.lexicon import _gene_ids

    votes = Counter({(MOUSE, "NCBIGene:11423"): 2})
    default, taxa = _gene_ids(votes, {}, {(MOUSE, "NCBIGene:11423"): "NCBIGene:43"})
    assert default == "NCBIGene:11423"
    assert dict(p.split("=") for p in taxa.split(";")) == {HUMAN: "NCBIGene:43", MOUSE: "NCBIGene:11423"}
    two = Counter({(MOUSE, "NCBIGene:1"): 1, (RAT, "NCBIGene:2"): 1})
    _, taxa = _gene_ids(two, {}, {(MOUSE, "NCBIGene:1"): "NCBIGene:10", (RAT, "NCBIGene:2"): "NCBIGene:20"})
    assert HUMAN not in taxa


def test_lexicon_links_a_mouse_only_name_to_its_human_gene(lexicon):
    """AChE is a mouse name in BioRED train, ACHE a human one sharing its mouse id: AChE's human id is ACHE's."""
    ache = lexicon.taxon_ids("AChE")
    assert ache[MOUSE] == "NCBIGene:11423" and ache[HUMAN] == lexicon.taxon_ids("ACHE")[HUMAN] == "NCBIGene:43"
    assert lexicon.lookup("AChE").vocab_id == "NCBIGene:11423"


def test_document_taxon():
    assert document_taxon([span("patients", "Species", "NCBITaxon:9606")]) == HUMAN
    assert document_taxon([span("mice", "Species", "NCBITaxon:10090"), span("mice", "Species", "NCBITaxon:10090"),
                           span("patients", "Species", "NCBITaxon:9606")]) == MOUSE
    assert document_taxon([span("BRCA1", "Gene", "NCBIGene:672")]) is None
    # a tie goes to human (measured on BioRED train), whatever the order of the mentions
    mouse, rat, human = (span("mice", "Species", "NCBITaxon:10090"), span("rats", "Species", "NCBITaxon:10116"),
                         span("patients", "Species", "NCBITaxon:9606"))
    assert document_taxon([mouse, human]) == HUMAN and document_taxon([human, mouse]) == HUMAN
    assert document_taxon([rat, mouse]) == MOUSE == document_taxon([mouse, rat])  # then the lowest taxon id


def test_a_species_tie_goes_to_the_species_the_gene_symbols_are_written_for():
    """"patients" once and "rats" once: genes written Mfn2 / Fis1 (rodent style) settle it for the rat, MFN2 for
    human; one rodent-styled symbol among more human-styled ones does not."""
    human, rat = span("patients", "Species", "NCBITaxon:9606"), span("rats", "Species", "NCBITaxon:10116", 30)
    rodent_genes = [span("Mfn2", "Gene", "NCBIGene:9927", 50), span("Fis1", "Gene", "NCBIGene:51024", 60)]
    assert document_taxon([human, rat, *rodent_genes]) == RAT
    assert document_taxon([human, rat, span("MFN2", "Gene", "NCBIGene:9927", 50)]) == HUMAN
    assert document_taxon([human, rat, rodent_genes[0], span("MFN2", "Gene", None, 70),
                           span("SOX2", "Gene", None, 80)]) == HUMAN
    # no tie: the counts decide, however the genes are written
    assert document_taxon([human, human, rat, *rodent_genes]) == HUMAN


def test_species_context_picks_the_species_gene_id(lexicon):
    tnf = lexicon.taxon_ids("TNF-alpha")
    gene = span("TNF-alpha", "Gene", tnf[HUMAN], 10)
    mouse = normalize_document([span("mice", "Species", "NCBITaxon:10090"), gene], lexicon)
    assert mouse.spans[1].vocab_id == tnf[MOUSE] and mouse.other_species == {}
    human = normalize_document([span("patients", "Species", "NCBITaxon:9606"), gene], lexicon)
    assert human.spans[1].vocab_id == tnf[HUMAN]
    off = normalize_document([span("mice", "Species", "NCBITaxon:10090"), gene], lexicon,
                             NormalizationConfig(species=False))
    assert off.spans[1].vocab_id == tnf[HUMAN]


def test_a_gene_known_only_in_another_species_is_a_new_entity(lexicon):
    assert RAT not in lexicon.taxon_ids("BRCA1")
    doc = normalize_document([span("rats", "Species", "NCBITaxon:10116"), span("BRCA1", "Gene", "NCBIGene:672", 9),
                              span("BRCA1", "Gene", "NCBIGene:672", 30)], lexicon)
    assert [s.vocab_id for s in doc.spans[1:]] == [None, None]  # clusters do not give the human id back
    assert doc.other_species == {1: RAT, 2: RAT}


def test_abbreviation_and_cluster_ids_hold_across_the_document(lexicon):
    spans = [span("TNF", "Gene", "NCBIGene:7124", 30, long_form="tumour necrosis factor"),
             span("TNF", "Disease", "MESH:D000001", 200),  # another summary, where the NER did not see the definition
             span("insulin", "Gene", "NCBIGene:3630", 300), span("Insulin", "Gene", "NCBIGene:3630", 320),
             span("insulin", "Gene", "NCBIGene:16334", 400)]
    out = normalize_document(spans, lexicon, NormalizationConfig(species=False)).spans
    assert (out[1].type, out[1].vocab_id, out[1].long_form) == ("Gene", "NCBIGene:7124", "tumour necrosis factor")
    assert {s.vocab_id for s in out[2:]} == {"NCBIGene:3630"}  # one id per name: the majority's
    kept = normalize_document(spans, lexicon, NormalizationConfig(species=False, abbreviations=False, clusters=False))
    assert [s.vocab_id for s in kept.spans] == [s.vocab_id for s in spans]


def test_species_ids_from_the_symbol_a_spelling_names(lexicon):
    """LAG-3 (a mouse id in train) is LAG3 in a human paper; CaSR, matched as the human CASR through the symbol
    keys, is not the human gene in a rat paper; a short form keeps its own human id when its long form was seen
    only in mouse papers."""
    human, rat = span("patients", "Species", "NCBITaxon:9606"), span("rats", "Species", "NCBITaxon:10116")
    assert HUMAN not in lexicon.taxon_ids("LAG-3")
    lag = normalize_document([human, span("LAG-3", "Gene", lexicon.lookup("LAG-3").vocab_id, 20)], lexicon)
    assert lag.spans[1].vocab_id == lexicon.taxon_ids("LAG3")[HUMAN] == "NCBIGene:3902"
    assert lexicon.lookup("CaSR") is None and lexicon.id_taxon_ids("NCBIGene:846") == {HUMAN: "NCBIGene:846"}
    casr = normalize_document([rat, span("CaSR", "Gene", "NCBIGene:846", 20)], lexicon)
    assert casr.spans[1].vocab_id is None and casr.other_species == {1: RAT}
    import pandas as pd

    from karma_dagster.dictionary.lexicon import LEXICON_COLUMNS

    rows = [("mitogen-activated protein kinases", "mitogen-activated protein kinases", "Gene", "NCBIGene:26413",
             "corpus", False, f"{MOUSE}=NCBIGene:26413"),
            ("MAPK", "MAPK", "Gene", "NCBIGene:5594", "corpus", True, f"{HUMAN}=NCBIGene:5594;{MOUSE}=NCBIGene:26413")]
    small = Lexicon(pd.DataFrame([(*r[:2], [r[1]], *r[2:]) for r in rows],
                                 columns=["key", "term", "tokens", *LEXICON_COLUMNS[3:]]), "test")
    mapk = span("MAPK", "Gene", "NCBIGene:26413", 20, "mitogen-activated protein kinases")
    assert normalize_document([human, mapk], small).spans[1].vocab_id == "NCBIGene:5594"
    assert normalize_document([span("mice", "Species", f"NCBITaxon:{MOUSE}"), mapk], small).spans[1].vocab_id \
        == "NCBIGene:26413"


class _Local:
    name = "local"

    def __init__(self, ner: DictionaryNER) -> None:
        self.ner = ner

    def recognize(self, text: str) -> list[MentionSpan]:
        return self.ner.recognize(text)


def test_eea_links_by_species(ner, lexicon, tmp_path):
    """End to end through the EEA: in a rat study BRCA1 is not the KG's human BRCA1 node; in a human one it is."""
    index = EntityIndex(tmp_path / "kg.lance")
    index.build([KGEntity(id="Gene::672", name="BRCA1", kind="Gene")])

    def run(text: str):
        s = SummaryRow(doc_key="d", summary_id="d:1", segment_id="d:1", section="abstract", text=text,
                       n_sentences_in=1, n_sentences_out=1)
        rows = extract_entities_counted([s], _Local(ner), ner, index, KarmaParams()).rows
        return next(r for r in rows if r.text == "BRCA1")

    human = run("BRCA1 loss in patients with breast cancer.")
    assert human.status == "linked" and human.kg_id == "Gene::672" and human.vocab_id == "NCBIGene:672"
    rat = run("BRCA1 loss in rats with mammary tumours.")
    assert rat.status == "new" and rat.kg_id is None and rat.vocab_id is None
    assert rat.entity_id == f"NEW:Gene:brca1@NCBITaxon:{RAT}"


def test_a_side_effect_name_takes_its_heads_mesh_id(lexicon):
    """"progressive renal failure" is only a Hetionet side effect (UMLS): the corpora give it renal failure's MeSH
    id; a side effect whose head MeSH does not name keeps its id; the step can be switched off."""
    failure = lexicon.lookup("renal failure")
    assert failure.vocab_id.startswith("MESH:")
    side = lexicon.lookup("progressive renal failure")
    assert side is not None and side.vocab_id.startswith("UMLS:")
    assert mesh_head_id("progressive renal failure", lexicon) == failure.vocab_id
    assert mesh_head_id("sinus rhythm", lexicon) is None
    spans = [span("progressive renal failure", "Disease", side.vocab_id), span("sinus rhythm", "Disease", "UMLS:C0232201", 40)]
    out = normalize_document(spans, lexicon).spans
    assert [s.vocab_id for s in out] == [failure.vocab_id, "UMLS:C0232201"]
    off = normalize_document(spans, lexicon, NormalizationConfig(side_effect_heads=False)).spans
    assert off[0].vocab_id == side.vocab_id
