"""KARMA's metrics, the gold scores and the comparison table on tiny fixtures whose values are worked out by hand."""

from __future__ import annotations

import datetime as dt
import math

import dagster as dg
import pandas as pd
import pytest

from karma_dagster.backbones.base import TripleQuery
from karma_dagster.config import read_backbones
from karma_dagster.ingest.pubtator import parse_pubtator_lines
from karma_dagster.kg.store import KGStore
from karma_dagster.metrics import comparison as cmp
from karma_dagster.metrics.gold import PredictedMention, PredictedTriple, kg_to_vocab, raw_id, score_gold
from karma_dagster.metrics.judge import NoJudge, RuleJudge
from karma_dagster.metrics.kg_metrics import (
    compute_kg_metrics,
    connectivity_gain,
    correctness,
    judge_triples,
    triple_quality,
)
from karma_dagster.stage_store import StageStore


def evaluated_fixture() -> pd.DataFrame:
    base = dict(doc_key="d1", head_name="A", head_type="Chemical", head_kg_type="Compound", tail_name="B",
                tail_type="Disease", tail_kg_type="Disease", relation="Negative_Correlation")
    rows = [
        {**base, "triple_id": "t1", "accepted": True, "conflict": False, "confidence": 0.9, "clarity": 0.8,
         "relevance": 0.7, "kg_relation": "treats", "evidence": "A reduced B in patients."},
        {**base, "triple_id": "t2", "accepted": True, "conflict": True, "confidence": 0.6, "clarity": 0.4,
         "relevance": 0.5, "kg_relation": "treats", "evidence": "A may reduce B."},
        {**base, "triple_id": "t3", "accepted": False, "conflict": True, "confidence": 0.1, "clarity": 0.1,
         "relevance": 0.1, "kg_relation": "treats", "evidence": "A did not reduce B."},
        {**base, "triple_id": "t4", "accepted": True, "conflict": False, "confidence": 0.3, "clarity": 0.9,
         "relevance": 0.3, "kg_relation": "treats", "evidence": "A did not reduce B."},
    ]
    return pd.DataFrame(rows)


def test_triple_quality_and_conflict_ratio_by_hand():
    q = triple_quality(evaluated_fixture())
    # accepted: t1, t2, t4 -> MC = (0.9+0.6+0.3)/3, MCl = (0.8+0.4+0.9)/3, MR = (0.7+0.5+0.3)/3; conflicts: t2
    assert q["triples_proposed"] == 4 and q["new_triples"] == 3
    assert q["mean_confidence"] == pytest.approx(0.6)
    assert q["mean_clarity"] == pytest.approx(0.7)
    assert q["mean_relevance"] == pytest.approx(0.5)
    assert q["conflicts"] == 1 and q["conflict_ratio"] == pytest.approx(1 / 3)
    empty = triple_quality(evaluated_fixture().iloc[0:0])
    assert empty["mean_confidence"] is None and empty["conflict_ratio"] is None


def test_connectivity_gain_by_hand():
    seed = [("a", "treats", "b"), ("b", "associates", "c")]
    after = seed + [("a", "causes", "c"), ("a", "binds", "x"), ("x", "binds", "y"), ("a", "treats", "b")]
    # existing {a, b, c}: deg before a1 b2 c1; after a3 b2 c2 -> net (3-1)+(2-2)+(2-1) = 3, per entity 3/3 = 1.0
    net, ratio = connectivity_gain(seed, after, {"a", "b", "c"})
    assert net == 3 and ratio == pytest.approx(1.0)
    assert connectivity_gain(seed, seed, {"a", "b", "c"}) == (0, 0.0)


