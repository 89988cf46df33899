"""Training the learned NER (spaCy's transition-based `ner`) on the shipped training corpora.

The dictionary finds the names it lists; the model finds names by their shape and context, so the two are unioned
(dictionary/ner.py). Three corpora annotate different types (BioRED six, BC5CDR chemicals and diseases, NCBI
diseases): a BC5CDR gene is not an "O" token, so the tokens of a dictionary hit of a type the corpus does not
annotate are left *missing* in its examples (spaCy's "-" tag) instead of taught as outside any entity.

Reproducible: the corpora's sha256, the seed, the hyper-parameters and the spaCy/thinc versions go into
`provenance.json` beside the model; the epoch kept is the best on a seeded tenth of each training corpus (dev is
never seen). Run: `python scripts/train_ner.py` (see there for the time it takes).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel, Field

from karma_dagster.dictionary.lexicon import CORPORA, CORPUS_TYPE
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.runtime.paths import data_file

LABELS: tuple[str, ...] = ("Gene", "Disease", "Chemical", "Variant", "Species", "CellLine")
MODEL_DIR = data_file("models", "ner")
PROVENANCE = "provenance.json"


class NerTrainingConfig(BaseModel):
    """What a learned NER is trained with (all of it recorded in the model's provenance)."""

    seed: int = 13
    max_epochs: int = Field(30, ge=1)
    patience: int = Field(4, ge=1, description="epochs without a better held-out F1 before stopping")
    dropout: float = Field(0.2, ge=0, lt=1)
    holdout: float = Field(0.1, gt=0, lt=0.5, description="share of each corpus held out to choose the epoch")
    width: int = Field(96, ge=16, description="tok2vec width (HashEmbedCNN)")
    depth: int = Field(4, ge=1)
    embed_size: int = Field(4000, ge=500, description="hash-embedding rows per attribute (NORM, PREFIX, SUFFIX, SHAPE)")
    batch_words: int = Field(1000, ge=100, description="words per update batch")
    limit: int | None = Field(None, ge=1, description="documents per corpus (a quick run; the shipped model uses all)")


class NerProvenance(BaseModel):
    version: str
    corpora: dict[str, str]  # file name -> sha256
    documents: dict[str, int]  # file name -> documents trained on (after the holdout)
    config: NerTrainingConfig
    epochs_run: int
    best_epoch: int
    holdout_f1: float
    holdout_per_type: dict[str, float]
    seconds: float
    spacy: str
    thinc: str


def sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def model_version(provenance: NerProvenance) -> str:
    """A short name for the model: what caches keyed on the NER must change with."""
    blob = json.dumps({"corpora": provenance.corpora, "config": provenance.config.model_dump(),
                       "best_epoch": provenance.best_epoch}, sort_keys=True)
    return "ner-" + hashlib.sha256(blob.encode()).hexdigest()[:12]


def ner_config(cfg: NerTrainingConfig) -> dict:
    return {"model": {
        "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner", "extra_state_tokens": False,
        "hidden_width": 64, "maxout_pieces": 2, "use_upper": True, "nO": None,
        "tok2vec": {"@architectures": "spacy.HashEmbedCNN.v2", "pretrained_vectors": None, "width": cfg.width,
                    "depth": cfg.depth, "embed_size": cfg.embed_size, "window_size": 1, "maxout_pieces": 3,
                    "subword_features": True},
    }}


def blank_pipeline(cfg: NerTrainingConfig):  # -> spacy.Language
    """The dictionary's tokenizer (make_nlp) with an untrained `ner`: training and use tokenize alike."""
    from karma_dagster.dictionary.lexicon import make_nlp

    nlp = make_nlp()
    ner = nlp.add_pipe("ner", config=ner_config(cfg))
    for label in LABELS:
        ner.add_label(label)
    return nlp


def corpus_examples(nlp, docs: Iterable[PubTatorDoc], annotated: frozenset[str],
                    other_hits: Callable[[str], list[tuple[int, int, str]]]) -> list:
    """spaCy Examples of one corpus: its gold spans (overlaps: the longest), and the tokens of a hit of a type the
    corpus does not annotate (`other_hits(text)` -> (start, end, type)) marked missing rather than outside."""
    from spacy.training import Example, offsets_to_biluo_tags

    out = []
    for d in docs:
        text = d.text
        doc = nlp.make_doc(text)
        spans = sorted({(m.start, m.end, CORPUS_TYPE[m.type]) for m in d.mentions if m.type in CORPUS_TYPE
                        and 0 <= m.start < m.end <= len(text)}, key=lambda s: (-(s[1] - s[0]), s[0]))
        kept: list[tuple[int, int, str]] = []
        for s in spans:  # nested / composite mentions: the longest, then the earliest
            if all(s[1] <= k[0] or k[1] <= s[0] for k in kept):
                kept.append(s)
        with warnings.catch_warnings():  # W030, once per such abstract: a span off the token boundaries is
            warnings.simplefilter("ignore", UserWarning)  # tagged "-" (missing), which is what it should be
            tags = offsets_to_biluo_tags(doc, sorted(kept))
        for start, end, typ in other_hits(text):
            if typ in annotated:
                continue
            for tok in doc:
                if tok.idx < end and start < tok.idx + len(tok) and tags[tok.i] == "O":
                    tags[tok.i] = "-"
        out.append(Example.from_dict(doc, {"entities": tags}))
    return out


def split_holdout(docs: list[PubTatorDoc], share: float, seed: int
                  ) -> tuple[list[PubTatorDoc], list[PubTatorDoc]]:
    """(documents to train on, the seeded share held out to choose the epoch and the union rule)."""
    order = sorted(docs, key=lambda d: d.pmid)
    random.Random(seed).shuffle(order)
    n = max(1, round(len(order) * share))
    return order[n:], order[:n]


def train_ner(out_dir: Path, cfg: NerTrainingConfig, corpora_dir: Path | None = None,
              other_hits: Callable[[str], list[tuple[int, int, str]]] | None = None,
              log: Callable[[str], None] = print) -> NerProvenance:
    """Train on every corpus of `CORPORA` in `corpora_dir` (default: the shipped data/corpora) and write the model
    and its provenance to `out_dir` (replaced only once training has finished)."""
    import shutil

    import spacy
    import thinc
    from spacy.util import fix_random_seed, minibatch

    corpora_dir = corpora_dir or data_file("corpora")
    hits = other_hits or (lambda _text: [])
    fix_random_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    nlp = blank_pipeline(cfg)
    train, held, hashes, counts = [], [], {}, {}
    for name, (fname, annotated) in CORPORA.items():
        path = corpora_dir / fname
        if not path.is_file():
            raise FileNotFoundError(f"training corpus {name}: {path.name} not found in {corpora_dir}")
        docs = read_pubtator(path)[: cfg.limit]
        if not docs:
            raise ValueError(f"training corpus {name}: {path.name} holds no PubTator documents")
        fit, hold = split_holdout(docs, cfg.holdout, cfg.seed)
        hashes[fname], counts[fname] = sha256(path), len(fit)
        train += corpus_examples(nlp, fit, annotated, hits)
        held += corpus_examples(nlp, hold, annotated, hits)
        log(f"{fname}: {len(fit)} documents to train on, {len(hold)} held out")
    t0 = time.perf_counter()
    optimizer = nlp.initialize(lambda: train)
    best = (-1.0, 0, b"", {})
    epoch = 0
    for epoch in range(1, cfg.max_epochs + 1):
        rng.shuffle(train)
        losses: dict[str, float] = {}
        for batch in minibatch(train, size=max(1, cfg.batch_words // 250)):
            nlp.update(batch, drop=cfg.dropout, sgd=optimizer, losses=losses)
        with nlp.select_pipes(enable=["ner"]):
            scores = nlp.evaluate(held)
        f1 = float(scores["ents_f"] or 0.0)
        per_type = {k: round(float(v["f"]), 4) for k, v in (scores.get("ents_per_type") or {}).items()}
        log(f"epoch {epoch}: loss {losses.get('ner', 0):.0f}, held-out F1 {f1:.4f} "
            f"({time.perf_counter() - t0:.0f} s)")
        if f1 > best[0]:
            best = (f1, epoch, nlp.get_pipe("ner").to_bytes(), per_type)
        elif epoch - best[1] >= cfg.patience:
            break
    nlp.get_pipe("ner").from_bytes(best[2])
    prov = NerProvenance(
        version="", corpora=hashes, documents=counts, config=cfg, epochs_run=epoch, best_epoch=best[1],
        holdout_f1=round(best[0], 4), holdout_per_type=best[3], seconds=round(time.perf_counter() - t0, 1),
        spacy=spacy.__version__, thinc=thinc.__version__,
    )
    prov.version = model_version(prov)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    nlp.get_pipe("ner").to_disk(tmp / "ner")
    (tmp / PROVENANCE).write_text(prov.model_dump_json(indent=2) + "\n")
    old = out_dir.with_name(out_dir.name + ".old")
    if out_dir.exists():
        shutil.rmtree(old, ignore_errors=True)
        out_dir.rename(old)
    tmp.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return prov
