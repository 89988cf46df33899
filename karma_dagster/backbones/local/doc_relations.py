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

Two refinements, each chosen by the same cross-validation on train (dev only scored):
- a head of its own for Positive_Correlation between a chemical and a disease (HEADS), trained on the
  chemical-disease candidates of both corpora (BC5CDR's CID is chemical-induced disease, annotated at the most
  specific disease, while the general Positive_Correlation model mostly sees gene and variant pairs); BC5CDR
  rows weigh HEAD_CDR_WEIGHT 1 (out-of-fold F1 0.593 vs 0.586 at 3). BC5CDR dev CID from gold mentions
  0.549 -> 0.572;
- one type per pair: BioRED gives every related pair exactly one type (4769 of 4769 in train), so of the types
  over their threshold the most probable stays and another only when it reaches `keep` (chosen on the
  out-of-fold pair+type F1 of BioRED train over KEEP_GRID; None = multi-label as before).
Measured and not kept: scikit-learn's HistGradientBoostingClassifier on the dense non-lexical features stacked
on this model's out-of-fold score (chemical-disease out-of-fold F1 0.563 vs 0.593, 3 minutes per fit); a
multinomial type classifier over related pairs (BioRED dev pair+type 0.483-0.491 vs 0.501).

The seed KG (data/seed_kg, kg_prior.py) is the `kg` group's prior, bridged to the corpora's ids once at training
and kept in the fitted model; the pipeline answers with the same shipped seed, not the KG it is growing (a KG that
holds this model's own earlier extractions would feed its answers back as evidence, and a prior the model was not
trained with would mean something else to it). The same bridge gives an entity the pipeline names by a KG
vocabulary id only (a Hetionet side effect's `UMLS:C0030252`) the MeSH id of its node's name, so the MeSH tree and
the corpus prior see it as the training corpora would. Kept by the same cross-validation on train, under 4 SGD
seeds: chemical-disease head out-of-fold F1 0.591-0.593 -> 0.598-0.599 (every seed), Positive_Correlation +0.007,
pair+type 0.513 -> 0.515 on average (the seeds alone move it by 0.006). A weak prior, as the demo seed is small:
a direct edge joins 2.1 % of BioRED train's related pairs and 0.4 % of the others (0.9 % / 0.5 % on dev), and
its nodes were chosen by the names in the train texts, so train's entities are in it more often than dev's. One
before/after on dev (bench/biored_ablation.py): from gold mentions BioRED pair+type 0.502 -> 0.492, BC5CDR CID
0.572 -> 0.573; end to end 0.238 -> 0.229 and 0.415 -> 0.419. Edge-only variants were no better out of fold.

Cached with joblib under the caller's cache directory, keyed by the training files, the seed KG, the lexicon's
inputs and this code; first use trains in well under a minute on 2 cores (the time is logged and kept in the
fitted model; the lexicon the KG bridge reads is built once beside it, ~20 s).
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
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import sklearn
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import GroupKFold

from karma_dagster.backbones.local import doc_features, kg_prior, relations
from karma_dagster.backbones.local.doc_features import (
    FEATURE_GROUPS,
    Entity,
    Layout,
    RelationPrior,
    EntityContext,
    document_entities,
    entity_context,
    entity_pair_features,
    saliences,
    split_ids,
)
from karma_dagster.backbones.local.kg_prior import KGPrior
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
from karma_dagster.backbones.local import mesh_tree
from karma_dagster.backbones.local.model_cache import load_or_train
from karma_dagster.backbones.local.sampling import logistic_draws, perturb
from karma_dagster.dictionary import cues, sentences
from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.ingest import pubtator
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import MentionSpan

log = logging.getLogger(__name__)

MODEL_VERSION = "docrel-sgdlr-v4"  # v4: the `kg` group (seed KG prior), KG ids bridged to MeSH
MIN_TYPE_PAIR_RELATIONS = 5  # type pairs with fewer training relations are not candidates (p = 0)
CDR_WEIGHT = 3.0  # sample weight of BC5CDR's chemical-disease pairs (cross-validated on train, see above)
# type-pair heads: (type, type pair) pairs with a model of their own, trained on that type pair's candidates
HEADS: tuple[tuple[str, str], ...] = (("Positive_Correlation", "Chemical|Disease"),)
HEAD_CDR_WEIGHT = 1.0
KEEP_GRID: tuple[float | None, ...] = (None, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # 1.0: exactly one type per pair
SUPPRESS = 3.0  # logits a pair's non-top type falls (well under any threshold, still ranked among themselves)
THETA_GRID = tuple(round(0.05 * k, 2) for k in range(2, 19))  # 0.10 .. 0.90


def context_of(text: str, ents: Sequence[Entity], groups: frozenset[str]) -> EntityContext | None:
    """The `hyp` / `role` groups' view of a document's entities (None when neither group is on)."""
    if not groups & {"hyp", "role"}:
        return None
    return entity_context(text, ents, mesh_tree.tree_numbers() if "hyp" in groups else {})


def layout_of(text: str) -> Layout:
    sents = tuple((s, e) for s, e, _ in split_sentences(text)) or ((0, len(text)),)
    return Layout(sents)


# ---------------------------------------------------------------- training examples
@dataclass
class DocExamples(Examples):
    type_pair: list[str] = field(default_factory=list)


def gold_entities(doc: PubTatorDoc) -> list[Entity]:
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
                   prior: RelationPrior | None, groups: frozenset[str], leave_out: bool = True,
                   kg: KGPrior | None = None) -> DocExamples:
    """One example per candidate entity pair of every document. `leave_out`: the documents are the prior's own
    training documents, so each one's relations leave the prior while it is described (they would otherwise
    be a feature of its labels)."""
    ex = DocExamples()
    for source, docs in (("biored", biored), ("cdr", cdr)):
        for doc in docs:
            rels = _doc_relations(doc, source)
            ents = gold_entities(doc)
            if len(ents) < 2:
                continue
            layout = layout_of(doc.text)
            n, rank = saliences(ents)
            ctx = context_of(doc.text, ents, groups)
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
                    ex.feats.append(entity_pair_features(doc.text, layout, ents, i, j, prior, n, rank, groups, ctx,
                                                         kg))
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
    heads: dict[str, SGDClassifier] = field(default_factory=dict)  # "type@Chemical|Disease": a type pair's own model
    keep: float | None = None  # a second type over its threshold stays when p >= keep (None: every one stays)
    cache_key: str = ""  # what it was trained under (model_cache.load_or_train checks it on load)
    kg: KGPrior | None = None  # the seed KG bridged to the corpora's ids: the `kg` group, and KG ids -> MeSH


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


def _fit_one(X, y: np.ndarray, w: np.ndarray, docs: np.ndarray, alpha: float, folds: int
             ) -> tuple[SGDClassifier, float, float, np.ndarray]:
    """(the learner fitted on all rows, theta with the best out-of-fold F1, that F1, the out-of-fold
    probabilities): document-grouped folds."""
    oof = np.zeros(len(y))
    for tr, te in GroupKFold(n_splits=folds).split(y, y, docs):
        if y[tr].sum() == 0:
            continue
        clf = _learner(alpha)
        with warnings.catch_warnings():  # 30 epochs are enough (out-of-fold F1 measured); no convergence nag
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(X[tr], y[tr], sample_weight=w[tr])
        oof[te] = clf.predict_proba(X[te])[:, 1]
    f1, theta = _best_theta(y, oof)
    clf = _learner(alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, y, sample_weight=w)
    return clf, theta, f1, oof


def _one_type(P: np.ndarray, targets: np.ndarray, keep: float | None) -> np.ndarray:
    """BioRED gives an entity pair one relation type: of the types over their threshold, the most probable one
    stays and the others fall SUPPRESS logits lower, unless they reach `keep` too (None: multi-label as is)."""
    if keep is None or P.shape[0] == 0:
        return P
    top = P.argmax(axis=1)
    other = np.ones_like(P, dtype=bool)
    other[np.arange(P.shape[0]), top] = False
    hit = other & (P >= targets[None, :]) & (P < keep)
    z = np.log(np.clip(P, 1e-9, 1 - 1e-9)) - np.log1p(-np.clip(P, 1e-9, 1 - 1e-9))
    return np.where(hit, 1.0 / (1.0 + np.exp(-(z - SUPPRESS))), P)


def _micro_f1(P: np.ndarray, Y: np.ndarray, targets: np.ndarray) -> float:
    pred = P >= targets[None, :]
    tp = float((pred & Y).sum())
    return 2 * tp / (2 * tp + float((pred & ~Y).sum()) + float((~pred & Y).sum())) if tp else 0.0


def fit(ex: DocExamples, allowed: frozenset[str], prior: RelationPrior | None, groups: frozenset[str],
        alpha: float = 3e-5, folds: int = 5, min_positives: int = 5, cdr_weight: float = CDR_WEIGHT,
        heads: Sequence[tuple[str, str]] = HEADS, head_cdr_weight: float = HEAD_CDR_WEIGHT,
        keeps: Sequence[float | None] = KEEP_GRID) -> DocFitted:
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
    oof_all = np.zeros((len(ex.feats), len(RELATION_TYPES)))  # out-of-fold p, shifted as predict() does
    for r in RELATION_TYPES:
        rows = _rows_for(ex, r)
        y = np.array([r in ex.labels[k] for k in rows], dtype=int)
        w = np.where(src[rows] == "cdr", cdr_weight, 1.0)
        if y.sum() < min_positives:
            models[r] = float(y.mean()) if len(y) else 0.0
            theta_cv[r], cv_f1[r] = 0.5, 0.0
            continue
        models[r], theta_cv[r], cv_f1[r], oof = _fit_one(X[rows], y, w, docs[rows], alpha, folds)
        oof_all[rows, RELATION_TYPES.index(r)] = _shift(oof, theta_cv[r], params.theta_for(r))
    fitted_heads: dict[str, SGDClassifier] = {}
    tps = np.array(ex.type_pair)
    for r, tp in heads:
        rows = np.flatnonzero(tps == tp)
        y = np.array([r in ex.labels[k] for k in rows], dtype=int)
        if y.sum() < min_positives:
            continue
        w = np.where(src[rows] == "cdr", head_cdr_weight, 1.0)
        key = f"{r}@{tp}"
        fitted_heads[key], theta_cv[key], cv_f1[key], oof = _fit_one(X[rows], y, w, docs[rows], alpha, folds)
        oof_all[rows, RELATION_TYPES.index(r)] = _shift(oof, theta_cv[key], params.theta_for(r))
    # one type per pair, and when a second type may stay: the out-of-fold pair+type F1 on BioRED decides
    targets = np.array([params.theta_for(r) for r in RELATION_TYPES])
    bio = np.flatnonzero(src == "biored")
    Y = np.array([[r in ex.labels[k] for r in RELATION_TYPES] for k in bio], dtype=bool).reshape(-1, len(RELATION_TYPES))
    scored = [(_micro_f1(_one_type(oof_all[bio], targets, k), Y, targets), k) for k in keeps]
    keep = max(scored, key=lambda fk: fk[0])[1] if len(bio) else None
    cv_f1["pair+type"] = max(f for f, _k in scored) if len(bio) else 0.0
    return DocFitted(vectorizer=vec, models=models, theta_cv=theta_cv,
                     theta_target={r: params.theta_for(r) for r in RELATION_TYPES}, cv_f1=cv_f1,
                     allowed=allowed, prior=prior, groups=groups, version=MODEL_VERSION, n_examples=len(ex.feats),
                     heads=fitted_heads, keep=keep)


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
    tps = [f[0].removeprefix("type:") for f in feats]  # every example's first feature is its type pair
    for key, head in sorted(fitted.heads.items()):
        r, tp = key.split("@", 1)
        rows = [k for k, t in enumerate(tps) if t == tp]
        if rows:
            P[rows, RELATION_TYPES.index(r)] = _shift(head.predict_proba(X[rows])[:, 1], fitted.theta_cv[key],
                                                      fitted.theta_target[r])
    P = _one_type(P, np.array([fitted.theta_target[r] for r in RELATION_TYPES]), fitted.keep)
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
                pubtator.__file__, mesh_tree.__file__):
        h.update(Path(mod).read_bytes())
    h.update(f"sklearn {sklearn.__version__} numpy {np.__version__}".encode())
    h.update(repr(sorted((r, KarmaParams().theta_for(r)) for r in RELATION_TYPES)).encode())
    h.update(extra.encode())
    return h.hexdigest()[:16]


