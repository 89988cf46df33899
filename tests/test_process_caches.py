"""What a process keeps across `services.clear()`: objects that are a pure function of content it checks again on
each use (the dictionary NER of a lexicon fingerprint, a trained model's file by its bytes), so a cleared process
answers as a new one would, without building them again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import joblib
import pytest

from karma_dagster.backbones.local.model_cache import load_or_train
from karma_dagster.dictionary.lexicon import Lexicon
from karma_dagster.runtime import services
from karma_dagster.runtime.paths import DataPaths

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
SENTENCE = "Levofloxacin-induced thrombocytopenia in a patient with hypertension."


@dataclass
class Toy:
    """A model stand-in that pickles by name (module-level)."""

    value: int


def test_a_cleared_process_keeps_the_ner_of_an_unchanged_lexicon_and_reads_texts_anew(tmp_path, shared_cache):
    data = DataPaths(tmp_path / "karma", cache_dir=shared_cache)
    services.import_seed_kg(data, SEED / "nodes.tsv", SEED / "edges.sif.gz", "hetionet", 0.9)
    first = services.dictionary(data)
    mentions = first.recognize(SENTENCE)
    assert {m.text for m in mentions} >= {"Levofloxacin", "thrombocytopenia", "hypertension"}

    services.clear()
    again = services.dictionary(data)
    assert again is first  # the same lexicon content: not built again
    assert again._recall(SENTENCE) is None  # but what it read before the clear is read anew
    assert again.recognize(SENTENCE) == mentions

    other = services._ner_for(Lexicon(first.lexicon.table, fingerprint="another-seed"))
    assert other is not first and other.lexicon.fingerprint == "another-seed"  # other content: its own NER


def test_a_model_file_is_unpickled_once_per_content_and_again_when_rewritten(tmp_path):
    path = tmp_path / "toy.joblib"
    trained, from_cache = load_or_train(path, Toy, "toy model", lambda: Toy(1))
    assert from_cache is False and path.is_file()

    def must_not_train() -> Toy:
        raise AssertionError("trained again although the file holds the model")

    same, from_cache = load_or_train(path, Toy, "toy model", must_not_train)
    assert from_cache is True and same is trained  # the same bytes: the object already made

    joblib.dump(Toy(2), path)  # another model copied into place (same size, possibly the same clock tick)
    other, from_cache = load_or_train(path, Toy, "toy model", must_not_train)
    assert from_cache is True and other is not trained and other.value == 2

    path.write_bytes(b"\0" * path.stat().st_size)  # damaged in place: set aside and trained, never the old object
    retrained, from_cache = load_or_train(path, Toy, "toy model", lambda: Toy(3))
    assert from_cache is False and retrained.value == 3
    assert path.with_name(path.name + ".corrupt").is_file()


@pytest.fixture(autouse=True)
def _forget():
    yield
    services.clear()
