"""The KG schema (schema.yaml) as validated pydantic models plus the lookups the agents need.

Schema alignment asks "which metaedges can join these two node kinds, and which one does this extracted label
mean?"; conflict resolution asks "can these two relations both hold for one pair?". Both answers come from the
one YAML file so that aligning to another KG means editing data, not code.
"""

from __future__ import annotations

import warnings
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class SchemaError(ValueError):
    """The schema file is missing, not YAML, or internally inconsistent; the message names the file."""


Polarity = Literal["positive", "negative", "neutral"]


class Metaedge(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    abbrev: str
    source: str
    relation: str
    target: str
    extension: bool = False
    polarity: Polarity = "neutral"  # the direction of the effect it states (binds the alignment of a correlation)

    def __str__(self) -> str:
        return f"{self.source} -{self.relation}-> {self.target} ({self.abbrev})"


class RelationMapping(BaseModel):
    """An extracted label (BioRED's) that means `relation` between two (unordered) node kinds."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    label: str
    kinds: tuple[str, str]
    relation: str


class RelationPair(BaseModel):
    """Two metaedges joining the same two node kinds, judged (in)compatible, with the reason a curator reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    between: tuple[str, str]  # metaedge abbreviations
    why: str = Field(min_length=1)


class KGSchema(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    node_kinds: list[str]
    ner_type_to_kind: dict[str, str]
    metaedges: list[Metaedge]
    relation_map: list[RelationMapping] = []
    label_polarity: dict[str, Polarity] = {}
    incompatible_pairs: list[RelationPair] = Field(default=[], alias="incompatible")
    compatible_pairs: list[RelationPair] = Field(default=[], alias="compatible")
    dangling_mappings: list[RelationMapping] = Field(default=[], exclude=True)

    @model_validator(mode="after")
    def _consistent(self) -> "KGSchema":
        kinds = set(self.node_kinds)
        problems: list[str] = []
        for ner, kind in self.ner_type_to_kind.items():
            if kind not in kinds:
                problems.append(f"ner_type_to_kind[{ner!r}] = {kind!r} is not a node kind")
        for me in self.metaedges:
            for k in (me.source, me.target):
                if k not in kinds:
                    problems.append(f"metaedge {me.abbrev}: {k!r} is not a node kind")
        dangling = [rm for rm in self.relation_map if not self._find(rm.relation, *rm.kinds)]
        if dangling:
            # A mapping to a metaedge the KG lacks cannot be used; it is dropped loudly rather than failing the
            # whole schema, so a KG without some metaedge still loads.
            rows = ", ".join(f"{rm.label} {list(rm.kinds)} -> {rm.relation}" for rm in dangling)
            warnings.warn(f"KG schema relation_map rows with no matching metaedge are ignored: {rows}", stacklevel=2)
            object.__setattr__(self, "relation_map", [rm for rm in self.relation_map if rm not in dangling])
            object.__setattr__(self, "dangling_mappings", dangling)
        problems += self._pair_problems()
        for rm in self.relation_map:  # the table itself never maps a correlation onto the contrary relation
            me = self._find(rm.relation, *rm.kinds)
            if me is not None and not polarity_fits(self.label_polarity.get(rm.label), me.polarity):
                problems.append(f"relation_map {rm.label} {list(rm.kinds)} -> {rm.relation}: a "
                                f"{self.label_polarity[rm.label]} label onto a {me.polarity} relation")
        if problems:
            raise ValueError("; ".join(problems))
        unjudged = self.unjudged_pairs
        if unjudged:
            # A pair nobody judged is treated as compatible (no conflict is ever raised for it); said loudly so a
            # KG's own schema gets its table completed rather than silently missing contradictions.
            rows = ", ".join("/".join(sorted(p)) for p in unjudged)
            warnings.warn(f"KG schema: metaedge pairs on one kind pair in neither 'incompatible' nor 'compatible' "
                          f"(treated as compatible): {rows}", stacklevel=2)
        return self

    def _pair_problems(self) -> list[str]:
        """Each listed pair names two different metaedges of one kind pair, and is listed once."""
        by_abbrev = {me.abbrev: me for me in self.metaedges}
        problems: list[str] = []
        seen: dict[frozenset[str], str] = {}
        for section, pairs in (("incompatible", self.incompatible_pairs), ("compatible", self.compatible_pairs)):
            for pair in pairs:
                a, b = pair.between
                unknown = [x for x in (a, b) if x not in by_abbrev]
                if unknown:
                    problems.append(f"{section}: {unknown} not metaedge abbreviations ({sorted(by_abbrev)})")
                    continue
                if a == b:
                    problems.append(f"{section}: [{a}, {b}] pairs a metaedge with itself")
                    continue
                if _kind_pair(by_abbrev[a]) != _kind_pair(by_abbrev[b]):
                    problems.append(f"{section}: {a} and {b} join different node kinds, so never the same pair")
                key = frozenset((a, b))
                if key in seen:
                    problems.append(f"{section}: [{a}, {b}] is already listed under {seen[key]}")
                seen[key] = section
        return problems

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, path: str | Path | None = None) -> "KGSchema":
        """The packaged schema.yaml by default; any other path to align to another KG."""
        if path is None:
            text = resources.files("karma_dagster.kg").joinpath("schema.yaml").read_text(encoding="utf-8")
            where = "karma_dagster/kg/schema.yaml"
        else:
            p = Path(path)
            if not p.is_file():
                raise SchemaError(f"{p}: KG schema file not found")
            text, where = p.read_text(encoding="utf-8"), str(p)
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SchemaError(f"{where}: not valid YAML ({exc})") from exc
        if not isinstance(data, dict):
            raise SchemaError(f"{where}: expected a mapping at the top level, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SchemaError(f"{where}: invalid KG schema: {exc}") from exc

    # ------------------------------------------------------------------ lookups
    @cached_property
    def relation_names(self) -> list[str]:
        return sorted({me.relation for me in self.metaedges})

    @cached_property
    def _ner_lower(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.ner_type_to_kind.items()}

    def kind_for_ner_type(self, ner_type: str) -> str | None:
        """The node kind a *new* entity of this NER type gets; None when the schema has no place for it."""
        if ner_type in self.ner_type_to_kind:
            return self.ner_type_to_kind[ner_type]
        return self._ner_lower.get(ner_type.lower())

    def _find(self, relation: str, kind_a: str, kind_b: str) -> Metaedge | None:
        for me in self.metaedges:
            if me.relation == relation and {me.source, me.target} == {kind_a, kind_b}:
                return me
        return None

    def candidates(self, kind_a: str, kind_b: str) -> list[Metaedge]:
        """Metaedges that can join the two kinds, in either orientation."""
        return [me for me in self.metaedges if (me.source, me.target) in {(kind_a, kind_b), (kind_b, kind_a)}]

    def metaedge(self, relation: str, kind_a: str, kind_b: str) -> tuple[Metaedge, bool] | None:
        """The metaedge named `relation` joining the kinds, and whether (kind_a, kind_b) must be swapped to
        follow its source -> target direction."""
        me = self._find(relation, kind_a, kind_b)
        if me is None:
            return None
        return me, (me.source != kind_a)

    def map_label(self, label: str, kind_a: str, kind_b: str) -> tuple[Metaedge, bool] | None:
        """An extracted label (a BioRED type, or already a KG relation name) between kind_a and kind_b ->
        (the metaedge, swapped); swapped is True when kind_a is the metaedge's target."""
        for rm in self.relation_map:
            if rm.label == label and set(rm.kinds) == {kind_a, kind_b}:
                return self.metaedge(rm.relation, kind_a, kind_b)
        if label in self.relation_names:
            return self.metaedge(label, kind_a, kind_b)
        return None

    def polarity_of(self, label: str) -> Polarity | None:
        """The polarity an extracted label states; None when the schema does not know the label."""
        if label in self.label_polarity:
            return self.label_polarity[label]
        if any(rm.label == label for rm in self.relation_map):
            return "neutral"
        return None

    def aligned_candidates(self, label: str, kind_a: str, kind_b: str) -> list[Metaedge]:
        """The metaedges a backbone may align `label` between the kinds to: those of the label's polarity or neutral
        (a positive correlation never becomes a negative relation, nor the reverse); a neutral label to neutral
        ones only; a label the schema does not know to any candidate."""
        return [me for me in self.candidates(kind_a, kind_b) if polarity_fits(self.polarity_of(label), me.polarity)]

    def label_confidence(self, label: str, relation: str, kind_a: str, kind_b: str) -> float:
        """How sure the label table is of `label` -> `relation` on the kinds: 1 for a one-to-one mapping (or a label
        that is the relation's name), lower when several labels collapse onto the relation for this kind pair."""
        if label == relation:
            return 1.0
        n_labels = max(1, len(self.labels_for(relation, kind_a, kind_b)))
        return 1.0 / (1.0 + 0.25 * (n_labels - 1))

    def labels_for(self, relation: str, kind_a: str, kind_b: str) -> list[str]:
        """Extracted labels that the table maps to `relation` for this kind pair (how lossy the mapping is)."""
        return sorted({rm.label for rm in self.relation_map
                       if rm.relation == relation and set(rm.kinds) == {kind_a, kind_b}})

    # ------------------------------------------------------------------ contradictions
    @cached_property
    def _incompatible(self) -> frozenset[frozenset[str]]:
        return frozenset(frozenset(p.between) for p in self.incompatible_pairs) | frozenset(self.opposite_pairs)

    @cached_property
    def opposite_pairs(self) -> dict[frozenset[str], str]:
        """The rule that derives contradictions from the schema itself: two metaedges on one kind pair whose
        polarities are opposite (positive / negative) cannot both hold, unless `compatible` lists them (a stated
        exception). Pair -> the reason, so a KG's own schema extension contradicts without a hand-written row."""
        listed_compatible = {frozenset(p.between) for p in self.compatible_pairs}
        out: dict[frozenset[str], str] = {}
        for pair in self.pairs_to_judge:
            a, b = sorted((me for me in self.metaedges if me.abbrev in pair), key=lambda me: me.polarity)
            if {a.polarity, b.polarity} == {"positive", "negative"} and pair not in listed_compatible:
                out[pair] = (f"opposite polarity on {a.source}-{a.target}: {a.relation} ({a.abbrev}) is "
                             f"{a.polarity}, {b.relation} ({b.abbrev}) {b.polarity}")
        return out

    @cached_property
    def pairs_to_judge(self) -> list[frozenset[str]]:
        """Every two metaedges (abbreviations) that join the same two node kinds: the pairs the incompatible /
        compatible tables must cover, since only such relations can meet on one pair of entities."""
        out = []
        for i, a in enumerate(self.metaedges):
            for b in self.metaedges[i + 1:]:
                if _kind_pair(a) == _kind_pair(b):
                    out.append(frozenset((a.abbrev, b.abbrev)))
        return out

    @cached_property
    def unjudged_pairs(self) -> list[frozenset[str]]:
        judged = {frozenset(p.between) for p in (*self.incompatible_pairs, *self.compatible_pairs)}
        return [p for p in self.pairs_to_judge if p not in judged and p not in self.opposite_pairs]

    def incompatible(self, rel_a: str, rel_b: str, kind_a: str | None = None, kind_b: str | None = None) -> bool:
        """True when the two relations cannot both hold for one pair of entities of kinds (kind_a, kind_b), in
        either orientation; without kinds, when they are incompatible on some kind pair where both exist."""
        if rel_a == rel_b:
            return False
        if kind_a is None or kind_b is None:
            return any(self._abbrevs_incompatible(a, b) for a in self.metaedges if a.relation == rel_a
                       for b in self.metaedges if b.relation == rel_b and _kind_pair(a) == _kind_pair(b))
        me_a, me_b = self._find(rel_a, kind_a, kind_b), self._find(rel_b, kind_a, kind_b)
        return me_a is not None and me_b is not None and self._abbrevs_incompatible(me_a, me_b)

    def _abbrevs_incompatible(self, a: Metaedge, b: Metaedge) -> bool:
        return frozenset((a.abbrev, b.abbrev)) in self._incompatible

    def why_incompatible(self, rel_a: str, rel_b: str, kind_a: str, kind_b: str) -> str | None:
        """The schema's stated reason the two relations contradict on this kind pair (None when they do not)."""
        me_a, me_b = self._find(rel_a, kind_a, kind_b), self._find(rel_b, kind_a, kind_b)
        if me_a is None or me_b is None:
            return None
        key = frozenset((me_a.abbrev, me_b.abbrev))
        return next((p.why for p in self.incompatible_pairs if frozenset(p.between) == key),
                    self.opposite_pairs.get(key))


def polarity_fits(label: Polarity | None, relation: Polarity) -> bool:
    """Whether a label of this polarity (None: unknown) may be aligned to a relation of that one."""
    if label is None or relation == "neutral":
        return True
    return label == relation


def _kind_pair(me: Metaedge) -> frozenset[str]:
    return frozenset((me.source, me.target))
