"""CogMG end to end on the shipped seed KG and sample papers: a question the seed KG cannot answer misses, names
its missing triple, gets a completion that a shipped paper's passage supports, and hits once it is accepted.
Also: the LLM path through the loopback OpenAI-compatible server, `karma ask`, bad input, the Dagster assets."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from karma_dagster.runtime import services
from karma_dagster.cogmg import complete
from karma_dagster.cogmg.answer import answer_question, run_plan
from karma_dagster.cogmg.benchmark import benchmark
from karma_dagster.cogmg.models import LinkedEntity, QueryPlan, QueryStep
from karma_dagster.cogmg.pipeline import complete_answer
from karma_dagster.cogmg.questions import load_set
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import scan_inbox
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.runtime.stage_store import StageStore
from karma_dagster.stages import StageInputs, chain_for

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = load_set(REPO / "data" / "questions" / "sample_biomed.v1.yaml")
BY_ID = {q.id: q for q in QUESTIONS.questions}
# A question the seed KG cannot answer and a shipped abstract can (6794356: lithium carbonate and the newborn's
# tricuspid regurgitation). Not "cardiac arrhythmia": that Disease is one concept with the seed's Side Effect
# Arrhythmia, whose CcSE edges already answer it.
SEED_MISS = "tricuspid-regurgitation-drug"
LOCAL = BackboneSettings()
PAPERS = ("abstracts.pubtator", "PMC4738914.pdf")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> DataPaths:
    """The shipped seed KG (nothing merged) and the local chain's stage tables of two sample inbox files."""
    root = tmp_path_factory.mktemp("cogmg")
    inbox = root / "inbox"
    inbox.mkdir()
    for name in PAPERS:
        shutil.copy(REPO / "data" / "inbox" / name, inbox / name)
    (root / "karma").mkdir()
    (root / "karma" / "cache").symlink_to(shared_cache)  # the session's lexicon and relation model
    paths = DataPaths(root / "karma", inbox=inbox)
    services.clear()
    seed = REPO / "data" / "seed_kg"
    services.import_seed_kg(paths, seed / "nodes.tsv", seed / "edges.sif.gz", "hetionet", 0.9)
    keys = sorted(scan_inbox(inbox, Catalog(paths.catalog), arrival_date=dt.date(2026, 1, 1)).keys_to_run)
    backbone, store = services.backbone("local", LOCAL, paths), StageStore(paths.stages_dir)
    for key in keys:
        for stage in chain_for(LOCAL):
            rows, _ = stage.run(StageInputs(stage, "local", key, paths, backbone, KarmaParams()))
            store.write("local", stage.name, key, records_to_frame(rows, stage.row_model))
    yield paths
    services.clear()


def _ask(data: DataPaths, qid: str, **kw):  # noqa: ANN202
    return answer_question(BY_ID[qid].question, backbone="local", settings=LOCAL, data=data, question_id=qid, **kw)


def _other_end(answer, c) -> str:  # noqa: ANN001
    return c.tail_name if answer.missing[0].known_end == "head" else c.head_name


def test_a_seed_miss_gets_a_completion_a_shipped_paper_supports_and_hits_once_accepted(data):
    q = BY_ID[SEED_MISS]  # "Which drug taken in pregnancy is linked to tricuspid regurgitation in the newborn?"
    answer = _ask(data, q.id)
    assert not answer.hit and not answer.error
    assert answer.plan.steps and all(s.relation == "causes" for s in answer.plan.steps)
    missing = answer.missing[0]
    assert (missing.head, missing.relation) == ("?", "causes") and "tricuspid" in missing.tail.lower()
    completions = complete_answer(answer, settings=LOCAL, data=data)
    key = {a.lower() for a in q.answers}
    good = [c for c in completions if c.supported and _other_end(answer, c).lower() in key]
    assert good, [(c.head_name, c.tail_name, c.supported, c.score) for c in completions]
    best = good[0]
    pmid = q.source.split("#")[1]
    support = next(p for p in best.passages if len(p.entities) == 2)
    assert pmid in support.doc_key and pmid in best.evidence_doc_keys[0]  # the paper the question was written from
    assert 0.5 <= best.score <= 1 and best.method in ("candidate", "passage_re")
    assert all(e.lower() in support.text.lower() for e in support.entities)
    # the completion, once in the KG (here: as the benchmark's overlay), answers the question
    after = run_plan(answer.plan, question_id=q.id, backbone="local", data=data, overlay=[best])
    assert after.hit and any(a.lower() in key for a in after.answers)
    assert after.triples[0].source == "completion"
    row = benchmark("local", QUESTIONS.key, [q], data, {q.id: answer}, {q.id: completions}, lambda c: c is best)
    assert (row.hit_before, row.hit_after_completion, row.hit_after_review) == (0.0, 1.0, 1.0)
    row = benchmark("local", QUESTIONS.key, [q], data, {q.id: answer}, {q.id: completions}, lambda c: False)
    assert (row.hit_before, row.hit_after_review) == (0.0, 0.0)


