"""Gene names several human genes share, and which gene a mention of one means: by species, then by context.

HGNC lists COX2 as an alias of PTGS2 (cyclooxygenase-2) and of MT-CO2, and Hetionet still names MT-CO2's node by
that old symbol, so the lexicon's votes sent every "COX-2" to MT-CO2 (BioRED train annotates it so, too). The
lexicon leaves such shared aliases to whoever else names them; this module decides per mention:

1. species: only the human genes of the alias are candidates, and only for a mention the lexicon already gave one
   of them (a mouse paper's id, or another gene's, is never touched);
2. context: the candidate whose HGNC name shares the most words with the document ("prostaglandin", "synthase"
   for PTGS2; "mitochondrially", "cytochrome", "oxidase" for MT-CO2) wins;
3. otherwise a nuclear gene before a mitochondrially encoded one (an MT- symbol): a paper names the mitochondrial
   gene by a shared abbreviation only when it says so, and then rule 2 finds it.

Also the spoken forms HGNC names give a gene: "Jagged1", "Jagged-1", "Jagged 1" for JAG1 ("jagged canonical
Notch ligand 1"), the name's first word with its closing number, where that form is one gene's only.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from karma_dagster.dictionary.lexicon import read_tsv_gz
from karma_dagster.runtime.paths import data_file

HGNC_FILE = "hgnc-genes.tsv.gz"
_WORD = re.compile(r"[a-z][a-z0-9]+")
# words of HGNC names that say nothing of which gene a paper means
_GENERIC = frozenset({"protein", "family", "member", "subunit", "encoded", "domain", "containing", "like", "factor",
                      "gene", "receptor", "type", "alpha", "beta", "gamma", "delta", "kappa", "homolog", "associated",
                      "binding", "complex", "chain", "class", "group", "with", "and", "the", "for", "activity",
                      "related", "regulator", "subfamily", "polypeptide", "isoform", "ligand", "canonical"})
_SPOKEN = re.compile(r"([a-z]{4,})\b(.*?)\b(\d{1,2})$")  # "jagged canonical notch ligand 1" -> jagged, 1


def alias_key(text: str) -> str:
    """One spelling of a gene abbreviation: COX-2, Cox2 and "COX 2" are all `cox2`."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _stems(text: str) -> set[str]:
    return {w[:8] for w in _WORD.findall(text.lower()) if len(w) >= 5 and w not in _GENERIC}


@dataclass(frozen=True)
class Candidate:
    vocab_id: str  # NCBIGene:5743
    symbol: str
    stems: frozenset[str]  # the telling words of its HGNC name (first 8 letters)

    @property
    def mitochondrial(self) -> bool:
        return self.symbol.startswith("MT-")


@dataclass(frozen=True)
class GeneAliases:
    """alias key -> the human genes that go by it (only aliases two or more genes share), and spoken name forms."""

    shared: dict[str, tuple[Candidate, ...]] = field(default_factory=dict)
    spoken: dict[str, str] = field(default_factory=dict)  # "jagged1" -> NCBIGene:182 (one gene's only)

    @classmethod
    def load(cls, vocab_dir: Path | None = None) -> "GeneAliases":
        return _load(str(vocab_dir or data_file("vocab")))

    def resolve(self, text: str, vocab_id: str, document: str) -> str:
        """The gene a mention `text` the lexicon linked to `vocab_id` means in `document` (rules above); its own id
        when the name is no shared alias, or the lexicon's id is none of the alias's genes."""
        cands = self.shared.get(alias_key(text))
        if not cands or vocab_id not in {c.vocab_id for c in cands}:
            return vocab_id
        words = _stems(document)
        scored = sorted(cands, key=lambda c: (-len(c.stems & words), c.mitochondrial, c.vocab_id != vocab_id))
        return scored[0].vocab_id

    def default_id(self, name: str) -> str | None:
        """The gene a shared alias names with no context to go by: its one nuclear gene (rule 3); None when it is
        no shared alias or several nuclear genes share it (a guess)."""
        nuclear = [c for c in self.shared.get(alias_key(name), ()) if not c.mitochondrial]
        return nuclear[0].vocab_id if len(nuclear) == 1 else None

    def spoken_id(self, name: str) -> str | None:
        """The gene a spoken form of its HGNC name names ("Jagged1", "Jagged-1"); a family range ("Jagged1-2") its
        first member; None otherwise."""
        key = alias_key(name)
        if key in self.spoken:
            return self.spoken[key]
        m = re.fullmatch(r"([a-z]{4,}\d{1,2})\d{1,2}", key)  # "jagged12" from "Jagged1-2": a range, not Jagged12
        if m and re.search(r"\d\s*[-/]\s*\d+$", name) and m.group(1) in self.spoken:
            return self.spoken[m.group(1)]
        return None


@lru_cache(maxsize=2)
def _load(vocab_dir: str) -> GeneAliases:
    path = Path(vocab_dir) / HGNC_FILE
    if not path.exists():
        return GeneAliases()
    owners: dict[str, set[str]] = defaultdict(set)  # alias key -> gene ids
    genes: dict[str, tuple[str, str]] = {}  # gene id -> (symbol, name)
    by_first: dict[str, list[tuple[str, str, str]]] = defaultdict(list)  # first word -> (middle, number, id)
    symbols: set[str] = set()
    for entrez, symbol, name, aliases, previous in read_tsv_gz(path, 5):
        vid = f"NCBIGene:{entrez}"
        genes[vid] = (symbol, name)
        symbols.add(alias_key(symbol))
        for a in f"{aliases}|{previous}".split("|"):
            if a:
                owners[alias_key(a)].add(vid)
        first = name.lower().split(" ", 1)[0]
        m = _SPOKEN.match(name.lower())
        by_first[first].append((m.group(2), m.group(3), vid) if m and "," not in name else ("", "", ""))
    # a spoken form only where every gene whose name starts with that word is "<word> <same words> <n>" (the
    # jagged ligands; not "cyclin A2" beside "cyclin dependent kinase 2", where "cyclin2" would be a guess)
    spoken: dict[str, set[str]] = defaultdict(set)
    for first, forms in by_first.items():
        if first.isalpha() and all(vid for _m, _n, vid in forms) and len({m for m, _n, _v in forms}) == 1:
            for _middle, number, vid in forms:
                spoken[first + number].add(vid)
    return GeneAliases(
        {k: tuple(Candidate(v, genes[v][0], frozenset(_stems(genes[v][1]))) for v in sorted(ids))
         for k, ids in owners.items() if len(ids) > 1},
        {k: next(iter(v)) for k, v in spoken.items() if len(v) == 1 and k not in symbols and k not in owners})
