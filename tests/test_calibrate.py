"""`karma calibrate`: an LLM backbone's evaluator scores fitted to P(right) on real gold (BioRED's training split,
judged as `karma gold-eval` judges), stored for the backbone's settings and used by its evaluator from then on; a
backbone never calibrated (or calibrated for other settings) says so and holds its triples for review.

The backbone here is an LLM behind the scripted OpenAI-compatible server on 127.0.0.1 (tests/fake_openai_server.py):
its answers are deterministic, so the fitted map is about its scores, not about any real model's skill (the
shipped SmolLM2-135M proposes no entity pair on gold abstracts, so there is nothing to calibrate it on:
docs/benchmarks.md)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any
from pathlib import Path

import pandas as pd
import pytest

from karma_dagster.backbones.calibration_fit import fit_scale
from karma_dagster.backbones.llm.calibration import CalibrationError, ScoreCalibration, load, path_for, save, stamp
from karma_dagster.cli import main
from karma_dagster.review.karma_items import held_back_items
from karma_dagster.metrics.gold_run import KGView, predict_document, read_gold
from karma_dagster.runtime import services
from karma_dagster.runtime.config import read_backbones
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "data" / "corpora" / "biored-train.pubtator.gz"  # shipped: BioRED's training split
NO_RELATIONS = REPO / "data" / "corpora" / "ncbi-disease-train.pubtator.gz"  # mentions only
N_DOCS = 8


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> DataPaths:
    root = tmp_path_factory.mktemp("calibrate")
    (root / "karma").mkdir()
    (root / "karma" / "cache").symlink_to(shared_cache)  # the session's lexicon and models
    paths = DataPaths(root / "karma")
    services.clear()
    seed = REPO / "data" / "seed_kg"
    services.import_seed_kg(paths, seed / "nodes.tsv", seed / "edges.sif.gz", "hetionet", 0.9)
    yield paths
    services.clear()


def gold_reader(docs: int) -> Callable[[dict[str, Any]], str]:
    """The scripted model, with the entity vocabulary of the first `docs` gold abstracts (a model that finds their
    entities; its relations are still cue words, so the gold judges some triples right and others wrong)."""
    from fake_openai_server import agent_of, karma_responder

    vocabulary = {m.text: m.type for d in read_gold(TRAIN)[:docs] for m in d.mentions}

    def answer(request: dict[str, Any]) -> str:
        if agent_of(request) != "entity_extraction":
            return karma_responder(request)
        text = request["messages"][-1]["content"].split("<text>")[1].split("</text>")[0]
        found = [{"text": t, "type": k} for t, k in vocabulary.items()
                 if re.search(rf"(?<!\w){re.escape(t)}(?!\w)", text)]
        return json.dumps({"entities": found})
    return answer


def _project(root: Path, url: str, monkeypatch: pytest.MonkeyPatch, model: str = "openai/fake-model",
             extra: str = "") -> None:
    root.mkdir(exist_ok=True)
    (root / "karma.yaml").write_text("karma_project: 1\n")
    (root / "backbones.yaml").write_text(
        "backbones:\n  local: {kind: local}\n"
        f"  fake: {{kind: litellm, model: {model}, api_base: '{url}', max_retries: 0, timeout: 20{extra}}}\n")
    monkeypatch.setenv("KARMA_PROJECT", str(root))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-karma-test-calibrate")


def _fake(data: DataPaths):  # noqa: ANN202 - the configured LLM backbone, built as a run builds it
    return services.backbone("fake", read_backbones().backbones["fake"].keyed_settings("fake"), data)


def _integrable(backbone, data: DataPaths, docs: int = 3):  # noqa: ANN001, ANN202 - evaluated rows of gold docs
    kg = KGView(schema=services.kg_schema(), kind_of=services.kg_kind_lookup(data),
                existing=services.existing_relations_lookup(data, "fake"))
    frames = []
    for doc in read_gold(TRAIN)[:docs]:
        _m, _t, judged = predict_document(doc, backbone, services.dictionary(data), services.entity_index(data),
                                          KarmaParams(), kg, integrable=True,
                                          identity=services.identity_index(data, "fake"))
        frames.append(judged.triples)
    rows = [r for f in frames for r in f.to_dict(orient="records")]
    assert rows, "the scripted model extracts integrable triples from BioRED's first abstracts"
    return rows


def test_the_scale_is_fitted_out_of_fold_by_document_and_refuses_what_it_cannot_fit():
    # 40 papers: a higher score is right more often; the out-of-fold map learns that, never from its own paper
    scores = [i / 80 for i in range(80)]
    right = [i % 4 != 0 if i >= 40 else i % 4 == 0 for i in range(80)]
    fit = fit_scale(scores, right, [f"doc{i // 2}" for i in range(80)])
    assert (fit.examples, fit.right, fit.documents, fit.folds) == (80, 40, 40, 5)
    assert fit.calibrate(0.9) > 0.6 > 0.3 > fit.calibrate(0.1)
    assert all(fit.floor <= p <= fit.cap for p in fit.oof) and len(fit.oof) == 80
    assert [p.threshold for p in fit.curve] == sorted(p.threshold for p in fit.curve)
    with pytest.raises(ValueError, match="all right"):
        fit_scale([0.1, 0.9], [True, True], ["a", "b"])
    with pytest.raises(ValueError, match="one document"):
        fit_scale([0.1, 0.9], [True, False], ["a", "a"])


def test_karma_calibrate_fits_stores_and_the_evaluator_then_decides_by_the_probability(
        seeded, fresh_server, tmp_path, monkeypatch, capsys):
    _project(tmp_path / "proj", fresh_server.url, monkeypatch)
    monkeypatch.setattr(fresh_server, "responder", gold_reader(N_DOCS))
    before = _fake(seeded)
    assert before.calibration_state() == "uncalibrated: held for review"
    held = _integrable(before, seeded)
    assert not any(r["accepted"] for r in held), "an uncalibrated LLM admits nothing by default"
    assert all(r["admission"].startswith("held for review: backbone 'fake' is uncalibrated") for r in held)
    items = held_back_items("fake", "pmid-x", pd.DataFrame(held))  # what is not admitted goes to review, never away
    assert len(items) == len(held) and all("is uncalibrated" in i.note for i in items)

    assert main(["calibrate", "--backbone", "fake", "--pubtator", str(TRAIN), "--limit", str(N_DOCS),
                 "--data-dir", str(seeded.root)]) == 0
    out = capsys.readouterr().out
    said = re.search(rf"fake on biored-train\.pubtator\.gz: {N_DOCS} documents, (\d+) triples judged \((\d+) right\)",
                     out)
    assert said, out
    assert "ECE of the raw scores" in out and "admission precision 0.75" in out
    assert "stored: calibration/fake.json" in out
    stored = path_for(seeded.calibration_dir, "fake")
    text = stored.read_text()
    assert str(REPO) not in text and str(tmp_path) not in text, "no machine path in the stored file"
    cal = ScoreCalibration.model_validate(json.loads(text))
    assert (cal.examples, cal.right) == (int(said[1]), int(said[2])) and cal.gold == "biored-train.pubtator.gz"
    assert cal.documents <= N_DOCS and cal.model == "openai/fake-model" and cal.version.startswith("cal-")

    after = _fake(seeded)  # built anew: the stored calibration is read when a backbone is built
    assert after is not before and after.calibration_state().startswith("calibrated on biored-train.pubtator.gz")
    assert after.calibration_fingerprint == cal.fingerprint
    assert after.prompt_id("evaluator").endswith(f"@{cal.version}")
    assert before.prompt_id("evaluator").endswith("@uncalibrated")
    threshold = after.admission_threshold(KarmaParams().admission_precision)
    for r in _integrable(after, seeded):
        assert r["correctness"] == pytest.approx(cal.calibrate(r["score"]))
        assert r["evidence_score"] == r["correctness"], "the KG aggregates the probability, not the raw score"
        if r["accepted"]:
            assert r["correctness"] >= threshold and r["admission"].startswith("admitted: P(right)")
        else:  # below the operating point, or a precision rule (negation, contrast) held it back
            assert r["correctness"] < threshold or not r["admission"].startswith(("admitted", "below"))

    # the model behind the name changed: the calibration no longer applies, and the backbone says why
    _project(tmp_path / "proj", fresh_server.url, monkeypatch, model="openai/another-model")
    other = _fake(seeded)
    assert other.score_calibration is None
    assert other.calibration_state().startswith(
        "uncalibrated (calibrated on biored-train.pubtator.gz for another model")


def test_uncalibrated_admission_theta_keeps_karmas_rule_and_says_it_is_uncalibrated(
        seeded, fresh_server, tmp_path, monkeypatch):
    _project(tmp_path / "proj", fresh_server.url, monkeypatch, model="openai/theta-model",
             extra=", uncalibrated_admission: theta")
    backbone = _fake(seeded)
    state = backbone.calibration_state()  # (the module's data folder holds another model's calibration of "fake")
    assert state.startswith("uncalibrated") and state.endswith(": admitted by Theta")
    theta = KarmaParams().integrate_threshold
    rows = _integrable(backbone, seeded, docs=2)
    assert all(r["accepted"] == (r["score"] >= theta) for r in rows) and all(math.isnan(r["correctness"]) for r in rows)


def test_bad_input_is_refused_in_one_line_and_nothing_is_stored(seeded, fresh_server, tmp_path, monkeypatch, capsys):
    _project(tmp_path / "proj", fresh_server.url, monkeypatch, model="openai/bad-input-model")
    data = ["--data-dir", str(seeded.root)]
    assert main(["calibrate", "--backbone", "local", "--pubtator", str(TRAIN), *data]) == 2
    assert "the local backbone's evaluator is its shipped learned model" in capsys.readouterr().err
    assert main(["calibrate", "--backbone", "nope", "--pubtator", str(TRAIN), *data]) == 2
    assert "--backbone nope: not in backbones.yaml" in capsys.readouterr().err
    assert main(["calibrate", "--backbone", "fake", "--pubtator", str(tmp_path / "gone.PubTator"), *data]) == 2
    assert "--pubtator gone.PubTator: no such file" in capsys.readouterr().err
    assert main(["calibrate", "--backbone", "fake", "--pubtator", str(NO_RELATIONS), "--limit", "5", *data]) == 2
    assert "annotates no relations" in capsys.readouterr().err
    assert main(["calibrate", "--backbone", "fake", "--pubtator", str(TRAIN), "--limit", "1", *data]) == 2
    err = capsys.readouterr().err
    assert re.search(r"biored-train\.pubtator\.gz: \d triples could be judged \(\d extracted\); at least 10 are "
                     r"needed to fit a calibration \(use more documents\); nothing stored$", err.rstrip()), err
    assert not path_for(seeded.calibration_dir, "fake").exists() or \
        json.loads(path_for(seeded.calibration_dir, "fake").read_text())["model"] != "openai/bad-input-model"

    # a calibration file that cannot be read is an error naming it, never a silent "uncalibrated"
    broken = path_for(seeded.calibration_dir, "fake")
    kept = broken.read_bytes() if broken.exists() else None
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text("{not json")
    try:
        with pytest.raises(CalibrationError, match=r"fake\.json \(calibration of backbone 'fake'\): not a usable"):
            _fake(seeded)
    finally:
        if kept is None:
            broken.unlink()
        else:
            broken.write_bytes(kept)


def test_a_calibration_under_the_shared_storage_url_is_read_by_a_worker_with_its_own_data_folder(tmp_path):
    """With KARMA_STORAGE_URL set, the calibration lives there beside the stage tables: a worker on another machine
    (its own data folder, the same URL) builds the backbone calibrated, as the machine that ran `karma calibrate`."""
    scores = [i / 40 for i in range(40)]
    fit = fit_scale(scores, [i % 3 != 0 if i >= 20 else i % 3 == 0 for i in range(40)],
                    [f"doc{i // 2}" for i in range(40)])
    cal = ScoreCalibration(**fit.model_dump(include={"calibration_x", "calibration_y", "cap", "floor", "curve"}),
                           backbone="fake", fingerprint="f" * 16, model="openai/fake-model", gold="gold.PubTator",
                           gold_sha256="0" * 64, fitted_on="2026-12-07", examples=fit.examples, right=fit.right,
                           documents=fit.documents, folds=fit.folds, ece_raw=0.2, ece_oof=0.1)
    url = f"memory://karma-calibration-{tmp_path.name}"
    here, there = DataPaths(tmp_path / "here", storage_url=url), DataPaths(tmp_path / "there", storage_url=url)
    assert stamp(there.calibration_dir, "fake") is None
    save(here.calibration_dir, cal)
    assert not (tmp_path / "here" / "calibration").exists(), "stored under the URL, not on this machine's disk"
    got, label = load(there.calibration_dir, "fake", "f" * 16)
    assert got is not None and got.model_dump(exclude={"version"}) == cal.model_dump(exclude={"version"})
    assert label.startswith("calibrated on gold.PubTator") and got.version.startswith("cal-")
    assert stamp(there.calibration_dir, "fake") is not None
    # on the local disk when no URL is set: each data folder its own
    alone = DataPaths(tmp_path / "alone", storage_url="")
    assert load(alone.calibration_dir, "fake", "f" * 16) == (None, "uncalibrated")