def test_a_seed_hit_comes_with_its_triples_and_provenance(data):
    answer = _ask(data, "graves-genes")  # the seed KG has Graves' disease -associates-> genes (not the key's)
    assert answer.hit and answer.answers and not answer.missing
    t = answer.triples[0]
    assert t.source == "seed" and t.provenance[0]["evidence"] == "seed KG (imported)"
    assert t.head_name == "Graves' disease" and t.relation == "associates"


def test_a_disease_the_kg_holds_as_a_side_effect_is_asked_on_that_node(data):
    """'cardiac arrhythmia' links to MeSH's Disease, which the KG stores as the seed's Side Effect Arrhythmia (one
    concept, kg/same_entity.py; a merge puts a paper's arrhythmia there too): the plan asks that node."""
    answer = _ask(data, "arrhythmia-drug")
    [step] = answer.plan.steps
    assert step.entity.kind == "Disease" and not step.entity.entity_id.startswith("Side Effect::")
    assert answer.hit and answer.triples
    assert {(t.relation, t.tail_id, t.source) for t in answer.triples} == {("causes", "Side Effect::C0003811", "seed")}


def test_candidates_are_the_chains_unaccepted_triples(data):
    rows = complete.candidate_rows(data, "local")
    evaluated = StageStore(data.stages_dir)
    assert len(rows) and "accepted" in rows and not rows["accepted"].any()
    aligned = rows[rows["kg_relation"].notna()].iloc[0]
    from karma_dagster.cogmg.models import OpenTriple

    open_triple = OpenTriple(head=aligned["head_name"], relation=aligned["kg_relation"], tail="?",
                             known_id=aligned["head_id"], known_end="head")
    found = complete.from_candidates(open_triple, "q", "question?", "local", rows)
    assert any(c.tail_id == aligned["tail_id"] and c.method == "candidate" and c.evidence == aligned["evidence"]
               for c in found)
    assert evaluated.partitions("local", "evaluated")


def test_a_question_naming_no_entity_is_not_understood_without_a_kg_query(data, monkeypatch, capsys):
    from karma_dagster.cogmg import answer as answer_module
    from karma_dagster.cogmg.cli_ask import cmd_ask

    def no_query(*_a, **_k):  # noqa: ANN202
        raise AssertionError("the KG was queried for a question naming no entity")

    monkeypatch.setattr(answer_module, "execute", no_query)
    monkeypatch.setattr(answer_module, "kg_store", no_query)
    answer = answer_question("What is the meaning of life?", backbone="local", settings=LOCAL, data=data)
    assert not answer.understood and not answer.hit and not answer.plan.steps and not answer.missing
    assert answer.error.startswith("not understood: no linkable entity") and answer.text.startswith("Not understood")
    args = argparse.Namespace(question="What is the meaning of life?", backbone="local", data_dir=str(data.root),
                              no_complete=False, no_queue=True)
    assert cmd_ask(args) == 0  # answered: "not understood" is an answer, not a failure
    out = capsys.readouterr().out
    assert "NOT UNDERSTOOD: no linkable entity" in out and "(the KG was not queried)" in out and "MISS" not in out


def test_plan_values_are_bound_never_pasted_into_sql(data):
    kg = KGStore(data.kg)
    before = kg.seed_counts()
    evil = LinkedEntity(mention="x", entity_id="x'; DROP TABLE seed_nodes; --", name="x", kind="Compound",
                        distance=0.0)
    plan = QueryPlan(question="q?", decomposer="test", steps=[QueryStep(entity=evil, relation="causes",
                                                                        direction="out")])
    assert not run_plan(plan, question_id="q", backbone="local", data=data).hit
    assert kg.seed_counts() == before
    with pytest.raises(ValueError, match="not in the KG schema"):
        QueryStep(entity=evil, relation="cures", direction="out")


def test_karma_ask_prints_plan_miss_and_supported_completions(data, capsys):
    from karma_dagster.cogmg.cli_ask import cmd_ask

    args = argparse.Namespace(question=BY_ID[SEED_MISS].question, backbone="local",
                              data_dir=str(data.root), no_complete=False, no_queue=True)
    assert cmd_ask(args) == 0  # a miss is answered: no fact found in the KG, an answer from the completions
    out = capsys.readouterr().out
    assert "plan (local:" in out and "? -causes-> tricuspid regurgitation" in out and "MISS on the local KG" in out
    assert "missing triples:" in out and "SUPPORTED" in out and "states causes" in out
    # CogMG's answer after completion: written from the verified completions, marked as not yet in the KG, each
    # citing the document and the sentence that states it
    assert "no fact found in the KG" in out
    written = out.split("written answer (local: template over verified completions (not yet in the KG)):\n")[1]
    text = written.splitlines()[0]
    assert text.startswith("  Not yet in the KG (read in the literature, awaiting review): Tricuspid valve "
                           "regurgitation is caused by ")
    cited = re.findall(r"^  \[(\d+)\] (.+) -causes-> Tricuspid valve regurgitation "
                       r"\((\S+#p\d+), not yet in the KG\)$", written, re.M)
    assert cited and _markers(text) == {int(n) for n, _h, _p in cited}
    assert any(h.lower() in {"lithium", "lithium carbonate"} and "6794356" in p for _n, h, p in cited)
    assert "Tricuspid valve regurgitation and lithium carbonate toxicity in a newborn infant." in written


