"""Two backbones side by side on a one-abstract fixture: `local` and the single-agent baseline over an LLM that
replays scripted answers on 127.0.0.1 (judged by the same scripted LLM); every metric checked against values
worked out by hand from the fixture, the KARMA formulas and the default evaluator weights."""

from __future__ import annotations

import json
import math
import re

import dagster as dg
import duckdb
import pandas as pd
import pytest
from fake_openai_server import FakeOpenAIServer, agent_of, karma_responder

from karma_dagster import runner

from karma_dagster.definitions import build_definitions
from karma_dagster.params import KarmaParams
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


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


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
    # rule signals: probability 0.9, both ends linked to the KG (2), not hedged/negated, short evidence,
    # segment relevance 1.0 (no reader): C = s(b + w_p*0.9 + w_l*2), Cl = s(b), R = s(b + w_s*1 + w_l*2)
    w = KarmaParams().weights
    assert m["documents"] == 1 and m["triples_proposed"] == 1 and m["new_triples"] == 1
    c = w.confidence
    assert m["mean_confidence"] == pytest.approx(sigmoid(c["bias"] + c["probability"] * 0.9 + c["linked_entities"] * 2))
    assert m["mean_clarity"] == pytest.approx(sigmoid(w.clarity["bias"]))
    r = w.relevance
    assert m["mean_relevance"] == pytest.approx(sigmoid(r["bias"] + r["segment_relevance"] * 1.0 + r["linked_entities"] * 2))
    assert m["coverage_gain"] == 0, "Tamoxifen and breast cancer are both seed KG nodes"
    con = duckdb.connect(str(p.storage.kg_path()), read_only=True)
    seed_has = con.execute("SELECT count(*) FROM seed_edges WHERE head_id = 'Compound::DB00675' AND relation = 'treats' "
                           "AND tail_id = 'Disease::DOID:1612'").fetchone()[0]
    n_seed = con.execute("SELECT count(*) FROM seed_nodes").fetchone()[0]
    con.close()
    net = 0 if seed_has else 2  # a new edge between two existing entities adds 1 to each degree
    assert m["net_degree_increase"] == net and m["connectivity_gain"] == pytest.approx(net / n_seed)
    assert m["conflicts"] == 0 and m["conflict_ratio"] == 0.0
    assert m["verdicts"]["likely_correct"] == 1 and m["llm_correctness"] == 1.0 and m["judge"].startswith("LLM judge scripted")
    # tamoxifen -treats-> breast cancer is answered (curated key); no KG node is named "visfatin": no answer
    assert (m["qa_questions"], m["qa_answered"], m["qa_plausible"], m["qa_coherence"]) == (2, 1, 1, 0.5)
    g = gold(p, "scripted")
    # gold: Tamoxifen x2, breast cancer x2, both found exactly; ids {MESH:D013629, MESH:D001943}; one pair, its type
    for k in ("mention", "id", "pair", "pair_type"):
        assert (g[f"gold_{k}_p"], g[f"gold_{k}_r"], g[f"gold_{k}_f1"]) == (1.0, 1.0, 1.0), k


def test_local_metrics_agree_with_its_tables_and_the_comparison_shows_both(compared):
    p, _defs, key, _ok, table, _asked = compared
    m = metrics(p, "local")
    stages = p.storage.stage_store()
    ev = stages.read("local", "evaluated", key)
    con = duckdb.connect(str(p.storage.kg_path()), read_only=True)
    merged = {r[0] for r in con.execute("SELECT triple_id FROM evidence WHERE namespace = 'local'").fetchall()}
    extracted = con.execute("SELECT count(*) FROM kg_nodes('local') WHERE source = 'extracted'").fetchone()[0]
    con.close()
    new = ev[ev["accepted"] & ev["triple_id"].isin(merged)]
    assert m["new_triples"] == len(new) and m["triples_proposed"] == len(ev) and m["coverage_gain"] == extracted
    if len(new):
        assert m["mean_confidence"] == pytest.approx(new["confidence"].mean())
        assert m["conflict_ratio"] == pytest.approx(new["conflict"].mean())
    g = gold(p, "local")  # the dictionary finds the four gold spans and their MeSH ids ('women' is not scored)
    assert (g["gold_mention_f1"], g["gold_id_f1"]) == (1.0, 1.0)

    csv = pd.read_csv(p.storage.root() / "metrics" / "backbone_comparison.csv").set_index("backbone")
    assert list(csv.index) == ["local", "scripted"]
    assert csv.loc["scripted", "mean_confidence"] == pytest.approx(metrics(p, "scripted")["mean_confidence"])
    assert csv.loc["local", "cost_usd"] == 0.0 and pd.isna(csv.loc["scripted", "cost_usd"]), "unpriced model: n/a"
    assert csv.loc["scripted", "gold_pair_type_f1"] == 1.0
    assert "| scripted |" in table and "**1.000**" in table and "LC ↑" in table
    record = p.instance.fetch_materializations(dg.AssetKey("backbone_comparison"), limit=1).records[0]
    meta = record.asset_materialization.metadata  # type: ignore[union-attr]
    assert "data:image/png;base64," in meta["chart"].value and "| local |" in meta["table"].value
    assert (p.storage.root() / "metrics" / "backbone_comparison.png").read_bytes()[:4] == b"\x89PNG"
    for path in p.root.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path.name
