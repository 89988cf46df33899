"""PDF text against the JATS body of the same article, and the reader's kept-segment recall on the PDFs.

Figures (measurement only, never tuning):
- token precision / recall: word tokens (lowercased, as multisets) of the PDF's document text (what a
  `DocumentRow` carries, `agents.ingestion.document_text`) against the JATS body of the same paper: title,
  abstract, body sections, captions and tables, without references, acknowledgements, affiliations, funding
  and conflict statements. Precision falls when page furniture or back matter leaks into the text.
- kept-segment recall (`--reader`): of the PDF's content segments that the local NER finds an entity in, the
  share the reader keeps at the default delta, overall and per section kind (no KG context: the worst case).

Usage: python bench/pdf_text.py [--papers DIR] [--reader] [--cache DIR]
DIR defaults to the shared papers (<PMCID>/fulltext.pdf + fulltext.xml).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

from karma_dagster.agents.ingestion import document_text
from karma_dagster.ingest.parse import parse_file
from karma_dagster.schemas.records import RawSection

NON_CONTENT = {"references", "acknowledgements", "affiliations", "funding", "conflicts"}


def tokens(text: str) -> Counter[str]:
    return Counter(w.lower() for w in re.findall(r"\w+", text))


def jats_body(sections: list[RawSection]) -> str:
    """The gold: the JATS sections that are the paper's own content, whatever the code under test keeps."""
    return "\n\n".join(f"{s.heading}\n{s.text}" if s.kind != "title" else s.text
                       for s in sections if s.kind not in NON_CONTENT)


def paper_dirs(papers: Path) -> list[Path]:
    return sorted(d for d in papers.iterdir() if (d / "fulltext.pdf").is_file() and (d / "fulltext.xml").is_file())


def text_scores(papers: Path) -> tuple[list[tuple[str, int, int, int]], float, float]:
    """Per paper (name, PDF tokens, gold tokens, shared tokens), and micro precision and recall."""
    rows = []
    for d in paper_dirs(papers):
        pdf = parse_file(d / "fulltext.pdf", d, use_sidecar=False)[0]
        jats = parse_file(d / "fulltext.xml", d, use_sidecar=False)[0]
        got, gold = tokens(document_text(pdf.sections)), tokens(jats_body(jats.sections))
        rows.append((d.name, sum(got.values()), sum(gold.values()), sum((got & gold).values())))
    shared = sum(r[3] for r in rows)
    return rows, shared / max(1, sum(r[1] for r in rows)), shared / max(1, sum(r[2] for r in rows))


def reader_recall(papers: Path, cache: Path) -> tuple[Counter[str], Counter[str], list[str], Counter[str]]:
    """(kept, total) counts per section kind of content segments with an NER entity, the dropped ones, and the
    fate of every segment (kept / below delta / non-content, with or without an entity)."""
    from karma_dagster.agents.reader import NON_CONTENT_KINDS, read_document
    from karma_dagster.backbones.local import reader as local_reader
    from karma_dagster.dictionary.lexicon import Lexicon
    from karma_dagster.dictionary.ner import DictionaryNER
    from karma_dagster.runtime.params import KarmaParams

    ner = DictionaryNER(Lexicon.build(cache_dir=cache))

    class _Reader:  # the local backbone's reader, without the relation model it does not need here
        name = "local"

        def score_relevance(self, sections, kg_context):
            return local_reader.score_sections(sections, ner.count_hits, kg_context)

    kept: Counter[str] = Counter()
    total: Counter[str] = Counter()
    dropped: list[str] = []
    fate: Counter[str] = Counter()
    for d in paper_dirs(papers):
        pdf = parse_file(d / "fulltext.pdf", d, use_sidecar=False)[0]
        for row in read_document(d.name.lower(), pdf.sections, _Reader(), KarmaParams()):
            has_entity = bool(ner.recognize(row.text))
            fate[("kept" if row.kept else "non-content" if row.section in NON_CONTENT_KINDS else "below delta")
                 + (", with entity" if has_entity else ", no entity")] += 1
            if row.section in NON_CONTENT_KINDS or not has_entity:
                continue
            total[row.section] += 1
            kept[row.section] += row.kept
            if not row.kept:
                dropped.append(f"{d.name} {row.section:<12} R={row.relevance:.3f} {row.text[:70]!r}")
    return kept, total, dropped, fate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--papers", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "papers")
    ap.add_argument("--reader", action="store_true", help="also the reader's kept-segment recall (builds the NER)")
    ap.add_argument("--cache", type=Path, default=Path(".cache/lexicon"))
    args = ap.parse_args()
    if not args.papers.is_dir():
        raise SystemExit(f"--papers {args.papers}: no such folder")
    rows, precision, recall = text_scores(args.papers)
    print(f"{'paper':<12} {'pdf tok':>8} {'gold tok':>8} {'P':>6} {'R':>6}")
    for name, n_pdf, n_gold, shared in rows:
        print(f"{name:<12} {n_pdf:>8} {n_gold:>8} {shared / max(1, n_pdf):>6.3f} {shared / max(1, n_gold):>6.3f}")
    print(f"{'micro':<12} {sum(r[1] for r in rows):>8} {sum(r[2] for r in rows):>8} {precision:>6.3f} {recall:>6.3f}"
          f"   ({len(rows)} papers)")
    if args.reader:
        kept, total, dropped, fate = reader_recall(args.papers, args.cache)
        print("\nkept-segment recall (content segments with an entity, default delta, no KG context)")
        for kind in sorted(total):
            print(f"  {kind:<14} {kept[kind]:>3}/{total[kind]:<3} {kept[kind] / total[kind]:.3f}")
        print(f"  {'all':<14} {sum(kept.values()):>3}/{sum(total.values()):<3} "
              f"{sum(kept.values()) / max(1, sum(total.values())):.3f}")
        print("all segments: " + ", ".join(f"{k} {n}" for k, n in sorted(fate.items())))
        for line in dropped:
            print("  dropped:", line)


if __name__ == "__main__":
    main()
