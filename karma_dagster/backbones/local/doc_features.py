"""Features of an entity pair from all its co-mentions in a document (the input of the document-level model).

BioRED and BC5CDR annotate relations per abstract, and most related pairs never share a sentence, so the unit
is the entity pair, not the mention pair. A pair is described by every mention of its two entities:

- `type`:  the coarse type pair;
- `dist`:  the smallest sentence distance between a mention of each, the number of sentences holding both, the
           token distance of the closest co-mention;
- `cnt`:   how often each entity is mentioned, and whether it is the most mentioned entity of its type (the
           topic of an abstract is what its relations are about);
- `sec`:   where they occur: the first sentence (the title of an abstract, the lead of a summary), the last
           (the conclusion), both;
- `lex`:   the classic mention-pair features of the closest co-mention (entity-masked words between and
           around, the cues between: relations.pair_features);
- `cue`:   relation cues (dictionary/cues.py) of every sentence holding both, and of the sentences holding one;
- `prior`: a knowledge prior: was this id pair related in the training corpora, and how often is each id a
           relation's argument there (a KG of known relations);
- `kg`:    the seed KG (kg_prior.py): how many of the two are KG nodes (genes by NCBI Gene id, diseases and
           chemicals by name through the lexicon), a direct edge and its relation, the neighbours they share
           (2-hop paths), their degrees;
- `hyp`:   specificity within the document: is another entity of the document under this one in MeSH (this one
           is the broader term: BC5CDR annotates the most specific disease only), or above it;
- `role`:  how each entity is spoken of anywhere in the document: as the agent of an adverse effect
           ("cocaine-induced", "lithium toxicity"), as what was induced ("-induced seizures"), as a treatment
           ("treated with", "therapy"), and how many entities of each type the document has.

Every feature string starts with its group name, so an ablation drops a group by prefix.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from karma_dagster.backbones.local.kg_prior import KGPrior
from karma_dagster.backbones.local.mesh_tree import hierarchy_flags
from karma_dagster.backbones.local.relations import _bucket, _Span, coarse_type, pair_features
from karma_dagster.dictionary.cues import relation_cues

FEATURE_GROUPS: tuple[str, ...] = ("type", "dist", "cnt", "sec", "lex", "cue", "prior", "kg", "hyp", "role")
_ID_PREFIXES = ("MESH:", "NCBIGene:", "NCBITaxon:", "Cellosaurus:", "dbSNP:")


def bare_id(identifier: str | None) -> str | None:
    """MESH:D003409 -> D003409: the training corpora's relation lines use bare ids."""
    if not identifier:
        return None
    for p in _ID_PREFIXES:
        if identifier.startswith(p):
            return identifier[len(p):]
    return identifier


def split_ids(identifier: str | None, coarse: str = "") -> frozenset[str]:
    """An id column -> bare ids: composites are `D001,D002` (BioRED) or `D001|D002` (BC5CDR), but a variant's
    `p|SUB|V|1764|M` is one id (its `|` belongs to it); `-1` and empty are no id."""
    if not identifier:
        return frozenset()
    seps = r"[,;]" if coarse == "Variant" else r"[,;|]"
    return frozenset(b for i in re.split(seps, identifier) if (b := bare_id(i.strip())) and b not in ("-1", "-"))


@dataclass(frozen=True)
class Entity:
    """One entity of a document: its mentions' spans (one coarse type) and its bare ids (for the prior)."""

    spans: tuple[_Span, ...]
    type: str
    ids: frozenset[str] = frozenset()
    surfaces: tuple[str, ...] = ()


@dataclass
class RelationPrior:
    """Known relations of the training corpora, by bare id: the pair's count and each id's relation count."""

    pairs: Counter[frozenset[str]] = field(default_factory=Counter)
    args: Counter[str] = field(default_factory=Counter)

    def add(self, pairs: Iterable[frozenset[str]], sign: int = 1) -> None:
        for p in set(pairs):
            self.pairs[p] += sign
            for i in p:
                self.args[i] += sign

    def features(self, a: frozenset[str], b: frozenset[str], tp: str) -> list[str]:
        if not a or not b:
            return ["prior:none"]
        seen = max((self.pairs.get(frozenset((x, y)), 0) for x in a for y in b), default=0)
        na = max((self.args.get(x, 0) for x in a), default=0)
        nb = max((self.args.get(y, 0) for y in b), default=0)
        lo, hi = sorted((na, nb))
        out = [f"prior:pair={_bucket(seen, (0, 1, 3))}", f"prior:tp_pair={tp}_{_bucket(seen, (0, 1, 3))}",
               f"prior:args={_bucket(lo, (0, 2, 10))}_{_bucket(hi, (0, 2, 10))}"]
        return out


