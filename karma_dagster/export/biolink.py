"""The KG schema in Biolink terms: categories for node kinds, predicates (and qualifiers) for metaedges.

The mapping itself is a decision (biolink_map.yaml, chosen by hand); bmt checks it against the Biolink Model
YAML the `biolink-model` package ships. bmt's default Toolkit() downloads the model from GitHub, so it is
always built here from the packaged file with an empty predicate map: exports never touch the network.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from karma_dagster.kg.schema import KGSchema

NAMED_THING, RELATED_TO = "biolink:NamedThing", "biolink:related_to"
QUALIFIER_SLOTS = ("qualified_predicate", "subject_aspect_qualifier", "subject_direction_qualifier",
                   "object_aspect_qualifier", "object_direction_qualifier")


class PredicateMapping(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    predicate: str
    invert: bool = False
    qualifiers: dict[str, str] = {}
    lossy: str | None = None


class BiolinkMapping(BaseModel):
    """Validated mapping of one KG schema; `unmapped` says what fell back to NamedThing / related_to and why."""

    model_config = ConfigDict(frozen=True)
    biolink_version: str
    categories: dict[str, str]  # kind -> category CURIE (NamedThing when unmapped)
    predicates: dict[str, PredicateMapping]  # metaedge abbrev -> predicate (related_to when unmapped)
    unmapped_kinds: dict[str, str]  # kind -> why
    unmapped_metaedges: dict[str, str]  # abbrev -> why
    lossy: dict[str, str]
    id_prefixes: dict[str, list[str]]  # category CURIE -> Biolink's id prefixes for it (preferred first)
    prefixes: list[str]  # every prefix the model's context knows

    def category(self, kind: str) -> str:
        return self.categories.get(kind, NAMED_THING)


@functools.lru_cache(maxsize=1)
def toolkit() -> Any:  # bmt.Toolkit
    """bmt over the packaged Biolink Model YAML (offline; ~1 s to load, once per process)."""
    from bmt import Toolkit

    schema = resources.files("biolink_model") / "schema" / "biolink_model.yaml"  # a namespace package
    return Toolkit(schema=str(schema), predicate_map={"predicate mappings": []})


def _name(curie: str) -> str:
    return curie.split(":", 1)[1] if curie.startswith("biolink:") else curie


def load_mapping(schema: KGSchema | None = None) -> BiolinkMapping:
    """biolink_map.yaml checked against the installed Biolink Model, for the schema's kinds and metaedges."""
    schema = schema or KGSchema.load()
    return _load_mapping(tuple(schema.node_kinds), tuple((m.abbrev, m.source, m.relation, m.target)
                                                         for m in schema.metaedges))


@functools.lru_cache(maxsize=4)
def _load_mapping(kinds: tuple[str, ...], metaedges: tuple[tuple[str, str, str, str], ...]) -> BiolinkMapping:
    raw = yaml.safe_load(resources.files("karma_dagster.export").joinpath("biolink_map.yaml").read_text("utf-8"))
    tk = toolkit()
    categories, unmapped_kinds = {}, {}
    for kind in kinds:
        curie = (raw.get("categories") or {}).get(kind)
        if curie is None:
            unmapped_kinds[kind] = "no Biolink category in biolink_map.yaml"
        elif not tk.is_category(_name(curie)):
            unmapped_kinds[kind] = f"{curie} is not a category of Biolink {tk.get_model_version()}"
        else:
            categories[kind] = curie
    predicates, unmapped, lossy = {}, {}, {}
    for abbrev, source, relation, target in metaedges:
        entry = (raw.get("predicates") or {}).get(abbrev)
        label = f"{abbrev} ({source} {relation} {target})"
        if entry is None:
            unmapped[label] = "no Biolink predicate in biolink_map.yaml"
            continue
        pm = PredicateMapping(**entry)
        problem = _check_predicate(tk, pm)
        if problem:
            unmapped[label] = problem
            continue
        predicates[abbrev] = pm
        if pm.lossy:
            lossy[label] = pm.lossy
    id_prefixes = {c: list(tk.get_element(_name(c)).id_prefixes or []) for c in {*categories.values(), NAMED_THING}}
    return BiolinkMapping(
        biolink_version=tk.get_model_version(), categories=categories, predicates=predicates,
        unmapped_kinds=unmapped_kinds, unmapped_metaedges=unmapped, lossy=lossy, id_prefixes=id_prefixes,
        prefixes=sorted(known_prefixes()),
    )


def _check_predicate(tk: Any, pm: PredicateMapping) -> str | None:
    if not tk.is_predicate(_name(pm.predicate)):
        return f"{pm.predicate} is not a predicate of Biolink {tk.get_model_version()}"
    for slot, value in pm.qualifiers.items():
        if slot not in QUALIFIER_SLOTS:
            return f"qualifier {slot} is not one this export writes ({', '.join(QUALIFIER_SLOTS)})"
        if slot == "qualified_predicate":
            if not tk.is_predicate(_name(value)):
                return f"qualified_predicate {value} is not a Biolink predicate"
        elif value not in enum_values(slot):
            return f"{slot} {value!r} is not in its Biolink enumeration"
    return None


@functools.lru_cache(maxsize=16)
def enum_values(slot: str) -> frozenset[str]:
    """The permissible values of an enum-ranged Biolink slot (knowledge_level, agent_type, qualifiers)."""
    tk = toolkit()
    rng = tk.get_element(slot.replace("_", " ")).range
    enum = tk.view.get_enum(rng) if rng else None
    if enum is None:
        return frozenset()
    return frozenset(enum.permissible_values)


