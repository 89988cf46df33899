"""The scale path of the KG store gives exactly what the whole-graph views give.

The merge no longer counts the whole graph (kg/sizes.py: a kept edge count updated from the edges the merge
touches) and lookups read only the wanted pairs' rows (kg/keyed.py). Here a history with reinforcement,
re-merges, an out-of-order date, a supersession, a same-day contradiction, a removed document, a second namespace
and a seed re-import is merged, and after every merge its statistics are compared with a from-scratch recount over
the views at the same points (after the merge's deletes, and at its end); keyed reads are compared with the views
for every pair and date of that history.
"""

from __future__ import annotations

import csv
import datetime as dt
import shutil
from pathlib import Path

import pytest

from karma_dagster.kg import keyed
from karma_dagster.kg import merge as kg_merge
from karma_dagster.kg import sizes as kg_sizes
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import SEED_ONLY_NAMESPACE, KGStore, NodeIn, edge_text

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
NS, OTHER = "local", "other"


def _seed_ids(kind: str, n: int = 30) -> list[str]:
    with open(SEED / "nodes.tsv", encoding="utf-8") as fh:
        return sorted(r["id"] for r in csv.DictReader(fh, delimiter="\t") if r["kind"] == kind)[:n]


COMPOUNDS, DISEASES = _seed_ids("Compound"), _seed_ids("Disease")


def _seed_treats() -> list[tuple[str, str]]:
    """(compound, disease) pairs the seed holds as 'treats' (what a replace supersedes)."""
    import gzip

    with gzip.open(SEED / "edges.sif.gz", "rt", encoding="utf-8") as fh:
        rows = [line.rstrip("\n").split("\t") for line in fh][1:]
    return sorted((s, t) for s, m, t in rows if m == "CtD")


def triple(doc: str, tid: str, head: str, tail: str, score: float, relation: str = "treats", **kw: object) -> dict:
    row = {"triple_id": tid, "head_id": head, "relation": relation, "tail_id": tail,
           "metaedge": {"treats": "CtD", "causes": "CcD", "palliates": "CpD"}[relation], "score": score,
           "segment_id": f"{doc}#s1", "evidence": "The compound changed the course of the disease."}
    row.update(kw)
    return row