# the words right around a mention that say what part it plays
_AFTER_ROLES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("agent", re.compile(r"^\s*-?\s*(?:induced|associated|related|mediated|evoked|provoked|caused|dependent)\b",
                         re.IGNORECASE)),
    ("toxic", re.compile(r"^\s*(?:toxicity|overdose|poisoning|intoxication|abuse|users?|exposure|withdrawal|"
                         r"nephrotoxicity|hepatotoxicity|cardiotoxicity|neurotoxicity)\b", re.IGNORECASE)),
    ("treat", re.compile(r"^\s*(?:treatment|therapy|treated|prophylaxis|administration|infusion|injection)\b",
                         re.IGNORECASE)),
)
_BEFORE_ROLES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("induced", re.compile(r"(?:induced|associated|related|caused|evoked|provoked)\s+(?:[\w-]+\s+)?$",
                           re.IGNORECASE)),
    ("treated", re.compile(r"(?:treat(?:ed|ment|ing)?\s+(?:of|with|by|for)|therap(?:y|ies)\s+(?:of|with|for)|"
                           r"patients\s+(?:with|receiving|on)|administration\s+of|doses?\s+of|given|received|"
                           r"receiving|prevent(?:ion|ed|s)?\s+(?:of\s+)?|against)\s+(?:[\w-]+\s+){0,2}$",
                           re.IGNORECASE)),
)


def entity_roles(text: str, entities: Sequence[Entity]) -> list[tuple[str, ...]]:
    """Per entity, the roles its mentions are spoken of in (sorted): `agent`, `toxic`, `treat` from the words
    after a mention, `induced`, `treated` from the words before it."""
    out = []
    for e in entities:
        roles: set[str] = set()
        for s in e.spans:
            after, before = text[s.end:s.end + 30], text[max(0, s.start - 40):s.start]
            roles.update(name for name, rx in _AFTER_ROLES if rx.search(after))
            roles.update(name for name, rx in _BEFORE_ROLES if rx.search(before))
        out.append(tuple(sorted(roles)))
    return out


@dataclass(frozen=True)
class EntityContext:
    """What the document says about each of its entities, beyond its mentions' places (the `hyp` and `role`
    groups): per entity (broader than another entity, narrower than another) and its roles; entities per type."""

    hierarchy: tuple[tuple[bool, bool], ...]
    roles: tuple[tuple[str, ...], ...]
    per_type: dict[str, int]


def entity_context(text: str, entities: Sequence[Entity], trees: Mapping[str, tuple[str, ...]]) -> EntityContext:
    per_type: dict[str, int] = {}
    for e in entities:
        per_type[e.type] = per_type.get(e.type, 0) + 1
    return EntityContext(hierarchy=tuple(hierarchy_flags([e.ids for e in entities], trees)),
                         roles=tuple(entity_roles(text, entities)), per_type=per_type)


@dataclass(frozen=True)
class Layout:
    """Sentence boundaries of a text and which sentence each position falls in."""

    sents: tuple[tuple[int, int], ...]

    def index(self, pos: int) -> int:
        for i, (s, e) in enumerate(self.sents):
            if s <= pos < e:
                return i
        # between sentences (whitespace): the next sentence, or the last
        for i, (s, _e) in enumerate(self.sents):
            if pos < s:
                return i
        return max(0, len(self.sents) - 1)


def best_comention(layout: Layout, a: Entity, b: Entity) -> tuple[_Span, _Span]:
    """The closest mention pair of two entities: fewest sentences apart, then fewest characters."""
    best: tuple[tuple[int, int], _Span, _Span] | None = None
    for x in a.spans:
        sx = layout.index(x.start)
        for y in b.spans:
            key = (abs(sx - layout.index(y.start)), max(x.start, y.start) - min(x.end, y.end))
            if best is None or key < best[0]:
                best = (key, x, y)
    assert best is not None, "an entity without mentions"
    return best[1], best[2]


