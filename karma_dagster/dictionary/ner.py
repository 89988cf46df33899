"""Dictionary NER, the filter every backbone uses: matching over scispaCy tokens, abbreviations, variant patterns.

Pipeline: `spacy.blank("en")` + scispaCy's `combined_rule_tokenizer` (with hyphen infixes, see `make_nlp`) ->
scispaCy `abbreviation_detector` -> `karma_lexicon_ruler`. The ruler looks the document's token n-grams up in two
phrase tables (phrases.py: lower-case tokens for names, exact tokens for case-sensitive symbols), built from the
tokens the lexicon holds for each term (200k terms in about a second; spaCy's PhraseMatcher needed a Doc per
pattern, 7 s per process). Sequence variants come from
HGVS/dbSNP/protein-change regexes (a dictionary cannot list them). A short form defined in the text ("type 2
diabetes mellitus (T2DM)") takes the long form's type and id at every occurrence; a short form whose long form
is not an entity of ours may be dropped as a dictionary hit (off by default: on BioRED train held-out it cost
recall, F1 0.745 vs 0.757).
Overlaps keep the longest span (then the earliest).
"""

from __future__ import annotations

import warnings

# scispaCy builds an empty global matcher when a text has no abbreviation; harmless, and once per call.
warnings.filterwarnings("ignore", message=r".*\[W036\].*")
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

import scispacy.abbreviation  # noqa: F401  (registers the "abbreviation_detector" factory)
from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.util import filter_spans

from karma_dagster.dictionary.gene_aliases import GeneAliases
from karma_dagster.dictionary.learned_ner import load_learned
from karma_dagster.dictionary.lexicon import GENE_SYMBOL_SHAPE, HUMAN, Lexicon, make_nlp
from karma_dagster.dictionary.ner_training import MODEL_DIR
from karma_dagster.dictionary.phrases import PhraseTable
from karma_dagster.dictionary.symbols import CANDIDATE, gene_symbol_keys, symbol_key
from karma_dagster.dictionary.variants import (PROSE_VARIANT, is_amino_acid_in_change, prose_variant_id, rs_links,
                                               variant_id)
from karma_dagster.schemas.records import MentionSpan

NER_VERSION = "local-ner.v2"  # v2: a shared gene alias decided by its document (gene_aliases.py)

_AA1 = "ACDEFGHIKLMNPQRSTVWY"
_AA3 = "Ala|Arg|Asn|Asp|Cys|Gln|Glu|Gly|His|Ile|Leu|Lys|Met|Phe|Pro|Ser|Thr|Trp|Tyr|Val|Ter|Sec"
VARIANT_RE = re.compile(
    "|".join(
        [
            r"\brs\d{3,}\b",
            r"\bIVS\d+\s?[-+]\d+\s?[ACGT]\s?>\s?[ACGT]\b",
            r"\b[cgmnr]\.[-*+]?\d+(?:[-+]\d+)?\s[ACGT]\s?>\s?[ACGT]\b",
            r"\b[cgmnrp]\.[-*+]?[A-Za-z]{0,3}\d+[\w>*+\-_]*",
            rf"\b(?:{_AA3})\d{{1,5}}(?:{_AA3}|\*|X|fs\w*|del|dup|ins\w*)(?![A-Za-z0-9])",
            rf"\b[{_AA1}]\d{{1,5}}(?:[{_AA1}X*]|fs|del)(?![A-Za-z0-9])",
            r"(?<![\w.])[-+*]?\d+\s?[ACGT]\s?(?:>|->|-->)\s?[ACGT]\b",
            r"(?<![\w.])[-+]?\d+(?:_\d+)?(?:del|dup|ins)(?:[ACGT]+|\d+)?\b",
        ]
    )
)

_LIST_SEPARATOR = re.compile(r"^(?:,\s*|\s+and\s+|,\s+and\s+|\s*/\s*)$")

if not Doc.has_extension("karma_long_forms"):
    Doc.set_extension("karma_long_forms", default=None)


MEMO_TEXTS = 2048  # texts whose mentions a DictionaryNER remembers (a paper's sections, segments and summaries)
UNIONS = ("dictionary_first", "learned_first", "longest")  # how a learned span and an overlapping hit are settled


