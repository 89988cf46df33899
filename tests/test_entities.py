"""Lexicon, local NER and the EEA on real shipped data (vocabularies and BioRED/BC5CDR TRAIN abstracts)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from karma_dagster.agents.entity_extraction import (
    extract_entities_counted,
    filter_proposals,
    mention_id,
    screen_proposals,
    unlisted_name_problem,
)
from karma_dagster.dictionary.lexicon import Lexicon, LexiconError, hetionet_to_vocab_id
from karma_dagster.dictionary.ner import DictionaryNER
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.kg.entity_index import EntityIndex, KGEntity
from karma_dagster.metrics.gold_mentions import score_mentions
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import MentionSpan, SummaryRow

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "lexicon"  # gitignored; a cold build takes ~20 s, a cached load < 1 s


@pytest.fixture(scope="module")
def lexicon() -> Lexicon:
    return Lexicon.build(cache_dir=CACHE)


@pytest.fixture(scope="module")
def ner(lexicon) -> DictionaryNER:
    """The dictionary alone: these tests hand the EEA names it does not list (the learned NER, trained on these
    abstracts, would find them)."""
    return DictionaryNER(lexicon, learned=None)


@pytest.fixture(scope="module")
def train_docs():
    return read_pubtator(ROOT / "data" / "corpora" / "biored-train.pubtator.gz")


def test_lexicon_types_terms(lexicon):
    assert lexicon.lookup("metformin").type == "Chemical"
    assert lexicon.lookup("metformin").vocab_id == "MESH:D008687"
    assert lexicon.lookup("thrombocytopenia").type == "Disease"
    brca1 = lexicon.lookup("BRCA1")
    assert brca1.type == "Gene" and brca1.vocab_id == "NCBIGene:672" and brca1.case_sensitive
    assert lexicon.lookup("type 2 diabetes mellitus").type == "Disease"  # uninverted "Diabetes Mellitus, Type 2"
    assert lexicon.lookup("AIDS") is not None and lexicon.lookup("aids") is None  # case rule for short symbols
    assert lexicon.lookup("the") is None and lexicon.lookup("water") is None  # stopword / ratio filter
    assert hetionet_to_vocab_id("Compound::DB00331") == ("Compound", "DRUGBANK:DB00331")
    with pytest.raises(LexiconError):
        hetionet_to_vocab_id("DB00331")


def test_lexicon_cache_roundtrip(lexicon):
    again = Lexicon.build(cache_dir=CACHE)
    assert again.fingerprint == lexicon.fingerprint and len(again) == len(lexicon)


def test_abbreviation_resolution_on_real_text(ner, train_docs):
    doc = next(d for d in train_docs if "(VAL)" in d.text)
    mentions = ner.recognize(doc.text)
    vals = [m for m in mentions if m.text == "VAL"]
    assert len(vals) >= 3  # the definition and the later uses
    assert all(m.type == "Chemical" and m.long_form == "valsartan" for m in vals)
    assert {m.vocab_id for m in vals} == {next(m for m in mentions if m.text == "valsartan").vocab_id}


def test_defined_abbreviation_gets_long_form_type(ner):
    text = "Patients with type 2 diabetes mellitus (T2DM) received metformin. T2DM remission was rare."
    t2dm = [m for m in ner.recognize(text) if m.text == "T2DM"]
    assert len(t2dm) == 2 and all(m.type == "Disease" and m.vocab_id == "MESH:D003924" for m in t2dm)


def test_overlaps_resolved_to_longest(ner):
    text = "Ovarian cancer and breast cancer cells were treated with cisplatin."
    got = {(m.text, m.type) for m in ner.recognize(text)}
    assert ("Ovarian cancer", "Disease") in got and ("breast cancer", "Disease") in got
    assert not any(t == "cancer" for t, _ in got)
    spans = sorted((m.start, m.end) for m in ner.recognize(text))
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no overlaps


def test_variants_and_batch(ner):
    texts = ["The V600E mutation and rs1801133 (c.677C>T) in MTHFR.", "No entities here at all."]
    batch = ner.recognize_many(texts)
    assert {m.text for m in batch[0] if m.type == "Variant"} >= {"V600E", "rs1801133", "c.677C>T"}
    assert batch[1] == [] and ner.count_hits(texts[0]) == len(batch[0])


def test_mention_f1_floor_on_train_abstracts(ner, train_docs):
    docs = train_docs[:20]
    scores = score_mentions(docs, ner.recognize_many([d.text for d in docs]))
    # measured 0.958 on these abstracts, which the lexicon learned from: a regression floor, not a quality claim
    # (held-out figures: bench/biored_mentions.py)
    assert scores.mentions["micro"].f1 >= 0.93


class _Proposer:
    """A backbone stand-in that proposes what an LLM might: the real entities, plus (surface, type) extras located
    in the text — names the dictionary lacks, garbage, a type the schema has no node kind for."""

    def __init__(self, ner: DictionaryNER, extra: list[tuple[str, str]]):
        self.ner, self.extra = ner, extra

    def recognize(self, text: str) -> list[MentionSpan]:
        out = list(self.ner.recognize(text))
        for phrase, etype in self.extra:
            i = text.find(phrase)
            if i >= 0:
                out.append(MentionSpan(start=i, end=i + len(phrase), text=phrase, type=etype))
        return out


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> EntityIndex:
    rows = []
    with gzip.open(ROOT / "data" / "vocab" / "hetionet-nodes.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            node_id, name, kind = line.rstrip("\n").split("\t")
            if kind in {"Disease", "Compound", "Symptom", "Side Effect", "Gene"}:
                rows.append(KGEntity(id=node_id, name=name, kind=kind))
    ix = EntityIndex(tmp_path_factory.mktemp("lance") / "kg.lance")
    ix.build(rows)
    return ix


UNLISTED = ("Pro75 Ala", "SequenceVariant")  # a variant the lexicon spells only as "Pro75Ala"
GARBAGE = [("3.2%", "ChemicalEntity"), ("subjects", "OrganismTaxon"), ("Caucasians", "Ethnicity"),
           ("combined single strand conformational polymorphism-heteroduplex analysis followed by direct sequencing",
            "ChemicalEntity")]


def test_extract_entities_on_real_abstract(ner, index, train_docs):
    doc = next(d for d in train_docs if d.pmid == "10491763")  # HNF-6 and type II diabetes
    summary = SummaryRow(doc_key="2000-01-01_pmid10491763", summary_id="s1", segment_id="g1", section="abstract",
                         text=doc.text, n_sentences_in=10, n_sentences_out=10)
    backbone = _Proposer(ner, extra=[UNLISTED, *GARBAGE])
    found = extract_entities_counted([summary], backbone, ner, index, KarmaParams())
    rows, counts = found.rows, found.counts
    assert rows and all(r.doc_key == summary.doc_key for r in rows)
    by_text = {r.text: r for r in rows}
    diab = by_text["type II diabetes"]
    assert diab.status == "linked" and diab.kg_id == "Disease::DOID:9352" and diab.distance <= KarmaParams().rho
    assert diab.kind == "Disease" and diab.linked_to == "seed" and diab.in_dictionary
    insulin = by_text["insulin"]  # the KG names genes by symbol (INS): no close name, a new candidate
    assert insulin.status == "new" and insulin.entity_id == "NCBIGene:3630" and insulin.kg_id is None
    assert insulin.kind == "Gene" and insulin.in_dictionary and insulin.linked_to is None  # Eq. 14: Gene -> Gene
    new = [r for r in rows if r.status == "new"]
    assert new and all(r.kg_id is None and r.distance > KarmaParams().rho for r in new)
    assert all(r.entity_id == (r.vocab_id or r.entity_id) for r in new)

    # Unknown to the dictionary, still an entity: kept as new, typed through ner_type_to_kind (Variant).
    pro = by_text["Pro75 Ala"]
    assert (pro.status, pro.in_dictionary, pro.kind, pro.vocab_id) == ("new", False, "Variant", None)
    assert pro.entity_id == "NEW:SequenceVariant:pro75 ala"
    # Garbage and a type the schema cannot place are dropped, each with its reason.
    assert not {t for t, _ in GARBAGE} & set(by_text)
    assert counts.dropped == {"no_letters": 1, "generic": 1, "no_schema_kind": 1, "too_long": 1}
    assert counts.new_unlisted == 1 and counts.linked_unlisted == 0
    assert counts.new_from_dictionary == sum(r.status == "new" and r.in_dictionary for r in rows)
    assert counts.linked == counts.linked_seed == sum(r.status == "linked" for r in rows)
    assert counts.new_by_kind["Variant"] == sum(r.kind == "Variant" and r.status == "new" for r in rows)
    # nothing leaves without a count: every proposal is a mention or a counted drop
    proposed = len(backbone.recognize(summary.text))
    assert counts.proposed == proposed == len(rows) + sum(counts.dropped.values())

    r0 = rows[0]
    assert r0.mention_id == mention_id(r0.doc_key, r0.summary_id, r0.start, r0.end, r0.text)
    again = extract_entities_counted([summary], backbone, ner, index, KarmaParams()).rows
    assert [r.mention_id for r in again] == [r.mention_id for r in rows]  # content-hash ids, stable


def test_identity_before_similarity_links_a_mention_by_its_id(ner, index, train_docs):
    """Issue 27: insulin's vocabulary id NCBIGene:3630 is the KG's Gene::3630 (INS), however far the names are."""
    from karma_dagster.kg.identity import Crosswalk, IdentityIndex, Node

    doc = next(d for d in train_docs if d.pmid == "10491763")
    summary = SummaryRow(doc_key="2000-01-01_pmid10491763", summary_id="s1", segment_id="g1", section="abstract",
                         text=doc.text, n_sentences_in=10, n_sentences_out=10)
    with gzip.open(ROOT / "data" / "vocab" / "hetionet-nodes.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        nodes = [Node(*line.rstrip("\n").split("\t")) for line in fh]
    identity = IdentityIndex(nodes, Crosswalk.load())
    found = extract_entities_counted([summary], _Proposer(ner, extra=[]), ner, index, KarmaParams(), identity=identity)
    insulin = next(r for r in found.rows if r.text == "insulin")
    assert (insulin.status, insulin.kg_id, insulin.distance, insulin.linked_to) == ("linked", "Gene::3630", 0.0, "seed")
    assert insulin.vocab_id == "NCBIGene:3630"  # the vocabulary id stays: gold scoring reads it
    assert found.counts.linked_by_id >= 1
    assert found.counts.linked == found.counts.linked_seed == sum(r.status == "linked" for r in found.rows)
    # every new entity is one no KG node is: none carries an id the KG has
    assert all(identity.by_id(r.vocab_id) is None for r in found.rows if r.status == "new")


def test_unlisted_name_guards():
    assert unlisted_name_problem("  ") == "empty_name"
    assert unlisted_name_problem("10 mg/kg") == "measurement" and unlisted_name_problem("12 weeks") == "measurement"
    assert unlisted_name_problem("95%") == "no_letters"
    assert unlisted_name_problem("X") == "too_short"
    assert unlisted_name_problem("Treatment") == "generic" and unlisted_name_problem("cell lines") == "generic"
    assert unlisted_name_problem(" ".join(["word"] * 11)) == "too_long"
    # text a model was told to repeat (a prompt injection in the paper) never becomes a KG node
    assert unlisted_name_problem("'); DROP TABLE evidence;--") == "not_a_name"
    assert unlisted_name_problem("../../etc/passwd") == "not_a_name" and unlisted_name_problem("<b>x</b>") == "not_a_name"
    assert unlisted_name_problem("everything") == "generic" and unlisted_name_problem("all of these") == "generic"
    for name in ("visfatin", "Pro75 Ala", "5-HT", "IL-1β", "rs1042522", "Crohn's disease", "c.677C>T", "IL-1/IL-18"):
        assert unlisted_name_problem(name) is None, name


def test_screen_keeps_unlisted_and_the_strict_filter_does_not(ner):
    text = "Visfatin and metformin lowered glucose in 12 patients."
    spans = [MentionSpan(start=0, end=8, text="Visfatin", type="GeneOrGeneProduct"),
             MentionSpan(start=13, end=22, text="metformin", type="ChemicalEntity"),
             MentionSpan(start=42, end=44, text="12", type="ChemicalEntity")]
    if ner.lexicon.lookup("visfatin") is not None:
        pytest.skip("the lexicon learned visfatin")
    kept, dropped = screen_proposals(text, spans, ner)
    assert [(k.span.text, k.in_dictionary) for k in kept] == [("Visfatin", False), ("metformin", True)]
    assert kept[1].span.vocab_id == "MESH:D008687" and dropped == {"no_letters": 1}
    assert [k.text for k in filter_proposals(text, spans, ner)] == ["metformin"]


def test_an_id_borrowed_from_the_dictionary_brings_its_kind(ner):
    """A model's type and the dictionary's id at the same span never disagree: the vocabulary wins for a listed id
    (a Compound "malaria" carrying the disease's MeSH id once entered the KG beside the seed's Disease)."""
    text = "Malaria was treated with artesunate."
    (dict_span,) = [d for d in ner.recognize(text) if d.text == "Malaria"]
    spans = [MentionSpan(start=0, end=7, text="Malaria", type="ChemicalEntity")]
    ((kept,), _) = screen_proposals(text, spans, ner)
    assert kept.span.vocab_id == dict_span.vocab_id == "MESH:D008288"
    assert kept.span.type == dict_span.type and kept.span.type != "ChemicalEntity"
    same_kind = [MentionSpan(start=0, end=7, text="Malaria", type="DiseaseOrPhenotypicFeature")]
    assert screen_proposals(text, same_kind, ner)[0][0].span.type == "DiseaseOrPhenotypicFeature"  # kept as typed


def test_a_shared_gene_alias_is_the_gene_its_species_and_context_name(ner):
    """COX2 is HGNC's alias of PTGS2 and of MT-CO2 (Hetionet's old symbol for MT-CO2; BioRED train links "COX-2"
    there too): a paper's prostaglandin enzyme is PTGS2, a mitochondrial one keeps MT-CO2 (gene_aliases.py)."""
    def cox(text: str) -> list[str]:
        return [m.vocab_id for m in ner.recognize(text) if m.text.upper().startswith("COX")]

    assert cox("COX-2 is a key enzyme in the conversion of arachidonic acid to prostaglandins.") == ["NCBIGene:5743"]
    assert cox("Celecoxib is selective for COX-2.") == ["NCBIGene:5743"]  # no telling word: the nuclear gene
    assert cox("Mitochondrial cytochrome c oxidase subunit COX2 was lost from the mitochondria.") == ["NCBIGene:4513"]


