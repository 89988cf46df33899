"""The local backbone's relation classifier: p(r | head, tail, sentence) for the eight BioRED relation types.

Trained on the shipped training corpora (BioRED train; BC5CDR train's chemical-induced-disease pairs as
Positive_Correlation, as BioRED itself annotates CID). BioRED labels id pairs per document, so every pair of
mentions of two related ids that co-occur in a sentence is a (noisy) positive; other co-occurring pairs are
negatives. Features are the classic ones of pre-transformer relation extraction: entity-masked words between
the two mentions (uni/bigrams, also conjoined with the type pair), a little context on either side, the type
pair and its order, the token distance, the entities in between, relation cues from the shared lexicon, and how
often each mention's surface form occurs in the text (salience). One binary logistic regression per relation
type (one-vs-rest, so the types are scored independently and several may pass theta: multi-label), each trained
on the documents that annotate its type: BC5CDR only annotates CID, so its pairs train Positive_Correlation
alone. The fitted model is cached with joblib under a caller-given directory, keyed by a hash of the training
files and of this code, so it trains once (measured ~20 s on 2 cores) and loads in well under a second after.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sklearn
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from karma_dagster.dictionary import cues, sentences
from karma_dagster.dictionary.cues import relation_cues
from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.backbones.local.model_cache import load_or_train
from karma_dagster.runtime.paths import data_file
from karma_dagster.schemas.records import MentionSpan

log = logging.getLogger(__name__)

MODEL_VERSION = "rel-lr-v1"
RELATION_TYPES: tuple[str, ...] = (
    "Association", "Positive_Correlation", "Negative_Correlation", "Bind",
    "Cotreatment", "Comparison", "Drug_Interaction", "Conversion",
)
# The shipped training files.
DEFAULT_BIORED = data_file("corpora", "biored-train.pubtator.gz")
DEFAULT_CDR = data_file("corpora", "bc5cdr-train.pubtator.gz")

# NER type names of the corpora, the schema and the LLM prompts -> the coarse types the classifier knows.
_COARSE_TYPES: dict[str, str] = {
    "gene": "Gene", "geneorgeneproduct": "Gene", "protein": "Gene",
    "chemical": "Chemical", "chemicalentity": "Chemical", "drug": "Chemical", "compound": "Chemical",
    "disease": "Disease", "diseaseorphenotypicfeature": "Disease", "symptom": "Disease",
    "side effect": "Disease", "phenotype": "Disease",
    "variant": "Variant", "sequencevariant": "Variant", "mutation": "Variant",
    "species": "Species", "organismtaxon": "Species", "organism": "Species",
    "cellline": "CellLine", "cell line": "CellLine",
}


def coarse_type(ner_type: str) -> str:
    """The classifier's name for an NER type; unknown types share one bucket rather than failing."""
    return _COARSE_TYPES.get(ner_type.strip().lower(), "Other")


# ---------------------------------------------------------------- features
_TOKEN_RE = re.compile(r"@[A-Za-z]+\$|@[a-z]+@|[A-Za-z]+|\d+(?:\.\d+)?|[^\sA-Za-z\d]")
_NEGATION = frozenset({"not", "no", "without", "neither", "nor", "failed", "lack", "absence", "unaffected"})


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    type: str  # coarse


def _tokens(text: str) -> list[str]:
    out = []
    for t in _TOKEN_RE.findall(text):
        if t[0].isdigit():
            out.append("<num>")
        elif t[0] == "@":
            out.append(t)
        else:
            out.append(t.lower())
    return out


def _bucket(n: int, edges: Sequence[int] = (0, 2, 5, 10, 20, 40)) -> str:
    for e in edges:
        if n <= e:
            return f"<={e}"
    return f">{edges[-1]}"


def _masked(text: str, lo: int, hi: int, spans: Sequence[_Span], a: _Span, b: _Span) -> list[str]:
    """Tokens of text[lo:hi] with the two targets as @TYPE$ and any other mention as @type@ (entity masking)."""
    out: list[str] = []
    pos = lo
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        if s.start < pos or s.end > hi or s.start < lo:
            continue
        out.extend(_tokens(text[pos:s.start]))
        out.append(f"@{s.type.upper()}$" if s in (a, b) else f"@{s.type.lower()}@")
        pos = s.end
    out.extend(_tokens(text[pos:hi]))
    return out


