"""The seed KG as a prior of the document-level relation model: are two entities of a paper joined in the KG?

The KG speaks Hetionet (genes by NCBI Gene id, diseases by DOID, compounds by DrugBank, side effects by UMLS,
symptoms by MeSH); the relation model's entities carry the training corpora's ids (NCBI Gene, MeSH) or, in the
pipeline, the lexicon's (the same, or a Hetionet vocabulary id when only Hetionet names a term). The bridge:
- a gene by its NCBI Gene id (`3579` is `Gene::3579`);
- any node by its own id or vocabulary id (`UMLS:C0024299` is `Side Effect::C0024299`, `DRUGBANK:DB00331` is
  `Compound::DB00331`, a symptom's MeSH id);
- a disease or chemical node by its name, through the lexicon: the id the lexicon gives the node's exact name
  (`breast cancer` -> MESH:D001943, from the corpora's annotations; `Type 2 Diabetes Mellitus` from MeSH), of the
  node's NER type.
The name bridge works both ways: an entity the pipeline saw by a KG vocabulary id only (a Hetionet side effect's
UMLS id) is seen by the MeSH id of its node's name instead, when the lexicon has one (`canonical_ids`), so the MeSH
tree and the training-corpus prior see it too. (Few do: the lexicon gave it the UMLS id because no MeSH or corpus
name matched its surface; BioRED dev end to end: 11 of 334 disease entities carry a UMLS id, 12 of 220 chemicals a
DrugBank id; the `kg` group finds their nodes by that id.)

Features (the `kg` group, doc_features.py): how many of the two entities are KG nodes, a direct edge and its
relation, the neighbours they share (a 2-hop path), each one's degree. Built once (adjacency precomputed) and
kept inside the fitted model: inference needs no lexicon.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from karma_dagster.backbones.local.relations import _bucket
from karma_dagster.runtime.paths import data_file

SEED_NODES = ("seed_kg", "nodes.tsv")
SEED_EDGES = ("seed_kg", "edges.sif.gz")
# KG node kind -> the relation model's coarse entity type (lexicon.KIND_TO_TYPE, limited to the related kinds)
KIND_TYPE: dict[str, str] = {"Gene": "Gene", "Compound": "Chemical", "Pharmacologic Class": "Chemical",
                             "Disease": "Disease", "Symptom": "Disease", "Side Effect": "Disease"}
# the node kinds bridged by name (genes have their NCBI Gene id)
NAMED_KINDS = frozenset({"Compound", "Pharmacologic Class", "Disease", "Symptom", "Side Effect"})
_DEGREE_BUCKETS = (0, 2, 10, 40)
_SHARED_BUCKETS = (0, 1, 3, 10)
NameLookup = Callable[[str], "tuple[str, str | None] | None"]  # name -> (NER type, vocab id) or None


def seed_paths() -> tuple[Path, Path]:
    """The shipped seed KG (data/seed_kg): what the model is trained with and answers with."""
    return data_file(*SEED_NODES), data_file(*SEED_EDGES)


def _bare(identifier: str) -> str:
    """What doc_features.split_ids makes of an id (MESH:/NCBIGene: dropped), so both sides key alike."""
    for p in ("MESH:", "NCBIGene:"):
        if identifier.startswith(p):
            return identifier[len(p):]
    return identifier


@dataclass
class KGPrior:
    """Entity ids -> KG nodes, and the KG's adjacency (undirected: node -> neighbour -> relations)."""

    nodes_of: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)  # (type, bare id) -> node ids
    mesh_of: dict[str, frozenset[str]] = field(default_factory=dict)  # node id -> the bare MeSH ids its name has
    adjacency: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    n_nodes: int = 0
    n_edges: int = 0

    # ------------------------------------------------------------ building
    @classmethod
    def build(cls, nodes: Iterable[tuple[str, str, str, str | None]], edges: Iterable[tuple[str, str, str]],
              lookup: NameLookup | None = None) -> "KGPrior":
        """From (node id, name, kind, vocabulary id) and (head, relation, tail); `lookup` maps a name to its
        (NER type, vocabulary id) (a Lexicon's lookup), None = no name bridge."""
        nodes_of: dict[tuple[str, str], set[str]] = {}
        mesh_of: dict[str, set[str]] = {}
        n_nodes = 0
        for nid, name, kind, vocab_id in nodes:
            n_nodes += 1
            t = KIND_TYPE.get(kind)
            if t is None:
                continue
            local = nid.split("::", 1)[1] if "::" in nid else nid
            keys = {nid, local} if kind in ("Gene", "Symptom") else {nid}  # Entrez id; a symptom's MeSH id
            if vocab_id:
                keys |= {_bare(vocab_id), vocab_id}
                prefix, sep, rest = vocab_id.partition(":")
                if sep:  # DrugBank:DB00331 and DRUGBANK:DB00331 (the lexicon's spelling)
                    keys |= {f"{prefix.upper()}:{rest}", f"{prefix}:{rest}"}
            if lookup is not None and kind in NAMED_KINDS:
                hit = lookup(name)
                if hit is not None and hit[0] == t and hit[1]:
                    keys.add(_bare(hit[1]))
                    if hit[1].startswith("MESH:"):
                        mesh_of.setdefault(nid, set()).add(_bare(hit[1]))
            if kind == "Symptom":  # Hetionet's symptoms are MeSH descriptors
                mesh_of.setdefault(nid, set()).add(local)
            for k in keys:
                nodes_of.setdefault((t, k), set()).add(nid)
        adjacency: dict[str, dict[str, set[str]]] = {}
        n_edges = 0
        for head, relation, tail in edges:
            if head == tail:
                continue
            n_edges += 1
            adjacency.setdefault(head, {}).setdefault(tail, set()).add(relation)
            adjacency.setdefault(tail, {}).setdefault(head, set()).add(relation)
        return cls(nodes_of={k: frozenset(v) for k, v in sorted(nodes_of.items())},
                   mesh_of={k: frozenset(v) for k, v in sorted(mesh_of.items())},
                   adjacency={n: {m: frozenset(r) for m, r in sorted(nb.items())}
                              for n, nb in sorted(adjacency.items())},
                   n_nodes=n_nodes, n_edges=n_edges)

    # ------------------------------------------------------------ lookups
    def nodes(self, entity_type: str, ids: Iterable[str]) -> frozenset[str]:
        """The KG nodes an entity (its coarse type and bare ids) is."""
        out: set[str] = set()
        for i in ids:
            out |= self.nodes_of.get((entity_type, i), frozenset())
        return frozenset(out)

    def canonical_ids(self, entity_type: str, ids: frozenset[str]) -> frozenset[str]:
        """An entity seen by a KG vocabulary id only (`UMLS:C0030252`, a Hetionet side effect) by the MeSH id of its
        KG node's name instead (D010146): what the training corpora, the MeSH tree and the corpus prior know it by
        (and the KG node is still found from it). Other ids as they are."""
        if not ids or entity_type not in ("Disease", "Chemical") or any(_is_mesh(i) for i in ids):
            return ids
        mesh: set[str] = set()
        for n in self.nodes(entity_type, ids):
            mesh |= self.mesh_of.get(n, frozenset())
        return frozenset(mesh) if mesh else ids

    def neighbours(self, nodes: frozenset[str]) -> set[str]:
        out: set[str] = set()
        for n in nodes:
            out.update(self.adjacency.get(n, {}))
        return out - nodes

    def features(self, a_type: str, a_ids: frozenset[str], b_type: str, b_ids: frozenset[str], tp: str) -> list[str]:
        """The `kg` group of a pair: `kg:in=` how many of the two are KG nodes; when both are, `kg:edge=` the
        relations of a direct edge (or 0), `kg:shared=` how many neighbours they share (2-hop paths), `kg:deg=`
        their degrees (low, high); each also per type pair."""
        na, nb = self.nodes(a_type, a_ids), self.nodes(b_type, b_ids)
        n_in = int(bool(na)) + int(bool(nb))
        feats = [f"kg:in={n_in}", f"kg:tp_in={tp}_{n_in}"]
        if n_in < 2:
            return feats
        rels = sorted({r for x in na for y in nb for r in self.adjacency.get(x, {}).get(y, ())})
        if na & nb:
            rels.append("same")  # two entities of the paper on one node (a KG name for both)
        shared = len(self.neighbours(na) & self.neighbours(nb))
        lo, hi = sorted((len(self.neighbours(na)), len(self.neighbours(nb))))
        feats += [f"kg:edge={int(bool(rels))}", f"kg:tp_edge={tp}_{int(bool(rels))}"]
        feats += [f"kg:rel={r}" for r in rels] + [f"kg:tp_rel={tp}_{r}" for r in rels]
        sb = _bucket(shared, _SHARED_BUCKETS)
        feats += [f"kg:shared={sb}", f"kg:tp_shared={tp}_{sb}",
                  f"kg:deg={_bucket(lo, _DEGREE_BUCKETS)}_{_bucket(hi, _DEGREE_BUCKETS)}"]
        return feats


