"""Two backbones side by side on a one-abstract fixture: `local` and the single-agent baseline over an LLM that
replays scripted answers on 127.0.0.1 (judged by the same scripted LLM, which the comparison flags); every metric
checked against values worked out by hand from the fixture and the KARMA formulas."""

from __future__ import annotations

import json
import re

import dagster as dg
import duckdb
import pandas as pd
import pytest
from fake_openai_server import FakeOpenAIServer, agent_of, karma_responder

from karma_dagster import runner

from karma_dagster.definitions import build_definitions
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.resources.judge import JudgeResource

TITLE = "Tamoxifen and breast cancer."
ABSTRACT = "Tamoxifen reduced the risk of breast cancer in women."
FAKE_KEY = "sk-karma-test-0000-not-a-real-key"


def pubtator() -> str:
    text = f"{TITLE} {ABSTRACT}"
    lines = [f"900001|t|{TITLE}", f"900001|a|{ABSTRACT}"]
    for m in re.finditer(r"Tamoxifen|breast cancer", text):
        kind, ident = ("ChemicalEntity", "D013629") if m.group() == "Tamoxifen" else ("DiseaseOrPhenotypicFeature", "D001943")
        lines.append(f"900001\t{m.start()}\t{m.end()}\t{m.group()}\t{kind}\t{ident}")
    lines.append("900001\tNegative_Correlation\tD013629\tD001943\tNovel")
    return "\n".join(lines) + "\n\n"


QUESTIONS = """\
version: 1
questions:
  - {id: tam, question: "What does tamoxifen treat?", entity: Tamoxifen, relations: [treats], plausible: [breast cancer]}
  - {id: vis, question: "What is visfatin associated with?", entity: visfatin, relations: [associates],
     plausible: [hypothyroidism]}
"""


def single_agent_responder(request: dict) -> str:
    """The one-generation baseline: Tamoxifen -Negative_Correlation-> breast cancer wherever both are named."""
    if agent_of(request) != "single_agent":
        return karma_responder(request)
    text = re.findall(r"<text>\n?(.*?)\n?</text>", request["messages"][-1]["content"], flags=re.S)[-1]
    triples = []
    if "Tamoxifen" in text and "breast cancer" in text:
        triples.append({"head": "Tamoxifen", "head_type": "ChemicalEntity", "relation": "Negative_Correlation",
                        "tail": "breast cancer", "tail_type": "DiseaseOrPhenotypicFeature", "confidence": 0.9})
    return json.dumps({"triples": triples})


@pytest.fixture(scope="module")
def compared(make_module_pipeline, tmp_path_factory):
    with FakeOpenAIServer(responder=single_agent_responder) as srv:
        scripted = BackboneConfig(kind="litellm", model="openai/karma-scripted", api_base=srv.url, api_key=FAKE_KEY,
                                  mode="single_agent")
        backbones = {"local": BackboneConfig(), "scripted": scripted}
        p = make_module_pipeline(backbones=backbones)
        (p.inbox / "tiny.pubtator").write_text(pubtator())
        qfile = tmp_path_factory.mktemp("qa") / "questions.v1.yaml"
        qfile.write_text(QUESTIONS)
        defs = build_definitions(backbones=backbones, storage=p.storage,
                                 judge=JudgeResource(name="scripted", backbone=scripted, qa_questions=str(qfile)))
        assert runner.import_kg(defs, p.instance)
        keys, failed = runner.register_inbox(defs, p.instance)
        assert keys == ["%s_pmid-900001" % keys[0].split("_")[0]] and not failed
        assert not runner.run_documents(defs, p.instance, keys, log=lambda _m: None)
        dates = [date_of_document_key(keys[0])]
        for ns in backbones:
            assert all(runner.run_increments(defs, p.instance, ns, dates).values())
        ok, table = runner.run_comparison(defs, p.instance)
        asked = {agent_of(r) for r in srv.requests}
        yield p, defs, keys[0], ok, table, asked


def metrics(p, ns: str) -> dict:
    return json.loads((p.storage.root() / "metrics" / ns / "kg_metrics.json").read_text())


def gold(p, ns: str) -> dict:
    return json.loads((p.storage.root() / "metrics" / ns / "gold.json").read_text())


