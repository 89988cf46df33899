"""The classes and properties a tool caller sees: the KG schema (schema.yaml) plus what callers added.

Classes are the schema's node kinds; properties its relations, each with the (domain, range) pairs of its
metaedges. A class or property a caller creates is stored in the KG's `schema_extension` table; it reaches the KG
through its *schema ancestor*: an instance of a new class is stored with the node kind its super classes lead to,
a statement with a new property under the schema relation its super properties lead to (the chain's pattern: the
specific label in `type` / `relation`, the schema's in `kind` / `kg_relation`). The merge accepts only schema
kinds and relations, so a class or property without such an ancestor is kept, but cannot carry instances or
statements until a curator adds it to schema.yaml; the refusal says so.
"""

from __future__ import annotations

from difflib import SequenceMatcher

from pydantic import BaseModel

from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.kg.entity_index import word_distance
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.store import KGStore


class ClassInfo(BaseModel):
    label: str
    comment: str
    super_class: str | None = None
    kind: str | None  # the schema node kind it leads to (itself for a schema class); None: no schema ancestor
    source: str  # "schema" or "extension"
    synonyms: list[str] = []


class PropertyInfo(BaseModel):
    label: str
    comment: str
    domain: str | None = None  # a class label (an extension property's own; None = any its schema relation allows)
    range: str | None = None
    super_property: str | None = None
    relation: str | None  # the schema relation it leads to; None: no schema ancestor
    source: str
    pairs: list[tuple[str, str, str]] = []  # (source kind, target kind, metaedge) the schema relation allows
    synonyms: list[str] = []


def label_key(label: str) -> str:
    """What makes two labels the same: case, spacing and punctuation aside."""
    return normalize_name(label).replace(" ", "")


def similarity(query: str, label: str) -> float:
    """1 = same label; character and word overlap otherwise (what 'did you mean' ranks by)."""
    q, lab = label_key(query), label_key(label)
    if not q or not lab:
        return 0.0
    if q == lab:
        return 1.0
    chars = SequenceMatcher(None, q, lab).ratio()
    words = 1.0 - word_distance(query.replace("_", " "), label.replace("_", " "))
    contained = 0.8 if (q in lab or lab in q) and min(len(q), len(lab)) >= 3 else 0.0
    return max(chars, words, contained)


class Ontology:
    """The namespace's classes and properties, read once per call (the extension table is small)."""

    def __init__(self, schema: KGSchema, store: KGStore, namespace: str) -> None:
        self.schema, self.store, self.namespace = schema, store, namespace
        self.classes: dict[str, ClassInfo] = {}
        self.properties: dict[str, PropertyInfo] = {}
        self._load()

    def _load(self) -> None:
        ner_synonyms: dict[str, list[str]] = {}
        for ner, kind in self.schema.ner_type_to_kind.items():
            if label_key(ner) != label_key(kind):
                ner_synonyms.setdefault(kind, []).append(ner)
        for kind in self.schema.node_kinds:
            out = sorted({me.relation for me in self.schema.metaedges if me.source == kind})
            self.classes[label_key(kind)] = ClassInfo(
                label=kind, kind=kind, source="schema", synonyms=ner_synonyms.get(kind, []),
                comment=f"KG node kind (schema){'; subject of ' + ', '.join(out) if out else ''}")
        label_synonyms: dict[str, set[str]] = {}
        for rm in self.schema.relation_map:
            label_synonyms.setdefault(rm.relation, set()).add(rm.label)
        for relation in self.schema.relation_names:
            pairs = [(me.source, me.target, me.abbrev) for me in self.schema.metaedges if me.relation == relation]
            shown = ", ".join(f"{s} -> {t}" for s, t, _ in pairs)
            self.properties[label_key(relation)] = PropertyInfo(
                label=relation, relation=relation, source="schema", pairs=pairs,
                synonyms=sorted(label_synonyms.get(relation, ())), comment=f"KG relation (schema): {shown}")
        for row in self.store.schema_extension(self.namespace):
            if row["what"] == "class":
                parent = self.classes.get(label_key(row["super"])) if row["super"] else None
                self.classes[row["label_key"]] = ClassInfo(
                    label=row["label"], comment=row["comment"], super_class=row["super"],
                    kind=parent.kind if parent else None, source="extension")
            else:
                parent_p = self.properties.get(label_key(row["super"])) if row["super"] else None
                self.properties[row["label_key"]] = PropertyInfo(
                    label=row["label"], comment=row["comment"], domain=row["domain"], range=row["range"],
                    super_property=row["super"], relation=parent_p.relation if parent_p else None,
                    pairs=parent_p.pairs if parent_p else [], source="extension")

    # ------------------------------------------------------------ lookups
    def cls(self, label: str) -> ClassInfo | None:
        return self.classes.get(label_key(label))

    def prop(self, label: str) -> PropertyInfo | None:
        return self.properties.get(label_key(label))

    def class_for_synonym(self, label: str) -> ClassInfo | None:
        """The class a known synonym (an NER type such as 'Protein' or 'Drug') means in this KG."""
        key = label_key(label)
        return next((c for c in self.classes.values() if key in {label_key(s) for s in c.synonyms}), None)

    def is_subclass(self, label: str, ancestor: str) -> bool:
        """label == ancestor, or ancestor is among its super classes."""
        seen: set[str] = set()
        current = self.cls(label)
        while current is not None and label_key(current.label) not in seen:
            if label_key(current.label) == label_key(ancestor):
                return True
            seen.add(label_key(current.label))
            current = self.cls(current.super_class) if current.super_class else None
        return False

    def is_subproperty(self, label: str, ancestor: str) -> bool:
        seen: set[str] = set()
        current = self.prop(label)
        while current is not None and label_key(current.label) not in seen:
            if label_key(current.label) == label_key(ancestor):
                return True
            seen.add(label_key(current.label))
            current = self.prop(current.super_property) if current.super_property else None
        return False

    # ------------------------------------------------------------ search
    def search_classes(self, text: str, k: int = 5) -> list[tuple[float, ClassInfo]]:
        return _ranked(text, self.classes.values(), k)

    def search_properties(self, text: str, k: int = 5) -> list[tuple[float, PropertyInfo]]:
        return _ranked(text, self.properties.values(), k)

    def close_classes(self, text: str) -> list[str]:
        """Close class labels; one found through a synonym says which ("Gene (known as 'Protein')")."""
        out = []
        for s, c in self.search_classes(text, 3):
            if s < 0.5:
                continue
            via = max(c.synonyms, key=lambda n: similarity(text, n), default=None)
            known = via and similarity(text, via) > similarity(text, c.label)
            out.append(f"'{c.label}' (known as '{via}')" if known else f"'{c.label}'")
        return out

    def close_properties(self, text: str) -> list[str]:
        return [f"'{p.label}'" for s, p in self.search_properties(text, 3) if s >= 0.5]


def _ranked(text: str, items, k: int) -> list:
    scored = []
    for item in items:
        names = [item.label, *item.synonyms]
        best = max(similarity(text, n) for n in names)
        if text.strip() and text.strip().lower() in item.comment.lower():
            best = max(best, 0.5)
        scored.append((round(best, 3), item))
    scored.sort(key=lambda x: (-x[0], x[1].source != "schema", x[1].label))
    return [(s, i) for s, i in scored[:k] if s > 0.3]
