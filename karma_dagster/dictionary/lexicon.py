"""The shared dictionary: typed terms from the KG, Hetionet, MeSH (2015's names, today's new descriptors, disease
entry terms and drugs' supplementary concepts), HGNC (human gene names and former symbols) and the TRAIN corpora'
annotations. Ids prefer the corpora, then MeSH, then the KG, then Hetionet and HGNC (`SOURCE_RANK`).

Why a filtered dictionary: vocabularies hold many names that are ordinary words in running text ("Cells",
"Water", "CAT"). A term that occurs in the training text but is mostly *not* annotated there is dropped
(annotated/occurrence ratio < `min_ratio`), and only corpora that annotate the term's type are asked.
Matching is case-insensitive for names and case-sensitive for short or mixed-case symbols (AIDS vs aids).
Dev splits are never read here.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.dictionary.variants import split_identifier, variant_id
from karma_dagster.runtime.integrity import PARQUET_WRITE, StoreCorrupt, quarantine, read_parquet_checked
from karma_dagster.runtime.paths import data_file
from karma_dagster.project.safe_files import replace_with

LEXICON_VERSION = "lexicon.v1"

# KG node kind -> NER type; None = not proposed by the dictionary NER (GO terms and pathways read as prose).
KIND_TO_TYPE: dict[str, str | None] = {
    "Gene": "Gene", "Compound": "Chemical", "Disease": "Disease", "Symptom": "Disease",
    "Side Effect": "Disease", "Anatomy": "Anatomy", "Pharmacologic Class": "Chemical", "Species": "Species",
    "Cell Line": "CellLine", "Variant": "Variant", "Pathway": None, "Biological Process": None,
    "Cellular Component": None, "Molecular Function": None,
}
# Corpus annotation types -> NER type.
CORPUS_TYPE: dict[str, str] = {
    "GeneOrGeneProduct": "Gene", "DiseaseOrPhenotypicFeature": "Disease", "ChemicalEntity": "Chemical",
    "SequenceVariant": "Variant", "OrganismTaxon": "Species", "CellLine": "CellLine", "Chemical": "Chemical",
    "Disease": "Disease", "SpecificDisease": "Disease", "DiseaseClass": "Disease", "Modifier": "Disease",
    "CompositeMention": "Disease",
}
# Which NER types each training corpus annotates (an unannotated occurrence only counts against a term there).
CORPORA: dict[str, tuple[str, frozenset[str]]] = {
    "biored": ("biored-train.pubtator.gz", frozenset({"Gene", "Disease", "Chemical", "Variant", "Species", "CellLine"})),
    "bc5cdr": ("bc5cdr-train.pubtator.gz", frozenset({"Chemical", "Disease"})),
    "ncbi": ("ncbi-disease-train.pubtator.gz", frozenset({"Disease"})),
}
HETIONET_PREFIX = {
    "Gene": "NCBIGene:", "Compound": "DRUGBANK:", "Disease": "", "Symptom": "MESH:", "Side Effect": "UMLS:",
    "Anatomy": "", "Pharmacologic Class": "NDFRT:", "Pathway": "", "Biological Process": "",
    "Cellular Component": "", "Molecular Function": "",
}
SOURCE_RANK = {"corpus": 0, "mesh": 1, "kg": 2, "hetionet": 3, "hgnc": 3}  # id preference (MeSH/NCBIGene ids compare to corpora)
GREEK = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "kappa": "κ", "epsilon": "ε"}
_WS = re.compile(r"\s+")
# an eponymous disease name as MeSH writes it (no possessive), and a numbered subtype without its "type"
_EPONYM = re.compile(
    r"^([A-Z][a-z]+(?:-[A-Z][a-z]+)?(?<!ic)(?<!al)(?<!ar)(?<!ous)(?<!ive)(?<!ed)) "  # Gitelman, not Hemolytic
    r"((?:Disease|Syndrome|Sarcoma|Lymphoma|Tumor|Palsy|Phenomenon|Anomaly|Ataxia|Dystrophy|Encephalopathy|"
    r"Leukemia|Neuroma|Neuralgia|Arthritis|Anemia)\b.*)$")
# American -> British spelling (MeSH and Hetionet write anemia, edema, hemorrhage; many abstracts anaemia, oedema,
# haemorrhage): applied together, one British variant per name
BRITISH = (
    (re.compile(r"(?<=[a-z])emi(?=as?\b|c\b)", re.IGNORECASE), "aemi"),  # anemia, ischemic, hypokalemia, leukemia
    (re.compile(r"\b(h)em(?=[aeo])", re.IGNORECASE), r"\1aem"),  # hemorrhage, hematoma, hemolytic
    (re.compile(r"(?<=[a-z])hem(?=or|at)"), "haem"),  # cerebral/intrahemorrhage inside a word
    (re.compile(r"\b(e)(?=dema|sophag|strog|strad|striol)", re.IGNORECASE),  # oedema, oesophagus, oestrogen
     lambda m: "Oe" if m.group(1).isupper() else "oe"),
    (re.compile(r"(?<=[a-z])esthe(?=si|ti)"), "aesthe"),  # paresthesia, anesthetic
    (re.compile(r"\b(a)nesthe", re.IGNORECASE), r"\1naesthe"),
    (re.compile(r"(?<=[Tt]um)or\b"), "our"),  # tumor
    (re.compile(r"(?<=rrh)ea\b"), "oea"),  # diarrhea, amenorrhea
    (re.compile(r"(?<=[Ss]ul)f(?=[auio])"), "ph"),  # sulfate, sulfur, sulfonamide
    (re.compile(r"\b(p)edi(?=atr)", re.IGNORECASE), r"\1aedi"),  # pediatric
    (re.compile(r"\b(f)et(?=al\b|us\b)", re.IGNORECASE), r"\1oet"),  # fetal
)
# a drug descriptor named with its salt (MeSH 2015: Tiapride Hydrochloride, Dizocilpine Maleate): papers name the drug
_SALT = re.compile(r"^([A-Z][a-z]{3,}) (?:Hydrochloride|Dihydrochloride|Hydrobromide|Maleate|Mesylate|Fumarate|"
                   r"Tartrate|Succinate|Besylate|Hyclate)$")
# a salt MeSH names that is also a plain chemical (Calcium Chloride, Vinyl Chloride): its stem is a synonym only
# when it is a drug Hetionet names (Methacholine Chloride: methacholine, Vecuronium Bromide: vecuronium)
_DRUG_SALT = re.compile(r"^([A-Z][a-z]{3,}) (?:Chloride|Bromide|Citrate)$")
GENE_SYMBOL_SHAPE = re.compile(r"[A-Z][A-Z0-9-]{1,7}")  # VHL, APC, NF1
_NUMBERED = re.compile(r"^([A-Za-z][\w -]*[a-z]) ((?:[IVX]+|\d{1,2})[A-Z]?)$")


VOCAB_FILES = ("hetionet-nodes.tsv.gz", "mesh-terms.tsv.gz", "mesh-tree-numbers.tsv.gz", "mesh-current.tsv.gz",
               "mesh-supplementary-drugs.tsv.gz", "hgnc-genes.tsv.gz")


class LexiconError(ValueError):
    """A vocabulary/corpus file that is missing or malformed."""


class LexiconConfig(BaseModel):
    """Build knobs; they are part of the cache key. Defaults were set on BioRED TRAIN (held-out part)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min_ratio: float = Field(0.5, ge=0, le=1, description="keep a term when annotated/occurrences >= this on train")
    min_occurrences: int = Field(2, ge=1, description="below this many train occurrences the ratio is not judged")
    use_mesh: bool = True
    use_hetionet: bool = True
    use_corpora: bool = True
    use_mesh_current: bool = Field(True, description="MeSH descriptors newer than 2015, entry terms, drugs' C ids")
    use_hgnc: bool = Field(True, description="HGNC names, aliases and previous symbols of human genes")
    max_tokens: int = Field(12, ge=1)
    exclude_pmids: tuple[str, ...] = Field((), description="train documents held out (for tuning on train)")