def test_single_agent_baseline_asks_one_prompt_and_writes_the_same_stage_tables(compared):
    p, _defs, key, ok, _table, asked = compared
    assert ok
    assert asked == {"single_agent", "judge"}, "no reader/summarizer/REA/evaluator model in the baseline"
    stages = p.storage.stage_store()
    for stage in ("documents", "segments", "summaries", "entities", "relations", "aligned", "resolved", "evaluated"):
        assert set(stages.read("scripted", stage, key).columns) == set(stages.read("local", stage, key).columns)


def test_every_metric_of_the_scripted_backbone_matches_the_hand_computation(compared):
    p, _defs, _key, _ok, _table, _asked = compared
    m = metrics(p, "scripted")
    # one document, one triple (the title's and the abstract's readings dedupe per document), accepted;
    # the single-agent baseline runs no evaluator and no conflict resolution: MC, MCl, MR and R_CR are n/a
    assert m["documents"] == 1 and m["triples_proposed"] == 1 and m["new_triples"] == 1
    assert (m["mode"], m["ablated"]) == ("single_agent", [])
    assert (m["mean_confidence"], m["mean_clarity"], m["mean_relevance"]) == (None, None, None)
    assert m["triples_into_cra"] == 1 and m["conflicts_removed"] == 0 and m["conflict_ratio"] is None
    assert m["coverage_gain"] == 0, "Tamoxifen and breast cancer are both seed KG nodes"
    con = duckdb.connect(str(p.storage.kg_path()), read_only=True)
    seed_has = con.execute("SELECT count(*) FROM seed_edges WHERE head_id = 'Compound::DB00675' AND relation = 'treats' "
                           "AND tail_id = 'Disease::DOID:1612'").fetchone()[0]
    # Σ deg_before over the seed entities: every seed edge adds 1 to each end (a self-loop once)
    degree_sum = con.execute("SELECT sum(CASE WHEN head_id = tail_id THEN 1 ELSE 2 END) FROM "
                             "(SELECT DISTINCT head_id, relation, tail_id FROM seed_edges)").fetchone()[0]
    con.close()
    net = 0 if seed_has else 2  # a new edge between two existing entities adds 1 to each degree
    assert m["connectivity_net"] == net and m["connectivity_ratio"] == pytest.approx((degree_sum + net) / degree_sum)
    assert m["verdicts"]["likely_correct"] == 1 and m["llm_correctness"] == 1.0 and m["judge"].startswith("LLM judge scripted")
    # the judge is the scripted chain's own model: flagged; the same judge over `local` is not
    assert m["judge_is_chain_model"] and "openai/karma-scripted" in m["judge_overlap"]
    assert not metrics(p, "local")["judge_is_chain_model"]
    # tamoxifen -treats-> breast cancer is answered (curated key), by the seed alone too (the seed holds that edge);
    # no KG node is named "visfatin": no answer
    assert (m["qa_questions"], m["qa_answered"], m["qa_plausible"], m["qa_coherence"]) == (2, 1, 1, 0.5)
    assert (m["qa_plausible_seed_only"], m["qa_coherence_seed_only"]) == ((1, 0.5) if seed_has else (0, 0.0))
    g = gold(p, "scripted")
    # gold: Tamoxifen x2, breast cancer x2, both found exactly; ids {MESH:D013629, MESH:D001943}; one pair, its type
    for k in ("mention", "id", "pair", "pair_type"):
        assert (g[f"gold_{k}_p"], g[f"gold_{k}_r"], g[f"gold_{k}_f1"]) == (1.0, 1.0, 1.0), k


