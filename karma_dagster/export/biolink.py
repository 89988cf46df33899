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