def test_rule_judge_and_correctness_by_hand():
    new = evaluated_fixture()
    new = new[new["accepted"]]
    verdicts = judge_triples(new, RuleJudge())
    # t1 states 'reduc' plainly -> likely_correct; t2 hedged ('may') -> uncertain; t4 negated -> likely_incorrect
    assert list(verdicts["verdict"]) == ["likely_correct", "uncertain", "likely_incorrect"]
    counts, lc = correctness(verdicts)
    assert counts == {"likely_correct": 1, "uncertain": 1, "likely_incorrect": 1, "not_judged": 0}
    assert lc == pytest.approx(1 / 3)
    none = judge_triples(new, NoJudge("judge gpt-4o NOT CONFIGURED: set OPENAI_API_KEY"))
    counts, lc = correctness(none)
    assert counts["not_judged"] == 3 and lc is None
    assert RuleJudge().judge(TripleQuery(head_name="x", head_type="", relation="binds", tail_name="y", tail_type="",
                                         evidence="x was measured together with y."))[0] == "uncertain"



def test_compute_kg_metrics_from_plain_stores_by_hand(tmp_path):
    stages = StageStore(tmp_path / "stages")
    stages.write("local", "documents", "d1", pd.DataFrame({"doc_key": ["d1"]}))
    stages.write("local", "evaluated", "d1", evaluated_fixture())
    kg = KGStore(tmp_path / "kg.duckdb")
    day, now = dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 12)
    with kg.connect() as con:
        con.executemany("INSERT INTO seed_nodes VALUES (?, ?, ?, NULL)",
                        [("Compound::A", "A", "Compound"), ("Disease::B", "B", "Disease"), ("Disease::C", "C", "Disease")])
        con.execute("INSERT INTO seed_edges VALUES ('Compound::A', 'treats', 'Disease::C', 'CtD', 1.0)")
        con.executemany(  # t1 and t2 merged (one edge A-treats-B); t4 accepted but not merged; t3 rejected
            "INSERT INTO evidence VALUES ('local', 'd1', ?, ?, 'Compound::A', 'treats', 'Disease::B', 'CtD', 0.8, "
            "'s1', 'ev', 'local', 'v1', 'r1', ?)", [(day, "t1", now), (day, "t2", now)])
        con.execute("INSERT INTO extracted_nodes VALUES ('local', 'Gene::X', 'X', 'Gene', NULL, [], 'd1', ?, 'r1', ?)",
                    [day, now])
    questions = tmp_path / "questions.v1.yaml"
    questions.write_text("version: 1\nquestions:\n"
                         "  - {id: a, question: 'What does A treat?', entity: A, relations: [treats], plausible: [B]}\n"
                         "  - {id: z, question: 'What does Z treat?', entity: Z, relations: [treats], plausible: [B]}\n")
    m, verdicts, answers = compute_kg_metrics(stages, kg, "local", RuleJudge(), questions)
    # new triples t1, t2: MC (0.9+0.6)/2, MCl (0.8+0.4)/2, MR (0.7+0.5)/2, conflict t2 -> CR 1/2
    assert (m.documents, m.triples_proposed, m.new_triples, m.conflicts) == (1, 4, 2, 1)
    assert (m.mean_confidence, m.mean_clarity, m.mean_relevance) == pytest.approx((0.75, 0.6, 0.6))
    assert m.conflict_ratio == pytest.approx(0.5)
    # existing {A, B, C}: degree before A1 B0 C1, after A2 B1 C1 -> net 2, per entity 2/3; one extracted node
    assert (m.coverage_gain, m.net_degree_increase, m.existing_entities) == (1, 2, 3)
    assert m.connectivity_gain == pytest.approx(2 / 3)
    assert list(verdicts["triple_id"]) == ["t1", "t2"] and m.llm_correctness == pytest.approx(0.5)
    assert (m.qa_questions, m.qa_answered, m.qa_plausible, m.qa_coherence) == (2, 1, 1, 0.5)
    assert answers[0].answers == ["B", "C"] and m.qa_judge == "curated key questions.v1.yaml"