@dataclass(frozen=True)
class LexiconEntry:
    term: str
    type: str
    vocab_id: str | None
    source: str
    case_sensitive: bool


def normalize_space(text: str) -> str:
    return _WS.sub(" ", text).strip()


def hetionet_to_vocab_id(node_id: str) -> tuple[str, str]:
    """`Gene::6616` -> (`Gene`, `NCBIGene:6616`); `Disease::DOID:9352` -> (`Disease`, `DOID:9352`)."""
    kind, sep, local = node_id.partition("::")
    if not sep or not local:
        raise LexiconError(f"not a Hetionet node id (Kind::id): {node_id!r}")
    return kind, f"{HETIONET_PREFIX.get(kind, '')}{local}"


def corpus_vocab_id(ner_type: str, identifier: str) -> str | None:
    """A corpus identifier with its namespace, so it compares across sources (MESH:D003924, NCBIGene:3630).

    The first id of a list (`split_identifier`: a variant's `p|SUB|V|1764|M` is one id, kept whole)."""
    parts = split_identifier(ner_type, identifier)
    if not parts:
        return None
    ident = parts[0]
    if ":" in ident:  # OMIM:123, already prefixed
        return ident
    if ner_type == "Gene":
        return f"NCBIGene:{ident}"
    if ner_type in {"Disease", "Chemical"}:
        return f"MESH:{ident}"
    if ner_type == "Species":
        return f"NCBITaxon:{ident}"
    if ner_type == "CellLine":
        return f"Cellosaurus:{ident}"
    return ident


