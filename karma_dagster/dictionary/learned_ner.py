"""The learned NER (trained by scripts/train_ner.py) as the first component of the dictionary's pipeline.

It writes `doc.ents`; the lexicon ruler (dictionary/ner.py) then unions them with the dictionary's hits. A missing
or damaged model folder is an error naming it: the model ships with the project, so silently running without it
would change every figure.
"""

from __future__ import annotations

from pathlib import Path

from karma_dagster.dictionary.ner_training import PROVENANCE, NerProvenance, ner_config


class LearnedNerError(RuntimeError):
    """The learned NER's folder is missing or does not hold a model trained by scripts/train_ner.py."""


def read_provenance(model_dir: Path) -> NerProvenance:
    path = Path(model_dir) / PROVENANCE
    if not path.is_file():
        raise LearnedNerError(f"learned NER {model_dir}: no {PROVENANCE} (train it: python scripts/train_ner.py)")
    try:
        return NerProvenance.model_validate_json(path.read_text())
    except ValueError as exc:
        raise LearnedNerError(f"learned NER {model_dir}: {PROVENANCE} is not a training record ({exc})") from exc


def load_learned(nlp, model_dir: Path) -> NerProvenance:
    """Add the trained `ner` to `nlp` (built by make_nlp: the tokenizer it was trained with) and return its
    provenance."""
    prov = read_provenance(model_dir)
    ner = nlp.add_pipe("ner", name="learned_ner", config=ner_config(prov.config))
    try:
        ner.from_disk(Path(model_dir) / "ner")
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: named, not a bare msgpack error
        raise LearnedNerError(f"learned NER {model_dir}: cannot load its ner/ folder ({type(exc).__name__}: {exc})"
                              ) from exc
    return prov