def _is_mesh(bare: str) -> bool:
    """A bare MeSH descriptor or supplementary concept id (D003409, C012345), as the corpora write them."""
    return len(bare) >= 7 and bare[0] in "DC" and bare[1:].isdigit()


KGNode = tuple[str, str, str, "str | None"]  # id, name, kind, vocabulary id


def read_kg(nodes_path: Path, edges_path: Path) -> tuple[list[KGNode], list[tuple[str, str, str]]]:
    """Nodes (id, name, kind, vocabulary id) and edges (head, relation, tail) of a Hetionet-format KG, read and
    checked by the seed importer's readers (kg/seed_import.py)."""
    from karma_dagster.kg.seed_import import read_edges, read_nodes

    nodes, _rejected = read_nodes(Path(nodes_path), hetionet=True)
    edges, _filtered = read_edges(Path(edges_path), nodes, set(nodes), 1.0)
    return ([(n.id, n.name, n.kind, n.vocab_id) for n in nodes.values()],
            [(h, rel, t) for h, rel, t, _abbrev, _conf in edges])


def lexicon_lookup(cache_dir: Path | None) -> NameLookup:
    """The shipped lexicon's name -> (NER type, id) (built once without KG names: MeSH, Hetionet, the corpora;
    cached in `cache_dir`)."""
    from karma_dagster.dictionary.lexicon import Lexicon

    lexicon = Lexicon.build((), cache_dir=cache_dir)

    def lookup(name: str) -> tuple[str, str | None] | None:
        e = lexicon.lookup(name)
        return None if e is None else (e.type, e.vocab_id)

    return lookup