def mesh_type(tree_numbers: Iterable[str]) -> str | None:
    """MeSH tree branch -> NER type (C/F03 disease, D chemical, proteins/enzymes gene, B01 organisms, A anatomy)."""
    types = set()
    for tn in tree_numbers:
        if tn.startswith(("D12.776", "D08.811")):
            types.add("Gene")
        elif tn.startswith("C") or tn.startswith("F03"):
            types.add("Disease")
        elif tn.startswith("D"):
            types.add("Chemical")
        elif tn.startswith("B01"):
            types.add("Species")
        elif tn.startswith("A"):
            types.add("Anatomy")
    for t in ("Disease", "Gene", "Chemical", "Species", "Anatomy"):  # precedence when a descriptor sits in two
        if t in types:
            return t
    return None


def make_nlp():  # -> spacy.Language
    """spaCy blank English with scispaCy's tokenizer, plus hyphen/slash infixes so `BRCA1-mutated` yields `BRCA1`
    (and a genotype's parenthesis: `Ptpn22(-/-)` yields `Ptpn22`).

    Measured on BioRED train: 10.6 % of gold mention boundaries fall inside a combined_rule_tokenizer token,
    2.9 % with the extra infixes (spaCy's default tokenizer: 3.2 %).
    """
    import spacy

    from karma_dagster.dictionary.sentences import scispacy_tokenizer  # scispaCy's, built without re's warning

    nlp = spacy.blank("en")
    tok = scispacy_tokenizer(nlp)
    extra = r"(?<=[A-Za-z0-9αβγδκε])[-/](?=[A-Za-z0-9αβγδκε])|(?<=[A-Za-z0-9])\((?=[-+/])"  # Ptpn22(-/-), CXCR4(+)
    tok.infix_finditer = re.compile(tok.infix_finditer.__self__.pattern + "|" + extra).finditer  # type: ignore[attr-defined]
    nlp.tokenizer = tok
    return nlp


def read_tsv_gz(path: Path, ncols: int) -> list[list[str]]:
    """The rows (of at least `ncols` columns) of a shipped gzipped vocabulary TSV, its header checked and skipped."""
    if not path.exists():
        raise LexiconError(f"vocabulary file not found: {path}")
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        header = fh.readline()
        if header.count("\t") + 1 < ncols:
            raise LexiconError(f"{path.name}: expected {ncols} tab-separated columns, header is {header!r}")
        for line in fh:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= ncols:
                rows.append(cols)
    return rows


def _is_case_sensitive(term: str, ner_type: str) -> bool:
    """Symbols (no space, short or with an inner capital) match case-sensitively; names do not."""
    if " " in term:
        return False
    inner_upper = any(c.isupper() for c in term[1:])
    return inner_upper or (len(term) <= 4 and any(c.isupper() for c in term))


ORGAN_ADJECTIVES = {"Heart": "Cardiac", "Kidney": "Renal", "Liver": "Hepatic", "Lung": "Pulmonary",
                    "Muscle": "Muscular", "Brain": "Cerebral", "Stomach": "Gastric", "Skin": "Cutaneous", "Eye": "Ocular"}
_ORGAN = re.compile(r"\b(" + "|".join([*ORGAN_ADJECTIVES, *ORGAN_ADJECTIVES.values()]) + r")\b", re.IGNORECASE)
_ORGAN_SWAP = {k.lower(): v for a, b in ORGAN_ADJECTIVES.items() for k, v in ((a, b), (b, a))}


def _organ_synonyms(name: str) -> set[str]:
    """A disease name with its organ written the other way (MeSH's Heart Failure is papers' cardiac failure,
    Kidney Failure, Chronic their chronic renal failure)."""
    out = set()
    for t in {name, *([" ".join(reversed(name.split(", ")))] if ", " in name else [])}:
        if _ORGAN.search(t):
            out.add(_ORGAN.sub(lambda m: _ORGAN_SWAP[m.group(1).lower()], t))
    return out


def _british(text: str) -> str:
    for pattern, repl in BRITISH:
        text = pattern.sub(repl, text)
    return text