@Language.factory("karma_lexicon_ruler",
                  default_config={"suppress_undefined_abbreviations": False, "union": "longest"})
def make_lexicon_ruler(nlp: Language, name: str, suppress_undefined_abbreviations: bool, union: str
                       ) -> "LexiconRuler":
    return LexiconRuler(nlp, name, suppress_undefined_abbreviations, union)


_NAME_SUFFIX = re.compile(r"(?:in|ine|ase|ol|ide|ate|one|mab|nib|emia|aemia|itis|oma|osis|pathy|algia|uria|plasia|"
                          r"trophy|ism|cin|vir|pril|olol|azole|stat|amine)s?$", re.IGNORECASE)


def _name_shaped(text: str) -> bool:
    """Whether a name the learned NER found alone (no dictionary hit under it) has a name's shape. Trained on
    abstracts, on a PDF's full text it also tags "Figure", "held", "resp", "S2", an author ("Perou") and numbers:
    a lone word must carry a digit, an inner capital or a hyphen, or end like a drug, gene product or disease."""
    words = text.split()
    if len(words) > 1:
        return any(c.isalpha() for c in text)
    w = words[0] if words else ""
    if len(w) < 4 or not any(c.isalpha() for c in w):
        return False
    return (any(c.isdigit() for c in w) or any(c.isupper() for c in w[1:]) or "-" in w
            or bool(_NAME_SUFFIX.search(w)))