def build_seed_prior(cache_dir: Path | None = None, nodes_path: Path | None = None, edges_path: Path | None = None,
                     lookup: NameLookup | None = None) -> KGPrior:
    """The KG prior of the shipped seed KG (or the given files), names bridged through the shipped lexicon."""
    default_nodes, default_edges = seed_paths()
    nodes, edges = read_kg(nodes_path or default_nodes, edges_path or default_edges)
    return KGPrior.build(nodes, edges, lookup if lookup is not None else lexicon_lookup(cache_dir))


_MEMO: dict[str, KGPrior] = {}
_MEMO_LOCK = threading.Lock()


def seed_prior(cache_dir: Path | None = None) -> KGPrior:
    """The shipped seed KG's prior, built once per process and inputs (the lexicon it reads is cached in
    `cache_dir`; every model trained in the process, whatever its cache folder, shares the result)."""
    key = inputs_digest()
    with _MEMO_LOCK:
        if key not in _MEMO:
            _MEMO[key] = build_seed_prior(cache_dir)
        return _MEMO[key]


def inputs_digest() -> str:
    """What the seed prior is built from: the KG and lexicon input files, and the code that reads them."""
    from karma_dagster.dictionary import lexicon, variants
    from karma_dagster.kg import seed_import
    from karma_dagster.kg.store import SCHEMA_YAML

    h = hashlib.sha256()
    for f in [*input_files(), Path(__file__), Path(lexicon.__file__), Path(variants.__file__),
              Path(seed_import.__file__), SCHEMA_YAML]:
        if not f.is_file():
            raise FileNotFoundError(f"KG prior input {f.name} not found")
        data = f.read_bytes()
        h.update(f"{f.name}:{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()[:16]


def input_files(nodes_path: Path | None = None, edges_path: Path | None = None) -> list[Path]:
    """What a KG prior depends on besides code: the KG files and what the lexicon is built from (every shipped
    vocabulary file, so one the lexicon starts reading counts too, and its training corpora)."""
    from karma_dagster.dictionary.lexicon import CORPORA

    default_nodes, default_edges = seed_paths()
    files = [Path(nodes_path or default_nodes), Path(edges_path or default_edges)]
    files += sorted(data_file("vocab").glob("*.gz"))
    files += [data_file("corpora", f) for f, _types in CORPORA.values()]
    return files