def pair_features(text: str, sent: tuple[int, int], a: _Span, b: _Span, others: Sequence[_Span],
                  salience: tuple[int, int]) -> list[str]:
    """Feature strings of one mention pair; `a` precedes `b`, `sent` is the (start, end) window holding both."""
    if b.start < a.start:
        a, b = b, a
        salience = (salience[1], salience[0])
    tp = f"{a.type}>{b.type}"
    upair = "|".join(sorted((a.type, b.type)))
    spans = [a, b, *others]
    between = _masked(text, a.end, b.start, spans, a, b) if b.start >= a.end else []
    left = _masked(text, sent[0], a.start, spans, a, b)[-3:]
    right = _masked(text, b.end, sent[1], spans, a, b)[:3]
    sentence = _masked(text, sent[0], sent[1], spans, a, b)
    n_between_ents = sum(1 for s in others if s.start >= a.end and s.end <= b.start)
    feats = [f"tp={upair}", f"ord={tp}", f"dist={_bucket(len(between))}", f"nent={_bucket(n_between_ents, (0, 1, 3))}",
             f"tp_dist={upair}_{_bucket(len(between))}",
             f"sal={_bucket(min(salience), (1, 2, 4))}_{_bucket(max(salience), (1, 2, 4))}",
             f"tp_sal={upair}_{_bucket(min(salience), (1, 2, 4))}"]
    if len(between) <= 6:
        feats.append("bfull=" + "_".join(between))
    for i, w in enumerate(between):
        feats.append(f"b={w}")
        feats.append(f"tpb={upair}_{w}")
        if i + 1 < len(between):
            feats.append(f"bb={w}_{between[i + 1]}")
    feats.extend(f"l={w}" for w in left)
    feats.extend(f"r={w}" for w in right)
    feats.extend(f"s={w}" for w in sorted(set(sentence)) if w.isalpha() and len(w) > 2)
    btext = text[a.end:b.start] if b.start >= a.end else ""
    for cue in relation_cues(btext):
        feats.append(f"cb={cue}")
        feats.append(f"tpcb={upair}_{cue}")
    for cue in relation_cues(text[sent[0]:sent[1]]):
        feats.append(f"tpcs={upair}_{cue}")
    if _NEGATION & set(between):
        feats.append("neg_between")
    return feats


def _identity(x: list[str]) -> list[str]:  # module level so the fitted vectorizer pickles
    return x


def _salience(text_lower: str, mention_text: str) -> int:
    return max(1, text_lower.count(mention_text.lower())) if mention_text else 1


# ---------------------------------------------------------------- training examples
@dataclass
class Examples:
    """Training examples as parallel lists (features, labels, corpus, document)."""

    feats: list[list[str]] = field(default_factory=list)
    labels: list[frozenset[str]] = field(default_factory=list)
    source: list[str] = field(default_factory=list)  # "biored" | "cdr"
    doc: list[str] = field(default_factory=list)


def _sentence_of(sents: list[tuple[int, int, str]], pos: int) -> int:
    for i, (s, e, _) in enumerate(sents):
        if s <= pos < e:
            return i
    return -1


