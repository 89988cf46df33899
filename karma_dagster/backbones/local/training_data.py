"""Clean training corpora: no abstract of any shipped dev split may be fitted on.

BioRED and BC5CDR share PubMed abstracts (44 BC5CDR dev abstracts and 1 NCBI disease dev abstract sat in BioRED
train, 10 BioRED dev abstracts in BC5CDR train, 3 in NCBI disease train: 58 removed on 2026-11-30), so "dev is never used for fitting" only holds once every training
corpus drops every PMID of every dev split. `clean_corpora` does that in place on data/corpora and writes the
removed PMIDs to data/training_exclusions.tsv (pmid, training corpus, dev split it belongs to), so the removal is
visible, reproducible and testable. Run it again after a training corpus or a dev split changes:

    python -m karma_dagster.backbones.local.training_data --shared ../shared/data
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel

from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.runtime.paths import data_file
from karma_dagster.project.safe_files import replace_file

TRAINING_CORPORA: tuple[str, ...] = (
    "biored-train.pubtator.gz", "bc5cdr-train.pubtator.gz", "ncbi-disease-train.pubtator.gz",
)
# dev split name -> its file under the shared data folder
DEV_SPLITS: dict[str, str] = {
    "biored-dev": "biored/Dev.PubTator",
    "bc5cdr-dev": "bc5cdr/CDR_DevelopmentSet.PubTator.txt",
    "ncbi-disease-dev": "ncbi_disease/NCBIdevelopset_corpus.txt",
}
EXCLUSIONS_FILE = "training_exclusions.tsv"
HEADER = "pmid\ttraining_corpus\tdev_split"


class Exclusion(BaseModel):
    pmid: str
    training_corpus: str
    dev_split: str


def dev_pmids(shared_dir: Path) -> dict[str, set[str]]:
    """PMIDs of each shipped dev split (a missing split file is an error: the check would silently pass)."""
    out: dict[str, set[str]] = {}
    for name, rel in DEV_SPLITS.items():
        path = Path(shared_dir) / rel
        if not path.is_file():
            raise FileNotFoundError(f"dev split {name}: {rel} not found under the shared data folder {shared_dir}")
        out[name] = {d.pmid for d in read_pubtator(path)}
    return out


def _blocks(lines: Iterable[str]) -> Iterator[tuple[str | None, list[str]]]:
    """(pmid, lines) per PubTator document, blank separator lines kept with the block they end."""
    block: list[str] = []
    pmid: str | None = None
    for line in lines:
        if not line.strip():
            block.append(line)
            if pmid is not None:
                yield pmid, block
                block, pmid = [], None
            continue
        if pmid is None:
            pmid = line.split("|", 1)[0].split("\t", 1)[0]
        block.append(line)
    if block:
        yield pmid, block


def filter_corpus(path: Path, excluded: set[str]) -> list[str]:
    """Drop the documents whose PMID is in `excluded` from a (gzipped) PubTator file, in place; the PMIDs removed.

    Written to a temporary file and renamed, so an interrupted run leaves the old corpus whole.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:  # type: ignore[operator]
        lines = fh.read().splitlines(keepends=True)
    kept: list[str] = []
    removed: list[str] = []
    for pmid, block in _blocks(lines):
        if pmid is not None and pmid in excluded:
            if pmid not in removed:
                removed.append(pmid)
            continue
        kept.extend(block)
    if not removed:
        return []
    data = "".join(kept).encode("utf-8")
    if path.suffix == ".gz":
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:  # mtime 0: reproducible bytes
            gz.write(data)
        data = buf.getvalue()
    replace_file(path, data)  # a fresh temporary file renamed over it: no planted link followed
    return removed


def read_exclusions(path: Path | None = None) -> list[Exclusion]:
    path = Path(path) if path else data_file(EXCLUSIONS_FILE)
    rows = path.read_text(encoding="utf-8").splitlines()
    if not rows or rows[0] != HEADER:
        raise ValueError(f"{path.name}: expected the header {HEADER!r}")
    out = []
    for n, line in enumerate(rows[1:], start=2):
        cols = line.split("\t")
        if len(cols) != 3:
            raise ValueError(f"{path.name}:{n}: expected 3 tab-separated columns, got {len(cols)}")
        out.append(Exclusion(pmid=cols[0], training_corpus=cols[1], dev_split=cols[2]))
    return out


def clean_corpora(shared_dir: Path, corpora_dir: Path | None = None, exclusions: Path | None = None) -> list[Exclusion]:
    """Remove every dev PMID from every training corpus; append what was removed to the exclusions file."""
    corpora_dir = Path(corpora_dir) if corpora_dir else data_file("corpora")
    exclusions = Path(exclusions) if exclusions else data_file(EXCLUSIONS_FILE)
    dev = dev_pmids(shared_dir)
    every_dev = set().union(*dev.values())
    previous = read_exclusions(exclusions) if exclusions.is_file() else []
    new: list[Exclusion] = []
    for name in TRAINING_CORPORA:
        path = corpora_dir / name
        if not path.is_file():
            raise FileNotFoundError(f"training corpus {name} not found in {corpora_dir}")
        for pmid in filter_corpus(path, every_dev):
            splits = sorted(s for s, ids in dev.items() if pmid in ids)
            new.append(Exclusion(pmid=pmid, training_corpus=name, dev_split=",".join(splits)))
    rows = sorted({(e.pmid, e.training_corpus, e.dev_split) for e in [*previous, *new]},
                  key=lambda r: (r[1], int(r[0]) if r[0].isdigit() else 0, r[0]))
    replace_file(exclusions, "\n".join([HEADER, *("\t".join(r) for r in rows)]) + "\n")
    return new


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, required=True, help="the shared data folder holding the dev splits")
    args = ap.parse_args(argv)
    removed = clean_corpora(args.shared)
    for e in removed:
        print(f"removed {e.pmid} from {e.training_corpus} (in {e.dev_split})")
    print(f"{len(removed)} abstracts removed; the list is in data/{EXCLUSIONS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