@functools.lru_cache(maxsize=1)
def known_prefixes() -> frozenset[str]:
    """Every id prefix the Biolink Model names: its own prefix declarations and each class's id_prefixes."""
    tk = toolkit()
    out = set(tk.view.schema.prefixes)
    for name in tk.get_all_classes(formatted=False):
        out.update(getattr(tk.get_element(name), "id_prefixes", None) or [])
    return frozenset(out)


# ---------------------------------------------------------------- the mapping read backwards (KGX import)
_TOO_GENERAL = frozenset({NAMED_THING, "biolink:Entity", RELATED_TO, "biolink:related_to_at_instance_level",
                          "biolink:related_to_at_concept_level"})


class InverseMapping:
    """Biolink terms -> the KG schema, by reading biolink_map.yaml backwards (one mapping both ways) along the
    Biolink hierarchy: a category maps to the kind of its nearest ancestor the map names (biolink:SmallMolecule ->
    ChemicalEntity -> Compound); a predicate to the metaedge whose mapping it is, or whose mapping is its nearest
    ancestor, or its inverse with subject and object swapped (participates_in -> has_participant). Where the map
    sends two kinds to one category (Symptom, Side Effect -> PhenotypicFeature) the kind schema.yaml lists first is
    read back; where two metaedges share a predicate, qualifiers and kinds, the one that is not `lossy` (AeG, not
    AuG/AdG). Anything else that has no single answer is None: the importer refuses it and says why."""

    def __init__(self, mapping: BiolinkMapping, schema: KGSchema) -> None:
        self.mapping, self.tk = mapping, toolkit()
        self.kind_of_category: dict[str, str] = {}
        for kind, category in mapping.categories.items():  # schema order: the first kind listed wins
            self.kind_of_category.setdefault(category, kind)
        by_abbrev = {m.abbrev: m for m in schema.metaedges}
        self._by_predicate: dict[str, list[tuple[Any, PredicateMapping]]] = {}
        for abbrev, pm in mapping.predicates.items():
            self._by_predicate.setdefault(pm.predicate, []).append((by_abbrev[abbrev], pm))
        self._kinds: dict[str, tuple[str | None, int]] = {}

    def _category_kind(self, category: str) -> tuple[str | None, int]:
        """(kind, depth in the Biolink tree) of one category; (None, 0) when no ancestor of it is mapped."""
        if category not in self._kinds:
            found: tuple[str | None, int] = (None, 0)
            if category.startswith("biolink:") and self.tk.is_category(_name(category)):
                ancestors = self.tk.get_ancestors(category, reflexive=True, formatted=True, mixin=False)
                kind = next((self.kind_of_category[a] for a in ancestors
                             if a not in _TOO_GENERAL and a in self.kind_of_category), None)
                found = (kind, len(ancestors)) if kind else (None, 0)
            self._kinds[category] = found
        return self._kinds[category]

    def is_category(self, category: str) -> bool:
        return category.startswith("biolink:") and bool(self.tk.is_category(_name(category)))

    def kind(self, categories: list[str]) -> str | None:
        """The kind of a node with these categories (most specific first or not): the deepest one that maps."""
        best: tuple[str | None, int] = (None, 0)
        for c in categories:
            kind, depth = self._category_kind(c)
            if kind and depth > best[1]:
                best = (kind, depth)
        return best[0]

    def is_predicate(self, predicate: str) -> bool:
        return predicate.startswith("biolink:") and bool(self.tk.is_predicate(_name(predicate)))

    def _inverse(self, predicate: str) -> str | None:
        inverse = getattr(self.tk.get_element(_name(predicate)), "inverse", None)
        return f"biolink:{inverse.replace(' ', '_')}" if inverse else None

    def metaedge(self, predicate: str, qualifiers: dict[str, str], subject_kind: str,
                 object_kind: str) -> tuple[Any, bool] | None:
        """(metaedge, whether the KG edge's head is the statement's subject) for a Biolink statement between nodes
        of these kinds; `qualifiers` are its QUALIFIER_SLOTS cells that are set. None: no single metaedge says it."""
        if not self.is_predicate(predicate):
            return None
        for ancestor in self.tk.get_ancestors(predicate, reflexive=True, formatted=True, mixin=False):
            if ancestor in _TOO_GENERAL:
                continue
            tries = [(ancestor, False)]
            inverse = self._inverse(ancestor)
            if inverse and not qualifiers:  # the inverse statement: its qualifiers would have to be inverted too
                tries.append((inverse, True))
            for pred, swapped in tries:
                s_kind, o_kind = (object_kind, subject_kind) if swapped else (subject_kind, object_kind)
                fits = [(m, pm) for m, pm in self._by_predicate.get(pred, [])
                        if pm.qualifiers == qualifiers
                        and (m.source, m.target) == ((o_kind, s_kind) if pm.invert else (s_kind, o_kind))]
                if len(fits) > 1:
                    fits = [f for f in fits if not f[1].lossy] or fits
                if len(fits) == 1:
                    m, pm = fits[0]
                    return m, pm.invert == swapped  # head = the statement's subject unless exactly one swap
                if fits:
                    return None  # ambiguous
        return None


def inverse_mapping(schema: KGSchema | None = None) -> InverseMapping:
    schema = schema or KGSchema.load()
    return InverseMapping(load_mapping(schema), schema)