# ---------------------------------------------------------------- `karma ask`: cited answers, two hops, review
def _ask_args(data: DataPaths, question: str, backbone: str = "local", **kw) -> argparse.Namespace:
    return argparse.Namespace(question=question, backbone=backbone, data_dir=str(data.root), no_complete=False,
                              no_queue=False, **kw)


def _seed_edges() -> set[tuple[str, str, str]]:
    """(head name, relation, tail name) of the shipped seed KG, read from its files (not through the code tested)."""
    import csv
    import gzip

    from karma_dagster.runtime.services import kg_schema

    names = {r["id"]: r["name"] for r in csv.DictReader((REPO / "data/seed_kg/nodes.tsv").open(), delimiter="\t")}
    rel = {me.abbrev: me.relation for me in kg_schema().metaedges}
    with gzip.open(REPO / "data/seed_kg/edges.sif.gz", "rt") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))[1:]
    return {(names[h], rel[m], names[t]) for h, m, t in rows if m in rel}


def _markers(text: str) -> set[int]:
    return {int(n) for group in re.findall(r"\[(\d+(?:,\s*\d+)*)\]", text) for n in group.split(",")}


def test_karma_ask_writes_a_cited_answer_for_a_seed_hit(data, capsys):
    from karma_dagster.cogmg.cli_ask import cmd_ask

    question = BY_ID["graves-genes"].question
    assert cmd_ask(_ask_args(data, question)) == 0
    out = capsys.readouterr().out
    assert "HIT on the local KG" in out and "written answer (local: template):" in out
    seed = _seed_edges()
    from karma_dagster.cogmg.write import write_local

    answer = write_local(_ask(data, "graves-genes"))
    assert answer.text and answer.citations and answer.writer == "local: template"
    assert _markers(answer.text) == {c.marker for c in answer.citations}  # every triple cited, no marker invented
    for c in answer.citations:
        assert (c.head, c.relation, c.tail) in seed and c.source == "seed" and c.sentence == "seed KG"
        assert f"{c.label()}" in out
    named = answer.text.split(" is associated with ")[1]
    assert all(a in named for a in answer.answers)


def test_a_two_hop_question_answers_through_a_bridge_with_both_hops_cited(data, capsys):
    from karma_dagster.cogmg.cli_ask import cmd_ask
    from karma_dagster.cogmg.write import write_local

    question = "Which genes are targeted by drugs that treat glaucoma?"
    answer = write_local(answer_question(question, backbone="local", settings=LOCAL, data=data))
    assert answer.hit and answer.plan.steps
    for step in answer.plan.steps:
        assert step.entity.name == "glaucoma" and step.then is not None and step.answer_kinds == ["Compound"]
        assert step.then.answer_kinds == ["Gene"] and {step.relation, step.then.relation} <= {
            "treats", "palliates", "binds", "downregulates"}
    # the answers, independently: genes that a compound treating / palliating glaucoma binds or downregulates
    seed = _seed_edges()
    drugs = {h for h, r, t in seed if t == "glaucoma" and r in ("treats", "palliates")}
    genes = {t for h, r, t in seed if h in drugs and r in ("binds", "downregulates")}
    assert answer.answers and set(answer.answers) <= genes
    support = {g: len({h for h, r, t in seed if h in drugs and t == g and r in ("binds", "downregulates")})
               for g in genes}
    assert support[answer.answers[0]] == max(support.values())  # ranked by the number of bridges reaching it
    hop1 = {(t.head_name, t.tail_name) for t in answer.triples if t.hop == 1}
    for t in (t for t in answer.triples if t.hop == 2):
        assert (t.head_name, "glaucoma") in hop1 and t.head_name in drugs and t.answer == t.tail_name  # the path
        assert t.provenance and t.provenance[0]["evidence"] == "seed KG (imported)"
    by_triple = {(c.head, c.relation, c.tail): c.marker for c in answer.citations}
    assert _markers(answer.text) == set(by_triple.values())
    for t in (t for t in answer.triples if t.hop == 2 and (t.head_name, t.relation, t.tail_name) in by_triple):
        bridge_hop = next(b for b in answer.triples if b.hop == 1 and b.head_name == t.head_name)
        m1, m2 = by_triple[(bridge_hop.head_name, bridge_hop.relation, "glaucoma")], by_triple[
            (t.head_name, t.relation, t.tail_name)]
        # one sentence cites the path: the bridge with its first hop's marker, the answer with the second's
        assert any(f"{t.head_name} [{m1}]" in x and f" {t.tail_name} [" in x and m2 in _markers(x.split(t.tail_name)[1])
                   for x in answer.text.split(". ")), (t, answer.text)
    assert cmd_ask(_ask_args(data, question)) == 0
    out = capsys.readouterr().out
    assert "glaucoma <-treats- ? -binds-> ?" in out and "via: Compound; answer kinds: Gene" in out
    # the schema joins a compound to a symptom in one hop (CcS): asked directly, not bridged through a disease
    plan = answer_question("Which symptoms does lithium cause?", backbone="local", settings=LOCAL, data=data).plan
    assert [(s.relation, s.answer_kinds, s.then) for s in plan.steps] == [("causes", ["Symptom"], None)]
    # a symptom two hops away still goes through the disease that presents it
    plan = answer_question("Which symptoms are presented by diseases that lithium treats?", backbone="local",
                           settings=LOCAL, data=data).plan
    assert sorted((s.relation, s.answer_kinds, s.then.relation, s.then.answer_kinds) for s in plan.steps) == [
        ("palliates", ["Disease"], "presents", ["Symptom"]), ("treats", ["Disease"], "presents", ["Symptom"])]


