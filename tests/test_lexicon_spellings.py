"""Disease and chemical names as papers write them, not as MeSH lists them: British spellings, eponyms with a
possessive, numbered subtypes with "type", -sia for MeSH's -sis, the organ as an adjective, a drug without the salt
MeSH names it with (dictionary/lexicon.py `_variants`, `_organ_synonyms`, `_SALT`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from karma_dagster.dictionary.lexicon import Lexicon, _british, _organ_synonyms, _variants
from karma_dagster.dictionary.ner import DictionaryNER

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lexicon() -> Lexicon:
    return Lexicon.build(cache_dir=ROOT / ".cache" / "lexicon")


@pytest.mark.parametrize("american, british", [
    ("Anemia", "Anaemia"), ("Hypokalemia", "Hypokalaemia"), ("Myocardial Ischemia", "Myocardial Ischaemia"),
    ("ischemic", "ischaemic"), ("Edema", "Oedema"), ("edema", "oedema"), ("Gastrointestinal Hemorrhage",
    "Gastrointestinal Haemorrhage"), ("Paresthesia", "Paraesthesia"), ("Tumor", "Tumour"), ("Diarrhea", "Diarrhoea"),
    ("Sodium Sulfate", "Sodium Sulphate"), ("Estradiol", "Oestradiol"), ("Fetal Death", "Foetal Death"),
    ("Hemolytic Anemia", "Haemolytic Anaemia"),
    ("Hemiplegia", "Hemiplegia"), ("Chemistry", "Chemistry"), ("Emphysema", "Emphysema"),  # nothing to change
])
def test_british_spelling(american, british):
    assert _british(american) == british


def test_mesh_name_forms():
    assert "Gitelman's Syndrome" in _variants("Gitelman Syndrome", "Disease", "mesh")
    assert "Graves' Disease" in _variants("Graves Disease", "Disease", "mesh")
    assert "Ewing's Sarcoma" in _variants("Sarcoma, Ewing", "Disease", "mesh")  # uninverted first
    assert not any("'" in v for v in _variants("Hemolytic Anemia", "Disease", "mesh"))  # an adjective, no eponym
    assert "Mucopolysaccharidosis type VI" in _variants("Mucopolysaccharidosis VI", "Disease", "mesh")
    assert "Gitelman's Syndrome" not in _variants("Gitelman Syndrome", "Disease", "hetionet")  # MeSH's forms only
    assert _organ_synonyms("Heart Failure") == {"Cardiac Failure"}
    assert "Chronic Renal Failure" in _organ_synonyms("Kidney Failure, Chronic")
    assert _organ_synonyms("Asthma") == set()
    assert "Telangiectasia" in _variants("Telangiectasis", "Disease", "mesh")


def test_lexicon_gives_the_mesh_id_to_the_written_forms(lexicon):
    """Each form reaches the MeSH descriptor (the gold namespace), not a Hetionet UMLS/DOID id or nothing."""
    expected = {
        "anaemia": "MESH:D000740", "gastrointestinal haemorrhage": "MESH:D006471",
        "Gitelman's syndrome": "MESH:D053579", "Hodgkin's disease": "MESH:D006689",  # Hetionet: UMLS:C0019829
        "Addison's disease": "MESH:D000224", "mucopolysaccharidosis type VI": "MESH:D009087",
        "cardiac failure": "MESH:D006333", "muscle atrophy": "MESH:D009133",  # Hetionet: UMLS:C0026846
        "telangiectasia": "MESH:D013684", "hyperkinesia": "MESH:D006948",  # MeSH: Telangiectasis, Hyperkinesis
        "tiapride": "MESH:D063325",  # MeSH 2015: Tiapride Hydrochloride
    }
    got = {w: (lexicon.lookup(w).vocab_id if lexicon.lookup(w) else None) for w in expected}
    assert got == expected
    # an organ synonym never overrides a name a vocabulary or corpus lists itself
    assert lexicon.lookup("chronic renal failure").vocab_id == "MESH:D007676"


def test_ner_finds_british_and_possessive_forms(lexicon):
    ner = DictionaryNER(lexicon)
    text = "Two patients with Gitelman's syndrome developed hypokalaemia and gastrointestinal haemorrhage."
    spans = {s.text: s.vocab_id for s in ner.recognize(text) if s.type == "Disease"}
    assert spans == {"Gitelman's syndrome": "MESH:D053579", "hypokalaemia": "MESH:D007008",
                     "gastrointestinal haemorrhage": "MESH:D006471"}


def test_a_symbol_the_tokenizer_keeps_whole_before_a_slash_is_found(lexicon):
    """PI3K is two tokens alone (PI3 K) but one in "PI3K/Akt": both are matched."""
    ner = DictionaryNER(lexicon)
    found = {(s.text, s.start) for s in ner.recognize("The PI3K/Akt/mTOR pathway and PI3K signalling.") if s.type == "Gene"}
    assert {("PI3K", 4), ("Akt", 9), ("PI3K", 30)} <= found


def test_a_drug_named_with_its_salt_in_mesh_gets_the_mesh_id(lexicon):
    """Methacholine Chloride (MeSH) is the drug methacholine (Hetionet): the MeSH id, comparable to the corpora;
    Vinyl Chloride, not a drug, does not make "vinyl" a chemical of that id."""
    assert lexicon.lookup("methacholine").vocab_id == "MESH:D016210"
    vinyl = lexicon.lookup("vinyl")
    assert vinyl is None or vinyl.vocab_id != lexicon.lookup("vinyl chloride").vocab_id


def test_a_disease_short_form_named_as_a_gene_is_the_gene(lexicon):
    """VHL and APC are typed Disease (von Hippel-Lindau disease, adenomatous polyposis coli) but listed among
    genes they are the genes; alone, or "the VHL gene" (a disease in NCBI disease), they stay diseases."""
    ner = DictionaryNER(lexicon)
    vhl, apc = lexicon.taxon_ids("VHL")["9606"], lexicon.taxon_ids("APC")["9606"]

    def typed(text: str) -> dict[str, tuple[str, str | None]]:
        return {s.text: (s.type, s.vocab_id) for s in ner.recognize(text)}

    assert typed("Genes mutated were TP53, RB1, APC, BCOR and BRAF.")["APC"] == ("Gene", apc)
    assert typed("Genes mutated were TP53 and VHL.")["VHL"] == ("Gene", vhl)
    assert typed("Mutations in the VHL gene were found.")["VHL"][0] == "Disease"
    assert typed("Patients with VHL were followed.")["VHL"][0] == "Disease"