def _variants(term: str, ner_type: str, source: str) -> set[str]:
    """Surface variants: uninverted MeSH names, greek letters, MeSH disease names as papers write them (Gitelman's
    syndrome, mucopolysaccharidosis type VI, telangiectasia for Telangiectasis), British spellings (anaemia,
    oedema), singular/plural heads, mouse-style gene symbols."""
    out = {term}
    if source == "mesh" and ", " in term:
        parts = term.split(", ")
        out.add(" ".join(reversed(parts)))
    for t in list(out):
        low = t.lower()
        for word, sym in GREEK.items():
            if re.search(rf"\b{word}\b", low):
                out.add(re.sub(rf"\b{word}\b", sym, t, flags=re.IGNORECASE))
                out.add(re.sub(rf"(?<=[A-Za-z0-9])[- ]?\b{word}\b", sym, t, flags=re.IGNORECASE))
    if ner_type == "Disease" and source == "mesh":
        for t in list(out):
            if m := _EPONYM.match(t):  # MeSH's Gitelman Syndrome, Hodgkin Disease: papers write Gitelman's syndrome
                possessive = "'" if m.group(1).endswith("s") else "'s"  # Graves' disease
                out.add(f"{m.group(1)}{possessive} {m.group(2)}")
            if m := _NUMBERED.match(t):  # Mucopolysaccharidosis VI: mucopolysaccharidosis type VI
                out.add(f"{m.group(1)} type {m.group(2)}")
            if re.search(r"[a-z]{3}sis$", t):  # Telangiectasis, Hyperkinesis: telangiectasia, hyperkinesia
                out.add(t[:-1] + "a")
    if ner_type in {"Disease", "Chemical", "Anatomy"}:  # British spellings of (mostly American) vocabulary names
        for t in list(out):
            british = _british(t)
            if british != t:
                out.add(british)
    if ner_type in {"Disease", "Anatomy"} and len(term) >= 5:
        for t in list(out):
            if " " in t and t.split(" ")[-1][:1].isupper() and source != "mesh":
                continue
            if t.endswith("ies"):
                out.add(t[:-3] + "y")
            elif t.endswith("s") and not t.endswith(("ss", "us", "is", "sis")):
                out.add(t[:-1])
            elif t[-1:].isalpha() and not t.endswith(("s", "x", "y", "a")):
                out.add(t + "s")
    if ner_type == "Gene" and source in {"hetionet", "kg"} and re.fullmatch(r"[A-Z][A-Z0-9]{3,9}", term):
        out.add(term[0] + term[1:].lower())
    return {normalize_space(t) for t in out if t}


LEXICON_COLUMNS = ("key", "term", "tokens", "type", "vocab_id", "source", "case_sensitive", "taxon_ids")
HUMAN = "9606"


class Lexicon:
    """Typed terms (one row per matchable surface form) with their tokens, as a DataFrame.

    Columns: key (lowercased unless case-sensitive), term, tokens, type, vocab_id, source, case_sensitive,
    taxon_ids (a gene's id per species, `9606=NCBIGene:348;10090=NCBIGene:11816`, "" when unknown),
    n_occ, n_ann (train occurrences and annotated occurrences).
    """

    def __init__(self, table: pd.DataFrame, fingerprint: str):
        missing = set(LEXICON_COLUMNS) - set(table.columns)
        if missing:
            raise LexiconError(f"lexicon table lacks columns {sorted(missing)}")
        self.table = table.reset_index(drop=True)
        self.fingerprint = fingerprint
        self._ci: dict[str, int] = {}
        self._cs: dict[str, int] = {}
        self._by_id: dict[str, dict[str, str]] | None = None
        self._entries: dict[int, LexiconEntry] = {}
        for i, (key, cs) in enumerate(zip(self.table["key"], self.table["case_sensitive"])):
            (self._cs if cs else self._ci)[key] = i

    def __len__(self) -> int:
        return len(self.table)

    def entry(self, i: int) -> LexiconEntry:
        """Memoised: a pandas row access costs ~0.2 ms, and the controller looks up every title's n-grams (a
        month of PubMed is ~100,000 titles)."""
        got = self._entries.get(i)
        if got is None:
            t = self.table
            got = self._entries[i] = LexiconEntry(t.at[i, "term"], t.at[i, "type"], t.at[i, "vocab_id"],
                                                  t.at[i, "source"], bool(t.at[i, "case_sensitive"]))
        return got

    def lookup(self, text: str) -> LexiconEntry | None:
        """The entry for a whole string (exact case for symbols, any case for names)."""
        t = normalize_space(text)
        i = self._cs.get(t)
        if i is None:
            i = self._ci.get(t.lower())
        return None if i is None else self.entry(i)

    def taxon_ids(self, text: str) -> dict[str, str]:
        """A gene name's NCBI Gene id per NCBI taxon (`{"9606": "NCBIGene:348", "10090": "NCBIGene:11816"}`),
        empty when the lexicon does not know the name's species."""
        t = normalize_space(text)
        i = self._cs.get(t)
        if i is None:
            i = self._ci.get(t.lower())
        raw = "" if i is None else self.table.at[i, "taxon_ids"]
        return dict(p.split("=", 1) for p in raw.split(";")) if isinstance(raw, str) and raw else {}

    def id_taxon_ids(self, vocab_id: str | None) -> dict[str, str]:
        """A gene id's per-taxon ids, from every name whose default id it is (CASR's for a `CaSR` the symbol keys
        matched, whose own spelling is no lexicon key), empty when no name tells its species."""
        if self._by_id is None:
            by_id: dict[str, dict[str, str]] = {}
            for vid, raw in zip(self.table["vocab_id"], self.table["taxon_ids"]):  # table order: type, key
                if isinstance(vid, str) and isinstance(raw, str) and raw:
                    slot = by_id.setdefault(vid, {})
                    for taxon, tid in (p.split("=", 1) for p in raw.split(";")):
                        slot.setdefault(taxon, tid)
            self._by_id = by_id
        return dict(self._by_id.get(vocab_id or "", {}))

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and self.lookup(text) is not None

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        kg_entities: Iterable[Mapping[str, Any] | Any] = (),
        *,
        vocab_dir: Path | None = None,
        corpora_dir: Path | None = None,
        cache_dir: Path | None = None,
        config: LexiconConfig = LexiconConfig(),
    ) -> "Lexicon":
        """Build (or load from `cache_dir`, keyed by a hash of every input) the lexicon.

        `vocab_dir` and `corpora_dir` default to the shipped data/vocab and data/corpora.
        """
        kg_rows = [_as_kg_row(r) for r in kg_entities]
        vocab_dir = Path(vocab_dir) if vocab_dir is not None else data_file("vocab")
        corpora_dir = Path(corpora_dir) if corpora_dir is not None else data_file("corpora")
        files = [vocab_dir / n for n in VOCAB_FILES]
        files += [corpora_dir / f for f, _ in CORPORA.values()]
        h = hashlib.sha256(LEXICON_VERSION.encode())
        h.update(Path(__file__).read_bytes())  # a code change invalidates the cache too
        h.update(Path(variant_id.__code__.co_filename).read_bytes())  # the variant forms of its rs rows
        h.update(config.model_dump_json().encode())
        for f in files:
            if not f.exists():
                raise LexiconError(f"lexicon input not found: {f}")
            h.update(f.name.encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
        h.update(json.dumps(kg_rows, sort_keys=True).encode())
        fingerprint = h.hexdigest()[:16]
        if not cache_dir:
            return cls(_build_table(kg_rows, vocab_dir, corpora_dir, config), fingerprint)
        cache = Path(cache_dir) / f"lexicon-{fingerprint}.parquet"
        cache.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(cache) + ".lock"):  # processes sharing the cache (workers, a run beside the UI) build it once
            if cache.exists():
                try:  # a damaged or foreign cache file is never used: moved aside (kept) and rebuilt, with a warning
                    return cls(read_parquet_checked(cache, "lexicon cache", columns=LEXICON_COLUMNS), fingerprint)
                except StoreCorrupt as exc:
                    quarantine(cache, "lexicon cache", exc.detail)
            table = _build_table(kg_rows, vocab_dir, corpora_dir, config)
            replace_with(cache, lambda fh: table.to_parquet(fh, index=False, **PARQUET_WRITE))
        return cls(table, fingerprint)