EntityPairs = list[tuple[int, int]]


class DocRelationModel:
    """Lazily trained, joblib-cached document-level relation model (the local backbone's REA)."""

    def __init__(self, cache_dir: str | Path, biored_path: Path | None = None, cdr_path: Path | None = None,
                 alpha: float = 3e-5, groups: Iterable[str] = FEATURE_GROUPS, memo_size: int = 64,
                 refinements: bool = True) -> None:
        """`refinements=False`: without the type-pair heads and the one-type-per-pair rule (the model as it was
        before them, for the ablation's baseline row)."""
        self.cache_dir = Path(cache_dir)
        self.biored_path = Path(biored_path) if biored_path else DEFAULT_BIORED
        self.cdr_path = Path(cdr_path) if cdr_path else (DEFAULT_CDR if biored_path is None else None)
        self.alpha = alpha
        self.refinements = refinements
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
        if "hyp" in self.groups:
            files.append(mesh_tree.tree_path())
        g = "-".join(sorted(self.groups))
        r = "" if self.refinements else "-plain"
        # the seed KG, what its name bridge (the lexicon) is built from, and their code
        kg = kg_prior.inputs_digest()
        return f"{MODEL_VERSION}{r}-a{self.alpha:g}-{_digest(files, MODEL_VERSION + g + r + kg)}"

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
            kg = kg_prior.seed_prior(self.cache_dir / "lexicon")  # also the KG id -> MeSH bridge
            ex = build_examples(biored, cdr, allowed, prior, self.groups, kg=kg)
            plain = {} if self.refinements else {"heads": (), "keeps": (None,)}
            fitted = fit(ex, allowed, prior, self.groups, alpha=self.alpha, **plain)
            fitted.kg = kg
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
        if f.kg is not None:  # an entity known by a KG vocabulary id only: by its node's MeSH id, as in training
            ents = [replace(e, ids=f.kg.canonical_ids(e.type, e.ids)) for e in ents]
        ents, into = _merge_same_ids(ents)
        layout = layout_of(text)
        n, rank = saliences(ents)
        ctx = context_of(text, ents, f.groups)
        zero = dict.fromkeys(RELATION_TYPES, 0.0)
        feats, where, asked = [], [], {}
        for k, (i, j) in enumerate(pairs):
            gi, gj = sorted((into[i], into[j]))
            if gi != gj and (gi, gj) not in asked and "|".join(sorted((ents[gi].type, ents[gj].type))) in f.allowed:
                asked[(gi, gj)] = len(feats)
                feats.append(entity_pair_features(text, layout, ents, gi, gj, f.prior, n, rank, f.groups, ctx, f.kg))
            where.append(asked.get((gi, gj)))
        answers = predict(f, feats)
        return [dict(answers[w]) if w is not None else dict(zero) for w in where]

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


def _merge_same_ids(ents: list[Entity]) -> tuple[list[Entity], list[int]]:
    """Entities of one type with the same ids as one entity (all their mentions), as the training corpora have
    them (one entity per id): the chain may hand over two entities the normalizer gave one id (e.g. one linked,
    one new in the KG), and each would otherwise get its own, possibly different, answer for the same id pair.
    Returns the merged entities and, per input entity, its merged index; entities without ids stay alone."""
    merged: list[Entity] = []
    index: dict[tuple[str, frozenset[str]], int] = {}
    into = []
    for e in ents:
        key = (e.type, e.ids)
        if not e.ids or key not in index:
            if e.ids:
                index[key] = len(merged)
            merged.append(e)
            into.append(len(merged) - 1)
            continue
        g = index[key]
        old = merged[g]
        spans = tuple(sorted(set(old.spans) | set(e.spans), key=lambda s: (s.start, s.end)))
        merged[g] = Entity(spans=spans, type=old.type, ids=old.ids, surfaces=old.surfaces + e.surfaces)
        into.append(g)
    return merged, into


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
