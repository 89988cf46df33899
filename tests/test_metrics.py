"""KARMA's metrics, the gold scores and the comparison table on tiny fixtures whose values are worked out by hand."""

from __future__ import annotations

import datetime as dt
import json
import math

import dagster as dg
import pandas as pd
import pytest

from karma_dagster.backbones.base import TripleQuery
from karma_dagster.runtime.config import read_backbones
from karma_dagster.ingest.pubtator import parse_pubtator_lines
from karma_dagster.kg.store import KGStore
from karma_dagster.metrics import comparison as cmp
from karma_dagster.metrics.gold import PredictedMention, PredictedTriple, kg_to_vocab, raw_id, score_gold
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.metrics.judge import LLMJudge, NoJudge, RuleJudge, judge_chain_overlap
from karma_dagster.metrics.kg_metrics import (
    compute_kg_metrics,
    conflict_ratio,
    connectivity_gain,
    correctness,
    judge_triples,
    new_triples,
    triple_quality,
)
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.judge import JudgeResource
from karma_dagster.runtime.stage_store import StageStore


def evaluated_fixture() -> pd.DataFrame:
    base = dict(doc_key="d1", head_name="A", head_type="Chemical", head_kg_type="Compound", tail_name="B",
                tail_type="Disease", tail_kg_type="Disease", relation="Negative_Correlation", schema_status="aligned",
                contradicts=None)
    rows = [
        {**base, "triple_id": "t1", "accepted": True, "conflict": False, "verdict": "none", "action": "keep",
         "confidence": 0.9, "clarity": 0.8, "relevance": 0.7, "kg_relation": "treats",
         "evidence": "A reduced B in patients."},
        {**base, "triple_id": "t2", "accepted": True, "conflict": True, "verdict": "agree", "action": "keep",
         "confidence": 0.6, "clarity": 0.4, "relevance": 0.5, "kg_relation": "treats", "evidence": "A may reduce B."},
        {**base, "triple_id": "t3", "accepted": False, "conflict": True, "verdict": "contradict", "action": "discard",
         "confidence": 0.1, "clarity": 0.1, "relevance": 0.1, "kg_relation": "treats",
         "evidence": "A did not reduce B."},
        {**base, "triple_id": "t4", "accepted": True, "conflict": False, "verdict": "none", "action": "keep",
         "confidence": 0.3, "clarity": 0.9, "relevance": 0.3, "kg_relation": "treats",
         "evidence": "A did not reduce B."},
    ]
    return pd.DataFrame(rows)


def test_mean_confidence_clarity_relevance_by_hand():
    ev = evaluated_fixture()
    new = new_triples(ev, {("d1", "t1"), ("d1", "t2"), ("d1", "t3")})  # t4 accepted but not merged, t3 rejected
    assert list(new["triple_id"]) == ["t1", "t2"]
    q = triple_quality(new)
    # MC = (0.9 + 0.6) / 2 = 0.75, MCl = (0.8 + 0.4) / 2 = 0.6, MR = (0.7 + 0.5) / 2 = 0.6
    assert (q["mean_confidence"], q["mean_clarity"], q["mean_relevance"]) == pytest.approx((0.75, 0.6, 0.6))
    # no new triple: nothing to average -> None, never 0
    assert triple_quality(new.iloc[0:0]) == {"mean_confidence": None, "mean_clarity": None, "mean_relevance": None}
    # the evaluator did not run (ablated / single-agent): C, Cl, R are None -> n/a
    unscored = new.assign(confidence=None, clarity=None, relevance=None)
    assert triple_quality(unscored) == {"mean_confidence": None, "mean_clarity": None, "mean_relevance": None}


def test_connectivity_gain_both_readings_by_hand():
    seed = [("a", "treats", "b"), ("b", "associates", "c")]
    after = seed + [("a", "causes", "c"), ("a", "binds", "x"), ("x", "binds", "y"), ("a", "treats", "b")]
    # existing {a, b, c}: deg before a1 b2 c1 (sum 4); after a3 b2 c2 (sum 7); x, y are new entities, not counted
    # (a) net = (3-1) + (2-2) + (2-1) = 3        (b) ratio = 7 / 4 = 1.75
    net, ratio = connectivity_gain(seed, after, {"a", "b", "c"})
    assert net == 3 and ratio == pytest.approx(1.75)
    assert connectivity_gain(seed, seed, {"a", "b", "c"}) == (0, 1.0), "nothing added: net 0, ratio 1"
    # a superseded seed edge leaves the graph after: a -treats-> b replaced by a -causes-> b
    # before a1 b2 c1 (4); after a1 b2 c1 (4): net 0, ratio 1
    assert connectivity_gain(seed, [("a", "causes", "b"), ("b", "associates", "c")], {"a", "b", "c"}) == (0, 1.0)
    # existing entities without any edge before: the ratio has no denominator
    assert connectivity_gain([], [("a", "binds", "b")], {"a", "b"}) == (2, None)