def test_chain_cost_counts_the_latest_materialization_of_each_stage_partition():
    documents = [  # newest first
        ("d1", {"cost_usd": dg.MetadataValue.float(0.5), "llm_calls": dg.MetadataValue.int(2),
                "tokens_in": dg.MetadataValue.int(10), "tokens_out": dg.MetadataValue.int(5)}),
        ("d1", {"cost_usd": dg.MetadataValue.text("unpriced model (tokens only)"), "llm_calls": dg.MetadataValue.int(9)}),
        ("d2", {"cost_usd": 0.25, "llm_calls": 1}),
    ]
    segments = [("d1", {"cost_usd": 0.0}), ("d2", {})]
    assert cmp.chain_cost([documents, segments]) == (pytest.approx(0.75), 3, 15)
    unpriced = [("d1", {"cost_usd": "unpriced model (tokens only)", "llm_calls": 1, "tokens_in": 3})]
    assert cmp.chain_cost([documents, unpriced]) == (None, 4, 18), "one unpriced stage: no total, counts kept"
    assert cmp.chain_cost([]) == (0.0, 0, 0)

GOLD = """\
1|t|Aspirin and asthma.
1|a|Aspirin induced asthma in NAT2 carriers.
1\t0\t7\tAspirin\tChemicalEntity\tD001241
1\t12\t18\tasthma\tDiseaseOrPhenotypicFeature\tD001249
1\t20\t27\tAspirin\tChemicalEntity\tD001241
1\t36\t42\tasthma\tDiseaseOrPhenotypicFeature\tD001249
1\t46\t50\tNAT2\tGeneOrGeneProduct\t10
1\tPositive_Correlation\tD001241\tD001249\tNovel
1\tAssociation\t10\tD001249\tNovel

"""


def test_gold_scores_by_hand():
    doc = next(parse_pubtator_lines(GOLD.splitlines(keepends=True)))
    assert doc.text[36:42] == "asthma" and doc.text[46:50] == "NAT2"
    mentions = [
        PredictedMention(start=0, end=7, text="Aspirin", type="ChemicalEntity", vocab_id="MESH:D001241"),  # tp
        PredictedMention(start=20, end=27, text="Aspirin", type="Chemical", vocab_id="MESH:D001241"),  # tp
        PredictedMention(start=36, end=42, text="asthma", type="Gene", vocab_id=None),  # fp (wrong type) + fn
        PredictedMention(start=46, end=50, text="NAT2", type="Gene", vocab_id=None, kg_id="Gene::10"),  # tp, id via KG
        PredictedMention(start=8, end=11, text="and", type="Disease", vocab_id="MESH:D000001"),  # fp
    ]
    triples = [
        PredictedTriple(head_vocab_id="MESH:D001241", tail_vocab_id="MESH:D001249", head_type="Chemical",
                        tail_type="Disease", relation="Negative_Correlation", probability=0.8),  # pair tp, type fp+fn
        PredictedTriple(head_vocab_id="NCBIGene:10", tail_vocab_id="MESH:D000001", head_type="Gene",
                        tail_type="Disease", relation="Association", probability=0.7),  # pair fp
    ]
    s = score_gold([doc], [mentions], [triples])
    # mentions (span+type): gold 5, predicted 5, tp 3 (two Aspirin, NAT2) -> P = R = F1 = 0.6
    m = s.mentions.mentions["micro"]
    assert (m.tp, m.fp, m.fn) == (3, 2, 2) and m.f1 == pytest.approx(0.6)
    assert s.mentions.mentions["Disease"].tp == 0 and s.mentions.mentions["Chemical"].tp == 2
    # ids: gold {D001241 Chem, D001249 Dis, NCBIGene:10 Gene}; predicted {D001241 Chem, NCBIGene:10 Gene, D000001 Dis}
    i = s.mentions.ids["micro"]
    assert (i.tp, i.fp, i.fn) == (2, 1, 1)
    # pairs: gold {Asp-asthma, NAT2-asthma}; predicted {Asp-asthma, NAT2-D000001} -> tp 1 fp 1 fn 1
    assert (s.relations.pair.tp, s.relations.pair.fp, s.relations.pair.fn) == (1, 1, 1)
    # pair+type: (Asp-asthma, Neg) fp, (Asp-asthma, Pos) fn, (NAT2-D000001, Assoc) fp, (NAT2-asthma, Assoc) fn
    pt = s.relations.pair_type
    assert (pt.tp, pt.fp, pt.fn) == (0, 2, 2)
    assert s.id_sources == {"lexicon vocab_id": 3, "KG id Gene::10": 1, "new entity without vocab id": 1}
    nat2 = next(x for x in s.mapping if x.gold_id == "10")
    assert nat2.vocab_id == "NCBIGene:10" and nat2.kg_ids == ["Gene::10"] and nat2.predicted
    assert kg_to_vocab("Disease::DOID:1612") is None and raw_id("MESH:D001241") == "D001241"