def _as_kg_row(row: Mapping[str, Any] | Any) -> dict[str, Any]:
    get = row.get if isinstance(row, Mapping) else (lambda k, d=None: getattr(row, k, d))
    ident, name, kind = get("id") or get("entity_id"), get("name"), get("kind")
    if not ident or not name or not kind:
        raise LexiconError(f"KG entity row needs id, name and kind: {row!r}")
    return {"id": str(ident), "name": str(name), "kind": str(kind), "synonyms": [str(s) for s in (get("synonyms") or [])]}


def _build_table(kg_rows: list[dict[str, Any]], vocab_dir: Path, corpora_dir: Path, config: LexiconConfig) -> pd.DataFrame:
    from spacy.lang.en.stop_words import STOP_WORDS

    t0 = time.perf_counter()
    # candidates: surface -> list of (type, vocab_id, source, weight)
    cands: dict[str, list[tuple[str, str | None, str, int]]] = defaultdict(list)
    # gene surface -> (taxon, NCBIGene id) -> votes: the same symbol names a human and a mouse gene (Sox2)
    gene_taxa: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    human_genes: set[str] = set()
    variant_rs: dict[str, set[str]] = defaultdict(set)  # tmVar form (p|SUB|V|600|E) -> dbSNP ids train gave it

    def add_gene_taxon(term: str, vocab_id: str | None, taxon: str | None, source: str) -> None:
        if vocab_id and taxon and vocab_id.startswith("NCBIGene:"):
            for v in _variants(normalize_space(term), "Gene", source):
                gene_taxa[v][(taxon, vocab_id)] += 1

    def add(term: str, ner_type: str | None, vocab_id: str | None, source: str, weight: int = 1) -> None:
        if ner_type is None:
            return
        for v in _variants(normalize_space(term), ner_type, source):
            cands[v].append((ner_type, vocab_id, source, weight))

    drug_names: set[str] = set()  # Hetionet's compounds, lower case
    if config.use_hetionet:
        for node_id, name, kind in read_tsv_gz(vocab_dir / "hetionet-nodes.tsv.gz", 3):
            _kind, vid = hetionet_to_vocab_id(node_id)
            if kind == "Compound":
                drug_names.add(name.lower())
            add(name, KIND_TO_TYPE.get(kind), vid, "hetionet")
            if kind == "Gene":  # Hetionet's genes are human ones
                human_genes.add(vid)
                add_gene_taxon(name, vid, HUMAN, "hetionet")
    trees: dict[str, list[str]] = defaultdict(list)
    synonyms: list[tuple[str, str, str]] = []  # (surface, type, MeSH id), added after every exact name
    if config.use_mesh:
        for mesh_id, _name, tn in read_tsv_gz(vocab_dir / "mesh-tree-numbers.tsv.gz", 3):
            trees[mesh_id].append(tn)
        for mesh_id, name in read_tsv_gz(vocab_dir / "mesh-terms.tsv.gz", 2):
            ner_type = mesh_type(trees.get(mesh_id, []))
            add(name, ner_type, f"MESH:{mesh_id}", "mesh")
            if ner_type == "Disease":
                synonyms += [(v, ner_type, f"MESH:{mesh_id}") for v in sorted(_organ_synonyms(name))]
            elif ner_type == "Chemical" and (m := _SALT.match(name)):  # Tiapride Hydrochloride: tiapride
                synonyms.append((m.group(1), ner_type, f"MESH:{mesh_id}"))
            elif ner_type == "Chemical" and (m := _DRUG_SALT.match(name)) and m.group(1).lower() in drug_names:
                synonyms.append((m.group(1), ner_type, f"MESH:{mesh_id}"))
    # Today's MeSH: drugs named since 2015 (deferasirox), the disease entry terms papers write (NAFLD). Only its
    # diseases and chemicals: the corpora name species, genes and cell lines by other vocabularies' ids. Chemical
    # entry terms are left out: on a quarter of each train split held out of the lexicon they cost BC5CDR chemical
    # ids (F1 0.831 -> 0.805) and BioRED's (0.633 -> 0.613); disease entry terms gain (BioRED 0.736 -> 0.776).
    if config.use_mesh_current:
        for mesh_id, name, entry_terms, tns in read_tsv_gz(vocab_dir / "mesh-current.tsv.gz", 4):
            ner_type = mesh_type(tns.split("|"))
            if ner_type not in {"Disease", "Chemical"}:
                continue
            vid = f"MESH:{mesh_id}"
            if mesh_id not in trees:  # newer than MeSH 2015: a name of its own; an older one keeps 2015's
                add(name, ner_type, vid, "mesh")
                if ner_type == "Chemical" and ((m := _SALT.match(name)) or
                                               ((m := _DRUG_SALT.match(name)) and m.group(1).lower() in drug_names)):
                    synonyms.append((m.group(1), ner_type, vid))
            if ner_type == "Disease":  # an inverted entry term ("Neoplasms, Colonic") is no paper's words
                synonyms += [(t, ner_type, vid) for t in entry_terms.split("|") if t and ", " not in t]
        # a drug the corpora name by a supplementary concept (pazopanib: C516667), not Hetionet's DrugBank id
        for mesh_id, name, syns, _mapped in read_tsv_gz(vocab_dir / "mesh-supplementary-drugs.tsv.gz", 4):
            for t in [name, *syns.split("|")]:
                if t and t.lower() in drug_names:
                    add(t, "Chemical", f"MESH:{mesh_id}", "mesh")
    if config.use_hgnc:  # human genes by name and by the symbols papers still use (ceruloplasmin, PCAF)
        hgnc = read_tsv_gz(vocab_dir / "hgnc-genes.tsv.gz", 5)
        symbols = {r[1] for r in hgnc}
        owners: Counter[str] = Counter(a for r in hgnc for a in {*r[3].split("|"), *r[4].split("|")} if a)
        for entrez, _symbol, name, aliases, previous in hgnc:
            vid = f"NCBIGene:{entrez}"
            terms = [name] if "," not in name else []  # "adiponectin, C1Q and collagen domain containing": no paper's
            terms += [a for a in sorted({*aliases.split("|"), *previous.split("|")})  # one gene's alias, not another's symbol
                      if a and owners[a] == 1 and a not in symbols and len(a) >= 3]
            for t in terms:
                add(t, "Gene", vid, "hgnc")
                add_gene_taxon(t, vid, HUMAN, "hgnc")
    for row in kg_rows:
        kind = row["kind"]
        vid = hetionet_to_vocab_id(row["id"])[1] if "::" in row["id"] else row["id"]
        for name in [row["name"], *row["synonyms"]]:
            add(name, KIND_TO_TYPE.get(kind, kind), vid, "kg")
            if kind == "Gene" and vid in human_genes:
                add_gene_taxon(name, vid, HUMAN, "kg")

    corpus_docs: list[tuple[str, str, list[tuple[int, int]]]] = []  # (corpus, text, gold spans)
    if config.use_corpora:
        from karma_dagster.ingest.pubtator import read_pubtator

        for corpus, (fname, _types) in CORPORA.items():
            excluded = set(config.exclude_pmids)
            for doc in read_pubtator(corpora_dir / fname):
                if doc.pmid in excluded:
                    continue
                taxon = _document_taxon(doc)
                spans = []
                for m in doc.mentions:
                    ner_type = CORPUS_TYPE.get(m.type)
                    spans.append((m.start, m.end))
                    if ner_type == "Variant":  # variants are found by patterns; train tells which have an rs id
                        form = variant_id(m.text)
                        if form and not form.startswith("rs") and m.identifier.startswith("rs"):
                            variant_rs[form].add(m.identifier)
                    if ner_type is None or ner_type == "Variant":
                        continue
                    w = 3 if corpus == "biored" else 1  # BioRED's six types decide a term's type over 2-type corpora
                    vid = corpus_vocab_id(ner_type, m.identifier)
                    add(m.text, ner_type, vid, "corpus", w)
                    if ner_type == "Gene" and vid:
                        add_gene_taxon(m.text, vid, HUMAN if vid in human_genes else taxon, "corpus")
                corpus_docs.append((corpus, doc.text, spans))

    if synonyms:  # "cardiac failure" for Heart Failure, where no vocabulary or corpus names it otherwise
        for surface, ner_type, vid in synonyms:
            for v in _variants(surface, ner_type, "mesh"):
                if not any(c[2] in {"corpus", "mesh"} for c in cands.get(v, ())):
                    cands[v].append((ner_type, vid, "mesh", 1))
    gene_taxa_ci: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)  # names match in any case
    for term, votes in gene_taxa.items():
        gene_taxa_ci[term.lower()].update(votes)
    # a name train gives a human and a mouse id links the two genes, for every other name of the human gene too
    orthologs: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    for votes in gene_taxa_ci.values():
        human = [(n, vid) for (taxon, vid), n in votes.items() if taxon == HUMAN]
        if human:
            h = max(human)[1]
            for (taxon, vid), n in votes.items():
                if taxon != HUMAN:
                    orthologs[h][(taxon, vid)] += n
    # and back: a mouse or rat gene id -> the human gene train linked it to most (ties: the lower id string)
    human_of: dict[tuple[str, str], str] = {}
    for h, linked in sorted(orthologs.items()):
        for key, n in linked.items():
            if key not in human_of or n > orthologs[human_of[key]][key]:
                human_of[key] = h
    # resolve each surface form to one (type, id); decide its case rule
    rows = []
    for term, lst in cands.items():
        if not any(c.isalpha() for c in term) or term.lower() in STOP_WORDS:
            continue
        type_votes: Counter[str] = Counter()
        corpus_lst = [c for c in lst if c[2] == "corpus"]
        for ner_type, _vid, source, w in corpus_lst or lst:
            type_votes[ner_type] += w if corpus_lst else (4 - SOURCE_RANK[source] if source != "mesh" else 1)
        ner_type = type_votes.most_common(1)[0][0]
        same = [c for c in lst if c[0] == ner_type and c[1]]
        vid, taxa = None, ""
        if ner_type == "Gene":  # a gene's id is an NCBI Gene id (a MeSH protein descriptor is a class, not a gene)
            same = [c for c in same if c[1].startswith("NCBIGene:")]
            cs = _is_case_sensitive(term, ner_type)
            votes = gene_taxa.get(term, Counter()) if cs else gene_taxa_ci.get(term.lower(), Counter())
            vid, taxa = _gene_ids(votes, orthologs, human_of)
        elif term in gene_taxa and GENE_SYMBOL_SHAPE.fullmatch(term):  # VHL, a disease's short form, is also
            taxa = _gene_ids(gene_taxa[term], orthologs, human_of)[1]  # the gene: its ids, for VHL among genes
        if same and vid is None:
            best_rank = min(SOURCE_RANK[c[2]] for c in same)
            ids = Counter(c[1] for c in same if SOURCE_RANK[c[2]] == best_rank)
            vid = ids.most_common(1)[0][0]
        source = min((c[2] for c in lst), key=SOURCE_RANK.__getitem__)
        cs = _is_case_sensitive(term, ner_type)
        if len(term) <= 2 and not (ner_type == "Gene" and source in {"hetionet", "kg", "corpus"} and cs):
            continue
        rows.append((term.lower() if not cs else term, term, ner_type, vid, source, cs, taxa))
    table = pd.DataFrame(rows, columns=["key", "term", "type", "vocab_id", "source", "case_sensitive", "taxon_ids"])
    # one row per key: a case-insensitive key seen under several spellings keeps the most credible
    table["_rank"] = table["source"].map(SOURCE_RANK)
    table = table.sort_values(["_rank", "term"]).drop_duplicates(["key", "case_sensitive"]).drop(columns="_rank")

    nlp = make_nlp()
    table["tokens"] = [
        [t.text if cs else t.lower_ for t in d]
        for d, cs in zip(nlp.tokenizer.pipe(table["term"].tolist(), batch_size=4000), table["case_sensitive"])
    ]
    table = table[table["tokens"].map(len) <= config.max_tokens]
    table = _ratio_filter(table, corpus_docs, nlp, config)
    # a variant form train annotated with one dbSNP id (V600E -> rs113488022): a row without tokens (never a
    # pattern), looked up by the form the NER computes
    rs_rows = [(form, form, [], "Variant", next(iter(ids)), "corpus", True, "", 0, 0)
               for form, ids in sorted(variant_rs.items()) if len(ids) == 1]
    table = pd.concat([table, pd.DataFrame(rs_rows, columns=[*LEXICON_COLUMNS[:2], "tokens", *LEXICON_COLUMNS[3:],
                                                              "n_occ", "n_ann"])[table.columns]], ignore_index=True)
    table = table.sort_values(["type", "key"]).reset_index(drop=True)
    table.attrs["build_seconds"] = time.perf_counter() - t0
    return table


