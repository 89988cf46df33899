"""IA, the ingestion agent: one parsed source -> one `DocumentRow` (clean text, metadata, sections for RA).

Parsing needs no model and is shared by every backbone (karma_dagster.ingest); what a backbone adds here is
`clean_document`: extraction-noise repair and metadata the parser missed. The row's date is the catalog's
(publication date, else arrival date), so the key, the row and the KG increment agree on one date.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter

from karma_dagster.agents.reader import NON_CONTENT_KINDS
from karma_dagster.backbones.base import Backbone
from karma_dagster.ingest.catalog import Catalog, DocumentEntry, Registration
from karma_dagster.ingest.inbox import load_document
from karma_dagster.ingest.keys import content_hash
from karma_dagster.schemas.records import DocumentRow, ParsedDocument, RawSection

_SECTIONS = TypeAdapter(list[RawSection])


def document_text(sections: list[RawSection]) -> str:
    """The paper's own text: each section's heading on its own line above its text, sections blank-line separated.

    References, acknowledgements, affiliations, funding and conflict statements stay in the sections (the reader
    records them as dropped) but not here: this text is what KG context and relation features are read from.
    """
    parts = []
    for s in sections:
        if s.kind in NON_CONTENT_KINDS:
            continue
        if s.heading and s.kind != "title" and s.heading.strip() != s.text.strip():
            parts.append(f"{s.heading}\n{s.text}")
        else:
            parts.append(s.text)
    return "\n\n".join(p for p in parts if p.strip())


def sections_json(sections: list[RawSection]) -> str:
    return json.dumps([s.model_dump() for s in sections], ensure_ascii=False)


def sections_of(row: DocumentRow | dict) -> list[RawSection]:
    """The sections a `DocumentRow` carries, for the reader."""
    raw = row.sections_json if isinstance(row, DocumentRow) else row["sections_json"]
    return _SECTIONS.validate_json(raw)


def build_document_row(doc_key: str, parsed: ParsedDocument, registration: DocumentEntry | Registration,
                       backbone: Backbone) -> DocumentRow:
    """Clean the document with the backbone and flatten it into the stage row."""
    cleaned = backbone.clean_document(parsed)
    if not isinstance(cleaned, ParsedDocument):
        raise TypeError(f"{doc_key}: backbone {backbone.name!r} clean_document returned {type(cleaned).__name__}")
    sections = [s for s in cleaned.sections if s.text.strip()]
    if not sections:
        raise ValueError(f"{doc_key}: no text left after clean-up of {parsed.source_path}")
    text = document_text(sections)
    if not text:
        raise ValueError(f"{doc_key}: {parsed.source_path} holds only references, acknowledgements, affiliations, "
                         "funding or conflict statements, no text to read")
    ids = {"pmid": cleaned.pmid, "pmcid": cleaned.pmcid, "doi": cleaned.doi}
    if isinstance(registration, DocumentEntry):  # identifiers another source of the same paper brought
        ids = {k: v or getattr(registration, k) for k, v in ids.items()}
    return DocumentRow(
        doc_key=doc_key,
        source_path=parsed.source_path,
        source_format=parsed.source_format,
        content_hash=content_hash(parsed),
        title=cleaned.title or next((s.text for s in sections if s.kind == "title"), ""),
        authors="; ".join(cleaned.authors),
        journal=cleaned.journal,
        pub_date=cleaned.pub_date,
        date=registration.date,
        date_source=registration.date_source,
        license=cleaned.license,
        n_chars=len(text),
        n_sections=len(sections),
        text=text,
        sections_json=sections_json(sections),
        **ids,
    )


def ingest_document(doc_key: str, inbox: Path, catalog: Catalog, backbone: Backbone) -> DocumentRow:
    """The whole IA step for one partition: re-read the key's preferred source and build its row."""
    entry = catalog.lookup(doc_key)
    if entry is None:
        raise KeyError(f"{doc_key}: not in the document catalog (scan the inbox first)")
    parsed = load_document(doc_key, inbox, catalog)
    return build_document_row(doc_key, parsed, entry, backbone)
