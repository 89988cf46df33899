"""Which documents have no publication date, and why: what `karma status` and the run report show (dates.py)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from karma_dagster.ingest.catalog import Catalog, SkippedUndated


class UndatedDocument(BaseModel):
    doc_key: str
    date_source: str  # arrival | configured
    note: str  # why it has no publication date, and what dated it


class UndatedSummary(BaseModel):
    """The catalog's documents without a publication date and those `undated: skip` kept out."""

    n_documents: int = 0
    undated: list[UndatedDocument] = []
    skipped: list[SkippedUndated] = []

    def lines(self, limit: int = 50, named: Callable[[str], str] = lambda key: f"`{key}`") -> list[str]:
        """Markdown lines (empty when every document has its publication date and nothing was skipped); `named`
        says a document (the run report: by its paper's title, the key after it)."""
        out: list[str] = []
        if self.undated:
            by_source: dict[str, int] = {}
            for u in self.undated:
                by_source[u.date_source] = by_source.get(u.date_source, 0) + 1
            how = ", ".join(f"{n} by {'arrival' if s == 'arrival' else 'the undated setting'}"
                            for s, n in sorted(by_source.items()))
            out += [f"Documents without a publication date: {len(self.undated)} of {self.n_documents} ({how}); "
                    "their date is not when they were published, so they sort, merge and age by it. Supply dates "
                    "with a sidecar `<stem>.json` or `<stem>.dates.tsv` (pmid<TAB>date) beside the file, or set "
                    "the storage setting `undated`:"]
            out += [f"- {named(u.doc_key)} ({u.date_source}): {u.note.removeprefix('undated: ')}"
                    for u in self.undated[:limit]]
            if len(self.undated) > limit:
                out.append(f"- ... and {len(self.undated) - limit} more")
        if self.skipped:
            out += [""] if out else []
            out.append(f"Skipped-undated (storage setting `undated: skip`; not registered): {len(self.skipped)}")
            out += [f"- {s.source_path}" + (f" #{s.member}" if s.member != "0" else "") + f": {s.reason}"
                    for s in self.skipped[:limit]]
            if len(self.skipped) > limit:
                out.append(f"- ... and {len(self.skipped) - limit} more")
        return out


def undated_summary(catalog: Catalog) -> UndatedSummary:
    entries = catalog.undated()
    return UndatedSummary(
        n_documents=sum(catalog.date_counts().values()),
        undated=[UndatedDocument(doc_key=e.doc_key, date_source=e.date_source,
                                 note=e.date_note or "no publication date (registered before date notes were kept)")
                 for e in entries],
        skipped=catalog.skipped_undated(),
    )