class LexiconRuler:
    """Writes `doc.ents` (label = NER type, kb_id = vocab id) and `doc._.karma_long_forms`."""

    def __init__(self, nlp: Language, name: str, suppress_undefined_abbreviations: bool = False,
                 union: str = "longest"):
        if union not in UNIONS:
            raise ValueError(f"karma_lexicon_ruler: union {union!r} is not one of {', '.join(UNIONS)}")
        self.union = union
        self.name = name
        self.vocab = nlp.vocab
        self.suppress = suppress_undefined_abbreviations
        self.lexicon: Lexicon | None = None
        self._lower = PhraseTable()  # names: lower-case tokens
        self._orth = PhraseTable()  # symbols: exact tokens
        self._types: list[str] = []
        self._symbols: dict[str, int] = {}
        self._ids: list[str] = []

    def load(self, lexicon: Lexicon) -> None:
        """Add one phrase pattern per lexicon row (its tokens), keyed by the row number."""
        self.lexicon = lexicon
        t = lexicon.table
        self._types = t["type"].tolist()
        self._symbols = gene_symbol_keys(lexicon)
        self._ids = [v if isinstance(v, str) else "" for v in t["vocab_id"].tolist()]
        for i, (term, tokens, cs) in enumerate(zip(t["term"], t["tokens"], t["case_sensitive"])):
            words = list(tokens)
            if not words:
                continue
            table = self._orth if cs else self._lower
            table.add(i, words)
            if len(words) > 1 and not any(c.isspace() for c in term):  # PI3K is PI3 K alone but one token in PI3K/Akt
                table.add(i, ["".join(words)])

    def __call__(self, doc: Doc) -> Doc:
        if self.lexicon is None:
            raise RuntimeError("karma_lexicon_ruler has no lexicon: call .load(lexicon) after add_pipe")
        learned = list(doc.ents)  # the learned NER's, when it runs before the ruler
        text = doc.text  # spaCy joins the tokens anew at each `doc.text`: once per call, not per span
        spans: list[Span] = []
        for table, words in ((self._lower, [t.lower_ for t in doc]), (self._orth, [t.text for t in doc])):
            for i, start, end in table.matches(words):
                spans.append(Span(doc, start, end, label=self._types[i], kb_id=self._ids[i]))
        for m in VARIANT_RE.finditer(text):
            span = doc.char_span(m.start(), m.end(), label="Variant", alignment_mode="expand")
            if span is not None:  # its id computed from how it is written (dictionary/variants.py)
                spans.append(Span(doc, span.start, span.end, label="Variant", kb_id=self._variant_kb(variant_id(span.text))))
        for m in PROSE_VARIANT.finditer(text):  # "arginine to tryptophan at codon 198": one variant, no chemicals
            span = doc.char_span(m.start(), m.end(), label="Variant", alignment_mode="expand")
            if span is not None:
                spans.append(Span(doc, span.start, span.end, label="Variant", kb_id=self._variant_kb(prose_variant_id(m))))
        spans += self._symbol_spans(doc, spans)
        if learned:
            spans = self._with_learned(doc, spans, learned)
        long_forms: dict[tuple[int, int], str] = {}
        abbrevs = getattr(doc._, "abbreviations", []) or []
        if abbrevs:
            spans = self._resolve_abbreviations(doc, spans, abbrevs, long_forms)
        kept = [s for s in filter_spans(spans)  # arginine in "arginine to proline": a variant's, not a chemical
                if not (s.label_ == "Chemical" and is_amino_acid_in_change(text, s.start_char, s.end_char))]
        kept = self._link_rs(doc, kept)
        kept = self._genes_listed_among_genes(doc, kept, text)
        kept = self._shared_gene_aliases(doc, kept, text)
        doc.set_ents(kept)
        doc._.karma_long_forms = {k: v for k, v in long_forms.items() if any(
            (s.start_char, s.end_char) == k for s in kept)}
        return doc

    def _genes_listed_among_genes(self, doc: Doc, spans: list[Span], text: str) -> list[Span]:
        """A symbol the lexicon types Disease but also knows as a gene is the gene when listed among genes
        ("TP53, RB1, APC, BCOR": on BioRED train, symbols listed among genes are 612 genes, 3 diseases).

        Not "the VHL gene" (BioRED train: 252 genes, 3 diseases): NCBI disease annotates that VHL as a disease,
        and it moved no BioRED dev id (NCBI disease dev mentions F1 0.737 -> 0.730 with it, 0.738 without)."""
        assert self.lexicon is not None
        spans = sorted(spans, key=lambda x: x.start)

        def listed_with(k: int) -> list[Span]:  # the spans a list separator joins to spans[k]
            s = spans[k]
            return [n for n in (spans[k - 1] if k else None, spans[k + 1] if k + 1 < len(spans) else None)
                    if n is not None and _LIST_SEPARATOR.match(
                        text[n.end_char:s.start_char] if n.start < s.start else text[s.end_char:n.start_char])]

        out = []
        for k, s in enumerate(spans):
            if s.label_ == "Disease" and GENE_SYMBOL_SHAPE.fullmatch(s.text):
                near = listed_with(k)
                if near and all(n.label_ == "Gene" for n in near) and (ids := self.lexicon.taxon_ids(s.text)):
                    s = Span(doc, s.start, s.end, label="Gene", kb_id=ids.get(HUMAN) or ids[min(ids)])
            out.append(s)
        return out

    def _shared_gene_aliases(self, doc: Doc, spans: list[Span], text: str) -> list[Span]:
        """A gene alias several human genes share ("COX-2": PTGS2 and MT-CO2) names the one its document's words
        tell, else the nuclear gene (dictionary/gene_aliases.py)."""
        aliases = GeneAliases.load()
        out = []
        for s in spans:
            if s.label_ == "Gene" and s.kb_id_.startswith("NCBIGene:"):
                vid = aliases.resolve(s.text, s.kb_id_, text)
                if vid != s.kb_id_:
                    s = Span(doc, s.start, s.end, label=s.label_, kb_id=vid)
            out.append(s)
        return out

    def _with_learned(self, doc: Doc, hits: list[Span], learned: list[Span]) -> list[Span]:
        """The dictionary's hits and the learned NER's spans as one list. `dictionary_first`: a learned span only
        where no hit overlaps it; `learned_first`: a learned span replaces the hits it overlaps; `longest`: a learned
        span overlapping a hit of another type is dropped, else filter_spans keeps the longest. A learned span takes
        the id of the lexicon entry its text names with its type (a variant: the id its form gives), else that of
        the longest hit of its type it overlaps, else none (normalized later against the KG's names)."""
        assert self.lexicon is not None
        bounds = {(h.start, h.end) for h in hits}
        out = list(hits)
        for s in learned:
            if (s.start, s.end) in bounds:
                continue
            overlapping = [h for h in out if h.start < s.end and s.start < h.end]
            if not overlapping and not _name_shaped(s.text):
                continue
            if overlapping and self.union == "dictionary_first":
                continue
            if self.union == "longest" and any(h.label_ != s.label_ for h in overlapping):
                continue  # "BRCA1 loss" (Disease) over the gene hit BRCA1: the typed hit stays
            if self.union == "learned_first":
                out = [h for h in out if not (h.start < s.end and s.start < h.end)]
            if s.label_ == "Variant":
                kb = self._variant_kb(variant_id(s.text))
            else:
                entry = self.lexicon.lookup(s.text)
                kb = entry.vocab_id or "" if entry is not None and entry.type == s.label_ else ""
            same = [h for h in overlapping if h.label_ == s.label_ and h.kb_id_]
            if not kb and same:  # "hereditary breast cancer" over the hit "breast cancer": the hit's id
                kb = max(same, key=len).kb_id_
            out.append(Span(doc, s.start, s.end, label=s.label_, kb_id=kb))
        return out

    @staticmethod
    def _link_rs(doc: Doc, spans: list[Span]) -> list[Span]:
        """A change written beside its rs number ("Arg399Gln (rs25487)") takes the rs id at every occurrence."""
        links = rs_links(doc.text, [(s.start_char, s.end_char, s.kb_id_) for s in spans if s.label_ == "Variant" and s.kb_id_])
        if not links:
            return spans
        return [Span(doc, s.start, s.end, label=s.label_, kb_id=links[s.kb_id_])
                if s.label_ == "Variant" and s.kb_id_ in links else s for s in spans]

    def _variant_kb(self, form: str | None) -> str:
        """A variant's id: the dbSNP id train annotated its form with (V600E -> rs113488022), else the form."""
        if not form:
            return ""
        assert self.lexicon is not None
        entry = self.lexicon.lookup(form)
        return entry.vocab_id if entry is not None and entry.type == "Variant" and entry.vocab_id else form

    def _symbol_spans(self, doc: Doc, spans: list[Span]) -> list[Span]:
        """Gene symbols written with a hyphen or a Greek letter the lexicon does not list (FGFR-4, HNF4alpha),
        where no dictionary span already covers the word (dictionary/symbols.py)."""
        out = []
        for m in CANDIDATE.finditer(doc.text):
            i = self._symbols.get(symbol_key(m.group()))
            if i is None or any(s.start_char < m.end() and m.start() < s.end_char for s in spans):
                continue
            span = doc.char_span(m.start(), m.end(), alignment_mode="strict")
            if span is not None:
                out.append(Span(doc, span.start, span.end, label=self._types[i], kb_id=self._ids[i]))
        return out

    def _resolve_abbreviations(self, doc: Doc, spans: list[Span], abbrevs: list[Span],
                               long_forms: dict[tuple[int, int], str]) -> list[Span]:
        by_long: dict[tuple[int, int], Span | None] = {}
        for short in abbrevs:
            lf: Span = short._.long_form
            key = (lf.start_char, lf.end_char)
            if key not in by_long:
                by_long[key] = self._long_form_entity(doc, lf, spans)
        short_spans = {(s.start, s.end): s for s in abbrevs}
        out = [s for s in spans if not (self.suppress and (s.start, s.end) in short_spans and s.label_ != "Variant")]
        for (start, end), short in short_spans.items():
            lf = short._.long_form
            ent = by_long[(lf.start_char, lf.end_char)]
            if ent is None:
                continue
            out = [s for s in out if (s.start, s.end) != (start, end)]
            out.append(Span(doc, start, end, label=ent.label_, kb_id=ent.kb_id_))
            long_forms[(short.start_char, short.end_char)] = ent.text if ent.end_char == lf.end_char else lf.text
        return out

    def _long_form_entity(self, doc: Doc, lf: Span, spans: list[Span]) -> Span | None:
        """The entity the long form names: the longest match inside it ending at its end, or a whole-string lookup."""
        inside = [s for s in spans if s.start >= lf.start and s.end == lf.end]
        if inside:
            return max(inside, key=len)
        assert self.lexicon is not None
        entry = self.lexicon.lookup(lf.text)
        if entry is not None:
            return Span(doc, lf.start, lf.end, label=entry.type, kb_id=entry.vocab_id or "")
        return None