def test_local_metrics_agree_with_its_tables_and_the_comparison_shows_both(compared):
    p, defs, key, _ok, table, _asked = compared
    m = metrics(p, "local")
    stages = p.storage.stage_store()
    ev = stages.read("local", "evaluated", key)
    con = duckdb.connect(str(p.storage.kg_path()), read_only=True)
    merged = {r[0] for r in con.execute("SELECT triple_id FROM evidence WHERE namespace = 'local'").fetchall()}
    extracted = con.execute("SELECT count(*) FROM kg_nodes('local') WHERE source = 'extracted'").fetchone()[0]
    con.close()
    new = ev[ev["accepted"] & ev["triple_id"].isin(merged)]
    assert m["new_triples"] == len(new) and m["triples_proposed"] == len(ev) and m["coverage_gain"] == extracted
    assert (m["mode"], m["ablated"]) == ("multi_agent", [])
    if len(new):
        assert m["mean_confidence"] == pytest.approx(new["confidence"].mean())
    resolved = stages.read("local", "resolved", key)
    aligned = resolved[resolved["schema_status"] == "aligned"]
    removed = aligned["conflict"] & aligned["action"].isin(["discard", "review"])
    assert m["triples_into_cra"] == len(aligned) and m["conflicts_removed"] == int(removed.sum())
    if len(aligned):  # one document: the merge had no other document of its date to adjudicate against
        assert m["conflict_ratio"] == pytest.approx(removed.mean()) and m["conflicts_removed_at_merge"] == 0
    g = gold(p, "local")  # the dictionary finds the four gold spans and their MeSH ids ('women' is not scored)
    assert (g["gold_mention_f1"], g["gold_id_f1"]) == (1.0, 1.0)

    csv = pd.read_csv(p.storage.root() / "metrics" / "backbone_comparison.csv").set_index("backbone")
    assert list(csv.index) == ["local", "scripted"]
    if m["mean_confidence"] is not None:
        assert csv.loc["local", "mean_confidence"] == pytest.approx(m["mean_confidence"])
    assert csv.loc["local", "connectivity_ratio"] == pytest.approx(m["connectivity_ratio"])
    assert csv.loc["local", "cost_usd"] == 0.0 and pd.isna(csv.loc["scripted", "cost_usd"]), "unpriced model: n/a"
    assert csv.loc["scripted", "gold_pair_type_f1"] == 1.0
    assert "| scripted | single_agent | - |" in table and "LC ↑" in table
    # the two rows tie on every metric both measure (one abstract, one triple each): nothing is bolded
    assert "| local | multi_agent | - | " in table and "**" not in table.split("\n")[2]
    assert csv.index.name == "backbone" and list(csv.columns[:4]) == ["mode", "ablated", "status", "calibration"]
    # what each row's confidence is: the local chain's calibrated probability, the LLM baseline's own scores
    assert csv.loc["local", "calibration"] == "calibrated (shipped learned evaluator)"
    assert csv.loc["scripted", "calibration"] == "uncalibrated"
    assert "| local | multi_agent | - | calibrated |" in table and "| scripted | single_agent | - | **uncalibrated** ⚠ |" in table
    assert "⚠ Uncalibrated: these backbones' evaluator scores are no probabilities" in table
    assert pd.isna(csv.loc["scripted", "conflict_ratio"]) and pd.isna(csv.loc["scripted", "mean_clarity"])
    assert bool(csv.loc["scripted", "judge_is_chain_model"]) and not bool(csv.loc["local", "judge_is_chain_model"])
    assert "⚠ The judge is not independent of these chains" in table and "- scripted: the judge is the chain's own" in table
    record = p.instance.fetch_materializations(dg.AssetKey("backbone_comparison"), limit=1).records[0]
    meta = record.asset_materialization.metadata  # type: ignore[union-attr]
    assert "data:image/png;base64," in meta["chart"].value and "| local |" in meta["table"].value
    assert meta["judge_is_chain_model"].value is True and meta["judge_is_chain_model_backbones"].value == ["scripted"]
    assert (p.storage.root() / "metrics" / "backbone_comparison.png").read_bytes()[:4] == b"\x89PNG"
    # every accepted triple judged against gold; the stored confidences' reliability drawn per backbone
    judged = gold(p, "scripted")
    assert judged["judged_line"].startswith("accepted pairs P/R/F1 ") and judged["unjudged"] == 0
    assert len(judged["reliability"]) == judged["accepted_units"] >= 1
    assert "data:image/png;base64," in meta["reliability"].value
    assert (p.storage.root() / "metrics" / "reliability.png").read_bytes()[:4] == b"\x89PNG"
    report = runner.run_report(defs, p.instance, 1.0, {})  # the main job's report warns too
    assert list(report.judge_warnings) == ["scripted"] and "openai/karma-scripted" in report.judge_warnings["scripted"]
    assert "Warning: the judge is not independent" in report.markdown() and "- scripted:" in report.markdown()
    for path in p.root.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path.name
