"""Gold annotations of pipeline documents, and a backbone's stage tables turned into gold-comparable predictions.

Gold is re-read from the document's PubTator or BioC source (the catalog keeps every source of a paper, so a paper
read from its JATS still finds its PubTator gold). Predicted mentions index into summaries; each is carried
back to the gold text (title + ' ' + abstract) through its summary sentence, found verbatim in that text.
A mention whose sentence cannot be found (rewritten by a model's summary) is reported as unaligned and still
counts for the document-level identifier and relation scores, which need no offsets.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from karma_dagster.dictionary.sentences import split_sentences
from karma_dagster.ingest.bioc import gold_document as bioc_gold
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.parse import IngestError, parse_file
from karma_dagster.ingest.pubtator import PubTatorDoc
from karma_dagster.metrics.gold import PredictedMention, PredictedTriple, comparable_id


def gold_document(doc_key: str, inbox: Path, catalog: Catalog) -> PubTatorDoc | None:
    """The PubTator gold of a catalog document, None when no source of it carries gold annotations."""
    entry = catalog.lookup(doc_key)
    if entry is None:
        raise KeyError(f"{doc_key}: not in the document catalog")
    for src in entry.sources:
        if src.source_format not in ("pubtator", "bioc"):
            continue
        try:
            parsed = parse_file(inbox / src.source_path, inbox)
        except IngestError:
            continue
        for doc in parsed:
            if src.source_format == "bioc" and doc.pmid == src.member and (doc.gold_mentions or doc.gold_relations):
                return bioc_gold(doc)  # its passages joined as its gold offsets count them
            if doc.pmid == src.member and (doc.gold_mentions or doc.gold_relations):
                abstract = next((s.text for s in doc.sections if s.kind == "abstract"), "")
                return PubTatorDoc(pmid=doc.pmid or doc_key, title=doc.title, abstract=abstract,
                                   mentions=doc.gold_mentions, relations=doc.gold_relations)
    return None


def sentence_offsets(summary_text: str, gold_text: str) -> list[tuple[int, int, int | None]]:
    """(start, end, shift) per summary sentence: shift maps a summary offset to the gold text, None if not found."""
    out = []
    cursor = 0
    for s, e, sent in split_sentences(summary_text):
        pos = gold_text.find(sent, cursor)
        if pos < 0:
            pos = gold_text.find(sent)
        if pos >= 0:
            cursor = pos + len(sent)
        out.append((s, e, pos - s if pos >= 0 else None))
    return out


def aligned_mentions(summaries: pd.DataFrame, entities: pd.DataFrame, gold_text: str) -> tuple[list[PredictedMention], int]:
    """The entities table as mentions of the gold text; returns (mentions, how many could not be placed)."""
    shifts = {row.summary_id: sentence_offsets(row.text, gold_text) for row in summaries.itertuples()}
    out, unaligned = [], 0
    for m in entities.itertuples():
        shift = next((sh for s, e, sh in shifts.get(m.summary_id, []) if s <= m.start < e), None)
        if shift is None or gold_text[m.start + shift: m.end + shift] != m.text:
            unaligned += 1
            start = end = -1  # never matches a gold span; ids and pairs still count
        else:
            start, end = m.start + shift, m.end + shift
        out.append(PredictedMention(start=start, end=end, text=m.text, type=m.type,
                                    vocab_id=m.vocab_id if isinstance(m.vocab_id, str) else None,
                                    kg_id=m.kg_id if isinstance(m.kg_id, str) else None))
    return out, unaligned


def predicted_triples(triples: pd.DataFrame, entities: pd.DataFrame) -> list[PredictedTriple]:
    """Triples (relations or evaluated table) with each end's gold-comparable id taken from its mention."""
    ids = {}
    for m in entities.itertuples():
        vid, _ = comparable_id(m.vocab_id if isinstance(m.vocab_id, str) else None,
                               m.kg_id if isinstance(m.kg_id, str) else None)
        ids[m.mention_id] = (vid, m.type)
    out = []
    for t in triples.itertuples():
        hv, ht = ids.get(t.head_mention_id, (None, t.head_type))
        tv, tt = ids.get(t.tail_mention_id, (None, t.tail_type))
        out.append(PredictedTriple(head_vocab_id=hv, tail_vocab_id=tv, head_type=ht, tail_type=tt,
                                   relation=t.relation, probability=float(t.probability)))
    return out
