"""A seed import cannot silently replace a grown KG (issue 46, part A).

Before the guard, `karma import-kg` into a data folder whose KG had grown (evidence rows, extracted nodes) replaced
the 4,000-node seed with the file's few nodes without a word, left the evidence naming nodes that no longer existed,
and exports then dropped those edges. Now: no flag -> exit 2, one line naming the store and what it holds, the KG
file byte for byte as it was (the `import_kg` job launched from the UI fails the same way); --replace -> the new seed
in, the old KG kept aside and restored by the printed command; --add -> the file's nodes and edges join the seed,
nothing deleted. Evidence naming no node is reported (counts and examples) after an import and when `karma run`
starts. The CLI runs in a child process (`python -m karma_dagster.cli`) as a user runs it; the store-level checks run
on the DuckDB file and on PostgreSQL (kg_backends.py)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from kg_backends import KGBackend, kg_backend  # noqa: F401 - fixture
from reliability_helpers import kg_dump

from karma_dagster.kg import seed_guard
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.seed_import import import_generic, import_hetionet
from karma_dagster.kg.store import KGStore, NodeIn

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "data" / "seed_kg"
METFORMIN, T2DM, GRAVES = "Compound::DB00331", "Disease::DOID:9352", "Disease::DOID:12361"
NEW_DRUG, NEW_GENE = "Compound::NEW1", "Gene::NEWG1"
SEED_NODES, SEED_EDGES = 4000, 10000


def _triple(doc: str, tid: str, head: str, tail: str, score: float, relation: str = "treats") -> dict:
    return {"doc_key": doc, "triple_id": tid, "head_id": head, "relation": "Negative_Correlation",
            "kg_relation": relation, "tail_id": tail, "metaedge": None, "score": score, "segment_id": f"{doc}#s1",
            "accepted": True, "evidence": "Metformin improved glycemic control in type 2 diabetes."}


def grow(store: KGStore) -> None:
    """The shipped seed, then one merged day: a reinforced seed edge and an edge to a new entity."""
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    new = NodeIn(id="new::Compound::glucoblock", name="glucoblock", kind="Compound")
    doc = "2016-01-05_a"
    merge_increment(store, dt.date(2016, 1, 5), "local",
                    {doc: ([_triple(doc, "t1", METFORMIN, T2DM, 0.7), _triple(doc, "t2", new.id, GRAVES, 0.6)],
                           [new])}, "run-1")


def small_kg(folder: Path, *, join_seed: bool = False) -> tuple[Path, Path]:
    """A generic node/edge table of three nodes (one of them also a seed node, same kind); `join_seed`: one more
    edge to a seed node the file does not list (valid only when added to the seed)."""
    folder.mkdir(parents=True, exist_ok=True)
    nodes, edges = folder / "nodes.tsv", folder / ("edges_join.tsv" if join_seed else "edges.tsv")
    nodes.write_text("id\tname\tkind\n"
                     f"{NEW_DRUG}\tnewdrugamab\tCompound\n{T2DM}\ttype 2 diabetes mellitus\tDisease\n"
                     f"{NEW_GENE}\tNEWGENE1\tGene\n", encoding="utf-8")
    rows = [f"{NEW_DRUG}\ttreats\t{T2DM}", f"{NEW_DRUG}\tbinds\t{NEW_GENE}"]
    if join_seed:
        rows.append(f"{NEW_DRUG}\ttreats\t{GRAVES}")
    edges.write_text("source\trelation\ttarget\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return nodes, edges


@pytest.fixture(scope="module")
def grown_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("grown") / "kg.duckdb"
    grow(KGStore(path))
    return path


@pytest.fixture
def data(grown_file: Path, tmp_path: Path) -> Path:
    """A data folder whose KG grew (a copy of the module's), and a DAGSTER_HOME beside it."""
    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copy(grown_file, folder / "kg.duckdb")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return folder


def karma(args: list[str], data: Path, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`karma <args> --data-dir data` in a child, as a user runs it (DAGSTER_HOME: `home`, else data/../home)."""
    env = {**os.environ, "DAGSTER_HOME": str(home or data.parent / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "PYTHONPATH": str(REPO)}
    for var in ("KARMA_KG_URL", "KARMA_STORAGE_URL", "KARMA_KG_START_DATE"):
        env.pop(var, None)
    return subprocess.run([sys.executable, "-m", "karma_dagster.cli", *args, "--data-dir", str(data)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=REPO)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def counts(path: Path) -> dict[str, int]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        names = ("seed_nodes", "seed_edges", "evidence", "extracted_nodes", "merged_documents", "increments")
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in names}  # noqa: S608
    finally:
        con.close()


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


# ---------------------------------------------------------------- the CLI and the asset refuse
def test_import_into_a_grown_kg_without_a_flag_is_refused_and_changes_nothing(data: Path) -> None:
    kg = data / "kg.duckdb"
    before, listed, dump = sha(kg), files(data), kg_dump(kg)
    nodes, edges = small_kg(data.parent / "in")

    done = karma(["import-kg", "--format", "generic", "--nodes", str(nodes), "--edges", str(edges)], data)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("karma import-kg: ") and str(kg) in lines[0]
    assert "2 evidence rows, 1 extracted nodes" in lines[0] and "--replace" in lines[0] and "--add" in lines[0]
    assert sha(kg) == before and files(data) == listed and kg_dump(kg) == dump  # byte for byte, nothing beside it


def test_the_import_kg_job_refuses_a_grown_kg_with_a_clear_failure(data: Path) -> None:
    """What the UI launches (the import_kg job, seed_kg asset) fails naming what the KG holds; nothing written."""
    import dagster as dg

    from karma_dagster import runner
    from karma_dagster.definitions import build_definitions
    from karma_dagster.resources.backbones import BackboneConfig
    from karma_dagster.resources.storage import KarmaStorageResource

    kg = data / "kg.duckdb"
    before = sha(kg)
    nodes, edges = small_kg(data.parent / "in")
    storage = KarmaStorageResource(data_dir=str(data), cache_dir=str(data.parent / "cache"))
    defs = build_definitions(backbones={"local": BackboneConfig()}, storage=storage)
    said: list[str] = []
    with dg.instance_for_test(temp_dir=str(data.parent / "home")) as inst:
        assert not runner.import_kg(defs, inst, str(nodes), str(edges), "generic", reimport=True,
                                    on_failure=said.append)
        assert not runner.import_kg(defs, inst, reimport=True)  # the shipped seed again: refused as well
    assert len(said) == 1 and "seed_kg: " in said[0] and "holds a grown KG (2 evidence rows, 1 extracted nodes)" \
        in said[0] and "if_grown" in said[0], said
    assert sha(kg) == before


# ---------------------------------------------------------------- --replace and --add
def test_replace_puts_the_new_seed_in_and_keeps_the_old_kg_restorable(data: Path) -> None:
    kg = data / "kg.duckdb"
    old = kg_dump(kg)
    assert counts(kg)["seed_nodes"] == SEED_NODES and counts(kg)["evidence"] == 2
    nodes, edges = small_kg(data.parent / "in")

    done = karma(["import-kg", "--format", "generic", "--nodes", str(nodes), "--edges", str(edges), "--replace"], data)
    assert done.returncode == 0, done.stderr[-3000:]
    now = counts(kg)
    assert now == {"seed_nodes": 3, "seed_edges": 2, "evidence": 0, "extracted_nodes": 0, "merged_documents": 0,
                   "increments": 0}, now  # no evidence left pointing at the old seed: it is merged again later
    assert seed_guard.dangling_evidence(KGStore(kg)).n_rows == 0
    (kept,) = re.findall(r"the KG as it was is kept at (\S+);", done.stdout)
    (restore,) = re.findall(r"to restore it \(no karma process running\): (.+)", done.stdout)
    assert Path(kept).parent == data and counts(Path(kept))["seed_nodes"] == SEED_NODES
    assert kg_dump(Path(kept)) == old  # the copy is the KG as it was, evidence and all

    subprocess.run(["bash", "-c", restore], check=True)
    assert kg_dump(kg) == old and counts(kg)["seed_edges"] == SEED_EDGES


def test_add_merges_the_file_into_the_seed_and_deletes_nothing(data: Path) -> None:
    kg = data / "kg.duckdb"
    old = kg_dump(kg)
    nodes, edges = small_kg(data.parent / "in", join_seed=True)

    done = karma(["import-kg", "--format", "generic", "--nodes", str(nodes), "--edges", str(edges), "--add"], data)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "added to the seed: 2 nodes, 3 edges" in done.stdout, done.stdout
    now = counts(kg)
    assert (now["seed_nodes"], now["seed_edges"]) == (SEED_NODES + 2, SEED_EDGES + 3)
    new = kg_dump(kg)
    for table in ("extracted_nodes", "evidence", "increments"):
        assert new[table] == old[table], table  # every grown row as it was
    local = {(h, r, t) for ns, h, r, t, *_ in new["edges"] if ns == "local"}
    assert {(h, r, t) for ns, h, r, t, *_ in old["edges"] if ns == "local"} <= local  # nothing lost
    assert {(NEW_DRUG, "treats", GRAVES), (NEW_DRUG, "treats", T2DM), (NEW_DRUG, "binds", NEW_GENE)} <= local
    assert not list(data.glob("kg.duckdb.before-import-*"))  # an add keeps nothing aside: it deletes nothing

    again = karma(["import-kg", "--format", "generic", "--nodes", str(nodes), "--edges", str(edges), "--add"], data)
    assert again.returncode == 0 and "added to the seed: 0 nodes, 0 edges" in again.stdout  # idempotent
    assert counts(kg) == now


def test_add_refuses_a_node_stored_as_another_kind_and_an_edge_the_schema_lacks(data: Path) -> None:
    kg = data / "kg.duckdb"
    before = sha(kg)
    folder = data.parent / "bad"
    folder.mkdir()
    (folder / "nodes.tsv").write_text(f"id\tname\tkind\n{T2DM}\tdiabetes\tGene\n", encoding="utf-8")
    (folder / "edges.tsv").write_text("source\trelation\ttarget\n", encoding="utf-8")
    done = karma(["import-kg", "--format", "generic", "--nodes", str(folder / "nodes.tsv"),
                  "--edges", str(folder / "edges.tsv"), "--add"], data)
    assert done.returncode != 0 and f"{T2DM!r} is Gene in the file, Disease in the seed" in done.stderr, done.stderr
    nodes, _ = small_kg(folder)
    (folder / "edges.tsv").write_text(f"source\trelation\ttarget\n{METFORMIN}\tbinds\t{GRAVES}\n", encoding="utf-8")
    done = karma(["import-kg", "--format", "generic", "--nodes", str(nodes), "--edges", str(folder / "edges.tsv"),
                  "--add"], data)  # an edge between two seed nodes, validated like any seed edge
    assert done.returncode != 0 and "edges.tsv:2" in done.stderr, done.stderr  # the file line, the rule, the fact
    assert "admission rule domain_range" in done.stderr
    assert "the head is a Compound and the tail a Disease" in done.stderr
    assert sha(kg) == before


def test_after_replace_the_next_run_merges_the_evaluated_documents_again(tmp_path: Path, shared_cache: Path) -> None:
    """--replace empties what grew (kept aside), so no evidence points at the old seed; the evaluated documents are
    then unmerged, and the next `karma run` merges them onto the new seed. Replaced by the same seed, the KG ends
    as it was: every evidence row, extracted node, increment and merge record (two papers, the local backbone)."""
    from reliability_helpers import karma_spec, kg_state, run_karma
    from test_crash_points import make_inbox

    spec = karma_spec(tmp_path, shared_cache, make_inbox(tmp_path / "inbox"))
    code, _, err = run_karma(spec, tmp_path / "first")
    assert code == 0, err[-3000:]
    kg = tmp_path / "karma" / "kg.duckdb"
    grown = kg_state(kg)
    assert grown["evidence"] and grown["extracted_nodes"]
    home = tmp_path / "dagster_home"  # the runs' instance: the import is one more run of it, as in a deployment
    assert karma(["import-kg"], tmp_path / "karma", home).returncode == 2
    done = karma(["import-kg", "--replace"], tmp_path / "karma", home)
    assert done.returncode == 0, done.stderr[-3000:]
    assert counts(kg)["evidence"] == counts(kg)["merged_documents"] == 0
    code, _, err = run_karma(spec, tmp_path / "again")
    assert code == 0, err[-3000:]
    assert kg_state(kg) == grown


# ---------------------------------------------------------------- the store API, on DuckDB and PostgreSQL
def test_store_level_refuse_replace_add_on_both_stores(kg_backend: KGBackend, tmp_path: Path) -> None:  # noqa: F811
    store = kg_backend.new("guard")
    grow(store)
    nodes, edges = small_kg(tmp_path / "in")
    dump = _dump(store)
    with pytest.raises(seed_guard.SeedImportRefused, match=r"holds a grown KG \(2 evidence rows, 1 extracted"):
        import_generic(store, nodes, edges)
    assert _dump(store) == dump

    stats = import_generic(store, *small_kg(tmp_path / "in", join_seed=True), if_grown="add")
    assert (stats.n_nodes_added, stats.n_edges_added) == (2, 3)
    added = _dump(store)
    assert added["evidence"] == dump["evidence"] and len(added["seed_nodes"]) == SEED_NODES + 2

    stats = import_generic(store, nodes, edges, if_grown="replace")
    assert stats.kept_aside and stats.restore
    assert len(_dump(store)["seed_nodes"]) == 3 and not _dump(store)["evidence"]
    if kg_backend.is_pg:  # the restore statements, run as psql would run them (-1: one transaction)
        sql = re.search(r"-c '(.+)'$", stats.restore).group(1)  # type: ignore[union-attr]
        with store.connect() as con:
            con.execute("BEGIN")
            for statement in filter(str.strip, sql.split(";")):
                con.execute(statement)
            con.execute("COMMIT")
    else:
        subprocess.run(["bash", "-c", stats.restore], check=True)
    assert _dump(store) == added


def _dump(store: KGStore) -> dict[str, list[tuple]]:
    out = {}
    with store.connect(read_only=True) as con:
        for table in ("seed_nodes", "seed_edges", "node_synonyms", "evidence", "extracted_nodes", "merged_documents"):
            rows = con.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608 - fixed names
            out[table] = sorted((tuple(tuple(v) if isinstance(v, list) else v for v in r) for r in rows), key=repr)
    return out


# ---------------------------------------------------------------- the invariant
def test_evidence_naming_no_node_is_reported_with_counts_and_examples(grown_file: Path, tmp_path: Path) -> None:
    """What today's silent replace left behind (seed nodes gone under evidence), reported wherever it is checked:
    after an import (the import's summary) and when `karma run` opens the KG (services.dangling_evidence)."""
    from karma_dagster.runtime import services
    from karma_dagster.runtime.paths import DataPaths

    data = DataPaths(tmp_path / "data")
    data.root.mkdir()
    shutil.copy(grown_file, data.kg)
    assert services.dangling_evidence(data) == ""
    con = duckdb.connect(str(data.kg))
    con.execute("DELETE FROM seed_nodes WHERE id = ?", [T2DM])
    con.close()
    line = services.dangling_evidence(data)
    assert "1 evidence rows name a node that is neither a seed nor an extracted node" in line, line
    assert f"local/2016-01-05_a#t1 {METFORMIN} -treats-> {T2DM}" in line and str(data.kg) in line

    stats, _ = services.import_seed_kg(data, *small_kg(tmp_path / "in", join_seed=True), "generic", 0.9,
                                       if_grown="add")  # an add puts the node back: the import says it holds now
    assert stats.dangling == ""
    with pytest.raises(ValueError, match="if_grown 'merge': use 'refuse', 'replace', 'add'"):  # before any read
        services.import_seed_kg(data, SEED / "nodes.tsv", SEED / "edges.sif.gz", "hetionet", 0.9, if_grown="merge")
