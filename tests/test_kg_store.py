"""The KG store and seed import on the shipped demo seed (data/seed_kg, a Hetionet subset).

Tests taking `kg_backend` run on both KG stores (kg_backends.py: the DuckDB file and PostgreSQL); the few about
the DuckDB file itself (its lock file, an old file's upgrade) run on DuckDB only."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import multiprocessing as mp
import re
from pathlib import Path

import duckdb
import pytest

from karma_dagster.kg.backends import open_kg_store
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.seed_guard import SeedImportRefused
from karma_dagster.kg.seed_import import SeedImportError, import_generic, import_hetionet
from karma_dagster.kg.store import KGLockTimeout, KGStore, NodeIn
from karma_dagster.kg.subset import jats_text, match_nodes
from kg_backends import KGBackend, kg_backend  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "data" / "seed_kg"

METFORMIN, T2DM, SNAP25 = "Compound::DB00331", "Disease::DOID:9352", "Gene::6616"


@pytest.fixture(scope="module")
def seeded(kg_backend: KGBackend) -> tuple[KGStore, object]:
    store = kg_backend.new("seeded")
    stats = import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    return store, stats


def _counts(store: KGStore) -> tuple[int, int, int]:
    with store.connect(read_only=True) as con:
        tables = ("seed_nodes", "seed_edges", "evidence")
        return tuple(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in tables)  # type: ignore[return-value]


def test_import_counts_match_the_shipped_files(seeded) -> None:
    store, stats = seeded
    n_lines = sum(1 for _ in open(SEED / "nodes.tsv", encoding="utf-8")) - 1
    with gzip.open(SEED / "edges.sif.gz", "rt", encoding="utf-8") as fh:
        e_lines = sum(1 for _ in fh) - 1
    assert (stats.n_nodes, stats.n_edges) == (n_lines, e_lines) == (4000, 10000)
    assert stats.edges_by_metaedge["CtD"] > 500 and stats.nodes_by_kind["Side Effect"] > 1000
    counts = store.snapshot_counts()
    assert (counts.n_nodes, counts.n_edges, counts.n_evidence) == (4000, 10000, 0)
    with store.connect(read_only=True) as con:
        row = con.execute(
            "SELECT relation, metaedge, confidence FROM seed_edges WHERE head_id = ? AND tail_id = ?", [METFORMIN, T2DM]
        ).fetchall()[0]
        vocab = con.execute("SELECT vocab_id FROM seed_nodes WHERE id = ?", [SNAP25]).fetchall()[0][0]
    assert row == ("treats", "CtD", 0.9)
    assert vocab == "NCBIGene:6616"  # matches BioRED gene ids


def test_reads_for_the_agents(seeded) -> None:
    store, _ = seeded
    assert store.existing_relations(METFORMIN, T2DM) == ["treats"]
    assert store.existing_relations(T2DM, METFORMIN) == []
    assert store.existing_relations_many([(T2DM, SNAP25), ("x", "y")]) == {(T2DM, SNAP25): ["associates"], ("x", "y"): []}
    assert store.node_kind(SNAP25) == "Gene" and store.node_kind("Gene::nope") is None
    lex = store.lexicon_rows()
    assert len(lex) == 4000 and {r.kind for r in lex} >= {"Gene", "Compound", "Disease", "Side Effect"}
    assert any(r.id == METFORMIN and r.name == "Metformin" for r in lex)


def test_reimport_of_a_grown_kg_is_refused_unless_replace_which_empties_what_grew(kg_backend: KGBackend) -> None:
    """Issue 46: a seed replaced under evidence left it naming nodes that no longer existed (kg/seed_guard.py;
    tests/reliability/test_import_guard.py covers the CLI, the job, --add and the restore)."""
    store = kg_backend.new("reimport")
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", 0.9)
    t = {"triple_id": "t1", "head_id": METFORMIN, "relation": "treats", "tail_id": T2DM, "score": 0.7,
         "segment_id": "d#1", "evidence": "Metformin lowers glucose in type 2 diabetes."}
    fingerprint = store.seed_fingerprint()
    full = _counts(store)
    merge_increment(store, dt.date(2016, 1, 5), "local", {"d": ([t], [])}, "run1")
    assert store.seed_fingerprint() == fingerprint  # merges leave the seed (and what is built from it) alone
    first = _counts(store)
    smaller = {"node_filter": lambda n: n.kind != "Symptom"}
    with pytest.raises(SeedImportRefused, match=r"holds a grown KG \(1 evidence rows, 0 extracted nodes\)"):
        import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", 0.5, **smaller)
    assert _counts(store) == first and store.seed_fingerprint() == fingerprint  # refused: nothing changed
    stats = import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", 0.5, **smaller, if_grown="replace")
    assert stats.n_nodes < 4000 and stats.n_edges_filtered > 0 and stats.kept_aside and stats.restore
    assert store.seed_fingerprint() != fingerprint
    assert _counts(store) == (stats.n_nodes, stats.n_edges, 0)  # the evidence is kept aside, not left dangling
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", 0.9)  # nothing grown now: a plain re-import
    assert _counts(store) == full and store.seed_fingerprint() == fingerprint


NEW_DRUG, GPT = "new::Compound::ipilimumab", "openai/gpt-4o"


@pytest.fixture(scope="module")
def merged(seeded, kg_backend: KGBackend) -> KGStore:
    """The seed plus two small merges: one in GPT (a new entity, a new edge, a reinforced seed edge), one in local."""
    store = kg_backend.copy(seeded[0], "merged")

    def row(doc: str, tid: str, head: str) -> dict:
        return {"triple_id": tid, "head_id": head, "relation": "treats", "tail_id": T2DM, "score": 0.7,
                "segment_id": f"{doc}#1", "evidence": "It lowers glucose in type 2 diabetes."}

    drug = NodeIn(id=NEW_DRUG, name="ipilimumab", kind="Compound")
    d1 = ([row("d1", "t1", METFORMIN), row("d1", "t2", NEW_DRUG)], [drug])
    merge_increment(store, dt.date(2016, 1, 5), GPT, {"d1": d1}, "r1")
    merge_increment(store, dt.date(2016, 1, 5), "local", {"d2": ([row("d2", "t1", METFORMIN)], [])}, "r2")
    return store


def test_seed_fingerprint_formula_and_missing_file(seeded, kg_backend: KGBackend) -> None:
    store, _ = seeded
    id_hash = "sum(hashtext(id)::bigint)" if kg_backend.is_pg else "sum(hash(id))"
    with store.connect(read_only=True) as con:
        digest = con.execute(f"SELECT coalesce({id_hash}, 0)::VARCHAR FROM seed_nodes").fetchall()[0][0]
    assert store.seed_fingerprint() == hashlib.sha256(f"4000:10000:{digest}".encode()).hexdigest()[:16]
    missing = open_kg_store(kg_backend.location("absent"))
    assert missing.seed_fingerprint() == "no-kg" and not missing.exists()  # asking does not create the store


def test_node_kinds_cover_seed_and_extracted_nodes(seeded, merged) -> None:
    kinds = seeded[0].node_kinds()
    assert len(kinds) == 4000 and kinds[SNAP25] == "Gene" and kinds[METFORMIN] == "Compound"
    kinds = merged.node_kinds()
    assert len(kinds) == 4001 and kinds[NEW_DRUG] == "Compound" and kinds[T2DM] == "Disease"


def test_merged_evidence_is_per_namespace(merged) -> None:
    assert merged.merged_evidence(GPT) == {("d1", "t1"), ("d1", "t2")}
    assert merged.merged_evidence("local") == {("d2", "t1")}
    assert merged.merged_evidence("never-used") == set()


def test_seed_and_namespace_edge_triples(merged) -> None:
    seed = merged.seed_edge_triples()
    assert len(seed) == len(set(seed)) == 10000 and (METFORMIN, "treats", T2DM) in seed
    assert (NEW_DRUG, "treats", T2DM) not in seed
    gpt = merged.edge_triples(GPT)
    assert len(gpt) == 10001 and set(gpt) == set(seed) | {(NEW_DRUG, "treats", T2DM)}
    assert sorted(merged.edge_triples("local")) == sorted(seed)  # reinforcing a seed edge adds none


def test_seed_node_ids_and_extracted_node_count(merged) -> None:
    ids = merged.seed_node_ids()
    assert len(ids) == 4000 and SNAP25 in ids and NEW_DRUG not in ids
    assert (merged.count_extracted_nodes(GPT), merged.count_extracted_nodes("local")) == (1, 0)
    assert merged.count_extracted_nodes("never-used") == 0


def test_generic_format_with_synonyms_and_relation_names(tmp_path: Path, kg_backend: KGBackend) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "id,name,kind,synonyms\n"
        "C1,Metformin,Compound,dimethylbiguanide|Glucophage\nD1,type 2 diabetes mellitus,Disease,T2DM\nG1,SNAP25,Gene,\n"
    )
    edges = tmp_path / "edges.csv"
    edges.write_text("source,relation,target,confidence\nC1,treats,D1,0.8\nD1,associates,G1,\n")
    store = kg_backend.new("generic")
    stats = import_generic(store, nodes, edges, seed_confidence=0.6)
    assert (stats.n_nodes, stats.n_edges, stats.n_synonyms) == (3, 2, 3)
    with store.connect(read_only=True) as con:
        rows = con.execute("SELECT head_id, metaedge, confidence FROM seed_edges ORDER BY head_id").fetchall()
    assert rows == [("C1", "CtD", 0.8), ("D1", "DaG", 0.6)]
    lex = {r.id: r.synonyms for r in store.lexicon_rows()}
    assert lex["C1"] == ["Glucophage", "dimethylbiguanide"]


def test_seed_names_are_stored_clean_and_bad_synonyms_left_out_and_counted(tmp_path: Path,
                                                                           kg_backend: KGBackend) -> None:
    nodes = _write(tmp_path / "nodes.csv", "id,name,kind,synonyms\n"
                   "C1,cafe\u0301ine  citrate,Compound,\x1b[1mCAF\x1b[0m|caffeine   citrate|" + "y" * 300 + "\n")
    edges = _write(tmp_path / "edges.csv", "source,relation,target\n")
    store = kg_backend.new("generic")
    stats = import_generic(store, nodes, edges)
    (row,) = store.lexicon_rows()
    assert row.name == "caf\u00e9ine citrate" and row.synonyms == ["caffeine citrate"]
    assert stats.synonyms_rejected["names_rejected"] == 2
    assert stats.synonyms_rejected["names_rejected_by_reason"] == {"control_character": 1, "too_long": 1}


@pytest.mark.parametrize(
    ("nodes_text", "edges_text", "message"),
    [
        ("id\tname\nA\ta\n", "source\tmetaedge\ttarget\n", "nodes.tsv:1: missing column 'kind'"),
        ("id\tname\tkind\nA\ta\tGene\nA\tb\tGene\n", "source\tmetaedge\ttarget\n", "nodes.tsv:3: duplicate node id 'A'"),
        ("id\tname\tkind\nA\ta\tPlanet\n", "source\tmetaedge\ttarget\n", "nodes.tsv:2: node kind 'Planet'"),
        ("id\tname\tkind\nA\ta\tGene\nB\tb\tGene\n", "source\tmetaedge\ttarget\nA\tGiG\tB\nA\tXyZ\tB\n",
         "edges.sif:3: unknown metaedge 'XyZ'"),
        ("id\tname\tkind\nA\ta\tGene\n", "source\tmetaedge\ttarget\nA\tGiG\tZ\n", "edges.sif:2: target 'Z' is not in the node file"),
        ("id\tname\tkind\nA\ta\tGene\nB\tb\tGene\n", "source\tmetaedge\ttarget\nA\tCtD\tB\n", "metaedge CtD joins Compound -> Disease"),
        ("id\tname\tkind\nA\ta\tGene\n", "source\ttarget\n", "edges.sif:1: missing column 'metaedge' or 'relation'"),
        ("id\tname\tkind\nA\ta\n", "source\tmetaedge\ttarget\n", "nodes.tsv:2: 2 fields, header has 3"),
        # names that cannot enter the KG (kg/names.py): a terminal escape, 10,000 characters, an id not in clean form
        ("id\tname\tkind\nA\t\x1b[31mTP53\tGene\n", "source\tmetaedge\ttarget\n",
         "nodes.tsv:2: node name: control character U.001B"),
        ("id\tname\tkind\nA\t" + "x" * 10_000 + "\tGene\n", "source\tmetaedge\ttarget\n",
         "nodes.tsv:2: node name: too long (10000 > 200 chars)"),
        ("id\tname\tkind\nA  1\ta\tGene\n", "source\tmetaedge\ttarget\n", "nodes.tsv:2: node id: not in clean form"),
    ],
)
def test_bad_input_names_file_line_and_problem_and_writes_nothing(
    tmp_path: Path, nodes_text: str, edges_text: str, message: str, kg_backend: KGBackend
) -> None:
    store = kg_backend.new("bad")
    import_generic(store, _write(tmp_path / "ok_nodes.tsv", "id\tname\tkind\nK\tkeep\tGene\n"),
                   _write(tmp_path / "ok_edges.tsv", "source\tmetaedge\ttarget\n"))
    with pytest.raises(SeedImportError, match=message.replace("(", r"\(").replace(")", r"\)")):
        import_hetionet(store, _write(tmp_path / "nodes.tsv", nodes_text), _write(tmp_path / "edges.sif", edges_text))
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT id FROM seed_nodes").fetchall() == [("K",)]


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _hold_lock(location: str, ready: mp.Event, release: mp.Event) -> None:
    with open_kg_store(location).connect():
        ready.set()
        release.wait(30)


def test_lock_timeout_names_the_store(kg_backend: KGBackend) -> None:
    location = kg_backend.location("locked")
    open_kg_store(location).snapshot_counts()  # creates the schema
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(location, ready, release))
    holder.start()
    name = re.escape(location.rsplit("/", 1)[1])  # the file's name, or the database's
    try:
        assert ready.wait(30)
        if kg_backend.is_pg:  # readers take no lock on Postgres (one MVCC snapshot each): only a second writer waits
            assert open_kg_store(location, lock_timeout=0.2).snapshot_counts().n_nodes == 0
            with pytest.raises(KGLockTimeout, match=name), open_kg_store(location, lock_timeout=0.2).connect():
                pass
        else:
            with pytest.raises(KGLockTimeout, match=name):
                open_kg_store(location, lock_timeout=0.2).snapshot_counts()
    finally:
        release.set()
        holder.join(30)
    with open_kg_store(location, lock_timeout=5).connect() as con:  # the holder is gone: its lock with it
        assert con.execute("SELECT count(*) FROM seed_nodes").fetchall() == [(0,)]
    assert open_kg_store(location, lock_timeout=5).snapshot_counts().n_nodes == 0


def test_nested_use_reuses_the_open_connection(seeded) -> None:
    store, _ = seeded
    with store.connect() as con:
        assert store.node_kind(SNAP25) == "Gene"  # no second open of the file, no self-deadlock
        assert con.execute("SELECT count(*) FROM seed_nodes").fetchall() == [(4000,)]


def test_a_file_from_before_adjudications_gets_them_and_the_edges_between_query(tmp_path: Path) -> None:
    """KG files written before the adjudications table (an existing dagster_home) are upgraded on first open."""
    path = tmp_path / "kg.duckdb"
    store = KGStore(path)
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    con = duckdb.connect(str(path))
    con.execute("DROP MACRO TABLE kg_edges; DROP MACRO TABLE kg_edges_all; DROP MACRO TABLE kg_superseded; "
                "DROP TABLE adjudications")
    con.close()
    reopened = KGStore(path)
    assert reopened.merge_adjudications("local") == []
    (edge,) = reopened.edges_between([(METFORMIN, T2DM)])[(METFORMIN, T2DM)]
    assert (edge.relation, edge.confidence, edge.in_seed, edge.n_evidence, edge.last_seen) == ("treats", 0.9, True,
                                                                                               0, None)
    assert edge.text == f"{METFORMIN} -treats-> {T2DM}"
    assert reopened.edges_between([(T2DM, METFORMIN)]) == {(T2DM, METFORMIN): []}
    assert reopened.edge_history(METFORMIN, "treats", T2DM) == [
        {"date": None, "event": "seed", "doc_key": None, "triple_id": None, "score": 0.9,
         "detail": "imported seed edge"}]


def test_node_model_rejects_empty_fields() -> None:
    with pytest.raises(ValueError):
        NodeIn(id="", name="x", kind="Gene")


JATS = """<article xmlns:xlink="http://www.w3.org/1999/xlink"><front><journal-meta><journal-title>J Diabetes Res
</journal-title></journal-meta><article-meta><title-group><article-title>Synaptosomal Protein of 25 kDa (Snap25)
Polymorphisms Associated with Glycemic Parameters in Type 2 Diabetes Patients</article-title></title-group>
</article-meta></front><body><p>SNAP-25 variants and <italic>type 2 diabetes mellitus</italic>.</p></body>
<back><ref-list><ref>Graves' disease and CAT in an unrelated reference.</ref></ref-list></back></article>"""


def test_subset_matching_finds_the_papers_entities(tmp_path: Path) -> None:
    nodes = [
        {"id": SNAP25, "name": "SNAP25", "kind": "Gene"},
        {"id": T2DM, "name": "type 2 diabetes mellitus", "kind": "Disease"},
        {"id": "Disease::DOID:12361", "name": "Graves' disease", "kind": "Disease"},
        {"id": "Gene::847", "name": "CAT", "kind": "Gene"},
    ]
    text = jats_text(_write(tmp_path / "fulltext.xml", JATS))
    assert "Snap25" in text and "unrelated reference" not in text and "J Diabetes Res" not in text
    assert match_nodes(nodes, [text]) == {SNAP25, T2DM}
    assert match_nodes(nodes, ["Graves disease is autoimmune"]) == {"Disease::DOID:12361"}
    assert match_nodes(nodes, ["the cat sat", "Snap2 5"]) == set()  # symbols case-sensitive, whole words
    assert match_nodes(nodes, ["CAT activity"]) == {"Gene::847"}