def test_bc5cdr_cid_is_a_positive_correlation_between_a_chemical_and_a_disease():
    text = "1|t|Lithium toxicity.\n1\t0\t7\tLithium\tChemical\tD008094\n1\t8\t16\ttoxicity\tDisease\tD064420\n" \
           "1\tCID\tD008094\tD064420\n\n"
    doc = next(parse_pubtator_lines(text.splitlines(keepends=True)))
    hit = PredictedTriple(head_vocab_id="MESH:D008094", tail_vocab_id="MESH:D064420", head_type="ChemicalEntity",
                          tail_type="Disease", relation="Positive_Correlation", probability=0.9)
    s = score_gold([doc], [[]], [[hit]])
    assert s.relations.pair_type.tp == 1 and s.relations.pair_type.f1 == 1.0
    other = hit.model_copy(update={"relation": "Association"})
    assert score_gold([doc], [[]], [[other]]).relations.pair.tp == 0


def test_comparison_table_bolds_the_best_and_keeps_not_configured_rows(tmp_path):
    rows = [
        cmp.ComparisonRow(backbone="local", judge="rules", values={
            "mean_confidence": 0.8, "conflict_ratio": 0.10, **cmp.cost_figures(0.0, 4, 10)}),
        cmp.ComparisonRow(backbone="gpt", judge="rules", values={
            "mean_confidence": 0.9, "conflict_ratio": 0.05, **cmp.cost_figures(0.02, 4, 5)}),
        cmp.ComparisonRow(backbone="deepseek", status="NOT CONFIGURED: set DEEPSEEK_API_KEY"),
    ]
    md = cmp.markdown(rows)
    lines = md.splitlines()
    assert "**0.900**" in lines[3] and "0.800" in lines[2] and "**0.800**" not in lines[2]
    assert "**0.050**" in lines[3]  # lower conflict ratio is better
    assert "**0.0000**" in lines[2]  # cheaper is better; gpt: 0.02/4 docs = 0.005, 0.02/5 triples = 0.004
    assert "0.00500" in lines[3] and "0.00400" in lines[3]
    assert "NOT CONFIGURED: set DEEPSEEK_API_KEY" in lines[4]
    csv = pd.read_csv(__import__("io").StringIO(cmp.to_csv(rows)))
    assert list(csv["backbone"]) == ["local", "gpt", "deepseek"] and math.isclose(csv.loc[1, "cost_per_triple"], 0.004)
    png = cmp.chart(rows, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_key_means_not_configured_never_a_crash(tmp_path, monkeypatch):
    monkeypatch.delenv("KARMA_TEST_ABSENT_KEY", raising=False)
    f = tmp_path / "backbones.yaml"
    f.write_text("judge: llm\nbackbones:\n  local: {kind: local}\n  llm: {kind: litellm, model: openai/x, "
                 "api_key_env: KARMA_TEST_ABSENT_KEY, mode: single_agent}\n  spare: {kind: local, enabled: false}\n")
    statuses = {s.name: s for s in read_backbones(f).statuses()}
    assert statuses["llm"].status == "NOT CONFIGURED: set KARMA_TEST_ABSENT_KEY" and not statuses["llm"].runnable
    assert statuses["spare"].status == "disabled" and statuses["local"].runnable
    name, raw, why = read_backbones(f).judge_entry()
    assert name == "llm" and raw is None and "set KARMA_TEST_ABSENT_KEY" in why
    from karma_dagster.resources.backbones import backbone_configs_from_file

    assert set(backbone_configs_from_file(f)) == {"local"}
    monkeypatch.setenv("KARMA_TEST_ABSENT_KEY", "sk-test")
    configs = backbone_configs_from_file(f)
    assert set(configs) == {"local", "llm"} and configs["llm"].mode == "single_agent"
