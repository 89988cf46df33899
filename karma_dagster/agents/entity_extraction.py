"""EEA: backbone NER proposals ⊙ dictionary filter, then normalization against the KG's entity index.

The filter keeps a proposal when the dictionary NER also finds that span, a span overlapping it, or knows its
long form — an LLM's invented or generic "entities" drop out, and a kept proposal borrows the dictionary's
vocab id and abbreviation expansion. For the local backbone the proposals are the dictionary's own, so all pass.
Normalization: nearest KG name of a compatible kind (by the long form when an abbreviation was resolved);
linked when its cosine distance <= rho, else a new candidate whose id is the lexicon's vocab id or
`NEW:{type}:{normalized name}`. Mention ids are content hashes (stable across reruns).
"""

from __future__ import annotations

import hashlib

from karma_dagster.backbones.base import Backbone, backbone_map
from karma_dagster.dictionary.ner import DictionaryNER
from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.kg.entity_index import EntityIndex
from karma_dagster.params import KarmaParams
from karma_dagster.schemas.records import MentionRow, MentionSpan, SummaryRow

NO_HIT_DISTANCE = 2.0  # the largest cosine distance: nothing of a compatible kind in the index


def mention_id(doc_key: str, summary_id: str, start: int, end: int, text: str) -> str:
    raw = "\x1f".join([doc_key, summary_id, str(start), str(end), text])
    return "m_" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def filter_proposals(text: str, proposals: list[MentionSpan], dictionary: DictionaryNER) -> list[MentionSpan]:
    """Keep proposals the dictionary supports; fill vocab id / long form from the dictionary's matching span."""
    dict_spans = dictionary.recognize(text)
    exact = {(d.start, d.end): d for d in dict_spans}
    kept: list[MentionSpan] = []
    for p in proposals:
        if not (0 <= p.start < p.end <= len(text)) or text[p.start:p.end] != p.text:
            continue  # a span that does not index into the text is invalid, not repairable here
        same = exact.get((p.start, p.end))
        overlapping = same is not None or any(d.start < p.end and p.start < d.end for d in dict_spans)
        long_ok = p.long_form is not None and dictionary.lexicon.lookup(p.long_form) is not None
        if not (overlapping or long_ok or dictionary.lexicon.lookup(p.text) is not None):
            continue
        if same is not None:
            p = p.model_copy(update={"vocab_id": p.vocab_id or same.vocab_id, "long_form": p.long_form or same.long_form})
        elif p.vocab_id is None:
            entry = dictionary.lexicon.lookup(p.long_form or p.text)
            if entry is not None and entry.type == p.type:
                p = p.model_copy(update={"vocab_id": entry.vocab_id})
        kept.append(p)
    return kept


def extract_entities(
    summaries: list[SummaryRow],
    backbone: Backbone,
    dictionary: DictionaryNER,
    index: EntityIndex,
    params: KarmaParams,
) -> list[MentionRow]:
    rows: dict[str, MentionRow] = {}
    for s in summaries:
        if not isinstance(s, SummaryRow):
            raise TypeError(f"extract_entities: expected SummaryRow, got {type(s).__name__}")
    # the backbone's NER calls overlap (up to its concurrency limit); filter and index stay in this thread
    proposals = backbone_map(backbone, lambda s: backbone.recognize(s.text), summaries)
    for s, proposed in zip(summaries, proposals, strict=True):
        mentions = filter_proposals(s.text, proposed, dictionary)
        if not mentions:
            continue
        hits = index.search([m.long_form or m.text for m in mentions], [m.type for m in mentions], k=1)
        for m, h in zip(mentions, hits):
            mid = mention_id(s.doc_key, s.summary_id, m.start, m.end, m.text)
            best = h[0] if h else None
            distance = best.distance if best else NO_HIT_DISTANCE
            linked = best is not None and distance <= params.rho
            new_id = m.vocab_id or f"NEW:{m.type}:{normalize_name(m.long_form or m.text)}"
            rows[mid] = MentionRow(
                doc_key=s.doc_key, mention_id=mid, summary_id=s.summary_id, segment_id=s.segment_id,
                start=m.start, end=m.end, text=m.text, long_form=m.long_form, type=m.type, vocab_id=m.vocab_id,
                entity_id=best.entity_id if linked else new_id,
                kg_id=best.entity_id if linked else None,
                kg_name=best.name if linked else None,
                distance=distance, status="linked" if linked else "new",
            )
    return list(rows.values())