def _kg_edge_count(data: DataPaths) -> int:
    with KGStore(data.kg).connect(read_only=True) as con:
        return con.execute("SELECT count(*) FROM kg_edges('local')").fetchone()[0]


def test_karma_ask_queues_a_miss_completions_for_review_once(data, capsys):
    from karma_dagster.cogmg.cli_ask import ask_key, cmd_ask
    from karma_dagster.cogmg.store import CogmgStore
    from karma_dagster.review.cogmg_items import collect_cogmg
    from karma_dagster.review.queue import ReviewQueue

    question = BY_ID[SEED_MISS].question
    queue, key = ReviewQueue.for_data(data), ask_key(question)
    edges = _kg_edge_count(data)
    try:
        assert cmd_ask(_ask_args(data, question)) == 0
        out = capsys.readouterr().out
        pending = [i for i, _ in queue.items(source="cogmg")]
        completions = CogmgStore(data).read_completions("local", key)
        assert completions and any(c.supported for c in completions)
        assert len(pending) == len({(c.head_id, c.relation, c.tail_id) for c in completions if not c.refused})
        assert all(i.origin == key and i.change for i in pending)
        assert f"queued for review: {len(pending)} item(s) ({len(pending)} new" in out
        assert f"karma review --data-dir {data.root}" in out
        # `karma review` collects the very same items from the completions file
        assert {i.item_id for i in collect_cogmg(data)} == {i.item_id for i in pending}
        assert cmd_ask(_ask_args(data, question)) == 0  # asked again: refreshed, not duplicated
        assert "(0 new, " in capsys.readouterr().out
        assert len(queue.items(source="cogmg")) == len(pending)
        assert _kg_edge_count(data) == edges  # nothing enters the KG without review
    finally:  # the module's later tests review their own items
        for f in queue.path.parent.glob(queue.path.name + "*"):
            f.unlink()
        (CogmgStore(data).root / "local" / "completions" / f"{key}.json").unlink(missing_ok=True)


def test_the_written_answer_check_keeps_only_claims_citing_existing_markers():
    from karma_dagster.cogmg.models import Citation
    from karma_dagster.cogmg.write import ClaimOutput, check_claims

    cites = [Citation(marker=1, head="Timolol", relation="treats", tail="glaucoma", source="seed"),
             Citation(marker=2, head="Timolol", relation="binds", tail="ADRB1", source="seed")]
    text, notes = check_claims([
        ClaimOutput(text="Glaucoma is treated by Timolol [1]", cites=[]),
        ClaimOutput(text="Timolol binds ADRB1", cites=[2, 7]),
        ClaimOutput(text="Timolol also cures migraine", cites=[9]),
        ClaimOutput(text="Latanoprost lowers eye pressure", cites=[]),
        ClaimOutput(text="Aspirin thins blood", cites=[1]),
    ], cites)
    assert text == "Glaucoma is treated by Timolol [1]. Timolol binds ADRB1 [2]."
    assert any("[7]" in n and "removed" in n for n in notes)
    assert any("[9]" in n and "cures migraine" in n for n in notes)
    assert any("uncited claim" in n and "Latanoprost" in n for n in notes)
    assert any("names no entity" in n and "Aspirin" in n for n in notes)


# ---------------------------------------------------------------- verification reads the relation, refuses self-edges
def _completion(relation: str, head: tuple[str, str, str], tail: tuple[str, str, str], backbone: str = "local",
                question: str = "Which drug causes cardiac arrhythmia when consumed prior to delivery?"):  # noqa: ANN202
    from karma_dagster.cogmg.models import Completion

    return Completion(question_id="q", question=question, backbone=backbone, head_id=head[0], head_name=head[1],
                      head_kind=head[2], relation=relation, tail_id=tail[0], tail_name=tail[1], tail_kind=tail[2],
                      method="llm", passages=[], supported=False, score=0.0, evidence_doc_keys=[],
                      evidence="filled by a test")