def day_docs(day: int, n_docs: int = 3, drop: int = 0) -> tuple[dt.date, dict]:
    """A date's documents: overlapping compound-disease triples (seed edges among them), one new entity each."""
    date = dt.date(2016, 1, 1) + dt.timedelta(days=day)
    docs = {}
    for d in range(n_docs):
        key = f"{date}_doc{d}"
        new = NodeIn(id=f"new::Compound::c-{day}-{d}", name=f"compound {day}-{d}", kind="Compound")
        rows = [triple(key, f"t{k}", COMPOUNDS[(day * 5 + d * 3 + k) % 30], DISEASES[(day + 2 * k) % 30],
                       0.5 + 0.07 * ((day + d + k) % 5)) for k in range(5 - drop)]
        rows.append(triple(key, "tn", new.id, DISEASES[day % 30], 0.6))
        docs[key] = (rows, [new])
    return date, docs


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seed") / "kg.duckdb"
    import_hetionet(KGStore(path), SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    return path


def _all_edges(con, ns: str) -> set[tuple[str, str, str]]:
    return set(map(tuple, con.execute("SELECT head_id, relation, tail_id FROM kg_edges(?)", [ns]).fetchall()))


class Recount:
    """From-scratch figures at the merge's own points: wraps _delete_previous to count the views right after it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.after_delete: dict = {}
        original = kg_merge._delete_previous

        def wrapped(con, stamp, doc_keys):
            stamp = original(con, stamp, doc_keys)  # the stamp with the evidence's kept date sources
            self.after_delete = {
                "nodes": con.execute("SELECT count(*) FROM kg_nodes(?)", [stamp.ns]).fetchall()[0][0],
                "edges": _all_edges(con, stamp.ns),
            }
            return stamp

        monkeypatch.setattr(kg_merge, "_delete_previous", wrapped)

    def check(self, store: KGStore, stats: kg_merge.IncrementStats, doc_keys: list[str]) -> None:
        with store.connect(read_only=True) as con:
            nodes_after = con.execute("SELECT count(*) FROM kg_nodes(?)", [stats.namespace]).fetchall()[0][0]
            edges_after = len(_all_edges(con, stats.namespace))
            merged = set(map(tuple, con.execute(
                "SELECT head_id, relation, tail_id FROM evidence WHERE namespace = ? AND list_contains(?, doc_key)",
                [stats.namespace, doc_keys]).fetchall()))
        before = self.after_delete
        expected = (before["nodes"], len(before["edges"]), nodes_after, edges_after, len(merged & before["edges"]),
                    len(merged - before["edges"]))
        got = (stats.nodes_before, stats.edges_before, stats.nodes_after, stats.edges_after, stats.n_reinforced,
               stats.n_new_edges)
        assert got == expected, f"{stats.namespace} {stats.date}: incremental {got} != recomputed {expected}"


def _merge(store: KGStore, recount: Recount, date: dt.date, docs: dict, ns: str = NS) -> kg_merge.IncrementStats:
    stats = kg_merge.merge_increment(store, date, ns, docs, run_id=f"r-{date}")
    recount.check(store, stats, list(docs))
    return stats


def test_incremental_sizes_equal_a_full_recount_through_a_history(seeded: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(seeded, tmp_path / "kg.duckdb")
    store = KGStore(tmp_path / "kg.duckdb")
    recount = Recount(monkeypatch)
    for day in (0, 1, 2, 4):
        _merge(store, recount, *day_docs(day))
    _merge(store, recount, *day_docs(3))  # a date before the latest one
    _merge(store, recount, *day_docs(1, drop=3))  # re-merge: fewer triples, the dropped edges may disappear
    _merge(store, recount, *day_docs(2, n_docs=1))  # re-merge of one document of a date

    # a replace supersedes a seed edge (and with it that edge's earlier evidence), then its date is re-merged
    head, tail = _seed_treats()[0]
    date = dt.date(2016, 1, 10)
    replace = triple("r", "t1", head, tail, 0.95, relation="causes", action="replace",
                     contradicts=edge_text(head, "treats", tail), verdict="contradict")
    s = _merge(store, recount, date, {f"{date}_r": ([replace], [])})
    assert s.n_superseded == 1
    _merge(store, recount, date, {f"{date}_r": ([], [])})  # the supersession goes, the edge comes back
    s = _merge(store, recount, date, {f"{date}_r": ([replace], [])})
    # a same-day contradiction between two documents: the weaker triple stays out
    date = dt.date(2016, 1, 12)
    clash = {f"{date}_a": ([triple("a", "t1", COMPOUNDS[-1], DISEASES[-1], 0.9)], []),
             f"{date}_b": ([triple("b", "t1", COMPOUNDS[-1], DISEASES[-1], 0.4, relation="causes")], [])}
    s = _merge(store, recount, date, clash)
    assert s.n_discarded + s.n_review == 1

    # a removed document, a second namespace, then a seed re-import: the kept count is stale, recounted
    store.remove_document(f"{dt.date(2016, 1, 3)}_doc0")
    _merge(store, recount, *day_docs(2))
    _merge(store, recount, *day_docs(2), ns=OTHER)
    _merge(store, recount, *day_docs(5))
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.8, if_grown="add")
    _merge(store, recount, *day_docs(6))
    _merge(store, recount, *day_docs(6, drop=2), ns=OTHER)


def test_a_kept_count_is_not_used_once_the_rows_behind_it_change(seeded: Path, tmp_path: Path) -> None:
    shutil.copy(seeded, tmp_path / "kg.duckdb")
    store = KGStore(tmp_path / "kg.duckdb")
    date, docs = day_docs(0)
    kg_merge.merge_increment(store, date, NS, docs, run_id="r0")
    with store.connect() as con:
        full = kg_sizes.full_edge_count(con, NS)
        assert kg_sizes.edge_count(con, NS) == full
        con.execute("UPDATE kg_sizes SET n_edges = n_edges + 1000")  # a kept count that no longer tells the truth
        assert kg_sizes.edge_count(con, NS) == full + 1000  # same state: the kept count is what is used
        (key,) = con.execute("SELECT doc_key FROM evidence WHERE namespace = ? LIMIT 1", [NS]).fetchall()[0]
        con.execute("DELETE FROM evidence WHERE doc_key = ?", [key])  # a change the merge did not make
        assert kg_sizes.edge_count(con, NS) == kg_sizes.full_edge_count(con, NS)


def _view_facts(con, ns: str, as_of: dt.date | None) -> dict:
    rows = con.execute("SELECT head_id, relation, tail_id, confidence, first_seen, last_seen, n_evidence, in_seed "
                       "FROM kg_edges(?, as_of := ?)", [ns, as_of]).fetchall()
    return {(h, r, t): (round(c, 12), f, la, n, s) for h, r, t, c, f, la, n, s in rows}


def test_keyed_reads_equal_the_views_for_every_pair_and_date(seeded: Path, tmp_path: Path) -> None:
    shutil.copy(seeded, tmp_path / "kg.duckdb")
    store = KGStore(tmp_path / "kg.duckdb")
    for day in range(4):
        date, docs = day_docs(day)
        kg_merge.merge_increment(store, date, NS, docs, run_id="r")
    head, tail = _seed_treats()[1]
    date = dt.date(2016, 1, 3)
    kg_merge.merge_increment(store, date, NS, {f"{date}_r": ([triple("r", "t1", head, tail, 0.95, relation="causes",
                             action="replace", contradicts=edge_text(head, "treats", tail))], [])}, run_id="r")
    kg_merge.merge_increment(store, dt.date(2016, 1, 4), NS, {"late": ([triple("late", "t1", head, tail, 0.3)], [])},
                             run_id="r")
    with store.connect(read_only=True) as con:
        for ns in (NS, OTHER):
            for as_of in (None, dt.date(2015, 12, 31), dt.date(2016, 1, 2), dt.date(2016, 1, 3), dt.date(2016, 1, 4)):
                view = _view_facts(con, ns, as_of)
                pairs = {(h, t) for h, _, t in view} | {("no such", "pair")}
                got = {e: (round(f.confidence, 12), f.first_seen, f.last_seen, f.n_evidence, f.in_seed)
                       for e, f in keyed.edge_facts(con, pairs, ns, as_of).items()}
                assert got == view, (ns, as_of)
            assert keyed.count_nodes(con, ns) == con.execute("SELECT count(*) FROM kg_nodes(?)", [ns]).fetchall()[0][0]
            ids = [r[0] for r in con.execute("SELECT id FROM kg_nodes(?)", [ns]).fetchall()]
            assert keyed.node_kinds(con, [*ids, "no such id"], ns) == dict(
                con.execute("SELECT id, kind FROM kg_nodes(?)", [ns]).fetchall())
        # the superseded seed edge is gone as of its replace date, back with the later evidence (only that)
        assert keyed.live_edges(con, [(head, "treats", tail)], NS, date) == set()
        assert keyed.edge_facts(con, [(head, tail)], NS)[(head, "treats", tail)].n_evidence == 1
        all_kinds = dict(con.execute("SELECT id, kind FROM nodes").fetchall())
    assert store.node_kinds() == all_kinds
    assert store.seed_counts() == store.snapshot_counts(namespace=SEED_ONLY_NAMESPACE)  # counted by the views
    assert store.seed_counts().n_edges == 10000
    lookups = store.edges_between([(head, tail), (tail, head)], NS)
    assert [e.relation for e in lookups[(head, tail)]] == ["causes", "treats"] and lookups[(tail, head)] == []