def resolved_fixture() -> pd.DataFrame:
    base = dict(doc_key="d1", contradicts=None, schema_status="aligned", conflict=False, verdict="none", action="keep")
    rows = [
        {**base, "triple_id": "r1", "conflict": True, "verdict": "contradict", "action": "discard",
         "contradicts": "A -treats-> B"},  # removed by CRA
        {**base, "triple_id": "r2", "conflict": True, "verdict": "contradict", "action": "review",
         "contradicts": "A -treats-> C"},  # removed by CRA (to review, not the KG)
        {**base, "triple_id": "r3", "conflict": True, "verdict": "agree", "action": "keep"},  # conflict, kept
        {**base, "triple_id": "r4"},  # no conflict; the merge discards it (same-day contradiction)
        {**base, "triple_id": "r5", "conflict": True, "verdict": "contradict", "action": "replace",
         "contradicts": "X -treats-> Y; X -palliates-> Y"},  # wins, supersedes two older edges
        {**base, "triple_id": "r6", "schema_status": "review", "conflict": True, "action": "discard"},  # not in CRA
    ]
    return pd.DataFrame(rows)


def test_conflict_ratio_by_hand():
    merged = {("d1", "r3"), ("d1", "r5")}
    adjudications = [
        {"doc_key": "d1", "triple_id": "r4", "action": "discard", "against": "d2: A -causes-> B"},
        {"doc_key": "d1", "triple_id": "r5", "action": "replace", "against": "X -treats-> Y"},  # also in contradicts
        {"doc_key": "d2", "triple_id": "q1", "action": "replace", "against": "P -binds-> Q"},
    ]
    c = conflict_ratio(resolved_fixture(), adjudications, merged)
    # into CRA: the 5 aligned rows r1..r5 (r6 went to schema review); removed: r1, r2 (CRA) + r4 (merge) = 3
    # R_CR = 3 / 5 = 0.6; replaced: {X -treats-> Y, X -palliates-> Y, P -binds-> Q} = 3 distinct edges
    assert (c.triples_into_cra, c.conflicts_removed, c.conflicts_removed_at_merge) == (5, 3, 1)
    assert c.conflict_ratio == pytest.approx(0.6) and c.replaced_edges == 3
    # conflicting but kept (r3) does not count: without the merge's removal R_CR = 2 / 5
    assert conflict_ratio(resolved_fixture(), [], merged).conflict_ratio == pytest.approx(0.4)
    # a replace row that never reached the KG (rejected later) superseded nothing
    assert conflict_ratio(resolved_fixture(), [], set()).replaced_edges == 0
    # CRA did not run (ablated / single-agent): every verdict skipped -> n/a; nothing entered it -> n/a
    skipped = resolved_fixture().assign(verdict="skipped", action="keep", conflict=False)
    assert conflict_ratio(skipped, adjudications, merged).conflict_ratio is None
    assert conflict_ratio(pd.DataFrame(), [], set()).conflict_ratio is None


def test_rule_judge_and_correctness_by_hand():
    new = evaluated_fixture()
    new = new[new["accepted"]]
    verdicts = judge_triples(new, RuleJudge())
    # t1 states 'reduc' plainly -> likely_correct; t2 hedged ('may') -> uncertain; t4 negated -> likely_incorrect
    assert list(verdicts["verdict"]) == ["likely_correct", "uncertain", "likely_incorrect"]
    counts, lc = correctness(verdicts)
    # LC = likely_correct / judged = 1 / 3
    assert counts == {"likely_correct": 1, "uncertain": 1, "likely_incorrect": 1, "not_judged": 0}
    assert lc == pytest.approx(1 / 3)
    none = judge_triples(new, NoJudge("judge gpt-4o NOT CONFIGURED: set OPENAI_API_KEY"))
    counts, lc = correctness(none)
    assert counts["not_judged"] == 3 and lc is None
    assert RuleJudge().judge(TripleQuery(head_name="x", head_type="", relation="binds", tail_name="y", tail_type="",
                                         evidence="x was measured together with y."))[0] == "uncertain"