LITHIUM = ("Compound::test-lithium", "Lithium", "Compound")
ARRHYTHMIA = ("Disease::test-arrhythmia", "cardiac arrhythmia", "Disease")


def test_verification_reads_the_relation_and_proposes_the_one_the_passage_states(data):
    from karma_dagster.cogmg.verify import verify

    # the shipped abstract: "Lithium carbonate may be a factor ... It also causes ... cardiac arrhythmia when
    # consumed prior to delivery": the pronoun's sentence states `causes`
    good = verify(_completion("causes", LITHIUM, ARRHYTHMIA), data)
    assert good.supported and good.verdict == "states causes" and not good.proposed_relation
    assert "It also causes" in good.support_sentence and "6794356" in good.support_passage
    # the same passage read for `treats`: it names both ends, but states that lithium causes the arrhythmia
    wrong = verify(_completion("treats", LITHIUM, ARRHYTHMIA), data)
    assert not wrong.supported and wrong.score == 0.0 and wrong.proposed_relation == "causes"
    assert wrong.verdict.startswith("states causes in ") and "It also causes" in wrong.support_sentence
    from karma_dagster.review.cogmg_items import items_from_completions

    [item] = items_from_completions([wrong])  # the reviewer sees the correction the passage supports
    assert "NOT supported" in item.note and "the passage states 'causes' instead" in item.note


def test_a_negated_passage_does_not_verify(data):
    from karma_dagster.cogmg.verify import verify

    store, ns = StageStore(data.stages_dir), "negated"
    key = next(k for k in store.partitions("local", "documents") if "6794356" in k)
    frame = store.read("local", "documents", key)
    said = "It also causes neurologic depression, cyanosis, and cardiac arrhythmia when consumed prior to delivery."
    assert any(said in t for t in frame["text"])
    denied = "Lithium did not cause cardiac arrhythmia when consumed prior to delivery."
    store.write(ns, "documents", key, frame.assign(text=[t.replace(said, denied) for t in frame["text"]]))
    refuted = verify(_completion("causes", LITHIUM, ARRHYTHMIA, backbone=ns), data)
    assert any(len(p.entities) == 2 for p in refuted.passages)  # both ends co-occur in the passage ...
    assert not refuted.supported and refuted.verdict.startswith("negated in ")  # ... but the sentence denies it
    assert refuted.support_sentence == denied and refuted.score == 0.0


def test_a_completion_naming_one_entity_twice_is_refused_with_its_reason(data):
    from karma_dagster.cogmg.cli_ask import render
    from karma_dagster.cogmg.verify import verify
    from karma_dagster.review.cogmg_items import items_from_completions

    same_id = verify(_completion("causes", LITHIUM, LITHIUM), data)
    same_name = verify(_completion("causes", LITHIUM, ("NEW:Chemical:lithium", "lithium", "Compound")), data)
    for c, why in ((same_id, "both ends are Compound::test-lithium"), (same_name, "both ends are named 'Lithium'")):
        assert not c.supported and c.score == 0.0 and c.verdict == "refused"
        assert c.refused == f"names one entity twice: {why}"
    assert not items_from_completions([same_id, same_name])  # never queued for review
    answer = answer_question(BY_ID[SEED_MISS].question, backbone="local", settings=LOCAL, data=data)
    out = __import__("io").StringIO()
    render(answer, [same_id], out=out)
    assert "Lithium -causes-> Lithium  [llm, REFUSED: names one entity twice: both ends are Compound::test-lithium]" \
        in out.getvalue() and "SUPPORTED" not in out.getvalue()


