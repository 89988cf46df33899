"""Cut the demo seed KG out of Hetionet: the nodes a sample corpus names, plus their 1-hop neighbourhood.

Why a subset: the demo must stay small (a few thousand nodes, ~10k edges) yet cover what the sample papers talk
about, so that entity linking, conflict checks and reinforcement have something real to meet.

Matching is deliberately simple: whole-word, case-insensitive for names of >= 4 characters, case-sensitive for
gene symbols (>= 3 characters, with a letter; SNAP25 also as SNAP-25 and, mixing letters and digits, in any
case). Text is tokenized into words and punctuation, so "type 2 diabetes mellitus" or "5-fluorouracil" match
across spacing differences.

Run (from the repo root; DATA is the shared data folder):
    python -m karma_dagster.kg.subset --hetionet $DATA/hetionet --papers $DATA/papers \
        --pubtator data/corpora/biored-train.pubtator.gz data/corpora/bc5cdr-train.pubtator.gz --out data/seed_kg
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from pydantic import BaseModel

from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.project.safe_files import replace_file, replace_with

_TOKEN = re.compile(r"\w+|[^\w\s]")
_MAX_NGRAM = 8
# Clinically informative metaedges first: they are what the papers' triples meet (treats, causes, associates).
METAEDGE_PRIORITY = [
    "CtD", "CpD", "CcSE", "DaG", "DrD", "DpS", "DlA", "CbG", "PCiC", "CrC", "DuG", "DdG", "CuG", "CdG",
    "GiG", "Gr>G", "GcG", "GpPW", "GpBP", "GpMF", "GpCC", "AeG", "AuG", "AdG",
]
_SKIP_JATS = {"ref-list", "journal-meta", "contrib-group", "aff", "author-notes", "permissions", "fn-group"}


class SubsetStats(BaseModel):
    n_matched: int
    n_nodes: int
    n_edges: int
    nodes_by_kind: dict[str, int]
    edges_by_metaedge: dict[str, int]


def jats_text(path: Path) -> str:
    """Title, abstract, body, captions and tables of a JATS article (no references or affiliations)."""
    root = ET.parse(path).getroot()

    def walk(el: ET.Element) -> Iterable[str]:
        tag = el.tag.split("}")[-1] if isinstance(el.tag, str) else ""
        if tag in _SKIP_JATS:
            return
        if el.text:
            yield el.text
        for child in el:
            yield from walk(child)
            if child.tail:
                yield child.tail

    return " ".join(walk(root))


def corpus_texts(papers_dir: Path | None, pubtator_files: Iterable[Path]) -> list[str]:
    texts = [jats_text(p) for p in sorted(papers_dir.glob("*/fulltext.xml"))] if papers_dir else []
    for f in pubtator_files:
        texts += [d.text for d in read_pubtator(f)]
    return texts


def _tokens(text: str) -> list[str]:
    """Words and punctuation; apostrophes dropped so "Graves' disease" meets "Graves disease"."""
    return [t for t in _TOKEN.findall(text) if t not in {"'", "\u2019"}]


def _gene_keys(symbol: str) -> tuple[list[str], list[str]]:
    """Case-kept and lowercase keys of a gene symbol: SNAP25 also as SNAP-25, and as Snap25 (any case) when
    it mixes letters and digits and is >= 5 characters long (rarely an ordinary word)."""
    variants = {symbol}
    m = re.fullmatch(r"([A-Za-z]+)(\d+[A-Za-z]?)", symbol)
    if m:
        variants.add(f"{m.group(1)}-{m.group(2)}")
    keys = [" ".join(_tokens(v)) for v in variants]
    mixed = len(symbol) >= 5 and re.search(r"\d", symbol) and re.search(r"[A-Za-z]", symbol)
    return keys, [k.lower() for k in keys] if mixed else []


def _ngrams(texts: Iterable[str]) -> tuple[set[str], set[str]]:
    """All word n-grams (n <= 8) of the corpus: case-kept and lowercased."""
    exact: set[str] = set()
    for text in texts:
        toks = _tokens(text)
        for i in range(len(toks)):
            for n in range(1, min(_MAX_NGRAM, len(toks) - i) + 1):
                exact.add(" ".join(toks[i : i + n]))
    return exact, {g.lower() for g in exact}


def match_nodes(nodes: list[dict[str, str]], texts: Iterable[str]) -> set[str]:
    exact, lower = _ngrams(texts)
    hits: set[str] = set()
    for n in nodes:
        name = n["name"]
        key = " ".join(_tokens(name))
        if n["kind"] == "Gene":
            if len(name) < 3 or not re.search(r"[A-Za-z]", name):
                continue
            keys, lower_keys = _gene_keys(name)
            if any(k in exact for k in keys) or any(k in lower for k in lower_keys):
                hits.add(n["id"])
        elif len(name) >= 4 and key.lower() in lower:
            hits.add(n["id"])
    return hits


def select_subset(
    nodes: list[dict[str, str]], edges: list[tuple[str, str, str]], matched: set[str],
    max_nodes: int = 4000, max_edges: int = 10000,
) -> tuple[list[dict[str, str]], list[tuple[str, str, str]]]:
    """Edges among matched nodes first, then edges to 1-hop neighbours by metaedge priority, within the caps."""
    rank = {m: i for i, m in enumerate(METAEDGE_PRIORITY)}
    inner = [e for e in edges if e[0] in matched and e[2] in matched]
    outer = [e for e in edges if (e[0] in matched) != (e[2] in matched)]
    inner.sort(key=lambda e: (rank.get(e[1], 99), e))
    outer.sort(key=lambda e: (rank.get(e[1], 99), e))
    chosen: list[tuple[str, str, str]] = inner[:max_edges]
    keep = set(matched)
    for e in outer:
        if len(chosen) >= max_edges:
            break
        new = {e[0], e[2]} - keep
        if len(keep) + len(new) > max_nodes:
            continue
        keep |= new
        chosen.append(e)
    sub_nodes = [n for n in nodes if n["id"] in keep]
    return sub_nodes, sorted(chosen, key=lambda e: (e[1], e[0], e[2]))


def read_hetionet(hetionet_dir: Path) -> tuple[list[dict[str, str]], list[tuple[str, str, str]]]:
    with open(hetionet_dir / "nodes.tsv", encoding="utf-8", newline="") as fh:
        nodes = list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    with gzip.open(hetionet_dir / "edges-5k.sif.gz", "rt", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    return nodes, [(s, m, t) for s, m, t in rows[1:]]


SUBSET_FILES = ("nodes.tsv", "edges.sif.gz")


def write_subset(out: Path, nodes: list[dict[str, str]], edges: list[tuple[str, str, str]]) -> None:
    """The two files into out (other files there stay); never into the data dir, the checkout, home, / or a folder
    containing one of them (kg/safe_output.py)."""
    from karma_dagster.kg.safe_output import check_output_folder

    out = check_output_folder(out, kind="seed KG subset", own_files=SUBSET_FILES, others_stay=True)
    out.mkdir(parents=True, exist_ok=True)
    table = io.StringIO()
    w = csv.writer(table, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE)
    w.writerow(["id", "name", "kind"])
    w.writerows([n["id"], n["name"], n["kind"]] for n in nodes)
    # written whole and renamed over the name (project/safe_files.py): a link planted at it is replaced, never
    # written through
    replace_file(out / "nodes.tsv", table.getvalue())
    sif = ("source\tmetaedge\ttarget\n" + "".join(f"{s}\t{m}\t{t}\n" for s, m, t in edges)).encode()

    def gzipped(fh: IO[bytes]) -> None:  # mtime=0 and the file's own name: the same subset, the same bytes
        with gzip.GzipFile(filename="edges.sif.gz", mode="wb", fileobj=fh, mtime=0) as gz:
            gz.write(sif)

    replace_with(out / "edges.sif.gz", gzipped)


def build(
    hetionet_dir: Path, papers_dir: Path | None, pubtator_files: list[Path], out: Path,
    max_nodes: int = 4000, max_edges: int = 10000,
) -> SubsetStats:
    nodes, edges = read_hetionet(hetionet_dir)
    matched = match_nodes(nodes, corpus_texts(papers_dir, pubtator_files))
    sub_nodes, sub_edges = select_subset(nodes, edges, matched, max_nodes, max_edges)
    write_subset(out, sub_nodes, sub_edges)
    return SubsetStats(
        n_matched=len(matched), n_nodes=len(sub_nodes), n_edges=len(sub_edges),
        nodes_by_kind=dict(sorted(Counter(n["kind"] for n in sub_nodes).items())),
        edges_by_metaedge=dict(sorted(Counter(e[1] for e in sub_edges).items())),
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hetionet", type=Path, required=True, help="folder with nodes.tsv and edges-5k.sif.gz")
    ap.add_argument("--papers", type=Path, help="folder of <pmcid>/fulltext.xml (JATS)")
    ap.add_argument("--pubtator", type=Path, nargs="*", default=[], help="PubTator files whose abstracts to match")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-nodes", type=int, default=4000)
    ap.add_argument("--max-edges", type=int, default=10000)
    a = ap.parse_args(argv)
    from karma_dagster.kg.safe_output import TargetRefused, check_output_folder

    try:  # before the minutes of matching
        check_output_folder(a.out, kind="seed KG subset", own_files=SUBSET_FILES, others_stay=True)
    except TargetRefused as exc:
        ap.exit(2, f"subset: --out {exc}\n")
    print(build(a.hetionet, a.papers, a.pubtator, a.out, a.max_nodes, a.max_edges).model_dump_json(indent=1))


if __name__ == "__main__":
    main()
