"""The local relation models do not depend on PYTHONHASHSEED, and a cached model is only reused for its own data.

Fresh clones of one commit accepted different triples (local 118 vs 133) because the document-level model's
training pairs came in the iteration order of a frozenset of ids (a composite mention, `D001,D002`): the order
of SGD's examples, hence its coefficients and thresholds, followed the hash seed. Here a slice of the shipped
BioRED train trains both models in two subprocesses under different hash seeds; their coefficients, thresholds
and predictions must be identical.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from karma_dagster.backbones.local.doc_relations import DocRelationModel
from karma_dagster.backbones.local.relations import DEFAULT_BIORED
from karma_dagster.ingest.pubtator import read_pubtator

N_TRAIN = 150  # abstracts of BioRED train that train the models (several hold composite-id mentions)
N_PREDICT = 20  # the following abstracts, predicted from their gold entities

_RUN = r"""
import hashlib, json, sys
from pathlib import Path
from karma_dagster.backbones.local.doc_relations import DocRelationModel, gold_entities
from karma_dagster.backbones.local.relations import LocalRelationModel
from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.schemas.records import MentionSpan

train, held, cache = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
doc_model = DocRelationModel(cache, biored_path=train)
pair_model = LocalRelationModel(cache, biored_path=train)
out = {"key": doc_model.cache_key}
for name, fitted in (("doc", doc_model.fitted), ("pair", pair_model.fitted)):
    for r, m in sorted(fitted.models.items()):
        out[f"{name}:{r}"] = (m if isinstance(m, float) else
                              hashlib.sha256(m.coef_.tobytes() + m.intercept_.tobytes()).hexdigest())
out["theta"] = doc_model.fitted.theta_cv
preds = []
for doc in read_pubtator(held):
    ents = gold_entities(doc)
    spans = [[MentionSpan(start=s.start, end=s.end, text=doc.text[s.start:s.end], type=e.type,
                          vocab_id=next(iter(e.ids))) for s in e.spans] for e in ents]
    pairs = [(i, j) for i in range(len(ents)) for j in range(i + 1, len(ents))]
    preds.append([{r: round(p, 12) for r, p in sorted(probs.items())}
                  for probs in doc_model.probabilities(doc.text, spans, pairs)])
    preds.append([sorted(e.ids) for e in ents])
out["predictions"] = preds
print(json.dumps(out, sort_keys=True))
"""


def _slice(dst: Path, first: int, count: int) -> Path:
    """Abstracts first .. first+count-1 of the shipped BioRED train as a PubTator file."""
    blocks, block = [], []
    with gzip.open(DEFAULT_BIORED, "rt", encoding="utf-8") as fh:
        for line in fh:
            block.append(line)
            if not line.strip():
                blocks.append("".join(block))
                block = []
                if len(blocks) == first + count:
                    break
    dst.write_text("".join(blocks[first:first + count]), encoding="utf-8")
    return dst


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("repro")
    return _slice(d / "train.pubtator", 0, N_TRAIN), _slice(d / "held.pubtator", N_TRAIN, N_PREDICT)


def _run_all(seeds: tuple[str, ...], train: Path, held: Path, caches: Path) -> list[dict]:
    """Train and predict once per hash seed, each in its own subprocess with its own fresh cache (the lexicon the
    models' KG features come from built there too), all at once: they share nothing but the input files."""
    procs = [subprocess.Popen([sys.executable, "-c", _RUN, str(train), str(held), str(caches / f"cache{seed}")],
                              env={**os.environ, "PYTHONHASHSEED": seed}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in seeds]
    outs = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=600)
            assert proc.returncode == 0, stderr[-3000:]
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for proc in procs:  # a failed or timed-out one: the others are not left running
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outs


def test_the_slice_exercises_composite_ids(corpora):
    """The seed once mattered through composite-id mentions: the training slice must hold some."""
    train, _held = corpora
    composite = [m for d in read_pubtator(train) for m in d.mentions if "," in m.identifier]
    assert len(composite) >= 3


@pytest.fixture(scope="module")
def seed_runs(corpora, tmp_path_factory) -> tuple[dict, dict, Path]:
    """The runs under hash seeds 1 and 2, and the folder of their caches (cache1, cache2)."""
    train, held = corpora
    caches = tmp_path_factory.mktemp("seed-caches")
    one, two = _run_all(("1", "2"), train, held, caches)
    return one, two, caches


def test_models_and_predictions_do_not_depend_on_the_hash_seed(seed_runs):
    one, two, _caches = seed_runs
    assert one["key"] == two["key"]
    assert one["theta"] == two["theta"]
    differing = sorted(k for k in one if k.startswith(("doc:", "pair:")) and one[k] != two[k])
    assert not differing, f"coefficients differ between hash seeds: {differing}"
    assert one["predictions"] == two["predictions"]
    assert any(p for doc in one["predictions"][::2] for probs in doc for p in probs.values())  # it predicted


def test_a_cached_model_is_not_reused_for_other_training_data(corpora, seed_runs, tmp_path):
    train, _held = corpora
    cache = tmp_path / "cache"
    # the lexicon a seed run built (content-addressed, the same inputs), so only the relation models train here:
    # building it again was two thirds of a training's time
    shutil.copytree(seed_runs[2] / "cache1" / "lexicon", cache / "lexicon")
    first = DocRelationModel(cache, biored_path=train)
    first.fitted
    assert first.loaded_from_cache is False and first.fitted.cache_key == first.cache_key
    again = DocRelationModel(cache, biored_path=train)
    again.fitted
    assert again.loaded_from_cache is True

    other_data = tmp_path / "other.pubtator"
    text = train.read_text(encoding="utf-8")
    other_data.write_text(text.replace("\tPositive_Correlation\t", "\tAssociation\t", 5), encoding="utf-8")
    other = DocRelationModel(cache, biored_path=other_data)
    assert other.cache_key != first.cache_key  # other bytes, other key

    # the first model's file put where the other data's model belongs: set aside, retrained, never trusted
    shutil.copy(cache / f"docrel-{first.cache_key}.joblib", cache / f"docrel-{other.cache_key}.joblib")
    other.fitted
    assert other.loaded_from_cache is False and other.fitted.cache_key == other.cache_key
    assert other.fitted.n_examples == first.fitted.n_examples  # same pairs, other labels