def test_karma_ask_exit_codes_are_stated_and_kept(data, capsys):
    from karma_dagster import cli
    from karma_dagster.cogmg.cli_ask import cmd_ask

    for argv in (["--help"], ["ask", "--help"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 0
        said = " ".join(capsys.readouterr().out.split())
        assert "exit codes: 0" in said and "'no fact found'" in said and "'not understood'" in said
        assert "2 bad input" in said and "1 failure" in said
    assert cmd_ask(_ask_args(data, "   ")) == 2 and "the question is empty" in capsys.readouterr().err
    assert cmd_ask(_ask_args(data, "Which genes does x" * 200)) == 2
    assert "characters long" in capsys.readouterr().err
    assert cmd_ask(_ask_args(data, "Which drugs treat glaucoma?", backbone="nope")) == 2
    assert "--backbone nope: not in backbones.yaml" in capsys.readouterr().err
    assert cli.main(["ask", "What is the meaning of life?", "--data-dir", str(data.root), "--no-queue"]) == 0


# ---------------------------------------------------------------- the LLM path, through the loopback server
def test_llm_decomposition_is_schema_constrained_asked_again_once_and_completes(data, server):
    from fake_openai_server import agent_of

    from karma_dagster.backbones.llm import LLMBackbone, LLMClient, PromptStore

    server.reset()
    ns = "fake"
    shutil.copytree(data.stages_dir / "local" / "documents", data.stages_dir / ns / "documents", dirs_exist_ok=True)
    client = LLMClient("openai/fake-model", api_base=server.url, api_key="x", backoff_base=0.01, timeout=10,
                       name=ns)
    llm = LLMBackbone(ns, client, PromptStore(), "general biomedicine")
    step = {"entity": "acute liver failure", "entity_kind": "Disease", "direction": "in", "answer_kind": "Compound"}
    server.script(json.dumps({"steps": [{**step, "relation": "induces"}]}),  # outside the schema: asked again
                  json.dumps({"steps": [{**step, "relation": "causes"}]}),
                  json.dumps({"fills": [{"triple": 0, "answer": "Paracetamol", "answer_kind": "Compound"}]}))
    settings = BackboneSettings(kind="litellm", model="openai/fake-model")
    q = BY_ID["liver-failure-drug"]  # "Which drug caused the acute liver failure of the Danish cohort?"
    answer = answer_question(q.question, backbone=ns, settings=settings, data=data, question_id=q.id,
                             llm_backbone=llm)
    assert [agent_of(r) for r in server.requests] == ["cogmg_decompose", "cogmg_decompose"]
    assert '"induces"' in server.requests[1]["messages"][0]["content"]  # the re-ask names the bad label
    assert answer.plan.decomposer.startswith("cogmg_decompose.v3@")
    assert any("asked again once" in n for n in answer.plan.notes)
    assert [(s.relation, s.direction) for s in answer.plan.steps] == [("causes", "in")]
    assert not answer.hit and answer.missing[0].head == "?"
    completions = complete_answer(answer, settings=settings, data=data, llm_backbone=llm)
    assert agent_of(server.requests[-1]) == "cogmg_complete" and len(server.requests) == 3
    [c] = completions
    assert (c.method, c.head_name, c.relation) == ("llm", "Paracetamol", "causes")
    assert c.supported and q.source.split("#")[1] in c.evidence_doc_keys[0]


def test_a_plan_naming_an_entity_absent_from_the_question_is_refused_and_asked_again_once(data, server):
    from fake_openai_server import agent_of

    from karma_dagster.backbones.llm import LLMBackbone, LLMClient, PromptStore

    server.reset()
    ns = "fake"
    client = LLMClient("openai/fake-model", api_base=server.url, api_key="x", backoff_base=0.01, timeout=10,
                       name=ns)
    llm = LLMBackbone(ns, client, PromptStore(), "general biomedicine")
    settings = BackboneSettings(kind="litellm", model="openai/fake-model")
    q = BY_ID[SEED_MISS]
    invented = {"entity": "PWRN", "entity_kind": "Gene", "relation": "associates", "direction": "out",
                "answer_kind": "Disease"}
    grounded = {"entity": "tricuspid regurgitation", "entity_kind": "Disease", "relation": "causes", "direction": "in",
                "answer_kind": "Compound"}
    server.script(json.dumps({"steps": [grounded, invented]}), json.dumps({"steps": [grounded]}))
    answer = answer_question(q.question, backbone=ns, settings=settings, data=data, question_id=q.id,
                             llm_backbone=llm)
    assert [agent_of(r) for r in server.requests] == ["cogmg_decompose", "cogmg_decompose"]
    told = 'started from entities the question does not name: ["PWRN"]'
    assert told in server.requests[1]["messages"][0]["content"]  # the re-ask names what it invented
    assert told not in server.requests[0]["messages"][0]["content"]
    assert answer.understood and any("['PWRN'], which the question does not name: asked again once" in n
                                     for n in answer.plan.notes)
    [step] = answer.plan.steps
    assert step.entity.name.lower() == "tricuspid regurgitation"
    assert q.question[slice(*step.entity.span)].lower() == "tricuspid regurgitation"

    server.reset()
    server.script(json.dumps({"steps": [invented]}), json.dumps({"steps": [invented]}))
    again = answer_question(q.question, backbone=ns, settings=settings, data=data, question_id=q.id,
                            llm_backbone=llm)
    assert len(server.requests) == 2  # asked again once, never more; no completion asked for
    assert not again.understood and not again.plan.steps and not again.triples and not again.missing
    assert again.error == "not understood: the plan starts from ['PWRN'], which the question does not name"


def test_grounding_keeps_a_plan_to_the_spans_of_its_question():
    from karma_dagster.cogmg.grounding import find_span, ground_plan

    question = "Which drug causes cardiac arrhythmia when consumed prior to delivery?"
    arrhythmia = LinkedEntity(mention="Cardiac  Arrhythmia", entity_id="D", name="cardiac arrhythmia",
                              kind="Disease", distance=0.0)
    invented = LinkedEntity(mention="PWRN", entity_id="G", name="PWRN", kind="Gene", distance=0.0)
    plan = QueryPlan(question=question, decomposer="test", steps=[
        QueryStep(entity=arrhythmia, relation="causes", direction="in"),
        QueryStep(entity=invented, relation="associates", direction="out")])
    kept, missing = ground_plan(plan)
    assert missing == ["PWRN"] and [s.entity.span for s in kept.steps] == [(18, 36)]
    assert find_span(question, ["arrhythmia"]) == (26, 36) and find_span(question, ["rhythm"]) is None


def test_karma_ask_on_an_llm_backbone_reads_its_key_env_plans_two_hops_and_checks_citations(
        data, server, tmp_path, monkeypatch, capsys):
    """The key comes from the backbone's api_key_env (OPENAI_API_KEY unset): it reaches the server as the bearer
    token; a missing one is `karma run`'s error naming the variable, before any request."""
    from fake_openai_server import agent_of

    from karma_dagster.cogmg.cli_ask import cmd_ask

    server.reset()
    project = tmp_path / "proj"
    project.mkdir()
    (project / "karma.yaml").write_text("karma_project: 1\n")
    (project / "backbones.yaml").write_text(
        "backbones:\n  local: {kind: local}\n"
        f"  asker: {{kind: litellm, model: openai/fake-model, api_base: '{server.url}', api_key_env: KARMA_TEST_KEY,"
        " max_retries: 0, timeout: 10, enabled: false}\n")
    monkeypatch.setenv("KARMA_PROJECT", str(project))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("KARMA_TEST_KEY", raising=False)
    question = "Which genes are targeted by drugs that treat glaucoma?"
    assert cmd_ask(_ask_args(data, question, "asker")) == 2
    err = capsys.readouterr().err
    assert "--backbone asker (set KARMA_TEST_KEY): NOT CONFIGURED" in err and "Missing credentials" not in err
    assert not server.requests

    monkeypatch.setenv("KARMA_TEST_KEY", "sk-karma-test-ask-0000")
    step = {"entity": "glaucoma", "entity_kind": "Disease", "relation": "treats", "direction": "in",
            "answer_kind": "Compound", "then": {"relation": "binds", "direction": "out", "answer_kind": "Gene"}}
    server.script(json.dumps({"steps": [step]}))

    def claims(request):  # noqa: ANN001, ANN202 - the writer: one good claim, one citing a marker that is not there
        triples = json.loads(request["messages"][1]["content"].split("<triples>")[1].split("</triples>")[0])
        hop1 = next(t for t in triples if t["relation"] == "treats")
        hop2 = next(t for t in triples if t["relation"] == "binds" and t["head"] == hop1["head"])
        return json.dumps({"claims": [
            {"text": f"{hop1['head']} treats glaucoma and binds {hop2['tail']}", "cites": [hop1["marker"],
                                                                                     hop2["marker"]]},
            {"text": "Glaucoma is also treated by cannabis", "cites": [len(triples) + 5]},
            {"text": "Laser surgery lowers eye pressure", "cites": []}]})

    server.responder = claims
    try:
        assert cmd_ask(_ask_args(data, question, "asker")) == 0
    finally:
        from fake_openai_server import karma_responder

        server.responder = karma_responder
    out = capsys.readouterr().out
    assert server.authorizations and set(server.authorizations) == {"Bearer sk-karma-test-ask-0000"}
    assert [agent_of(r) for r in server.requests] == ["cogmg_decompose", "cogmg_answer"]
    assert "plan (cogmg_decompose.v3@" in out and "glaucoma <-treats- ? -binds-> ?" in out
    assert "written answer (cogmg_answer.v1@" in out
    written = out.split("written answer")[1].splitlines()[1]
    assert "treats glaucoma and binds" in written and "cannabis" not in written and "Laser" not in written
    assert "FLAGGED: markers [" in out and "cannabis" in out.split("FLAGGED")[1]
    assert "FLAGGED: the model added an uncited claim, dropped: 'Laser surgery" in out
    listed = {int(m) for m in re.findall(r"^  \[(\d+)\] ", out, re.M)}  # the citation list's markers
    assert _markers(written) and _markers(written) <= listed


# ---------------------------------------------------------------- Dagster: the question assets
def test_question_assets_materialize_answers_completions_and_the_benchmark(data, shared_cache):
    from karma_dagster.assets.questions import question_assets
    from karma_dagster.resources.backbones import BackbonesResource
    from karma_dagster.resources.storage import KarmaStorageResource

    key = QUESTIONS.key + "__" + SEED_MISS
    resources = {"storage": KarmaStorageResource(data_dir=str(data.root), inbox=str(data.inbox),
                                                 cache_dir=str(shared_cache)),
                 "backbones": BackbonesResource()}
    assets = question_assets(["local"])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("questions", [key])
        result = dg.materialize(assets, instance=instance, resources=resources, partition_key=key,
                                selection=[dg.AssetKey(["local", "answers"]), dg.AssetKey(["local", "completions"])])
        assert result.success
        events = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
        meta = {m.asset_key.to_user_string(): m.metadata for m in events}
        assert meta["local/answers"]["misses"].value == 1
        assert meta["local/completions"]["supported"].value >= 1
        bench = dg.materialize(assets, instance=instance, resources=resources, selection=["qa_benchmark"])
        m = bench.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
        assert m[f"local/{QUESTIONS.key}/hit_before"].value == 0.0
        assert m[f"local/{QUESTIONS.key}/hit_after_completion"].value == round(1 / 76, 4)
        assert m[f"local/{QUESTIONS.key}/hit_after_review"].value == 0.0, "nobody reviewed anything yet"

        # a reviewer accepts the supported completions in the review queue: "after review" counts them
        from karma_dagster.cogmg.store import CogmgStore
        from karma_dagster.review.cogmg_items import items_from_completions
        from karma_dagster.review.models import DecisionIn
        from karma_dagster.review.queue import ReviewQueue

        queue = ReviewQueue.for_data(data)
        items = items_from_completions(CogmgStore(data).read_completions("local", key), key)
        queue.add_items(items)
        assert items
        for item in items:
            queue.decide(item.item_id, DecisionIn(action="accept", reviewer="alice"))
        again = dg.materialize(assets, instance=instance, resources=resources, selection=["qa_benchmark"])
        m = again.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
        assert m[f"local/{QUESTIONS.key}/hit_after_review"].value == round(1 / 76, 4)
    for f in queue.path.parent.glob(queue.path.name + "*"):  # restore the module's data: the loop test reviews anew
        f.unlink()


# ---------------------------------------------------------------- the whole loop, last: it merges into the module's KG
def test_the_loop_miss_completion_review_page_kg_increment_hit(data, tmp_path):
    """Issue 13's loop with its real parts: the seed misses, CogMG completes and verifies, a reviewer accepts in the
    review page, the review_decisions sensor requests the KG date, the KG increment asset merges it, the question
    hits with provenance 'reviewed by alice via cogmg'."""
    from sensor_ticks import tick
    from starlette.testclient import TestClient

    from karma_dagster.definitions import build_definitions
    from karma_dagster.jobs import kg_job_name
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource
    from karma_dagster.review.app import create_app
    from karma_dagster.review.changes import with_changes
    from karma_dagster.review.cogmg_items import items_from_completions
    from karma_dagster.review.queue import ReviewQueue

    q = BY_ID[SEED_MISS]
    key = f"{QUESTIONS.key}__{q.id}"
    answer = _ask(data, q.id)
    assert not answer.hit
    answers = {a.lower() for a in q.answers}
    good = [c for c in complete_answer(answer, settings=LOCAL, data=data)
            if c.supported and _other_end(answer, c).lower() in answers]
    assert good

    queue = ReviewQueue.for_data(data)
    queue.add_items(with_changes(items_from_completions(good[:1], key), data.kg))
    (item,) = [i for i, _ in queue.items(source="cogmg")]
    app = create_app(queue)
    page = TestClient(app, base_url="http://127.0.0.1:8766", follow_redirects=False)
    root = f"/s/{app.state.key}"  # the printed address's prefix: the session's read key, no cookie
    assert page.get(root + "/").status_code == 200
    decision = {"action": "accept", "reviewer": "alice", "_token": app.state.token}  # the page's forms carry it
    assert page.post(f"{root}/items/{item.item_id}/decision", data=decision).status_code == 303

    storage = KarmaStorageResource(data_dir=str(data.root), inbox=str(data.inbox))
    p = SimpleNamespace(defs=build_definitions(backbones={"local": BackboneConfig()}, storage=storage))
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as p.instance:
        requested = tick(p, "review_decisions")
        (request,) = requested.run_requests
        for add in requested.dynamic_partitions_requests:  # what the daemon does with the sensor's requests
            p.instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
        run = p.defs.resolve_job_def(kg_job_name("local")).execute_in_process(
            partition_key=request.partition_key, instance=p.instance)
        assert run.success
        assert not tick(p, "review_decisions").run_requests, "merged: nothing waits any more"

    after = _ask(data, q.id)
    assert after.hit and any(a.lower() in answers for a in after.answers)
    assert after.triples[0].provenance[0]["prompt_version"] == "reviewed by alice via cogmg"
    from karma_dagster.cogmg.write import write_local

    written = write_local(after)  # the written answer cites the reviewed triple with its evidence row
    c = written.citations[0]
    assert (c.prompt_version, c.source, c.doc_key) == ("reviewed by alice via cogmg", "extracted",
                                                       after.triples[0].provenance[0]["doc_key"])
    assert c.doc_key and c.sentence == after.triples[0].provenance[0]["evidence"] and "[1]" in written.text
