"""KARMA's ablations (paper, Table 2) as backbone settings: `ablate: [summarizer]` etc. switches exactly that
agent's stage to its pass-through, in a chain, namespace and comparison row of its own; the rows of an absent
evaluator read n/a (C2); an ablated LLM backbone answers its shared stages from the full chain's response cache."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pandera.errors as pa_errors
import pytest
from fake_openai_server import FakeOpenAIServer, agent_of

from partition_views import document_metadata
from karma_dagster import runner, stages
from karma_dagster.agents.integration import collect_document
from karma_dagster.agents.pass_through import unevaluated, unresolved, unsummarized
from karma_dagster.runtime.config import ConfigError, BackboneSettings, read_backbones
from karma_dagster.definitions import build_definitions
from karma_dagster.runtime.ledger import Ledger, ledger_path
from karma_dagster.backbones.local import correctness
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.resources.backbones import BackboneConfig
from karma_dagster.schemas.frames import frame_to_records, records_to_frame
from karma_dagster.schemas.records import EvaluatedRow, ResolvedRow
from karma_dagster.schemas.tables import EvaluatedTable

PAPER = ("PMC4736972.pdf", "PMC4736972.json")  # Notch signalling, tamoxifen, breast cancer
# BC5CDR dev 11099450 (pallidotomy, levodopa-induced dyskinesias): the chain reads "L-DOPA causes Parkinson's
# disease", against the seed's L-DOPA palliates Parkinson's disease, and its CRA discards it. Since REA keeps one of
# a paper's opposite readings, the sample papers meet no seed edge they contradict.
CDR_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt"
CONFLICT_PMID = "11099450"
ABLATIONS = {"local-no-summarizer": "summarizer", "local-no-conflict-resolution": "conflict_resolution",
             "local-no-evaluator": "evaluator"}
ABLATED_STAGE = {"summarizer": "summaries", "conflict_resolution": "resolved", "evaluator": "evaluated"}
FAKE_KEY = "sk-karma-test-0000-not-a-real-key"


# ---------------------------------------------------------------- settings and the strict reader
def test_unknown_or_misplaced_ablations_are_config_errors_naming_the_file_and_key(tmp_path):
    f = tmp_path / "backbones.yaml"
    f.write_text("backbones:\n  local-x: {kind: local, ablate: [sumarizer]}\n")
    with pytest.raises(ConfigError) as err:
        read_backbones(f)
    msg = str(err.value)
    assert msg.startswith("backbones.yaml: line 2: backbones.local-x.ablate: unknown ablation 'sumarizer'")
    assert "did you mean 'summarizer'?" in msg and "summarizer, conflict_resolution, evaluator" in msg
    f.write_text("backbones:\n  local-x: {kind: local, ablate: evaluator}\n")
    with pytest.raises(ConfigError, match=r"backbones.local-x.ablate: expected a list such as \[summarizer\]"):
        read_backbones(f)
    f.write_text("backbones:\n  local-x: {kind: local, mode: single_agent, ablate: [evaluator]}\n")
    with pytest.raises(ConfigError, match="backbones.local-x: .*applies to the multi_agent chain"):
        read_backbones(f)
    f.write_text("backbones:\n  local-x: {kind: local, ablate: [evaluator, evaluator]}\n")
    with pytest.raises(ConfigError, match="lists an agent twice"):
        read_backbones(f)
    f.write_text("backbones:\n  local-x: {kind: local, ablate: [summarizer, evaluator]}\n")
    assert read_backbones(f).backbones["local-x"].settings().ablate == ["summarizer", "evaluator"]


def test_the_shipped_file_enables_the_three_local_ablations():
    entries = read_backbones().runnable()
    assert {name: entries[name].ablate for name in ABLATIONS} == {n: [a] for n, a in ABLATIONS.items()}
    assert all(entries[name].kind == "local" for name in ABLATIONS)


# ---------------------------------------------------------------- the registry
@pytest.mark.parametrize("kind", ["local", "litellm"])
@pytest.mark.parametrize("agent", sorted(ABLATED_STAGE))
def test_an_ablation_swaps_exactly_its_stage_and_its_code_version(kind, agent):
    model = "openai/gpt-4o" if kind == "litellm" else ""
    full, ablated = BackboneSettings(kind=kind, model=model), BackboneSettings(kind=kind, model=model, ablate=[agent])
    chain = stages.chain_for(ablated)
    assert [(s.name, s.reads, s.agent, s.table_model) for s in chain] == \
        [(s.name, s.reads, s.agent, s.table_model) for s in stages.STAGES], "the same asset graph shape"
    for base, stage in zip(stages.STAGES, chain, strict=True):
        swapped = stage.name == ABLATED_STAGE[agent]
        assert (stage.variant == stages.ABLATED) == swapped
        assert (stage.run is base.run) != swapped
        assert (stages.code_version(stage, ablated) != stages.code_version(base, full)) == swapped, stage.name
        if swapped:
            assert stage.prompts == () and stage.description.startswith("ABLATED")
    assert stages.code_version(stages.by_name(ABLATED_STAGE[agent]), ablated) == \
        stages.code_version(stages.by_name(ABLATED_STAGE[agent], chain), ablated), "asked with the base stage"


def test_an_ablation_no_stage_runs_is_refused():
    registry = tuple(s for s in stages.STAGES if s.agent != "evaluator")
    with pytest.raises(ValueError, match=r"ablate \['evaluator'\]: no stage of the chain runs that agent"):
        stages.chain_for(BackboneSettings(ablate=["evaluator"]), registry)


# ---------------------------------------------------------------- C2: an evaluator that did not run reads n/a
def _resolved(action: str = "keep", schema_status: str = "aligned", **extra) -> ResolvedRow:
    return ResolvedRow(
        doc_key="2016-01-10_pmc4736972", triple_id="t1", summary_id="s:sum", segment_id="s", head_mention_id="m1",
        head_id="Compound::DB00675", head_name="tamoxifen", head_type="Chemical", relation="Negative_Correlation",
        tail_mention_id="m2", tail_id="Disease::DOID:1612", tail_name="breast cancer", tail_type="Disease",
        probability=0.55, evidence="Tamoxifen treats breast cancer.", head_kg_type="Compound",
        tail_kg_type="Disease", kg_relation="treats" if schema_status == "aligned" else None,
        metaedge="CtD" if schema_status == "aligned" else None, alignment_prob=0.9, schema_status=schema_status,
        conflict=False, contradicts=None, verdict="skipped", action=action, **extra)


def test_evaluated_rows_take_none_scores_and_an_evidence_score():
    (row,) = unevaluated([_resolved()])
    assert (row.confidence, row.clarity, row.relevance, row.score) == (None, None, None, None)
    assert row.accepted and row.evidence_score == 0.55, "no evaluator: the extractor's p is the evidence"
    assert unevaluated([_resolved(action="replace")])[0].accepted
    assert not unevaluated([_resolved(action="review")])[0].accepted
    assert not unevaluated([_resolved(action="keep", schema_status="review")])[0].accepted
    judged = EvaluatedRow(**_resolved().model_dump(), confidence=0.8, clarity=0.7, relevance=0.6, score=0.7,
                          accepted=True)
    assert judged.evidence_score == 0.7, "the evaluator's score when it ran"
    with pytest.raises(ValueError, match="all set .* or all None"):
        EvaluatedRow(**_resolved().model_dump(), confidence=0.8, clarity=None, relevance=0.6, score=0.7,
                     accepted=False)
    with pytest.raises(ValueError, match="needs keep or replace, aligned"):
        EvaluatedRow(**_resolved(action="discard").model_dump(), confidence=None, clarity=None, relevance=None,
                     score=None, accepted=True)


def test_the_evaluated_table_allows_n_a_scores_but_not_a_half_judged_row_and_the_merge_gets_the_evidence_score():
    rows = unevaluated([_resolved(), _resolved(action="replace").model_copy(update={"triple_id": "t2"})])
    frame = records_to_frame(rows, EvaluatedRow)
    EvaluatedTable.validate(frame, lazy=True)
    no_mentions = records_to_frame([], stages.by_name("entities").row_model)
    triples, _nodes = collect_document("2016-01-10_pmc4736972", frame, no_mentions, "v1")
    assert [(t["triple_id"], t["score"], t["evidence_score"]) for t in triples] == [("t1", None, 0.55),
                                                                                     ("t2", None, 0.55)]
    half = frame.copy()
    half.loc[0, "confidence"] = 0.5
    with pytest.raises(pa_errors.SchemaErrors, match="judged_all_or_none"):
        EvaluatedTable.validate(half, lazy=True)
    wrong = frame.copy()
    wrong.loc[0, "action"] = "discard"
    with pytest.raises(pa_errors.SchemaErrors, match="accepted_only_if_kept_and_aligned"):
        EvaluatedTable.validate(wrong, lazy=True)


# ---------------------------------------------------------------- the local chains on a real paper
@pytest.fixture(scope="module")
def ablated(make_module_pipeline):
    backbones = {"local": BackboneConfig(), **{n: BackboneConfig(ablate=[a]) for n, a in ABLATIONS.items()}}
    p = make_module_pipeline(backbones=backbones, inbox_files=PAPER)
    assert runner.import_kg(p.defs, p.instance)
    keys, failed = runner.register_inbox(p.defs, p.instance)
    assert not failed and len(keys) == 1
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    return p, keys[0]


@pytest.fixture(scope="module")
def conflicted(ablated):
    """The same chains, then one more document: a BC5CDR dev abstract that contradicts a seed edge."""
    if not CDR_DEV.is_file():
        pytest.skip("the shared data folder with BC5CDR dev is not here")
    p, _key = ablated
    lines = [ln for ln in CDR_DEV.read_text("utf-8").splitlines() if re.match(rf"{CONFLICT_PMID}[|\t]", ln)]
    (p.inbox / f"cdr-{CONFLICT_PMID}.pubtator").write_text("\n".join(lines) + "\n\n", "utf-8")
    keys, failed = runner.register_inbox(p.defs, p.instance)
    assert not failed and len(keys) == 1 and keys[0].endswith(CONFLICT_PMID), keys
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    return p, keys[0]


def _records(p, ns: str, stage: str, key: str) -> list:
    return frame_to_records(p.storage.stage_store().read(ns, stage, key), stages.by_name(stage).row_model)


def _metadata(p, ns: str, stage: str, key: str) -> dict:
    return document_metadata(p, dg.AssetKey([ns, stage]), key)


@pytest.mark.parametrize("ns", sorted(ABLATIONS))
def test_every_stage_before_the_ablated_one_equals_the_full_chains_and_the_ablated_one_is_its_pass_through(ablated, ns):
    p, key = ablated
    target = ABLATED_STAGE[ABLATIONS[ns]]
    names = stages.names()
    for stage in names[: names.index(target)]:
        assert _records(p, ns, stage, key) == _records(p, "local", stage, key), f"{ns}/{stage}"
    upstream = stages.by_name(target).tables_read[0]
    mine = _records(p, ns, upstream, key)
    expected = {"summaries": lambda: unsummarized(mine), "resolved": lambda: unresolved(mine),
                "evaluated": lambda: unevaluated(mine)}[target]()
    assert _records(p, ns, target, key) == expected and expected, f"{ns}/{target} is the pass-through"
    assert _records(p, ns, target, key) != _records(p, "local", target, key), "and differs from the agent's table"
    for stage in names:
        meta = _metadata(p, ns, stage, key)
        assert meta["ablated"] is (stage == target) and meta["variant"] == ("ablated" if stage == target else "karma")
    node = p.defs.resolve_asset_graph().get(dg.AssetKey([ns, target]))
    assert node.description.startswith("ABLATED") and node.parent_keys == \
        {dg.AssetKey([ns, r]) if r != stages.SEED_KG else dg.AssetKey(r) for r in stages.by_name(target).reads}


def test_without_the_summarizer_extraction_reads_the_kept_segments_whole(ablated):
    p, key = ablated
    segments = [s for s in _records(p, "local", "segments", key) if s.kept]
    summaries = _records(p, "local-no-summarizer", "summaries", key)
    assert [s.text for s in summaries] == [s.text.strip() for s in segments]
    assert all(s.n_sentences_in == s.n_sentences_out for s in summaries)
    condensed = _records(p, "local", "summaries", key)
    assert sum(s.n_sentences_out for s in condensed) < sum(s.n_sentences_out for s in summaries)


def test_without_conflict_resolution_contradictions_are_not_looked_for_and_the_evaluator_still_runs(conflicted):
    p, key = conflicted
    full = {r.triple_id: r for r in _records(p, "local", "resolved", key)}
    skipped = {r.triple_id: r for r in _records(p, "local-no-conflict-resolution", "resolved", key)}
    assert set(full) == set(skipped)
    clashes = [r for r in full.values() if r.conflict]
    assert [(r.head_name, r.kg_relation, r.tail_name, r.against) for r in clashes] == [
        ("L-DOPA", "causes", "Parkinson's disease", "kg")], "the full chain's CRA meets the seed edge"
    assert clashes[0].contradicts == "Compound::DB01235 -palliates-> Disease::DOID:14330"
    # and does not keep it: the seed edge (0.9) leads by the margin -> discard, or is within it -> review. Which one
    # is the paper's sampling confidence: 3 of 5 samples on one machine (CI), 4 of 5 on another, whose trained
    # relation model put the fourth sample 0.03 over theta_r
    clash, params = clashes[0], KarmaParams()
    close = clash.against_confidence - clash.sample_confidence < params.conflict_replace_margin - 1e-9
    assert clash.action == ("review" if close else "discard"), clash.adjudication
    assert ("too close to call" in clash.adjudication) is close
    assert {r.verdict for r in skipped.values()} == {"skipped"} and not any(r.conflict for r in skipped.values())
    full_ev = {r.triple_id: r for r in _records(p, "local", "evaluated", key)}
    ev = {r.triple_id: r for r in _records(p, "local-no-conflict-resolution", "evaluated", key)}
    for tid, row in ev.items():  # the evaluator judged the same triples alike; only CRA's actions differ
        assert (row.confidence, row.clarity, row.relevance, row.score) == pytest.approx(
            (full_ev[tid].confidence, full_ev[tid].clarity, full_ev[tid].relevance, full_ev[tid].score))
        if full[tid].action == skipped[tid].action:
            assert row.accepted == full_ev[tid].accepted
    # what CRA changed (here the one triple it discarded; anything it queued or replaced likewise) is kept without it,
    # and then only the evaluator decides
    changed = [tid for tid in ev if full[tid].action != skipped[tid].action]
    assert changed == [clashes[0].triple_id]
    # the learned evaluator's operating point (backbones/local/correctness.py) at the default admission precision
    threshold = correctness.load().threshold_for(KarmaParams().admission_precision)
    for tid in changed:
        assert full[tid].action in ("discard", "review", "replace") and skipped[tid].action == "keep", tid
        admitted = ev[tid].schema_status == "aligned" and ev[tid].correctness >= threshold
        assert ev[tid].accepted == (admitted and ev[tid].admission.startswith("admitted")), tid
        assert ev[tid].accepted or ev[tid].admission, "a triple held back says why"
        if full[tid].action != "replace":
            assert not full_ev[tid].accepted, "the full chain accepts nothing its CRA discarded or queued"
    assert sum(r.accepted for r in ev.values()) >= sum(r.accepted for r in full_ev.values())


def test_without_the_evaluator_no_theta_filters_and_the_scores_read_n_a(ablated):
    p, key = ablated
    ev = p.storage.stage_store().read("local-no-evaluator", "evaluated", key)
    assert ev[["confidence", "clarity", "relevance", "score"]].isna().all().all()
    resolved = p.storage.stage_store().read("local-no-evaluator", "resolved", key)
    kept = resolved["action"].isin(["keep", "replace"]) & (resolved["schema_status"] == "aligned")
    assert list(ev["accepted"]) == list(kept) and kept.any()
    full = p.storage.stage_store().read("local", "evaluated", key)
    # the full chain: the calibrated P(right) at the operating point decides among what the others let by (and the
    # precision rules, which say so in `admission`); its evidence score is that probability
    threshold = correctness.load().threshold_for(KarmaParams().admission_precision)
    gate = full["action"].isin(["keep", "replace"]) & (full["schema_status"] == "aligned")
    admitted = gate & (full["correctness"] >= threshold) & full["admission"].str.startswith("admitted")
    assert list(full["accepted"]) == list(admitted)
    assert (full.loc[gate & ~full["accepted"], "admission"].str.len() > 0).all()
    assert (full["evidence_score"] == full["correctness"]).all()
    assert full["accepted"].sum() <= ev["accepted"].sum() and full["score"].notna().all()
    # what reinforcement aggregates: the MedKGent sampling confidence when sampled, else the extractor's p
    assert (ev["evidence_score"] == ev["sample_confidence"].fillna(ev["probability"])).all()


# ---------------------------------------------------------------- an ablated LLM backbone and the response cache
def _pubtator() -> str:
    """An abstract of eight sentences: the scripted summarizer keeps six, so its summary is not the segment."""
    title = "Tamoxifen and breast cancer."
    abstract = " ".join(["Tamoxifen reduced the risk of breast cancer in women."] * 7
                        + ["Cisplatin induced nephrotoxicity in two patients."])
    return f"900002|t|{title}\n900002|a|{abstract}\n\n"


def test_an_ablated_llm_backbone_answers_its_shared_calls_from_the_full_chains_cache(make_pipeline):
    with FakeOpenAIServer() as srv:
        def llm(**kw) -> BackboneConfig:
            return BackboneConfig(kind="litellm", model="openai/karma-scripted", api_base=srv.url, api_key=FAKE_KEY,
                                  **kw)

        full_only = {"scripted": llm()}
        p = make_pipeline(backbones=full_only)
        (p.inbox / "tiny.pubtator").write_text(_pubtator())
        assert runner.import_kg(p.defs, p.instance)
        keys, _ = runner.register_inbox(p.defs, p.instance)
        assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
        first = len(srv.requests)
        assert first > 0 and {"reader", "summarizer", "evaluator_confidence"} <= {agent_of(r) for r in srv.requests}

        everyone = {**full_only, "scripted-no-evaluator": llm(ablate=["evaluator"]),
                    "scripted-no-cr": llm(ablate=["conflict_resolution"]),
                    "scripted-no-summarizer": llm(ablate=["summarizer"])}
        defs = build_definitions(backbones=everyone, storage=p.storage)
        assert not runner.run_documents(defs, p.instance, keys, log=lambda _m: None)
        new = {agent_of(r) for r in srv.requests[first:]}
        # the evaluator and CRA ablations ask nothing the full chain did not ask (same model, prompts, inputs);
        # without the summarizer, only the agents after it read other text and ask anew
        assert new <= {"entity_extraction", "relation_extraction", "schema_alignment", "conflict_resolution",
                       "evaluator_confidence", "evaluator_clarity", "evaluator_relevance"}
        assert "entity_extraction" in new, "the no-summarizer chain's EEA reads the unsummarized segments"
        ledger = Ledger(ledger_path(p.storage.root()))
        for ns in ("scripted-no-evaluator", "scripted-no-cr"):
            totals = ledger.totals(["backbone"], backbone=ns)
            assert totals[0].calls == 0 and totals[0].cache_hits > 0, ns
        no_sum = {t.group["agent"]: t for t in ledger.totals(["agent"], backbone="scripted-no-summarizer")}
        assert no_sum["reader"].calls == 0 and no_sum["reader"].cache_hits > 0
        assert no_sum["summarizer"].calls == 0 and no_sum["summarizer"].cache_hits == 0, "ablated: never asked"
        assert _records_of(p, "scripted-no-evaluator", keys[0]) and all(
            r.score is None for r in _records_of(p, "scripted-no-evaluator", keys[0]))


def _records_of(p, ns: str, key: str) -> list:
    return frame_to_records(p.storage.stage_store().read(ns, "evaluated", key), EvaluatedRow)


def test_the_comparison_lists_each_ablation_as_its_own_backbone():
    defs = build_definitions(backbones={"local": BackboneConfig(),
                                        **{n: BackboneConfig(ablate=[a]) for n, a in ABLATIONS.items()}})
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    for ns in ["local", *ABLATIONS]:
        assert {f"{ns}/{s}" for s in stages.STAGE_NAMES} | {f"{ns}/knowledge_graph", f"{ns}/kg_metrics"} <= keys
    assert re.search(r"kg_increment__local_no_evaluator", " ".join(j.name for j in defs.jobs))


def test_without_the_evaluator_the_comparison_says_the_confidence_is_no_probability(tmp_path):
    """An ablated evaluator calibrates nothing: the comparison's confidence column must not call the row's
    confidence the shipped evaluator's calibrated probability, whatever the backbone ships."""
    from karma_dagster.resources.backbones import BackbonesResource
    from karma_dagster.resources.storage import KarmaStorageResource

    resource = BackbonesResource(backbones={"local-no-evaluator": BackboneConfig(ablate=["evaluator"])})
    state = resource.calibration_state("local-no-evaluator", KarmaStorageResource(data_dir=str(tmp_path)))
    assert state.startswith("uncalibrated") and "evaluator ablated" in state
