"""One admission rule for every write into the KG: what a fact must be before any path may store it.

The chain's merge, an accepted review decision, a CogMG completion, a KG tool / MCP statement, `karma dedupe` and an
import into a KG that grew all ask here, so a fact one door refuses is refused by every door, under the same rule
name. `karma check` (kg/cli_check.py) and the KG asset check ask the same rules of the rows already stored.

Rules (RULES holds the one-line statement each refusal carries):
- self_edge: no edge from a node to itself, nor to another node of the same identity (one vocabulary id, a shared
  cross-reference, or one name on kinds that may be one entity).
- metaedge: the fact names a relation of the schema, and a metaedge of the schema (never none).
- domain_range: the end kinds fit that metaedge's source and target.
- id_kind: an end's vocabulary id (its own id when that is a vocabulary id, or its vocab_id) belongs to its kind:
  a Compound carrying a disease's MeSH id, a chemical carrying a gene id, is refused.
- evidence: a sentence that states it (an evidence row's text; a seed edge is the user's KG and has none).
- date: the date it enters under lies inside the KG's date range (date_range.py), never in the future.

A refusal is a `Refusal` (the rule, the fact, why); a path that raises carries it in `AdmissionRefused`.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel

from karma_dagster.runtime import date_range
from karma_dagster.kg.identity import Crosswalk, compatible, curie_key, name_key
from karma_dagster.kg.schema import KGSchema, Metaedge

RuleName = Literal["self_edge", "metaedge", "domain_range", "id_kind", "evidence", "date"]
RULES: dict[str, str] = {
    "self_edge": "no edge from a node to itself or to another node of the same identity",
    "metaedge": "the relation and metaedge exist in the schema; an edge without a metaedge is refused",
    "domain_range": "the end kinds fit the metaedge's source and target",
    "id_kind": "a vocabulary id belongs to the kind of the node that carries it",
    "evidence": "an evidence row states the sentence it was read from",
    "date": "the date lies inside the KG's date range, never in the future",
}

_DISEASES = frozenset({"Disease", "Symptom", "Side Effect"})
_CHEMICALS = frozenset({"Compound", "Pharmacologic Class"})
_GO = frozenset({"Biological Process", "Cellular Component", "Molecular Function"})
# vocabulary prefix (curie_key spelling) -> the node kinds its ids may name; MeSH is read by tree (below)
PREFIX_KINDS: dict[str, frozenset[str]] = {
    "NCBIGENE": frozenset({"Gene"}), "HGNC": frozenset({"Gene"}), "ENSEMBL": frozenset({"Gene"}),
    "DRUGBANK": _CHEMICALS, "CHEBI": _CHEMICALS, "CHEMBL.COMPOUND": _CHEMICALS, "PUBCHEM.COMPOUND": _CHEMICALS,
    "DOID": _DISEASES, "MONDO": _DISEASES, "UBERON": frozenset({"Anatomy"}), "GO": _GO,
    "NCBITAXON": frozenset({"Species"}), "CELLOSAURUS": frozenset({"Cell Line"}), "CVCL": frozenset({"Cell Line"}),
    "DBSNP": frozenset({"Variant"}),
}
# MeSH tree branches -> kinds: C (diseases) and F03 (mental disorders) name diseases, symptoms and side effects;
# D (chemicals and drugs) compounds and classes; A anatomy. Other branches say nothing of a KG kind.
_MESH_BRANCH_KINDS = (("F03", _DISEASES), ("C", _DISEASES), ("D", _CHEMICALS), ("A", frozenset({"Anatomy"})))


class Refusal(BaseModel):
    """Why a fact may not enter the KG: the rule's name, the fact, and the reason in a curator's words."""

    rule: RuleName
    fact: str
    reason: str

    def message(self) -> str:
        return f"refused by admission rule {self.rule}: {self.fact}: {self.reason}"


class AdmissionRefused(ValueError):
    """A write refused by an admission rule (the message names the rule and the fact)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message())
        self.refusal = refusal