def test_judge_is_flagged_when_it_is_the_chain_model():
    gpt = BackboneSettings(kind="litellm", model="openai/gpt-4o")
    assert "openai/gpt-4o" in judge_chain_overlap(LLMJudge("gpt-4o", object(), model="OpenAI/GPT-4o"), gpt)
    assert judge_chain_overlap(LLMJudge("deepseek", object(), model="deepseek/deepseek-chat"), gpt) == ""
    assert judge_chain_overlap(LLMJudge("gpt-4o", object(), model="openai/gpt-4o"), BackboneSettings()) == ""
    # the rule judge shares dictionary/cues.py with every local chain (single-agent too); not with an LLM chain
    assert "cues" in judge_chain_overlap(RuleJudge(), BackboneSettings())
    assert "cues" in judge_chain_overlap(RuleJudge(), BackboneSettings(mode="single_agent"))
    assert judge_chain_overlap(RuleJudge(), gpt) == ""
    assert judge_chain_overlap(NoJudge("key missing"), gpt) == ""
    # the judge resource answers the same question without building its backbone (the run report uses it)
    resource = JudgeResource(name="gpt-4o", backbone=BackboneConfig(kind="litellm", model="openai/gpt-4o"))
    assert (resource.kind, resource.model) == ("litellm", "openai/gpt-4o") and judge_chain_overlap(resource, gpt)
    missing = JudgeResource(name="gpt-4o", unavailable="judge 'gpt-4o' NOT CONFIGURED: set OPENAI_API_KEY")
    assert missing.kind == "none" and judge_chain_overlap(missing, gpt) == ""
    assert JudgeResource().kind == "rules"


def test_compute_kg_metrics_from_plain_stores_by_hand(tmp_path):
    stages = StageStore(tmp_path / "stages")
    stages.write("local", "documents", "d1", pd.DataFrame({"doc_key": ["d1"]}))
    stages.write("local", "evaluated", "d1", evaluated_fixture())
    stages.write("local", "resolved", "d1", evaluated_fixture().drop(
        columns=["confidence", "clarity", "relevance", "accepted"]))
    kg = KGStore(tmp_path / "kg.duckdb")
    day, now = dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 12)
    with kg.connect() as con:
        con.executemany("INSERT INTO seed_nodes VALUES (?, ?, ?, NULL)",
                        [("Compound::A", "A", "Compound"), ("Disease::B", "B", "Disease"), ("Disease::C", "C", "Disease")])
        con.execute("INSERT INTO seed_edges VALUES ('Compound::A', 'treats', 'Disease::C', 'CtD', 1.0)")
        con.executemany(  # t1 and t2 merged (one edge A-treats-B); t4 accepted but not merged; t3 rejected
            "INSERT INTO evidence VALUES ('local', 'd1', ?, ?, 'Compound::A', 'treats', 'Disease::B', 'CtD', 0.8, "
            "'s1', 'ev', 'local', 'v1', 'r1', ?, NULL, NULL, NULL)", [(day, "t1", now), (day, "t2", now)])
        con.execute("INSERT INTO extracted_nodes VALUES ('local', 'Gene::X', 'X', 'Gene', NULL, [], 'd1', ?, 'r1', ?, "
                    "NULL, NULL)", [day, now])
        con.execute(  # the date's merge kept t4 out: a same-day contradiction it lost
            "INSERT INTO adjudications (namespace, date, doc_key, triple_id, head_id, relation, tail_id, action, "
            "against_head_id, against_relation, against_tail_id, reason, run_id, merged_at) VALUES ('local', ?, 'd1', "
            "'t4', 'Compound::A', 'treats', 'Disease::B', 'discard', 'Compound::A', 'causes', 'Disease::B', 'lost', "
            "'r1', ?)", [day, now])
    questions = tmp_path / "questions.v1.yaml"
    questions.write_text("version: 1\nquestions:\n"
                         "  - {id: a, question: 'What does A treat?', entity: A, relations: [treats], plausible: [B]}\n"
                         "  - {id: z, question: 'What does Z treat?', entity: Z, aliases: [Zed], relations: [treats], "
                         "plausible: [B]}\n")
    m, verdicts, answers, seed_answers = compute_kg_metrics(stages, kg, "local", RuleJudge(), questions)
    # new triples t1, t2: MC (0.9+0.6)/2, MCl (0.8+0.4)/2, MR (0.7+0.5)/2
    assert (m.documents, m.triples_proposed, m.new_triples) == (1, 4, 2)
    assert (m.mean_confidence, m.mean_clarity, m.mean_relevance) == pytest.approx((0.75, 0.6, 0.6))
    # into CRA: t1..t4 (aligned); removed: t3 (conflict, discard) + t4 (merge discard) -> R_CR = 2/4
    assert (m.triples_into_cra, m.conflicts_removed, m.conflicts_removed_at_merge) == (4, 2, 1)
    assert m.conflict_ratio == pytest.approx(0.5) and m.replaced_edges == 0
    # existing {A, B, C}: degree before A1 B0 C1 (sum 2), after A2 B1 C1 (sum 4) -> net 2, ratio 4/2; one new node
    assert (m.coverage_gain, m.connectivity_net, m.existing_entities) == (1, 2, 3)
    assert m.connectivity_ratio == pytest.approx(2.0)
    assert list(verdicts["triple_id"]) == ["t1", "t2"] and m.llm_correctness == pytest.approx(0.5)
    # with the increments 'a' reaches B (key) and C; over the seed alone only C: QA 1/2, seed-only 0/2
    assert (m.qa_questions, m.qa_answered, m.qa_plausible, m.qa_coherence) == (2, 1, 1, 0.5)
    assert (m.qa_plausible_seed_only, m.qa_coherence_seed_only) == (0, 0.0)
    assert answers[0].answers == ["B", "C"] and seed_answers[0].answers == ["C"]
    assert m.qa_judge == "curated key questions.v1.yaml"
    # the default settings are the local KARMA chain, judged by the rules it shares: flagged
    assert (m.mode, m.ablated, m.judge_is_chain_model) == ("multi_agent", [], True) and "cues" in m.judge_overlap
    gpt = BackboneSettings(kind="litellm", model="openai/gpt-4o", ablate=["evaluator"])
    m2, *_ = compute_kg_metrics(stages, kg, "local", RuleJudge(), questions, settings=gpt)
    assert (m2.ablated, m2.judge_is_chain_model, m2.judge_overlap) == (["evaluator"], False, "")


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