def doc_pair_instances(doc: PubTatorDoc, window: int = 0):
    """(mention_a, mention_b, sentence window, salience) for co-occurring mentions with different ids.

    window=0: same sentence; 1: also adjacent sentences. Mentions without an id (-1 / empty) are skipped.
    """
    text = doc.text
    sents = split_sentences(text)
    low = text.lower()
    ments = [m for m in doc.mentions if m.identifier not in ("", "-1")]
    spans = [_Span(m.start, m.end, coarse_type(m.type)) for m in ments]
    sid = [_sentence_of(sents, m.start) for m in ments]
    sal = [_salience(low, m.text) for m in ments]
    ids = [frozenset(re.split(r"[,|;]", m.identifier)) for m in ments]
    for i in range(len(ments)):
        for j in range(i + 1, len(ments)):
            if sid[i] < 0 or sid[j] < 0 or abs(sid[i] - sid[j]) > window or ids[i] & ids[j]:
                continue
            lo, hi = min(sid[i], sid[j]), max(sid[i], sid[j])
            win = (sents[lo][0], sents[hi][1])
            others = [spans[k] for k in range(len(ments)) if k not in (i, j) and lo <= sid[k] <= hi]
            yield i, j, ments[i], ments[j], ids[i], ids[j], spans[i], spans[j], win, others, (sal[i], sal[j])


def build_examples(biored: Iterable[PubTatorDoc], cdr: Iterable[PubTatorDoc] = (), window: int = 0) -> Examples:
    ex = Examples()
    for source, docs in (("biored", biored), ("cdr", cdr)):
        for doc in docs:
            rels: dict[frozenset[str], set[str]] = {}
            for r in doc.relations:
                label = "Positive_Correlation" if (source == "cdr" and r.relation == "CID") else r.relation
                rels.setdefault(frozenset((r.id1, r.id2)), set()).add(label)
            for _i, _j, ma, mb, ida, idb, sa, sb, win, others, sal in doc_pair_instances(doc, window):
                if source == "cdr" and {sa.type, sb.type} != {"Chemical", "Disease"}:
                    continue
                labels: set[str] = set()
                for x in ida:
                    for y in idb:
                        labels |= rels.get(frozenset((x, y)), set())
                ex.feats.append(pair_features(doc.text, win, sa, sb, others, sal))
                ex.labels.append(frozenset(labels & set(RELATION_TYPES)))
                ex.source.append(source)
                ex.doc.append(doc.pmid)
    return ex


# ---------------------------------------------------------------- the model
class RelationTrainingError(RuntimeError):
    """The training corpus is missing or yields no usable examples."""


@dataclass
class _Fitted:
    vectorizer: TfidfVectorizer
    models: dict[str, LogisticRegression | float]  # a float = constant probability (too few positives to fit)
    version: str
    train_seconds: float
    n_examples: int
    cache_key: str = ""  # what it was trained under (model_cache.load_or_train checks it on load)


def fit(ex: Examples, C: float = 4.0, min_positives: int = 3) -> _Fitted:
    """One binary logistic regression per type on the examples whose source annotates that type."""
    t0 = time.perf_counter()
    if not ex.feats:
        raise RelationTrainingError("no training pairs: the corpora gave no co-occurring mentions")
    vec = TfidfVectorizer(analyzer=_identity, min_df=2, sublinear_tf=True, dtype=np.float32)
    X = vec.fit_transform(ex.feats)
    src = np.array(ex.source)
    models: dict[str, LogisticRegression | float] = {}
    for r in RELATION_TYPES:
        rows = np.flatnonzero((src == "biored") | ((src == "cdr") & (r == "Positive_Correlation")))
        y = np.array([r in ex.labels[k] for k in rows], dtype=int)
        if y.sum() < min_positives:
            models[r] = float(y.mean()) if len(y) else 0.0
            continue
        clf = LogisticRegression(C=C, solver="liblinear", max_iter=200, random_state=0)
        clf.fit(X[rows], y)
        models[r] = clf
    return _Fitted(vec, models, MODEL_VERSION, time.perf_counter() - t0, len(ex.feats))