class DictionaryNER:
    """Dictionary NER over a `Lexicon`; `types` restricts what it reports (None = every lexicon type)."""

    def __init__(self, lexicon: Lexicon, *, types: Iterable[str] | None = None,
                 suppress_undefined_abbreviations: bool = False, learned: Path | None = MODEL_DIR,
                 union: str = "longest"):
        self.lexicon = lexicon
        self.types = frozenset(types) if types is not None else None
        self.nlp = make_nlp()
        self.learned = load_learned(self.nlp, learned) if learned is not None else None
        self.nlp.add_pipe("abbreviation_detector")
        ruler = self.nlp.add_pipe(
            "karma_lexicon_ruler",
            config={"suppress_undefined_abbreviations": suppress_undefined_abbreviations, "union": union}
        )
        ruler.load(lexicon)
        # The reader, the summarizer, the entity agent and its dictionary screen each ask about the same texts; the
        # pipeline is a pure function of the text, so a text is read once (and a paper's texts in one nlp.pipe).
        self._memo: OrderedDict[str, tuple[MentionSpan, ...]] = OrderedDict()
        self._memo_lock = threading.Lock()

    @property
    def version(self) -> str:
        learned = f"+{self.learned.version}" if self.learned is not None else ""
        return f"{NER_VERSION}+{self.lexicon.fingerprint}{learned}"

    def _spans(self, doc: Doc) -> list[MentionSpan]:
        long_forms = doc._.karma_long_forms or {}
        out = []
        for ent in doc.ents:
            if self.types is not None and ent.label_ not in self.types:
                continue
            out.append(
                MentionSpan(
                    start=ent.start_char, end=ent.end_char, text=ent.text, type=ent.label_,
                    long_form=long_forms.get((ent.start_char, ent.end_char)), vocab_id=ent.kb_id_ or None,
                )
            )
        return out

    def recognize(self, text: str) -> list[MentionSpan]:
        if not isinstance(text, str):
            raise TypeError(f"DictionaryNER.recognize needs a str, got {type(text).__name__}")
        known = self._recall(text)
        if known is not None:
            return list(known)
        spans = tuple(self._spans(self.nlp(text)))
        self._remember(text, spans)
        return list(spans)

    def prefetch(self, texts: Iterable[str], batch_size: int = 64) -> None:
        """Read the texts not read yet in one `nlp.pipe` pass; `recognize` then answers them from memory."""
        todo = list(dict.fromkeys(t for t in texts if isinstance(t, str) and self._recall(t) is None))
        for text, doc in zip(todo, self.nlp.pipe(todo, batch_size=batch_size), strict=True):
            self._remember(text, tuple(self._spans(doc)))

    def _recall(self, text: str) -> tuple[MentionSpan, ...] | None:
        with self._memo_lock:
            known = self._memo.get(text)
            if known is not None:
                self._memo.move_to_end(text)
            return known

    def forget_texts(self) -> None:
        """Forget the texts read so far: the pipeline is kept, and the next question is read anew."""
        with self._memo_lock:
            self._memo.clear()

    def _remember(self, text: str, spans: tuple[MentionSpan, ...]) -> None:
        with self._memo_lock:
            self._memo[text] = spans
            while len(self._memo) > MEMO_TEXTS:
                self._memo.popitem(last=False)

    def recognize_many(self, texts: Iterable[str], batch_size: int = 64) -> list[list[MentionSpan]]:
        return [self._spans(doc) for doc in self.nlp.pipe(texts, batch_size=batch_size)]

    def learned_spans(self, texts: Iterable[str]) -> list[list[MentionSpan]]:
        """The learned NER's spans alone, before the dictionary sees them (for measuring it; [] without it)."""
        if self.learned is None:
            return [[] for _ in texts]
        with self.nlp.select_pipes(enable=["learned_ner"]):
            return [[MentionSpan(start=e.start_char, end=e.end_char, text=e.text, type=e.label_) for e in doc.ents]
                    for doc in self.nlp.pipe(texts)]

    def count_hits(self, text: str) -> int:
        return len(self.recognize(text))
