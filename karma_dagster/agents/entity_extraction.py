"""EEA: backbone NER proposals screened against the dictionary, normalized against the KG's entity index, typed.

Screening: a proposal the dictionary NER also finds (that span, a span overlapping it, or its long form) borrows
the dictionary's vocab id and abbreviation expansion. A proposal the dictionary does not know is no longer
dropped (that capped the coverage gain KARMA reports): it is kept as an *unlisted* mention unless its name is
garbage (empty, no letters, one character, sentence-long, a generic word) — each such drop counted by reason.
For the local backbone the proposals are the dictionary's own, so all are listed.

Normalization, first over the whole document (dictionary/normalization.py): a gene takes the id of the document's
species (or, known only for another species, no id and no link to the KG's human gene node), a short form its long
form's id in every summary, and one name one id. Then each mention: identity before similarity (kg/identity.py) — a
mention whose vocabulary id, a cross-reference of it, or its exact name names a KG node is that node (distance 0);
only the others ask the vector index for the nearest KG name of a compatible kind (by the
long form when an abbreviation was resolved) in the index view the caller passes — the seed's names, plus, for a
pipeline document, the entities its namespace's earlier increments merged (kg/entity_index.py); linked when the
distance <= rho, else a new entity whose id is the lexicon's vocab id or `NEW:{type}:{normalized name}`.
Mention ids are content hashes (stable across reruns).

Typing (KARMA Eq. 14, the type of a new entity): a linked entity has its KG node's kind; a new one gets the
schema node kind its type maps to through kg/schema.yaml `ner_type_to_kind` — the LLM's typed answer on an LLM
backbone, the dictionary NER's type on the local one. A new entity whose type the schema has no kind for cannot
become a KG node: dropped, counted as `no_schema_kind`.

Names (kg/names.py): every proposal's name, type and vocab id is cleaned before screening (NFC, whitespace runs
one space) or, when it cannot be (a control character such as a terminal escape, over 200 characters, empty),
dropped as `bad_name` with its reason counted in the stage metadata (`names_rejected*`). A span whose own text
needed cleaning keeps it in `text` (it must index the summary) and carries the clean name in `long_form`.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict
from spacy.lang.en.stop_words import STOP_WORDS

from karma_dagster.backbones.base import Backbone, backbone_map
from karma_dagster.dictionary.ner import DictionaryNER
from karma_dagster.dictionary.normalization import NormalizationConfig, normalize_document
from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.kg.entity_index import Hit, compatible_kinds
from karma_dagster.kg.identity import IdentityIndex
from karma_dagster.kg.names import ID_MAX_CHARS, TYPE_MAX_CHARS, RejectedNames, Rejection, clean_name
from karma_dagster.kg.schema import KGSchema
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import MentionRow, MentionSpan, SummaryRow

NO_HIT_DISTANCE = 2.0  # the largest cosine distance: nothing of a compatible kind in the index
MAX_UNLISTED_WORDS = 10  # a longer "entity" is a phrase or a sentence, not a name
MAX_UNLISTED_CHARS = 120
# Words that name a category, not an entity (the prompt tells the model not to tag them; some still do).
GENERIC_NAMES = frozenset({
    "patient", "patients", "subject", "subjects", "control", "controls", "case", "cases", "group", "groups",
    "drug", "drugs", "medication", "medications", "compound", "compounds", "chemical", "chemicals", "agent",
    "agents", "treatment", "treatments", "therapy", "therapies", "dose", "doses", "placebo", "gene", "genes",
    "protein", "proteins", "mrna", "receptor", "receptors", "enzyme", "enzymes", "mutation", "mutations",
    "variant", "variants", "disease", "diseases", "disorder", "disorders", "syndrome", "symptom", "symptoms",
    "condition", "conditions", "cell", "cells", "tissue", "tissues", "cell line", "cell lines", "species",
    "human", "humans", "people", "animal", "animals", "model", "models", "level", "levels", "expression",
})
DROP_REASONS = ("bad_span", "duplicate", "empty_name", "no_letters", "measurement", "not_a_name", "too_short",
                "too_long", "generic", "no_schema_kind", "bad_name")  # bad_name: kg/names.py rejected it
# Characters no biomedical name uses (code, markup, paths, queries): such "entities" are text the model was told
# to repeat, never KG nodes. Kept: letters of any script, digits, space and - + , . ' ’ ( ) [ ] / : > (c.35delG,
# Crohn's, 5'-UTR, IL-1/IL-18, c.677C>T).
_NOT_IN_NAMES = re.compile(r"[;\\{}<=|`$\"@#~^*?!&%_]|\.\./|//|--|^[./]")
_LETTER = re.compile(r"[^\W\d_]")
_UNIT = r"(?:%|[µu]?g|mg|kg|ng|pg|m?l|[µu]l|d?l|[mnpµu]?mol|[mnµu]?m|iu|u|h|hrs?|hours?|min|s|sec|days?|weeks?|months?|years?|yrs?)"
_MEASUREMENT = re.compile(rf"^[<>≤≥~±]?\s*\d[\d.,]*\s*{_UNIT}(?:\s*/\s*{_UNIT})*$", re.IGNORECASE)


class Linker(Protocol):
    """What normalization searches: an EntityIndex (seed names only) or an IndexView (seed + a namespace's own)."""

    def search(self, names: list[str], kinds: list[str | None] | None = None, k: int = 1) -> list[list[Hit]]: ...


class EntityCounts(BaseModel):
    """Where every proposal went: mentions (linked or new) or a drop with its reason; none left uncounted.

    proposed == linked + new + sum(dropped.values()) (a proposal whose span another proposal already took
    counts as dropped "duplicate")."""

    model_config = ConfigDict(extra="forbid")
    proposed: int = 0
    linked: int = 0
    linked_seed: int = 0
    linked_extracted: int = 0  # to an entity an earlier increment of this namespace merged (the index grew)
    linked_unlisted: int = 0  # the dictionary did not know the span, the KG index did
    linked_by_id: int = 0  # identity before similarity: its vocabulary id is a KG node's id ...
    linked_by_xref: int = 0  # ... or one of its cross-references (MeSH D000082 = DrugBank DB00316)
    linked_by_name: int = 0  # ... or its exact name is a KG node's name or synonym
    new: int = 0
    new_from_dictionary: int = 0  # the lexicon knows it (vocab id), the KG does not
    new_unlisted: int = 0  # neither the lexicon nor the KG: kept, typed by Eq. 14
    new_by_kind: dict[str, int] = {}
    dropped: dict[str, int] = {}
    names: RejectedNames = RejectedNames()  # the "bad_name" drops: why (kg/names.py) and a few escaped examples

    def figures(self) -> dict[str, object]:
        """The stage metadata: flat counts, plus the per-kind and per-reason tables."""
        return {
            "proposed": self.proposed, "linked_seed": self.linked_seed, "linked_extracted": self.linked_extracted,
            "linked_unlisted": self.linked_unlisted, "linked_by_id": self.linked_by_id,
            "linked_by_xref": self.linked_by_xref, "linked_by_name": self.linked_by_name,
            "new_from_dictionary": self.new_from_dictionary,
            "new_unlisted": self.new_unlisted, "dropped": sum(self.dropped.values()),
            "dropped_by_reason": {r: self.dropped.get(r, 0) for r in DROP_REASONS},
            "new_by_kind": dict(sorted(self.new_by_kind.items())),
            **self.names.figures(),
        }


class EntityExtraction(BaseModel):
    rows: list[MentionRow]
    counts: EntityCounts


class Screened(BaseModel):
    """A proposal that passed screening, and whether the dictionary knew it."""

    model_config = ConfigDict(frozen=True)
    span: MentionSpan
    in_dictionary: bool


def mention_id(doc_key: str, summary_id: str, start: int, end: int, text: str) -> str:
    raw = "\x1f".join([doc_key, summary_id, str(start), str(end), text])
    return "m_" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def clean_span(span: MentionSpan) -> MentionSpan | tuple[str, str, Rejection]:
    """The span with the name, type and vocab id it brings to the KG cleaned (kg/names.py), or (field, value,
    rejection) for the first that cannot be. `text` stays the span's own characters (relations re-check it
    against the summary); when it needs cleaning, the clean name goes to `long_form`, which every consumer reads
    first (normalization, the node name, a triple's head/tail name)."""
    name = clean_name(span.long_form or span.text)
    if isinstance(name, Rejection):
        return ("long_form" if span.long_form else "text"), span.long_form or span.text, name
    etype = clean_name(span.type, TYPE_MAX_CHARS)
    if isinstance(etype, Rejection):
        return "type", span.type, etype
    vocab_id = None if span.vocab_id is None else clean_name(span.vocab_id, ID_MAX_CHARS)
    if isinstance(vocab_id, Rejection):
        return "vocab_id", span.vocab_id or "", vocab_id
    long_form = name if span.long_form or name != span.text else None
    if (long_form, etype, vocab_id) == (span.long_form, span.type, span.vocab_id):
        return span
    return span.model_copy(update={"long_form": long_form, "type": etype, "vocab_id": vocab_id})


def unlisted_name_problem(name: str) -> str | None:
    """Why a name the dictionary does not know cannot be an entity (a DROP_REASONS key), or None when it can."""
    norm = normalize_name(name)
    if not norm:
        return "empty_name"
    if not _LETTER.search(name):
        return "no_letters"  # a number, a percentage, punctuation
    if _MEASUREMENT.match(name.strip()):
        return "measurement"  # a dose or a duration: "10 mg/kg", "12 weeks"
    if _NOT_IN_NAMES.search(name.strip()):
        return "not_a_name"
    if len(norm.replace(" ", "")) < 2:
        return "too_short"
    if len(norm.split()) > MAX_UNLISTED_WORDS or len(name) > MAX_UNLISTED_CHARS:
        return "too_long"
    if norm in GENERIC_NAMES or all(w in STOP_WORDS for w in norm.split()):
        return "generic"  # a category word, or only function words ("everything", "all of these")
    return None


def screen_proposals(
    text: str, proposals: Sequence[MentionSpan], dictionary: DictionaryNER
) -> tuple[list[Screened], Counter[str]]:
    """Proposals kept (dictionary-supported ones completed with vocab id / long form from the dictionary's
    span; unlisted ones kept when their name passes `unlisted_name_problem`) and the drops by reason. A proposal
    that borrows the dictionary's id at the same offsets takes its type too when the two types name different
    node kinds: the vocabulary wins for a listed id, so a type and an id never disagree ("malaria" typed a chemical
    at the dictionary's disease span is the disease)."""
    dict_spans = dictionary.recognize(text)
    exact = {(d.start, d.end): d for d in dict_spans}
    kept: list[Screened] = []
    dropped: Counter[str] = Counter()
    for p in proposals:
        if not (0 <= p.start < p.end <= len(text)) or text[p.start:p.end] != p.text:
            dropped["bad_span"] += 1  # a span that does not index into the text is invalid, not repairable here
            continue
        same = exact.get((p.start, p.end))
        overlapping = same is not None or any(d.start < p.end and p.start < d.end for d in dict_spans)
        long_ok = p.long_form is not None and dictionary.lexicon.lookup(p.long_form) is not None
        if not (overlapping or long_ok or dictionary.lexicon.lookup(p.text) is not None):
            problem = unlisted_name_problem(p.long_form or p.text)
            if problem is not None:
                dropped[problem] += 1
            else:
                kept.append(Screened(span=p, in_dictionary=False))
            continue
        if same is not None:
            update = {"vocab_id": p.vocab_id or same.vocab_id, "long_form": p.long_form or same.long_form}
            if p.vocab_id is None and same.vocab_id is not None and _kind(same.type) != _kind(p.type):
                update["type"] = same.type  # an id borrowed from the dictionary carries its kind: the vocabulary wins
            p = p.model_copy(update=update)
        elif p.vocab_id is None:
            entry = dictionary.lexicon.lookup(p.long_form or p.text)
            if entry is not None and entry.type == p.type:
                p = p.model_copy(update={"vocab_id": entry.vocab_id})
        kept.append(Screened(span=p, in_dictionary=True))
    return kept, dropped


def _kind(ner_type: str) -> str | None:
    """The KG node kind a NER type places an entity in (the packaged schema's table), to tell two types apart."""
    from karma_dagster.kg.admission_rules import default_schema

    return default_schema().kind_for_ner_type(ner_type)


def filter_proposals(text: str, proposals: list[MentionSpan], dictionary: DictionaryNER) -> list[MentionSpan]:
    """The strict dictionary filter: only the proposals the dictionary supports (completed from its spans)."""
    return [s.span for s in screen_proposals(text, proposals, dictionary)[0] if s.in_dictionary]


def extract_entities_counted(
    summaries: list[SummaryRow],
    backbone: Backbone,
    dictionary: DictionaryNER,
    index: Linker,
    params: KarmaParams,
    schema: KGSchema | None = None,
    normalization: NormalizationConfig = NormalizationConfig(),
    identity: IdentityIndex | None = None,
) -> EntityExtraction:
    """The EEA over a document's summaries: mention rows plus where every proposal went (EntityCounts).

    `identity` (kg/identity.py) is asked first who a mention is (its vocabulary id, a cross-reference, an exact KG
    name): such a mention is that node at distance 0, whatever the vector index would say of its name."""
    schema = schema or KGSchema.load()
    for s in summaries:
        if not isinstance(s, SummaryRow):
            raise TypeError(f"extract_entities_counted: expected SummaryRow, got {type(s).__name__}")
    rows: dict[str, MentionRow] = {}
    dropped: Counter[str] = Counter()
    by_identity: Counter[str] = Counter()
    rejected = RejectedNames()
    proposed = 0
    # the dictionary reads the document's summaries in one batch (its screen below, and a local backbone's NER, then
    # recall them); the backbone's NER calls overlap (up to its concurrency limit); screening and index stay here
    dictionary.prefetch(s.text for s in summaries)
    proposals = backbone_map(backbone, lambda s: backbone.recognize(s.text), summaries)
    per_summary: list[list[Screened]] = []
    for s, proposed_spans in zip(summaries, proposals, strict=True):
        proposed += len(proposed_spans)
        screened, drops = screen_proposals(s.text, _clean_names(proposed_spans, dropped, rejected), dictionary)
        dropped.update(drops)
        # again: screening may complete a span with the dictionary's long form, which is text too
        per_summary.append([Screened(span=span, in_dictionary=c.in_dictionary) for c in screened
                            for span in _clean_names([c.span], dropped, rejected)])
    # ids decided over the whole document (species, abbreviations, one id per name): dictionary/normalization.py
    doc = normalize_document([c.span for cs in per_summary for c in cs], dictionary.lexicon, normalization)
    flat = iter(enumerate(doc.spans))
    per_summary = [[(Screened(span=span, in_dictionary=c.in_dictionary), doc.other_species.get(i))
                    for c, (i, span) in zip(cs, flat)] for cs in per_summary]
    for s, screened_taxa in zip(summaries, per_summary, strict=True):
        if not screened_taxa:
            continue
        known = [None if other_taxon is not None or identity is None else
                 identity.identify(c.span.vocab_id, c.span.long_form or c.span.text, compatible_kinds(c.span.type))
                 for c, other_taxon in screened_taxa]
        ask = [c for (c, _), k in zip(screened_taxa, known, strict=True) if k is None]
        found = iter(index.search([c.span.long_form or c.span.text for c in ask], [c.span.type for c in ask], k=1)
                     if ask else [])
        hits = [next(found) if k is None else [Hit(entity_id=k.node.id, name=k.node.name, kind=k.node.kind,
                                                   distance=0.0, source=k.node.source)] for k in known]
        for (c, other_taxon), h, k in zip(screened_taxa, hits, known, strict=True):
            m = c.span
            if other_taxon is not None:
                h = []  # another species' gene than the KG's (human) one: a new entity, not the human node
            mid = mention_id(s.doc_key, s.summary_id, m.start, m.end, m.text)
            if mid in rows:
                dropped["duplicate"] += 1  # the same span proposed twice (e.g. under two types): the first stays
                continue
            if k is not None and other_taxon is None:
                by_identity[k.by] += 1
            best = h[0] if h else None
            distance = best.distance if best else NO_HIT_DISTANCE
            if best is not None and distance <= params.rho:
                rows[mid] = _row(s, mid, m, c.in_dictionary, entity_id=best.entity_id, kg_id=best.entity_id,
                                 kg_name=best.name, distance=distance, status="linked", kind=best.kind,
                                 linked_to=best.source)
                continue
            kind = schema.kind_for_ner_type(m.type)
            if kind is None or kind not in schema.node_kinds:
                dropped["no_schema_kind"] += 1  # Eq. 14 has no schema kind for this type: it cannot be a node
                continue
            new_id = f"NEW:{m.type}:{normalize_name(m.long_form or m.text)}"
            if other_taxon is not None:
                new_id += f"@NCBITaxon:{other_taxon}"
            rows[mid] = _row(s, mid, m, c.in_dictionary, entity_id=m.vocab_id or new_id,
                             kg_id=None, kg_name=None, distance=distance, status="new", kind=kind, linked_to=None)
    out = list(rows.values())
    counts = _counts(out, proposed, dropped, rejected).model_copy(update={
        "linked_by_id": by_identity["id"], "linked_by_xref": by_identity["xref"], "linked_by_name": by_identity["name"]})
    return EntityExtraction(rows=out, counts=counts)


def _row(s: SummaryRow, mid: str, m: MentionSpan, in_dictionary: bool, **fields: object) -> MentionRow:
    return MentionRow(doc_key=s.doc_key, mention_id=mid, summary_id=s.summary_id, segment_id=s.segment_id,
                      start=m.start, end=m.end, text=m.text, long_form=m.long_form, type=m.type, vocab_id=m.vocab_id,
                      in_dictionary=in_dictionary, **fields)


def _clean_names(spans: Sequence[MentionSpan], dropped: Counter[str], rejected: RejectedNames) -> list[MentionSpan]:
    """The proposals with clean names (before screening: the dictionary looks up the clean long form); the rest
    dropped as "bad_name", each reason counted."""
    out = []
    for span in spans:
        cleaned = clean_span(span)
        if isinstance(cleaned, tuple):
            dropped["bad_name"] += 1
            rejected.add(*cleaned)
        else:
            out.append(cleaned)
    return out


def _counts(rows: list[MentionRow], proposed: int, dropped: Counter[str], rejected: RejectedNames) -> EntityCounts:
    linked = [r for r in rows if r.status == "linked"]
    new = [r for r in rows if r.status == "new"]
    return EntityCounts(
        proposed=proposed, linked=len(linked), new=len(new),
        linked_seed=sum(r.linked_to == "seed" for r in linked),
        linked_extracted=sum(r.linked_to == "extracted" for r in linked),
        linked_unlisted=sum(not r.in_dictionary for r in linked),
        new_from_dictionary=sum(r.in_dictionary for r in new), new_unlisted=sum(not r.in_dictionary for r in new),
        new_by_kind=dict(Counter(r.kind for r in new if r.kind)), dropped=dict(dropped), names=rejected,
    )