def _file_digest(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        if not p.is_file():
            raise RelationTrainingError(f"{p}: relation training corpus not found")
        h.update(p.read_bytes())
    for mod_file in (__file__, sentences.__file__, cues.__file__):
        h.update(Path(mod_file).read_bytes())  # the features, the sentence splitter and the cues are part of the model
    h.update(MODEL_VERSION.encode())
    h.update(f"sklearn {sklearn.__version__} numpy {np.__version__}".encode())
    return h.hexdigest()[:16]


class LocalRelationModel:
    """Lazily trained, joblib-cached relation classifier; `probabilities` is the backbone's REA answer."""

    def __init__(self, cache_dir: str | Path, biored_path: Path | None = None, cdr_path: Path | None = None,
                 window: int = 0, C: float = 4.0) -> None:
        self.cache_dir = Path(cache_dir)
        self.biored_path = Path(biored_path) if biored_path else DEFAULT_BIORED
        self.cdr_path = Path(cdr_path) if cdr_path else (DEFAULT_CDR if biored_path is None else None)
        self.window = window
        self.C = C
        self._fitted: _Fitted | None = None
        self.loaded_from_cache: bool | None = None

    @property
    def cache_key(self) -> str:
        files = [self.biored_path] + ([self.cdr_path] if self.cdr_path else [])
        return f"{MODEL_VERSION}-w{self.window}-C{self.C:g}-{_file_digest(files)}"

    @property
    def fitted(self) -> _Fitted:
        if self._fitted is None:
            self._fitted = self._load_or_train()
        return self._fitted

    @property
    def version(self) -> str:
        """What answers REA (feeds the asset's code_version)."""
        return self.cache_key

    def _load_or_train(self) -> _Fitted:
        def train() -> _Fitted:
            biored = read_pubtator(self.biored_path)
            cdr = read_pubtator(self.cdr_path) if self.cdr_path else []
            t0 = time.perf_counter()
            fitted = fit(build_examples(biored, cdr, window=self.window), C=self.C)
            fitted.train_seconds = time.perf_counter() - t0
            log.info("relation model trained on %d pairs in %.1f s", fitted.n_examples, fitted.train_seconds)
            return fitted

        key = self.cache_key
        fitted, self.loaded_from_cache = load_or_train(
            self.cache_dir / f"relations-{key}.joblib", _Fitted, "fitted relation model", train, key=key)
        return fitted

    def predict_features(self, feats: list[list[str]]) -> list[dict[str, float]]:
        if not feats:
            return []
        f = self.fitted
        X = f.vectorizer.transform(feats)
        cols = []
        for r in RELATION_TYPES:
            m = f.models[r]
            cols.append(np.full(X.shape[0], m) if isinstance(m, float) else m.predict_proba(X)[:, 1])
        P = np.vstack(cols).T
        return [{r: float(P[i, k]) for k, r in enumerate(RELATION_TYPES)} for i in range(P.shape[0])]

    def probabilities(self, text: str, pairs: list[tuple[MentionSpan, MentionSpan]]) -> list[dict[str, float]]:
        """p(r | head, tail, text) per pair; the two mentions' window is the sentence(s) that hold them."""
        if not isinstance(text, str):
            raise TypeError(f"relation text must be a str, got {type(text).__name__}")
        if not pairs:
            return []
        sents = split_sentences(text) or [(0, len(text), text)]
        low = text.lower()
        all_mentions: dict[tuple[int, int], MentionSpan] = {}
        for k, (h, t) in enumerate(pairs):
            for m in (h, t):
                if not (0 <= m.start < m.end <= len(text)):
                    raise ValueError(f"pair {k}: mention {m.text!r} span {m.start}-{m.end} lies outside the text "
                                     f"(length {len(text)})")
                all_mentions[(m.start, m.end)] = m
        spans = {k: _Span(m.start, m.end, coarse_type(m.type)) for k, m in all_mentions.items()}
        feats = []
        for h, t in pairs:
            sh, st = spans[(h.start, h.end)], spans[(t.start, t.end)]
            ih, it = _sentence_of(sents, h.start), _sentence_of(sents, t.start)
            if ih < 0 or it < 0:  # a mention in the whitespace between sentences: use the whole text
                win = (0, len(text))
            else:
                win = (sents[min(ih, it)][0], sents[max(ih, it)][1])
            others = [s for s in spans.values() if s not in (sh, st) and s.start >= win[0] and s.end <= win[1]]
            feats.append(pair_features(text, win, sh, st, others,
                                       (_salience(low, h.text), _salience(low, t.text))))
        return self.predict_features(feats)
