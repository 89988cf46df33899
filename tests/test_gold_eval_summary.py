"""`karma gold-eval` over several PubTator files ends with one table of issue 15's figures per corpus."""

import re
from pathlib import Path

import pytest

from karma_dagster.cli import main
from karma_dagster.dictionary.lexicon import CORPUS_TYPE, corpus_vocab_id
from karma_dagster.dictionary.variants import split_identifier
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.metrics.gold import PredictedMention, PredictedTriple, score_gold
from karma_dagster.metrics.gold_run import GoldEvalScores, summary_table

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_shared = pytest.mark.skipif(not (SHARED / "biored" / "Dev.PubTator").is_file(),
                                  reason="the shared data folder with the dev splits is not here")


def _gold_as_predictions(doc: PubTatorDoc) -> tuple[list[PredictedMention], list[PredictedTriple]]:
    """The gold itself as a backbone's answer: every figure it scores must be 1.000."""
    mentions, type_of = [], {}
    for m in doc.mentions:
        t = CORPUS_TYPE.get(m.type)
        ids = [v for p in split_identifier(t, m.identifier) if (v := corpus_vocab_id(t, p))] if t else []
        mentions.append(PredictedMention(start=m.start, end=m.end, text=m.text, type=m.type,
                                         vocab_id=ids[0] if len(ids) == 1 else None))
        for p in split_identifier(t, m.identifier) if t else []:
            type_of[p] = (t, corpus_vocab_id(t, p))
    triples = [PredictedTriple(head_vocab_id=type_of[r.id1][1], tail_vocab_id=type_of[r.id2][1],
                               head_type=type_of[r.id1][0], tail_type=type_of[r.id2][0], relation=r.relation,
                               probability=1.0)
               for r in doc.relations if r.id1 in type_of and r.id2 in type_of]
    return mentions, triples


@needs_shared
def test_the_summary_has_a_row_per_corpus_and_na_where_no_relation_is_annotated():
    runs = []
    for name, rel in (("BioRED dev", "biored/Dev.PubTator"), ("NCBI disease dev", "ncbi_disease/NCBIdevelopset_corpus.txt")):
        docs = [d for d in read_pubtator(SHARED / rel)[:8]
                if all(len(split_identifier(CORPUS_TYPE.get(m.type), m.identifier)) == 1 for m in d.mentions)]
        preds = [_gold_as_predictions(d) for d in docs]
        scores = GoldEvalScores.model_validate(score_gold(docs, [p[0] for p in preds], [p[1] for p in preds]).model_dump())
        runs.append((name, scores))
    rows = {line.split(" | ")[0].strip("| "): line for line in summary_table(runs).splitlines()[2:]}
    assert set(rows) == {"BioRED dev", "NCBI disease dev"}
    biored = [c.strip() for c in rows["BioRED dev"].strip("|").split("|")]
    assert biored[2:] == ["1.000"] * 4  # mentions, ids, pairs, pair + type: the gold scores itself perfectly
    ncbi = [c.strip() for c in rows["NCBI disease dev"].strip("|").split("|")]
    assert ncbi[2] != "n/a" and ncbi[4:] == ["n/a", "n/a"]


def test_a_missing_pubtator_file_is_named_before_anything_is_loaded(tmp_path, capsys):
    real = tmp_path / "real.PubTator"
    real.write_text("1|t|A title\n1|a|An abstract.\n\n", encoding="utf-8")
    assert main(["gold-eval", "--backbone", "local", "--pubtator", str(real), str(tmp_path / "missing.PubTator")]) == 2
    assert re.search(r"karma gold-eval: --pubtator .*missing\.PubTator: no such file", capsys.readouterr().err)


def test_gold_eval_links_a_mention_as_the_chain_does_by_its_id_before_its_name(tmp_path, shared_cache):
    """"COX-2" is PTGS2 (the dictionary's NCBIGene:5743), though the seed's MT-CO2 node is named "COX2": gold-eval
    asks the KG's identity index first, as the chain's entities stage does, so it scores the linking users get."""
    from karma_dagster.metrics.gold_run import predict_document
    from karma_dagster.runtime import services
    from karma_dagster.runtime.config import BackboneSettings
    from karma_dagster.runtime.params import KarmaParams
    from karma_dagster.runtime.paths import DataPaths

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "karma").mkdir()
    (tmp_path / "karma" / "cache").symlink_to(shared_cache)
    data = DataPaths(tmp_path / "karma")
    services.clear()
    services.import_seed_kg(data, repo / "data" / "seed_kg" / "nodes.tsv", repo / "data" / "seed_kg" / "edges.sif.gz",
                            "hetionet", 0.9)
    doc = read_pubtator_text(tmp_path, "1|t|Celecoxib inhibits COX-2.\n1|a|NIS expression was increased by TSH.\n"
                                       "1\t19\t24\tCOX-2\tGeneOrGeneProduct\t5743\n\n")
    backbone = services.backbone("local", BackboneSettings(), data)
    mentions, _t, _j = predict_document(doc, backbone, services.dictionary(data), services.entity_index(data),
                                        KarmaParams(), identity=services.identity_index(data, "local"))
    linked = {m.text: m.kg_id for m in mentions}
    assert linked["COX-2"] == "Gene::5743" and linked["NIS"] == "Gene::6528"
    services.clear()


def read_pubtator_text(folder: Path, text: str) -> PubTatorDoc:
    path = folder / "one.PubTator"
    path.write_text(text, encoding="utf-8")
    (doc,) = read_pubtator(path)
    return doc