class Fact(BaseModel):
    """One edge a path wants to write, with what it knows of its ends (None: unknown to the caller)."""

    head_id: str
    relation: str | None = None
    tail_id: str
    metaedge: str | None = None
    head_kind: str | None = None
    tail_kind: str | None = None
    head_name: str | None = None
    tail_name: str | None = None
    head_vocab_id: str | None = None
    tail_vocab_id: str | None = None
    evidence: str | None = None
    date: dt.date | None = None

    def text(self) -> str:
        return f"{self.head_id} -{self.relation or self.metaedge or '?'}-> {self.tail_id}"


class Admitted(BaseModel):
    """A fact every rule let through, with its metaedge (filled in from the relation and kinds when not given)."""

    relation: str
    metaedge: str


@functools.lru_cache(maxsize=1)
def default_schema() -> KGSchema:
    return KGSchema.load()


@functools.lru_cache(maxsize=1)
def _mesh_kinds() -> dict[str, frozenset[str]]:
    """MeSH id -> kinds, from the shipped MeSH descriptors' trees and the supplementary drug records."""
    from karma_dagster.dictionary.lexicon import read_tsv_gz
    from karma_dagster.runtime.paths import data_file

    base = data_file("vocab")
    out: dict[str, frozenset[str]] = {}
    if (base / "mesh-current.tsv.gz").exists():
        for mesh_id, _name, _terms, trees in read_tsv_gz(base / "mesh-current.tsv.gz", 4):
            kinds: set[str] = set()
            for tree in trees.split("|"):
                kinds |= next((k for branch, k in _MESH_BRANCH_KINDS if tree.startswith(branch)), frozenset())
            if kinds:
                out[f"MESH:{mesh_id.upper()}"] = frozenset(kinds)
    if (base / "mesh-supplementary-drugs.tsv.gz").exists():
        for row in read_tsv_gz(base / "mesh-supplementary-drugs.tsv.gz", 1):
            out.setdefault(f"MESH:{row[0].upper()}", _CHEMICALS)
    return out


def vocab_kinds(vocab_id: str | None) -> frozenset[str] | None:
    """The node kinds a vocabulary id may name; None when the id says nothing of a kind (unknown vocabulary,
    a made-up NEW: id, a UMLS concept, which names diseases and side effects alike)."""
    key = curie_key(vocab_id)
    if key is None:
        return None
    prefix = key.partition(":")[0]
    if prefix == "MESH":
        return _mesh_kinds().get(key)
    return PREFIX_KINDS.get(prefix)


def check_node(node_id: str, kind: str | None, vocab_id: str | None = None) -> Refusal | None:
    """id_kind: the node's own id (when it is a vocabulary id) and its vocab_id belong to its kind."""
    if not kind:
        return None
    for what, value in (("id", node_id), ("vocabulary id", vocab_id)):
        kinds = vocab_kinds(value)
        if kinds is not None and kind not in kinds:
            return Refusal(rule="id_kind", fact=f"node {node_id} ({kind})",
                           reason=f"its {what} {value} names a {' / '.join(sorted(kinds))}, not a {kind}")
    return None


def same_identity(fact: Fact, crosswalk: Crosswalk | None = None) -> str:
    """'' when the two ends are two entities, else how they are one (what the self_edge rule refuses)."""
    if fact.head_id == fact.tail_id:
        return f"both ends are node {fact.head_id}"
    hv, tv = curie_key(fact.head_vocab_id), curie_key(fact.tail_vocab_id)
    if hv and hv == tv:
        return f"both ends carry vocabulary id {hv}"
    cw = crosswalk or Crosswalk.load()
    head_ids = cw.node_ids(fact.head_id) | ({hv} if hv else set())
    shared = head_ids & (cw.node_ids(fact.tail_id) | ({tv} if tv else set()))
    if shared:
        return f"both ends go by {sorted(shared)[0]}"
    if (fact.head_name and name_key(fact.head_name) == name_key(fact.tail_name)
            and compatible(fact.head_kind, fact.tail_kind)):
        return (f"both ends are named {fact.head_name!r} on kinds that may be one entity "
                f"({fact.head_kind}, {fact.tail_kind})")
    return ""


def _pairs(mes: Iterable[Metaedge]) -> str:
    return ", ".join(f"{m.source} -> {m.target}" for m in mes)


