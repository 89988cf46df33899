"""Names for the entity-index benchmark: the shipped vocabularies, grown with variants to 100k / 1M, and held-out
mention strings (typos, case, word order, plurals, dropped words) of indexed names.

The vocabularies hold ~150k distinct names (Hetionet nodes, MeSH terms, the dictionary lexicon); the rest of a
large index is made of variants of them, each a new entity of its base's kind: qualified names ("<name>
receptor", "chronic <name>"), numbered family members ("<name> type 7", "<name>-like 3", as gene families and
disease subtypes are named) and two-name compounds. Numbered members are near-duplicates of each other, the
hard case for an approximate index, as in UMLS.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from karma_dagster.kg.embeddings import normalize_name

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
VOCAB = ROOT / "data" / "vocab"
NER_TO_KIND = {"Disease": "Disease", "Chemical": "Compound", "Gene": "Gene", "Species": "Species",
               "Anatomy": "Anatomy", "CellLine": "Cell Line", "Variant": "Variant"}
KIND_TO_NER = {"Disease": "Disease", "Symptom": "Disease", "Side Effect": "Disease", "Compound": "Chemical",
               "Pharmacologic Class": "Chemical", "Gene": "Gene", "Species": "Species", "Anatomy": "Anatomy",
               "Cell Line": "CellLine", "Variant": "Variant"}
QUALIFIERS = ("receptor", "antagonist", "agonist", "inhibitor", "deficiency", "protein", "precursor", "isoform",
              "homolog", "antibody", "pathway", "syndrome", "carcinoma", "toxicity", "poisoning", "metabolism",
              "binding", "complex", "subunit", "kinase", "activity", "signaling", "associated", "related",
              "induced", "dependent", "resistant", "sensitive", "level", "expression")
PREFIXES = ("chronic", "acute", "familial", "congenital", "juvenile", "recombinant", "human", "mouse", "rat",
            "mitochondrial", "nuclear", "hereditary", "secondary", "primary", "anti", "pseudo", "neo", "atypical")
FAMILY = ("type {n}", "{n}", "-like {n}", "subtype {n}", "member {n}", "isoform {n}", "variant {n}", "class {n}")


@dataclass(frozen=True)
class Name:
    id: str
    name: str
    kind: str


def _hetionet() -> Iterator[Name]:
    with gzip.open(VOCAB / "hetionet-nodes.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            node_id, name, kind = line.rstrip("\n").split("\t")
            yield Name(node_id, name, kind)


def _mesh() -> Iterator[Name]:
    from karma_dagster.dictionary.lexicon import mesh_type

    trees: dict[str, list[str]] = {}
    with gzip.open(VOCAB / "mesh-tree-numbers.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            mesh_id, tn = line.rstrip("\n").split("\t")[:2]
            trees.setdefault(mesh_id, []).append(tn)
    with gzip.open(VOCAB / "mesh-terms.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            mesh_id, name = line.rstrip("\n").split("\t")[:2]
            kind = NER_TO_KIND.get(mesh_type(trees.get(mesh_id, ())) or "")
            if kind:
                yield Name(f"MESH:{mesh_id}", name, kind)


def _lexicon() -> Iterator[Name]:
    from karma_dagster.dictionary.lexicon import Lexicon

    table = Lexicon.build(cache_dir=ROOT / ".cache" / "lexicon").table
    for term, ner_type, vocab_id in zip(table["term"], table["type"], table["vocab_id"]):
        kind = NER_TO_KIND.get(ner_type)
        if kind:
            yield Name(f"LEX:{vocab_id or normalize_name(term)}", term, kind)


def vocabulary_names() -> list[Name]:
    """The shipped vocabularies' names, one row per distinct normalized name (first source wins)."""
    seen: set[str] = set()
    out = []
    for source in (_hetionet, _mesh, _lexicon):
        for n in source():
            key = normalize_name(n.name)
            if key and key not in seen:
                seen.add(key)
                out.append(n)
    return out


def names(size: int, seed: int = 0) -> list[Name]:
    """`size` distinct names: the vocabularies' (shuffled, cut to size) then variants of them."""
    rng = random.Random(seed)
    base = vocabulary_names()
    rng.shuffle(base)
    out = base[:size]
    seen = {normalize_name(n.name) for n in out}
    by_kind: dict[str, list[Name]] = {}
    for n in base:
        by_kind.setdefault(n.kind, []).append(n)
    i = 0
    while len(out) < size:
        b = base[rng.randrange(len(base))]
        r = rng.random()
        if r < 0.3:
            name = f"{b.name} {rng.choice(QUALIFIERS)}"
        elif r < 0.45:
            name = f"{rng.choice(PREFIXES)} {b.name}"
        elif r < 0.85:
            fmt = rng.choice(FAMILY)
            glue = "" if fmt[0] in "{-" and " " not in b.name else " "  # BRCA12, KRAS-like 3
            name = b.name + glue + fmt.format(n=rng.randint(1, 40))
        else:
            other = rng.choice(by_kind[b.kind])
            name = f"{b.name} {other.name.split()[-1]}"
        key = normalize_name(name)
        if key and key not in seen:
            seen.add(key)
            i += 1
            out.append(Name(f"VAR:{i}", name, b.kind))
    return out


def _typo(word: str, rng: random.Random) -> str:
    j = rng.randrange(1, len(word) - 1)
    op = rng.randrange(4)
    if op == 0:
        return word[:j] + word[j + 1:]
    if op == 1:
        return word[:j - 1] + word[j] + word[j - 1] + word[j + 1:]
    if op == 2:
        return word[:j] + rng.choice("aeiourstnl") + word[j + 1:]
    return word[:j] + rng.choice("aeiourstnl") + word[j:]


def mention(name: str, rng: random.Random) -> str:
    """A mention string of `name` as text writes it: another normalized form, plus case or hyphen changes."""
    for _ in range(20):
        words = name.split()
        op = rng.random()
        long_words = [j for j, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
        if op < 0.45 and long_words:
            j = rng.choice(long_words)
            words[j] = _typo(words[j], rng)
        elif op < 0.6 and len(words) >= 2:  # MeSH inversion or a swap
            words = [words[-1].rstrip(",") + ","] + words[:-1] if rng.random() < 0.5 else words[1:] + words[:1]
        elif op < 0.75:
            last = words[-1]
            words[-1] = last[:-1] if last.endswith("s") and len(last) > 4 else last + "s"
        elif op < 0.85 and len(words) >= 3:
            del words[rng.randrange(len(words))]
        elif long_words:
            for j in rng.sample(long_words, min(2, len(long_words))):
                words[j] = _typo(words[j], rng)
        else:
            words[-1] = words[-1] + "s"
        text = " ".join(words)
        r = rng.random()
        text = text.upper() if r < 0.1 else text.lower() if r < 0.4 else text
        if rng.random() < 0.2:
            text = text.replace(" ", "-", 1)
        if normalize_name(text) != normalize_name(name) and normalize_name(text):
            return text
    return name + "s"


def queries(indexed: list[Name], n: int, seed: int = 1) -> list[tuple[str, str, Name]]:
    """`n` held-out (mention, NER type, source name) triples: mentions of random indexed names, never the
    indexed string itself (up to case and punctuation)."""
    rng = random.Random(seed)
    out = []
    for b in rng.sample(indexed, n):
        out.append((mention(b.name, rng), KIND_TO_NER.get(b.kind, b.kind), b))
    return out