def _document_taxon(doc) -> str | None:
    """The species of a training abstract's genes that are not Hetionet's (human) ones: its most mentioned
    non-human taxon, else human (a human non-coding gene, e.g. a miRNA); None when it names no species."""
    taxa = Counter(split_identifier("Species", m.identifier)[0] for m in doc.mentions
                   if m.type == "OrganismTaxon" and split_identifier("Species", m.identifier))
    other = [(n, t) for t, n in taxa.items() if t != HUMAN]
    if other:
        return max(other)[1]
    return HUMAN if taxa else None


def _gene_ids(votes: Counter[tuple[str, str]], orthologs: Mapping[str, Counter[tuple[str, str]]] | None = None,
              human_of: Mapping[tuple[str, str], str] | None = None) -> tuple[str | None, str]:
    """(default id, per-taxon ids) of a gene name from its (taxon, id) votes: the human id by default (most
    voted), one id per other species (`9606=NCBIGene:348;10090=NCBIGene:11816`); a species the name itself was
    never seen in takes the id train gave the human gene's other names in it (`orthologs`), and a name seen only
    in other species the human gene train linked its id to (`human_of`: "vimentin" in mouse papers, VIM's human
    id for a human paper; the default id stays the one the name was seen with)."""
    if not votes:
        return None, ""
    best: dict[str, tuple[int, str]] = {}
    for (taxon, vid), n in votes.items():
        if taxon not in best or (n, vid) > best[taxon]:
            best[taxon] = (n, vid)
    default = best[HUMAN][1] if HUMAN in best else max(best.values())[1]
    if human_of and HUMAN not in best:
        linked = sorted({human_of[(t, v)] for t, (_n, v) in best.items() if (t, v) in human_of})
        if len(linked) == 1:  # one human gene, not two a shared name would make a guess between
            best[HUMAN] = (0, linked[0])
    if orthologs and HUMAN in best:  # the most voted id per species the name was not seen in
        # ties by id, not by insertion order (which follows PYTHONHASHSEED through _variants' sets)
        for (taxon, vid), _n in sorted(orthologs.get(best[HUMAN][1], Counter()).items(),
                                       key=lambda kv: (-kv[1], kv[0])):
            best.setdefault(taxon, (0, vid))
    return default, ";".join(f"{t}={best[t][1]}" for t in sorted(best))