def test_filter_drops_misaligned_spans(ner):
    text = "Metformin lowers glucose."
    bad = MentionSpan(start=0, end=5, text="lower", type="Chemical")
    good = MentionSpan(start=0, end=9, text="Metformin", type="Chemical")
    kept = filter_proposals(text, [bad, good], ner)
    assert [k.text for k in kept] == ["Metformin"] and kept[0].vocab_id == "MESH:D008687"


def test_llm_typed_answer_is_placed_through_the_schema(fresh_server):
    """Eq. 14 on the LLM path: the model's type, mapped to a node kind by kg/schema.yaml, re-expressed as the
    listed type of that kind; a type the schema cannot place is dropped and counted (litellm -> 127.0.0.1)."""
    import json

    from karma_dagster.backbones.llm import LLMBackbone, LLMClient
    from karma_dagster.runtime.prompts import PromptStore, default_prompt_root

    text = "Visfatin, an adipokine, rose with levothyroxine in hypothyroidism and fatigue, in serum."
    fresh_server.script(json.dumps({"entities": [
        {"text": "Visfatin", "type": "Protein"}, {"text": "levothyroxine", "type": "drug"},
        {"text": "hypothyroidism", "type": "DiseaseOrPhenotypicFeature"}, {"text": "fatigue", "type": "Symptom"},
        {"text": "serum", "type": "Population"}]}))
    client = LLMClient("openai/fake-model", api_base=fresh_server.url, api_key="x", backoff_base=0.01, timeout=10,
                       name="fake")
    backbone = LLMBackbone("fake", client, PromptStore(default_prompt_root()), "general biomedicine")
    spans = backbone.recognize(text)
    assert [(s.text, s.type) for s in spans] == [
        ("Visfatin", "GeneOrGeneProduct"), ("levothyroxine", "ChemicalEntity"),
        ("hypothyroidism", "DiseaseOrPhenotypicFeature"), ("fatigue", "DiseaseOrPhenotypicFeature")]
    assert backbone.usage().invalid_items == 1  # Population: the schema has no kind for it


def test_a_papers_texts_read_in_one_batch_give_the_mentions_read_one_by_one(lexicon, train_docs):
    """The chain reads each paper's texts through DictionaryNER.prefetch (one nlp.pipe) and recalls them: the
    mentions must be those of reading each text alone, with the learned NER in the pipeline too."""
    texts = [t for d in train_docs[:6] for t in (d.title, d.abstract, d.text)]
    alone = DictionaryNER(lexicon)
    one_by_one = [alone.recognize(t) for t in texts]
    batched = DictionaryNER(lexicon)
    batched.prefetch(texts)
    batched.nlp = None  # every answer below must come from the batch, not a new pass
    assert [batched.recognize(t) for t in texts] == one_by_one
    assert any(one_by_one), "real abstracts have mentions"
    first = batched.recognize(texts[0])
    first.clear()  # a caller's list is its own: the remembered mentions stay
    assert batched.recognize(texts[0]) == one_by_one[0]