def resolve_metaedge(fact: Fact, schema: KGSchema) -> Metaedge | Refusal:
    """metaedge + domain_range: the schema metaedge the fact is, or why it is none. A relation with kinds names
    its metaedge when the fact gives none; a direction that fits only swapped is told as such (what the KG tools
    say to a caller: call again with subject and object swapped)."""
    text = fact.text()
    by_abbrev = {m.abbrev: m for m in schema.metaedges}
    me: Metaedge | None = None
    if fact.metaedge:
        me = by_abbrev.get(fact.metaedge)
        if me is None:
            return Refusal(rule="metaedge", fact=text, reason=f"unknown metaedge {fact.metaedge!r}: not in the schema")
        if fact.relation and fact.relation != me.relation:
            return Refusal(rule="metaedge", fact=text,
                           reason=f"metaedge {me.abbrev} means {me.relation!r}, not {fact.relation!r}")
    elif not fact.relation:
        return Refusal(rule="metaedge", fact=text, reason="it names neither a relation nor a metaedge")
    elif fact.relation not in schema.relation_names:
        return Refusal(rule="metaedge", fact=text,
                       reason=f"{fact.relation!r} is not a schema relation ({', '.join(schema.relation_names)})")
    hk, tk = fact.head_kind, fact.tail_kind
    if me is None:
        if not hk or not tk:
            return Refusal(rule="metaedge", fact=text, reason=f"no metaedge, and the kinds of its ends are unknown "
                                                              f"({hk or '?'} -> {tk or '?'}), so none can be named")
        same = [m for m in schema.metaedges if m.relation == fact.relation]
        me = next((m for m in same if (m.source, m.target) == (hk, tk)), None)
        if me is None:
            return _misfit(text, repr(fact.relation), same, hk, tk)
    if (hk and hk != me.source) or (tk and tk != me.target):
        return _misfit(text, f"metaedge {me.abbrev}", [me], hk or me.source, tk or me.target)
    return me


def _misfit(text: str, what: str, mes: list[Metaedge], hk: str, tk: str) -> Refusal:
    if any((m.source, m.target) == (tk, hk) for m in mes):
        return Refusal(rule="domain_range", fact=text,
                       reason=f"direction: {what} joins {_pairs(mes)}; the head is a {hk} and the tail a {tk}: it "
                              "fits only with head and tail swapped")
    return Refusal(rule="domain_range", fact=text,
                   reason=f"domain/range violation: {what} joins {_pairs(mes) or 'no kinds'}, but the head is a "
                          f"{hk} and the tail a {tk}")


def check(fact: Fact, *, schema: KGSchema | None = None, seed: bool = False,
          crosswalk: Crosswalk | None = None, start: dt.date | None = None) -> Admitted | Refusal:
    """Every rule, in the table's order; the first that refuses answers. `seed`: a row of the user's own KG (a seed
    import, an import into a KG that grew): it carries no evidence, and its distinct nodes are distinct entities
    by the user's word (Hetionet's "restless legs syndrome" Disease presents its namesake Symptom), so only an edge
    from a node to itself is a self-edge there. `start`: the KG's first date (default: the setting)."""
    schema = schema or default_schema()
    text = fact.text()
    why = (f"both ends are node {fact.head_id}" if fact.head_id == fact.tail_id else "") if seed else \
        same_identity(fact, crosswalk)
    if why:
        return Refusal(rule="self_edge", fact=text, reason=why)
    me = resolve_metaedge(fact, schema)
    if isinstance(me, Refusal):
        return me
    for end in ("head", "tail"):
        refused = check_node(getattr(fact, f"{end}_id"), getattr(fact, f"{end}_kind"), getattr(fact, f"{end}_vocab_id"))
        if refused is not None:
            return refused.model_copy(update={"fact": f"{text}: {end} {refused.fact}"})
    if not seed and (fact.evidence is None or not fact.evidence.strip()):
        return Refusal(rule="evidence", fact=text, reason="no evidence sentence states it")
    if fact.date is not None:
        problem = date_range.out_of_range(fact.date, what="the fact", start=start)
        if problem:
            return Refusal(rule="date", fact=text, reason=problem)
    return Admitted(relation=me.relation, metaedge=me.abbrev)


def require(fact: Fact, **kw: object) -> Admitted:
    """`check`, raising AdmissionRefused on a refusal (for paths that refuse by raising)."""
    result = check(fact, **kw)  # type: ignore[arg-type]
    if isinstance(result, Refusal):
        raise AdmissionRefused(result)
    return result