def test_comparison_table_has_a_row_per_backbone_with_ablations_n_a_and_the_judge_flag(tmp_path):
    rows = [
        cmp.ComparisonRow(backbone="local", judge="rules", judge_is_chain_model=True,
                          calibration="calibrated (shipped learned evaluator)",
                          judge_overlap="the rule-based judge uses the local chain's cues", values={
                              "mean_confidence": 0.8, "conflict_ratio": 0.10, "connectivity_ratio": 1.25,
                              "qa_coherence": 0.5, **cmp.cost_figures(0.0, 4, 10)}),
        cmp.ComparisonRow(backbone="local-no-evaluator", ablated=["evaluator"], judge="rules",
                          judge_is_chain_model=True, values={"mean_confidence": None, "conflict_ratio": 0.2}),
        cmp.ComparisonRow(backbone="gpt", judge="rules", judge_is_chain_model=False,
                          calibration="uncalibrated: held for review", values={
            "mean_confidence": 0.9, "conflict_ratio": 0.05, "qa_coherence": 0.5, **cmp.cost_figures(0.02, 4, 5)}),
        cmp.ComparisonRow(backbone="gpt-single", mode="single_agent", judge="rules", judge_is_chain_model=False,
                          values={"mean_confidence": None, "conflict_ratio": None}),
        cmp.ComparisonRow(backbone="deepseek", status="NOT CONFIGURED: set DEEPSEEK_API_KEY"),
    ]
    md = cmp.markdown(rows)
    lines = md.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["backbone", "mode", "ablated", "confidence", "MC ↑", "MCl ↑", "MR ↑", "Δcov ↑", "Δconn Σ(deg′−deg) ↑",
                      "Δconn Σdeg′/Σdeg ↑", "R_CR ↓", "edges replaced", "LC ↑", "QA ↑", "QA seed only", "docs",
                      "new triples", "gold mention F1 ↑", "gold id F1 ↑", "gold pair F1 ↑", "gold pair+type F1 ↑",
                      "cost $", "$ / doc ↓", "$ / accepted triple ↓", "judge = chain"]
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:7]}
    assert all(len(c) == len(header) for c in cells.values()), "every row has every column"
    col = {h: i for i, h in enumerate(header)}
    assert cells["gpt"][col["MC ↑"]] == "**0.900**" and cells["local"][col["MC ↑"]] == "0.800"
    assert cells["gpt"][col["R_CR ↓"]] == "**0.050**", "lower conflict ratio is better"
    assert cells["local"][col["cost $"]] == "**0.0000**" and cells["gpt"][col["$ / doc ↓"]] == "0.00500"
    assert cells["gpt"][col["$ / accepted triple ↓"]] == "0.00400"  # 0.02 / 5 accepted triples
    assert cells["local-no-evaluator"][col["ablated"]] == "w/o evaluator"
    assert cells["local-no-evaluator"][col["MC ↑"]] == "n/a" and cells["gpt-single"][col["R_CR ↓"]] == "n/a"
    assert (cells["gpt-single"][col["mode"]], cells["gpt-single"][col["ablated"]]) == ("single_agent", "-")
    assert cells["local"][col["judge = chain"]] == "**yes** ⚠" and cells["gpt"][col["judge = chain"]] == "no"
    # what each row's confidence is: a calibrated probability, an uncalibrated score (warned under the table), unknown
    assert cells["local"][col["confidence"]] == "calibrated" and cells["gpt"][col["confidence"]] == "**uncalibrated** ⚠"
    assert cells["gpt-single"][col["confidence"]] == "n/a"
    assert "⚠ Uncalibrated:" in md and "gpt (uncalibrated: held for review)" in md and "local (" not in md
    # one measured value, or all tied: nothing is singled out in bold
    assert cells["local"][col["Δconn Σdeg′/Σdeg ↑"]] == "1.2500" and cells["local"][col["edges replaced"]] == "n/a"
    assert cells["local"][col["QA ↑"]] == cells["gpt"][col["QA ↑"]] == "0.500"
    assert "NOT CONFIGURED: set DEEPSEEK_API_KEY" in cells["deepseek"]
    assert "⚠ The judge is not independent" in md and "- local: the rule-based judge uses the local chain's cues" in md
    assert "- local-no-evaluator: the judge is the chain's model" in md and "gpt" not in md.split("⚠ The judge")[1]
    twice = [r.model_copy(update={"backbone": f"{r.backbone}-2"}) for r in rows[:1]]
    assert cmp.judge_warnings(rows[:1] + twice) == ["local, local-2: the rule-based judge uses the local chain's cues"]
    csv = pd.read_csv(__import__("io").StringIO(cmp.to_csv(rows)))
    assert list(csv.columns) == ["backbone", "mode", "ablated", "status", "calibration", *cmp.COLUMNS,
                                 "judge_is_chain_model", "judge"]
    assert csv.loc[2, "calibration"] == "uncalibrated: held for review"
    assert list(csv["backbone"]) == ["local", "local-no-evaluator", "gpt", "gpt-single", "deepseek"]
    assert math.isclose(csv.loc[2, "cost_per_triple"], 0.004) and csv.loc[1, "ablated"] == "evaluator"
    assert pd.isna(csv.loc[1, "mean_confidence"]) and bool(csv.loc[0, "judge_is_chain_model"])
    assert cmp.variant("multi_agent", ["summarizer", "conflict_resolution"]) == "w/o summarizer + conflict resolution"
    png = cmp.chart(rows, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_comparison_rows_read_the_metric_files(tmp_path):
    from karma_dagster.runtime.config import BackboneStatus

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "kg_metrics.json").write_text(json.dumps({
        "documents": 2, "new_triples": 4, "mode": "multi_agent", "ablated": ["summarizer"], "mean_confidence": None,
        "conflict_ratio": 0.25, "connectivity_net": 6, "connectivity_ratio": 1.5, "qa_coherence": 0.1,
        "qa_coherence_seed_only": 0.0, "judge": "rules", "judge_is_chain_model": True, "judge_overlap": "why"}))
    statuses = [BackboneStatus(name="b", kind="litellm", mode="single_agent", enabled=True, key_env="K",
                               configured=False)]
    rows = cmp.comparison_rows(tmp_path, ["a"], statuses, lambda ns: 0.5, lambda ns: f"uncalibrated ({ns})")
    a, b = rows
    assert (a.calibration, b.calibration) == ("uncalibrated (a)", ""), "a status row's backbone was not built"
    assert (a.ablated, a.judge_is_chain_model, a.judge_overlap) == (["summarizer"], True, "why")
    assert a.values["mean_confidence"] is None and a.values["connectivity_ratio"] == 1.5
    assert a.values["cost_per_document"] == 0.25 and a.values["cost_per_triple"] == 0.125  # 0.5 / 2, 0.5 / 4
    assert (b.backbone, b.status, b.mode) == ("b", "NOT CONFIGURED: set K", "single_agent")


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
