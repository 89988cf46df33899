"""The local backbone's document-level relation model: p(r | entity A, entity B, document) for BioRED's types.

Candidates are every pair of entities of a text (not only those sharing a sentence: BioRED and BC5CDR annotate
relations per abstract and most related pairs span sentences), described by all their co-mentions
(doc_features.py). Learner: one binary logistic regression per type over those sparse features (one-vs-rest,
so several types may pass: multi-label), trained on BioRED train; BC5CDR train's chemical-induced-disease pairs
train Positive_Correlation, as in the mention-level model (relations.py). The regression is fitted by
scikit-learn's SGDClassifier (log loss, balanced classes): on these ~25k pairs x ~86k features it matched
liblinear's out-of-fold F1 (Association 0.547 vs 0.550, Positive_Correlation 0.511 vs 0.503) at a tenth of
the time, which is what keeps training (with its 5-fold cross-validation) under a minute. A factorised
p(related) x p(type | related) was measured too and was not better (BioRED dev pair F1 0.684 vs 0.696).
BC5CDR's pairs weigh CDR_WEIGHT in the Positive_Correlation fit: chosen by the same cross-validation on train
(out-of-fold CID F1 0.536 / 0.551 / 0.549 at weights 1 / 3 / 6, BioRED's out-of-fold type F1 unchanged).

theta_r by cross-validation on train: 5 document-grouped folds give out-of-fold probabilities; per type the
threshold with the best F1 there is theta*_r. The model then shifts each type's logit so that theta*_r lands
on the default theta_r of KarmaParams: the agents' own thresholding (and MedKGent's sampling around it) then
applies the cross-validated operating point, and a user's theta still moves it. A threshold per type and entity
type pair was measured too and not kept: the out-of-fold micro F1 per type did not rise (Association 0.561 ->
0.559, Positive_Correlation 0.512 -> 0.510).

Cached with joblib under the caller's cache directory, keyed by the training files and this code; first use
trains in well under a minute on 2 cores (the time is logged and kept in the fitted model).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sklearn
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import GroupKFold

from karma_dagster.backbones.local import doc_features, relations
from karma_dagster.backbones.local.doc_features import (
    FEATURE_GROUPS,
    Entity,
    Layout,
    RelationPrior,
    document_entities,
    entity_pair_features,
    saliences,
    split_ids,
)
from karma_dagster.backbones.local.relations import (
    DEFAULT_BIORED,
    DEFAULT_CDR,
    RELATION_TYPES,
    Examples,
    RelationTrainingError,
    _identity,
    _Span,
    coarse_type,
)
from karma_dagster.backbones.local.model_cache import load_or_train
from karma_dagster.backbones.local.sampling import logistic_draws, perturb
from karma_dagster.dictionary import cues, sentences
from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.ingest import pubtator
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.params import KarmaParams
from karma_dagster.schemas.records import MentionSpan

log = logging.getLogger(__name__)

MODEL_VERSION = "docrel-sgdlr-v2"
MIN_TYPE_PAIR_RELATIONS = 5  # type pairs with fewer training relations are not candidates (p = 0)
CDR_WEIGHT = 3.0  # sample weight of BC5CDR's chemical-disease pairs (cross-validated on train, see above)
THETA_GRID = tuple(round(0.05 * k, 2) for k in range(2, 19))  # 0.10 .. 0.90


def layout_of(text: str) -> Layout:
    sents = tuple((s, e) for s, e, _ in split_sentences(text)) or ((0, len(text)),)
    return Layout(sents)


# ---------------------------------------------------------------- training examples
@dataclass
class DocExamples(Examples):
    type_pair: list[str] = field(default_factory=list)


def _gold_entities(doc: PubTatorDoc) -> list[Entity]:
    return document_entities((m.start, m.end, m.text, m.type, split_ids(m.identifier, coarse_type(m.type)))
                             for m in doc.mentions)


def _doc_relations(doc: PubTatorDoc, source: str) -> dict[frozenset[str], set[str]]:
    rels: dict[frozenset[str], set[str]] = {}
    for r in doc.relations:
        label = "Positive_Correlation" if (source == "cdr" and r.relation == "CID") else r.relation
        rels.setdefault(frozenset((r.id1, r.id2)), set()).add(label)
    return rels


def related_type_pairs(docs: Iterable[PubTatorDoc], minimum: int = MIN_TYPE_PAIR_RELATIONS) -> frozenset[str]:
    """Coarse type pairs ("Chemical|Disease") with at least `minimum` gold relations: the candidate pairs."""
    counts: dict[str, int] = {}
    for doc in docs:
        type_of = {}
        for m in doc.mentions:
            for i in split_ids(m.identifier, coarse_type(m.type)):
                type_of.setdefault(i, coarse_type(m.type))
        for r in doc.relations:
            if r.id1 in type_of and r.id2 in type_of:
                tp = "|".join(sorted((type_of[r.id1], type_of[r.id2])))
                counts[tp] = counts.get(tp, 0) + 1
    return frozenset(tp for tp, n in counts.items() if n >= minimum)


def build_prior(sources: Iterable[tuple[str, Sequence[PubTatorDoc]]]) -> RelationPrior:
    prior = RelationPrior()
    for source, docs in sources:
        for doc in docs:
            prior.add(_doc_relations(doc, source))
    return prior


def build_examples(biored: Sequence[PubTatorDoc], cdr: Sequence[PubTatorDoc], allowed: frozenset[str],
                   prior: RelationPrior | None, groups: frozenset[str], leave_out: bool = True) -> DocExamples:
    """One example per candidate entity pair of every document. `leave_out`: the documents are the prior's own
    training documents, so each one's relations leave the prior while it is described (they would otherwise
    be a feature of its labels)."""
    ex = DocExamples()
    for source, docs in (("biored", biored), ("cdr", cdr)):
        for doc in docs:
            rels = _doc_relations(doc, source)
            ents = _gold_entities(doc)
            if len(ents) < 2:
                continue
            layout = layout_of(doc.text)
            n, rank = saliences(ents)
            if prior is not None and leave_out:
                prior.add(rels, -1)
            for i in range(len(ents)):
                for j in range(i + 1, len(ents)):
                    tp = "|".join(sorted((ents[i].type, ents[j].type)))
                    if tp not in allowed or (source == "cdr" and tp != "Chemical|Disease"):
                        continue
                    labels: set[str] = set()
                    for x in ents[i].ids:
                        for y in ents[j].ids:
                            labels |= rels.get(frozenset((x, y)), set())
                    ex.feats.append(entity_pair_features(doc.text, layout, ents, i, j, prior, n, rank, groups))
                    ex.labels.append(frozenset(labels & set(RELATION_TYPES)))
                    ex.source.append(source)
                    ex.doc.append(f"{source}:{doc.pmid}")
                    ex.type_pair.append(tp)
            if prior is not None and leave_out:
                prior.add(rels, +1)
    return ex


# ---------------------------------------------------------------- fitting
@dataclass
class DocFitted:
    vectorizer: TfidfVectorizer
    models: dict[str, SGDClassifier | float]  # a float = constant probability (too few positives)
    theta_cv: dict[str, float]  # cross-validated best threshold per type
    theta_target: dict[str, float]  # the KarmaParams default each type's theta_cv is shifted onto
    cv_f1: dict[str, float]  # out-of-fold F1 at theta_cv (train only)
    allowed: frozenset[str]
    prior: RelationPrior | None
    groups: frozenset[str]
    version: str
    train_seconds: float = 0.0
    n_examples: int = 0
    cache_key: str = ""  # what it was trained under (model_cache.load_or_train checks it on load)


def _rows_for(ex: DocExamples, r: str) -> np.ndarray:
    src = np.array(ex.source)
    tp = np.array(ex.type_pair)
    cdr_rows = (src == "cdr") & (r == "Positive_Correlation") & (tp == "Chemical|Disease")
    return np.flatnonzero((src == "biored") | cdr_rows)


def _best_theta(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    best = (0.0, 0.5)
    for t in THETA_GRID:
        pred = p >= t
        tp = float((pred & (y == 1)).sum())
        fp = float((pred & (y == 0)).sum())
        fn = float((~pred & (y == 1)).sum())
        f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        if f1 > best[0]:
            best = (f1, t)
    return best


def _learner(alpha: float) -> SGDClassifier:
    return SGDClassifier(loss="log_loss", alpha=alpha, class_weight="balanced", max_iter=30, tol=1e-3,
                         random_state=0)


def fit(ex: DocExamples, allowed: frozenset[str], prior: RelationPrior | None, groups: frozenset[str],
        alpha: float = 3e-5, folds: int = 5, min_positives: int = 5, cdr_weight: float = CDR_WEIGHT) -> DocFitted:
    if not ex.feats:
        raise RelationTrainingError("no candidate entity pairs in the training corpora")
    vec = TfidfVectorizer(analyzer=_identity, min_df=2, sublinear_tf=True, dtype=np.float32)
    X = vec.fit_transform(ex.feats)
    X.sort_indices()  # each row's column order would otherwise follow its feature list's (summation order)
    docs = np.array(ex.doc)
    src = np.array(ex.source)
    params = KarmaParams()
    models: dict[str, SGDClassifier | float] = {}
    theta_cv: dict[str, float] = {}
    cv_f1: dict[str, float] = {}
    for r in RELATION_TYPES:
        rows = _rows_for(ex, r)
        y = np.array([r in ex.labels[k] for k in rows], dtype=int)
        w = np.where(src[rows] == "cdr", cdr_weight, 1.0)
        if y.sum() < min_positives:
            models[r] = float(y.mean()) if len(y) else 0.0
            theta_cv[r], cv_f1[r] = 0.5, 0.0
            continue
        oof = np.zeros(len(rows))
        for tr, te in GroupKFold(n_splits=folds).split(rows, y, docs[rows]):
            if y[tr].sum() == 0:
                continue
            clf = _learner(alpha)
            with warnings.catch_warnings():  # 30 epochs are enough (out-of-fold F1 measured); no convergence nag
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf.fit(X[rows[tr]], y[tr], sample_weight=w[tr])
            oof[te] = clf.predict_proba(X[rows[te]])[:, 1]
        cv_f1[r], theta_cv[r] = _best_theta(y, oof)
        clf = _learner(alpha)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(X[rows], y, sample_weight=w)
        models[r] = clf
    return DocFitted(vectorizer=vec, models=models, theta_cv=theta_cv,
                     theta_target={r: params.theta_for(r) for r in RELATION_TYPES}, cv_f1=cv_f1,
                     allowed=allowed, prior=prior, groups=groups, version=MODEL_VERSION, n_examples=len(ex.feats))


def _logit(p: float) -> float:
    p = min(1 - 1e-9, max(1e-9, p))
    return math.log(p / (1 - p))


def _shift(p: np.ndarray, theta_cv: float, target: float) -> np.ndarray:
    """Move p so that theta_cv lands on target (a monotone logit shift: the ranking is unchanged)."""
    z = np.log(np.clip(p, 1e-9, 1 - 1e-9)) - np.log1p(-np.clip(p, 1e-9, 1 - 1e-9))
    return 1.0 / (1.0 + np.exp(-(z - _logit(theta_cv) + _logit(target))))


def predict(fitted: DocFitted, feats: list[list[str]]) -> list[dict[str, float]]:
    if not feats:
        return []
    X = fitted.vectorizer.transform(feats)
    X.sort_indices()
    cols = []
    for r in RELATION_TYPES:
        m = fitted.models[r]
        if isinstance(m, float):
            cols.append(np.full(X.shape[0], m))
        else:
            cols.append(_shift(m.predict_proba(X)[:, 1], fitted.theta_cv[r], fitted.theta_target[r]))
    P = np.vstack(cols).T
    return [{r: float(P[i, k]) for k, r in enumerate(RELATION_TYPES)} for i in range(P.shape[0])]


def _digest(paths: Iterable[Path], extra: str) -> str:
    """What the fitted model depends on: the training files (each with its length, so two files cannot pass
    for one), the code that reads, describes and fits them, the learner's library versions and the thresholds
    the cross-validated ones are shifted onto. A model trained from anything else is never taken from the cache."""
    h = hashlib.sha256()
    for p in paths:
        if not p.is_file():
            raise RelationTrainingError(f"{p.name}: relation training corpus not found")
        data = p.read_bytes()
        h.update(f"{len(data)}:".encode())
        h.update(data)
    for mod in (__file__, doc_features.__file__, relations.__file__, sentences.__file__, cues.__file__,
                pubtator.__file__):
        h.update(Path(mod).read_bytes())
    h.update(f"sklearn {sklearn.__version__} numpy {np.__version__}".encode())
    h.update(repr(sorted((r, KarmaParams().theta_for(r)) for r in RELATION_TYPES)).encode())
    h.update(extra.encode())
    return h.hexdigest()[:16]


EntityPairs = list[tuple[int, int]]


class DocRelationModel:
    """Lazily trained, joblib-cached document-level relation model (the local backbone's REA)."""

    def __init__(self, cache_dir: str | Path, biored_path: Path | None = None, cdr_path: Path | None = None,
                 alpha: float = 3e-5, groups: Iterable[str] = FEATURE_GROUPS, memo_size: int = 64) -> None:
        self.cache_dir = Path(cache_dir)
        self.biored_path = Path(biored_path) if biored_path else DEFAULT_BIORED
        self.cdr_path = Path(cdr_path) if cdr_path else (DEFAULT_CDR if biored_path is None else None)
        self.alpha = alpha
        self.groups = frozenset(groups)
        unknown = self.groups - set(FEATURE_GROUPS)
        if unknown:
            raise ValueError(f"unknown relation feature groups {sorted(unknown)}; known: {list(FEATURE_GROUPS)}")
        self._fitted: DocFitted | None = None
        self._lock = threading.Lock()
        self._memo: OrderedDict[tuple, list[dict[str, float]]] = OrderedDict()
        self._memo_size = memo_size
        self.loaded_from_cache: bool | None = None

    @property
    def cache_key(self) -> str:
        files = [self.biored_path] + ([self.cdr_path] if self.cdr_path else [])
        g = "-".join(sorted(self.groups))
        return f"{MODEL_VERSION}-a{self.alpha:g}-{_digest(files, MODEL_VERSION + g)}"

    @property
    def version(self) -> str:
        return self.cache_key

    @property
    def fitted(self) -> DocFitted:
        with self._lock:
            if self._fitted is None:
                self._fitted = self._load_or_train()
            return self._fitted

    def _load_or_train(self) -> DocFitted:
        def train() -> DocFitted:
            t0 = time.perf_counter()
            biored = read_pubtator(self.biored_path)
            cdr = read_pubtator(self.cdr_path) if self.cdr_path else []
            allowed = related_type_pairs(biored)
            prior = build_prior([("biored", biored), ("cdr", cdr)]) if "prior" in self.groups else None
            ex = build_examples(biored, cdr, allowed, prior, self.groups)
            fitted = fit(ex, allowed, prior, self.groups, alpha=self.alpha)
            fitted.train_seconds = time.perf_counter() - t0
            log.info("document relation model trained on %d entity pairs in %.1f s", fitted.n_examples,
                     fitted.train_seconds)
            return fitted

        key = self.cache_key
        fitted, self.loaded_from_cache = load_or_train(
            self.cache_dir / f"docrel-{key}.joblib", DocFitted, "document-level relation model", train, key=key)
        return fitted

    # ------------------------------------------------------------ inference
    def probabilities(self, text: str, entities: Sequence[Sequence[MentionSpan]], pairs: EntityPairs
                      ) -> list[dict[str, float]]:
        """p(r | entities[i], entities[j], text) per (i, j); an entity is the list of its mentions in `text`."""
        if not isinstance(text, str):
            raise TypeError(f"relation text must be a str, got {type(text).__name__}")
        if not pairs:
            return []
        ents = _entities(text, entities)
        for k, (i, j) in enumerate(pairs):
            if not (0 <= i < len(ents) and 0 <= j < len(ents)) or i == j:
                raise ValueError(f"entity pair {k}: ({i}, {j}) does not name two of the {len(ents)} entities")
        f = self.fitted
        layout = layout_of(text)
        n, rank = saliences(ents)
        zero = dict.fromkeys(RELATION_TYPES, 0.0)
        feats, where = [], []
        for k, (i, j) in enumerate(pairs):
            if "|".join(sorted((ents[i].type, ents[j].type))) in f.allowed:
                feats.append(entity_pair_features(text, layout, ents, i, j, f.prior, n, rank, f.groups))
                where.append(k)
        out = [dict(zero) for _ in pairs]
        for k, probs in zip(where, predict(f, feats), strict=True):
            out[k] = probs
        return out

    def sample(self, text: str, entities: Sequence[Sequence[MentionSpan]], pairs: EntityPairs, sample: int,
               temperature: float) -> list[dict[str, float]]:
        """MedKGent sample `sample` (the scheme of sampling.py): the model's answer, computed once per input and
        memoised, with seeded logistic noise on each type's logit, seeded per entity pair by its first mentions."""
        if sample < 0 or not temperature > 0:
            raise ValueError(f"relation sample index must be >= 0 and temperature > 0 (got {sample}, {temperature})")
        if not pairs:
            return []
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        key = (digest, tuple(tuple((m.start, m.end, m.type) for m in e) for e in entities), tuple(pairs))
        with self._lock:
            base = self._memo.get(key)
            if base is not None:
                self._memo.move_to_end(key)
        if base is None:
            base = self.probabilities(text, entities, pairs)
            with self._lock:
                self._memo[key] = base
                while len(self._memo) > self._memo_size:
                    self._memo.popitem(last=False)
        out = []
        for (i, j), probs in zip(pairs, base, strict=True):
            head, tail = min(entities[i], key=_pos), min(entities[j], key=_pos)
            out.append(perturb(probs, logistic_draws(digest, head, tail, sample, len(probs)), temperature))
        return out


def _pos(m: MentionSpan) -> tuple[int, int]:
    return (m.start, m.end)


def _entities(text: str, entities: Sequence[Sequence[MentionSpan]]) -> list[Entity]:
    out = []
    for k, ms in enumerate(entities):
        if not ms:
            raise ValueError(f"entity {k} has no mentions")
        types = {coarse_type(m.type) for m in ms}
        for m in ms:
            if not (0 <= m.start < m.end <= len(text)):
                raise ValueError(f"entity {k}: mention {m.text!r} span {m.start}-{m.end} lies outside the text "
                                 f"(length {len(text)})")
        # an entity's type: its mentions' (the most common, should the NER disagree)
        t = max(sorted(types), key=lambda x: sum(1 for m in ms if coarse_type(m.type) == x))
        ids = frozenset().union(*(split_ids(m.vocab_id, t) for m in ms))
        spans = tuple(sorted({_Span(m.start, m.end, t) for m in ms}, key=lambda s: (s.start, s.end)))
        out.append(Entity(spans=spans, type=t, ids=ids, surfaces=tuple(m.text for m in ms)))
    return out
