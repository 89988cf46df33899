"""Document-level normalization: what one mention alone cannot decide, the document it sits in can.

Run by the EEA over all of a document's screened mentions before they are linked to the KG index:
- species context: a gene symbol names a different gene per species (Sox2 is NCBI Gene 6657 in human, 20674 in
  mouse). The document's species is its most mentioned taxon (a tie goes to human: on BioRED train's gene
  mentions of names known for several species, 3221 right / 220 wrong / 283 withdrawn ids against 3166 / 228 /
  330 when a tie went to the other species, and 3201 / 193 / 330 for the nearest preceding species; a tie is
  settled by how the genes are written, Mfn2 or MFN2, see `_rodent_styled`); a gene whose
  name the lexicon knows for that species takes that species' id, and one the lexicon knows only for other
  species loses its id and is not linked to the KG's (human) gene node: an honest new entity, not the wrong gene
  (on BioRED dev: gene id precision 0.49 -> 0.80, recall 0.34 -> 0.34).
- abbreviations: a short form defined in the document ("tumour necrosis factor (TNF)") carries its long form's
  type and id at every occurrence, in every summary, not only in the sentence that defines it.
- a disease named only as a Hetionet side effect (a UMLS id) takes the MeSH id of its head ("acute liver injury":
  liver injury), as the corpora annotate it (`mesh_head_id`).
- one id per mention cluster: the mentions of one name (same type, same normalized name) share the id most of
  them carry, so a name is not two entities within one abstract.
Each step can be switched off (`NormalizationConfig`) for the ablation docs/benchmarks.md reports.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from karma_dagster.dictionary.lexicon import HUMAN, Lexicon
from karma_dagster.dictionary.symbols import symbol_taxon_ids
from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.schemas.records import MentionSpan

TAXON_PREFIX = "NCBITaxon:"


class NormalizationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    species: bool = True
    drop_other_species: bool = True  # a gene id known to be another species' is withdrawn (new entity)
    abbreviations: bool = True
    clusters: bool = True
    side_effect_heads: bool = True  # "acute liver injury" (a Hetionet side effect) -> liver injury's MeSH id


def document_taxon(spans: Sequence[MentionSpan]) -> str | None:
    """The NCBI taxon a document is about: its most mentioned species (ties: human, then the lowest taxon id),
    None if it names none."""
    counts = Counter(s.vocab_id[len(TAXON_PREFIX):] for s in spans
                     if s.type == "Species" and s.vocab_id and s.vocab_id.startswith(TAXON_PREFIX))
    if not counts:
        return None
    ranked = sorted(counts.items(), key=lambda tn: (-tn[1], tn[0] != HUMAN, int(tn[0]) if tn[0].isdigit() else 0, tn[0]))
    tied = [t for t, n in ranked if n == ranked[0][1]]
    if len(tied) > 1 and tied[0] == HUMAN and _rodent_styled(spans):
        return tied[1]
    return ranked[0][0]


_RODENT_SYMBOL = re.compile(r"^[A-Z][a-z]{1,5}\d+[a-z]?$")  # Mfn2, Sox2: how mouse and rat symbols are written
_HUMAN_SYMBOL = re.compile(r"^[A-Z]{2,6}\d+[A-Z]?$")  # MFN2, SOX2


def _rodent_styled(spans: Sequence[MentionSpan]) -> bool:
    """Whether more of the document's gene symbols are written the rodent way (Mfn2) than the human way (MFN2).

    Settles a tie between human and another species ("patients" once, "rats" once): on BioRED train it flips 2
    of the 9 tied documents, gene ids 1130 right / 97 wrong / 381 missed -> 1142 / 91 / 369; applied beyond
    ties (human mentioned most) it flips no other document."""
    genes = [s.text for s in spans if s.type == "Gene"]
    return sum(1 for g in genes if _RODENT_SYMBOL.match(g)) > sum(1 for g in genes if _HUMAN_SYMBOL.match(g))


def _species_ids(span: MentionSpan, taxon: str, lexicon: Lexicon) -> dict[str, str]:
    """A gene mention's ids per taxon: the first of its long form's, its own text's, and the symbol its text
    spells (IGF-1 for IGF1) that knows the document's species; else the first that knows any, else its id's.

    (MAPK defined as "mitogen-activated protein kinases", a name train saw only in mouse papers, gets MAPK's human
    id in a human paper; CaSR, matched through the symbol keys, is known as the human CASR, so in a rat paper it
    is no longer the human gene.)"""
    sources = [lexicon.taxon_ids(span.long_form) if span.long_form else {}, lexicon.taxon_ids(span.text)]
    for ids in sources:
        if taxon in ids:
            return ids
    folded = symbol_taxon_ids(lexicon, span.text)
    if taxon in folded:
        return folded
    return next((ids for ids in sources if ids), None) or lexicon.id_taxon_ids(span.vocab_id)


UMLS_PREFIX = "UMLS:"


def mesh_head_id(text: str, lexicon: Lexicon) -> str | None:
    """The MeSH id of the longest trailing part of a disease name that MeSH or a corpus names ("acute liver
    injury" -> liver injury, "progressive renal failure" -> renal failure), None if none does.

    For a name the lexicon knows only as a Hetionet side effect (a UMLS id, which no corpus uses): on the train
    splits, BioRED disease ids 1177 right / 90 wrong -> 1177 / 88, BC5CDR 1872 / 104 -> 1877 / 91; NCBI disease
    dev unchanged."""
    words = text.split()
    for k in range(1, len(words)):
        e = lexicon.lookup(" ".join(words[k:]))
        if e is not None and e.type == "Disease" and (e.vocab_id or "").startswith("MESH:") and e.source in {"corpus", "mesh"}:
            return e.vocab_id
    return None


def _cluster_key(span: MentionSpan) -> tuple[str, str]:
    return span.type, normalize_name(span.text).replace(" ", "")


class NormalizedDocument(BaseModel):
    """The document's mentions with their ids decided, and which genes are another species' than the KG's
    (index -> NCBI taxon): those are not linked to a KG gene node (Hetionet's are human) but stay new entities."""

    spans: list[MentionSpan]
    other_species: dict[int, str] = {}


def normalize_document(spans: Sequence[MentionSpan], lexicon: Lexicon,
                       config: NormalizationConfig = NormalizationConfig()) -> NormalizedDocument:
    """The document's mentions (all its summaries, in order) with ids decided at document level."""
    out = list(spans)
    other_species: dict[int, str] = {}
    if config.species:
        taxon = document_taxon(out)
        if taxon is not None:
            for i, s in enumerate(out):
                if s.type != "Gene":
                    continue
                ids = _species_ids(s, taxon, lexicon)
                if taxon in ids and ids[taxon] != s.vocab_id:
                    out[i] = s.model_copy(update={"vocab_id": ids[taxon]})
                elif config.drop_other_species and ids and taxon not in ids and s.vocab_id in ids.values():
                    out[i] = s.model_copy(update={"vocab_id": None})  # another species' gene: not this one
                    other_species[i] = taxon
    if config.abbreviations:
        defined: dict[str, MentionSpan] = {}  # short form -> its defining occurrence (resolved by the NER)
        for s in out:
            if s.long_form and s.vocab_id and s.text != s.long_form:
                defined.setdefault(s.text, s)
        for i, s in enumerate(out):
            d = defined.get(s.text)
            if d is not None and i not in other_species and (s.vocab_id, s.type) != (d.vocab_id, d.type):
                out[i] = s.model_copy(update={"vocab_id": d.vocab_id, "type": d.type,
                                              "long_form": s.long_form or d.long_form})
    if config.side_effect_heads:
        for i, s in enumerate(out):
            if s.type == "Disease" and s.vocab_id and s.vocab_id.startswith(UMLS_PREFIX):
                head = mesh_head_id(s.text, lexicon)
                if head is not None:
                    out[i] = s.model_copy(update={"vocab_id": head})
    if config.clusters:
        votes: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        for s in out:
            if s.vocab_id:
                votes[_cluster_key(s)][s.vocab_id] += 1
        for i, s in enumerate(out):
            v = votes.get(_cluster_key(s))
            if v and i not in other_species:
                best = max(v.items(), key=lambda kv: (kv[1], kv[0]))[0]
                if best != s.vocab_id:
                    out[i] = s.model_copy(update={"vocab_id": best})
    return NormalizedDocument(spans=out, other_species=other_species)