def entity_pair_features(text: str, layout: Layout, entities: Sequence[Entity], i: int, j: int,
                         prior: RelationPrior | None, salience: Sequence[int], type_rank: Sequence[int],
                         groups: frozenset[str] = frozenset(FEATURE_GROUPS),
                         context: EntityContext | None = None, kg: KGPrior | None = None) -> list[str]:
    """Feature strings of entities i and j of a document (`salience`: mentions per entity; `type_rank`: 0 for
    the most mentioned entity of its type; `context`: what the `hyp` and `role` groups read, none without it;
    `kg`: what the `kg` group reads, none without it)."""
    a, b = entities[i], entities[j]
    tp = "|".join(sorted((a.type, b.type)))
    sa = {layout.index(s.start) for s in a.spans}
    sb = {layout.index(s.start) for s in b.spans}
    shared = sa & sb
    dmin = min(abs(x - y) for x in sa for y in sb)
    last = len(layout.sents) - 1
    ma, mb = best_comention(layout, a, b)
    feats: list[str] = [f"type:{tp}"]
    if "dist" in groups:
        feats += [f"dist:d={_bucket(dmin, (0, 1, 2, 4))}", f"dist:tp_d={tp}_{_bucket(dmin, (0, 1, 2, 4))}",
                  f"dist:shared={_bucket(len(shared), (0, 1, 2, 4))}",
                  f"dist:tp_shared={tp}_{_bucket(len(shared), (0, 1, 2, 4))}"]
    if "cnt" in groups:
        lo, hi = sorted((salience[i], salience[j]))
        ra, rb = sorted((min(type_rank[i], 2), min(type_rank[j], 2)))
        feats += [f"cnt:n={_bucket(lo, (1, 2, 4))}_{_bucket(hi, (1, 2, 4, 8))}", f"cnt:rank={ra}_{rb}",
                  f"cnt:tp_rank={tp}_{ra}_{rb}", f"cnt:tp_n={tp}_{_bucket(lo, (1, 2, 4))}"]
    if "sec" in groups:
        fa, fb = 0 in sa, 0 in sb
        la, lb = last in sa, last in sb
        feats += [f"sec:first={int(fa)}{int(fb)}" if a.type <= b.type else f"sec:first={int(fb)}{int(fa)}",
                  f"sec:tp_first={tp}_{int(fa and fb)}", f"sec:last={int(la and lb)}",
                  f"sec:tp_firstany={tp}_{int(fa or fb)}"]
    if "lex" in groups:
        lo_s, hi_s = sorted((layout.index(ma.start), layout.index(mb.start)))
        win = (layout.sents[lo_s][0], layout.sents[hi_s][1]) if layout.sents else (0, len(text))
        others = [s for e in entities for s in e.spans if s not in (ma, mb) and win[0] <= s.start and s.end <= win[1]]
        prefix = "lex:" if dmin == 0 else "lex:x"  # a cross-sentence closest pair reads differently
        feats += [prefix + f for f in pair_features(text, win, ma, mb, others, (salience[i], salience[j]))]
    if "cue" in groups:
        both: set[str] = set()
        for k in shared:
            both.update(relation_cues(text[layout.sents[k][0]:layout.sents[k][1]]))
        cues_both = sorted(both)  # a set's order follows PYTHONHASHSEED
        feats += [f"cue:both={c}" for c in cues_both] + [f"cue:tp_both={tp}_{c}" for c in cues_both]
        feats.append(f"cue:n_both={_bucket(len(both), (0, 1, 3))}")
    if "prior" in groups and prior is not None:
        feats += prior.features(a.ids, b.ids, tp)
    if "kg" in groups and kg is not None:
        feats += kg.features(a.type, a.ids, b.type, b.ids, tp)
    if context is not None:
        (x, ex), (y, ey) = sorted(((a.type, i), (b.type, j)))  # the pair in type order: Chemical before Disease
        if "hyp" in groups:
            for side, k in (("a", ex), ("b", ey)):
                broader, narrower = context.hierarchy[k]
                feats += [f"hyp:{tp}_{side}_broader={int(broader)}", f"hyp:{tp}_{side}_narrower={int(narrower)}"]
        if "role" in groups:
            ra, rb = context.roles[ex] or ("none",), context.roles[ey] or ("none",)
            feats += [f"role:{x}={r}" for r in ra] + [f"role:{y}={r}" for r in rb]
            feats += [f"role:{tp}_{p}_{q}" for p in ra for q in rb]
            na, nb = context.per_type.get(x, 0), context.per_type.get(y, 0)
            feats.append(f"role:{tp}_ntype={_bucket(na, (1, 2, 4))}_{_bucket(nb, (1, 2, 4))}")
    return feats


def document_entities(mentions: Iterable[tuple[int, int, str, str, frozenset[str]]]) -> list[Entity]:
    """Gold entities of a document from (start, end, surface, ner type, ids): one entity per (type, id); a
    composite mention (`D001,D002`) belongs to each of its ids; mentions without an id are left out."""
    groups: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
    for start, end, surface, ner_type, ids in mentions:
        for i in sorted(ids):  # sorted: a frozenset's order follows PYTHONHASHSEED, and so would the entities'
            groups.setdefault((coarse_type(ner_type), i), []).append((start, end, surface))
    out = []
    for (t, i), ms in groups.items():
        ms = sorted(set(ms))
        out.append(Entity(spans=tuple(_Span(s, e, t) for s, e, _x in ms), type=t, ids=frozenset((i,)),
                          surfaces=tuple(x for _s, _e, x in ms)))
    return out


def saliences(entities: Sequence[Entity]) -> tuple[list[int], list[int]]:
    """Mentions per entity, and each entity's rank by mentions among the entities of its type (0 = most)."""
    n = [len(e.spans) for e in entities]
    rank = []
    for k, e in enumerate(entities):
        rank.append(sum(1 for m, f in enumerate(entities) if f.type == e.type and n[m] > n[k]))
    return n, rank