def _ratio_filter(table: pd.DataFrame, docs: list[tuple[str, str, list[tuple[int, int]]]], nlp, config: LexiconConfig) -> pd.DataFrame:
    """Count each term's train occurrences and how many are exactly a gold mention; drop mostly-unannotated terms.

    An occurrence inside a longer gold mention is not counted either way (longest match decides there).
    """
    if not docs:
        table = table.assign(n_occ=0, n_ann=0)
        return table
    ci = {tuple(tk): i for i, tk, cs in zip(table.index, table["tokens"], table["case_sensitive"]) if not cs}
    cs_ = {tuple(tk): i for i, tk, cs in zip(table.index, table["tokens"], table["case_sensitive"]) if cs}
    types = dict(zip(table.index, table["type"]))
    max_n = int(table["tokens"].map(len).max())
    occ: Counter[int] = Counter()
    ann: Counter[int] = Counter()
    for (corpus, text, spans), doc in zip(docs, nlp.tokenizer.pipe([d[1] for d in docs], batch_size=200)):
        annotated_types = CORPORA[corpus][1]
        low = [t.lower_ for t in doc]
        orth = [t.text for t in doc]
        exact = set(spans)
        covered = _coverage(len(text), spans)
        for s in range(len(doc)):
            for n in range(1, min(max_n, len(doc) - s) + 1):
                for i in (ci.get(tuple(low[s:s + n])), cs_.get(tuple(orth[s:s + n]))):
                    if i is None or types[i] not in annotated_types:
                        continue
                    a, b = doc[s].idx, doc[s + n - 1].idx + len(doc[s + n - 1])
                    if (a, b) in exact:
                        occ[i] += 1
                        ann[i] += 1
                    elif not all(covered[a:b]):  # inside a longer gold mention: neutral, the longer form decides
                        occ[i] += 1
    table = table.assign(n_occ=[occ[i] for i in table.index], n_ann=[ann[i] for i in table.index])
    judged = table["n_occ"] >= config.min_occurrences
    keep = ~judged | (table["n_ann"] >= config.min_ratio * table["n_occ"])
    return table[keep]


def _coverage(n: int, spans: list[tuple[int, int]]) -> list[bool]:
    cov = [False] * (n + 1)
    for a, b in spans:
        for k in range(max(a, 0), min(b, n)):
            cov[k] = True
    return cov
