"""KG store at scale: the per-document KG work of the chain at 10k vs 1M edges, and the 1M / 10k ratio.

    python bench/kg_scale.py [--sizes 10000 1000000] [--docs 10] [--repeat 3] [--workdir DIR]

For each size a temporary store is built: the shipped seed KG's nodes (data/seed_kg, real ids and kinds), then
synthetic seed edges and evidence over them generated in DuckDB (INSERT ... SELECT from range): metaedges consistent
with the node kinds, ~85% seed edges, evidence in two namespaces over six years of dates (10 triples a document,
a third reinforcing seed edges), new entities, and supersessions. Then it measures, with the store's real code:
- merge: `merge_increment` of --docs documents dated after everything (10 triples each: 4 on existing edges, 4 new,
  one new entity, plus a replace and a same-day contradiction), median over --repeat new dates (after one warm-up
  merge), and the median of --repeat re-merges of the last date (which first delete what it merged);
- conflict lookup: `edges_between` as the conflict agent calls it (as of the day before), one pair, and one
  document's pairs in one call (what `resolve_conflicts` does);
- the other per-document reads: `node_kinds` (alignment), `extracted_entities` with the index in sync (entity
  linking's check), `merged_documents` (document states); and, once per run, `snapshot_counts` (the report) and
  `seed_counts` (`karma run`'s seed check).
Prints a markdown table, with the last size ÷ the first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from karma_dagster.kg.merge import merge_increment  # noqa: E402
from karma_dagster.kg.seed_import import import_hetionet  # noqa: E402
from karma_dagster.kg.store import KGStore, NodeIn, edge_text, load_schema  # noqa: E402

SEED = REPO / "data" / "seed_kg"
NS, OTHER = "local", "other"
FIRST_DAY, N_DAYS = dt.date(2019, 1, 1), 6 * 365
MERGE_DAY = FIRST_DAY + dt.timedelta(days=N_DAYS + 10)
SENTENCE = ("In a randomized cohort of 412 patients, treatment was associated with a significant change "
            "(p < 0.01) compared with placebo over 24 weeks of follow-up.")


def _build(path: Path, n_edges: int) -> dict[str, int]:
    """A store of about n_edges edges in namespace NS (seed + extracted), generated in SQL."""
    store = KGStore(path)
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    _, metaedges = load_schema()
    n_seed, n_ev, n_other = int(n_edges * 0.85), int(n_edges * 0.5), int(n_edges * 0.1)
    n_new_keys = max(1, int(n_edges * 0.4))  # evidence keys beyond the seed (many meet seed edges)
    with store.connect() as con:
        con.execute("CREATE TEMP TABLE _n AS SELECT id, kind, row_number() OVER (PARTITION BY kind ORDER BY id) - 1 "
                    "AS k FROM seed_nodes")
        con.execute("CREATE TEMP TABLE _me(m INTEGER, abbrev VARCHAR, source VARCHAR, relation VARCHAR, "
                    "target VARCHAR)")
        con.executemany("INSERT INTO _me VALUES (?, ?, ?, ?, ?)",
                        [(0, m.abbrev, m.source, m.relation, m.target) for m in metaedges])
        con.execute("CREATE TEMP TABLE _mk AS SELECT row_number() OVER (ORDER BY abbrev) - 1 AS m, abbrev, relation, "
                    "source, target, (SELECT count(*) FROM _n WHERE kind = source) AS ns, "
                    "(SELECT count(*) FROM _n WHERE kind = target) AS nt FROM _me "
                    "WHERE (SELECT count(*) FROM _n WHERE kind = source) > 0 "
                    "AND (SELECT count(*) FROM _n WHERE kind = target) > 0")
        (n_me,) = con.execute("SELECT count(*) FROM _mk").fetchone()
        # a synthetic edge number -> (head, relation, tail, metaedge): kinds always match the metaedge
        gen = ("CREATE TEMP TABLE {name} AS SELECT i, h.id AS head_id, g.relation, t.id AS tail_id, g.abbrev AS "
               "metaedge FROM (SELECT i, mk.* FROM range({n}) r(i) JOIN _mk mk ON mk.m = (hash(i, {salt}) % {m})) g "
               "JOIN _n h ON h.kind = g.source AND h.k = hash(g.i, {salt} + 1) % g.ns "
               "JOIN _n t ON t.kind = g.target AND t.k = hash(g.i, {salt} + 2) % g.nt WHERE h.id <> t.id")
        con.execute(gen.format(name="_gs", n=int(n_seed * 2), salt=11, m=n_me))
        con.execute("DELETE FROM seed_edges")
        con.execute(f"INSERT INTO seed_edges SELECT head_id, relation, tail_id, any_value(metaedge), 0.9 FROM _gs "
                    f"GROUP BY ALL ORDER BY min(i) LIMIT {n_seed}")
        con.execute("CREATE TEMP TABLE _se AS SELECT row_number() OVER () - 1 AS k, * FROM seed_edges")
        (n_se,) = con.execute("SELECT count(*) FROM _se").fetchone()
        con.execute(gen.format(name="_gx", n=n_new_keys, salt=23, m=n_me))
        con.execute("CREATE TEMP TABLE _gxk AS SELECT row_number() OVER (ORDER BY i) - 1 AS k, * FROM _gx")
        (n_gx,) = con.execute("SELECT count(*) FROM _gxk").fetchone()
        ev = ("INSERT INTO evidence SELECT '{ns}', d.doc_key, d.date, 't' || (d.i % 10), "
              "CASE WHEN d.i % 10 < 3 THEN s.head_id ELSE x.head_id END, "
              "CASE WHEN d.i % 10 < 3 THEN s.relation ELSE x.relation END, "
              "CASE WHEN d.i % 10 < 3 THEN s.tail_id WHEN d.i % 50 = 5 THEN 'bench:E' || (d.i // 50) ELSE x.tail_id END, "
              "CASE WHEN d.i % 10 < 3 THEN s.metaedge ELSE x.metaedge END, 0.3 + (hash(d.i, 3) % 700) / 1000.0, "
              "d.doc_key || '#s' || (d.i % 7), '{sentence}', '{ns}', 'v1', 'bench', TIMESTAMP '2025-01-01', NULL, "
              "'publication' FROM (SELECT i, '{ns}-' || (i // 10) AS doc_key, DATE '{first}' + CAST((i // 10) * {days} // {docs} "
              "AS INTEGER) AS date FROM range({n}) r(i)) d "
              "JOIN _se s ON s.k = hash(d.i, 5) % {n_se} JOIN _gxk x ON x.k = hash(d.i, 7) % {n_gx}")
        for ns, n in ((NS, n_ev), (OTHER, n_other)):
            con.execute(ev.format(ns=ns, sentence=SENTENCE, first=FIRST_DAY, days=N_DAYS, docs=max(1, n // 10), n=n,
                                  n_se=n_se, n_gx=n_gx))
        con.execute("INSERT INTO extracted_nodes SELECT namespace, tail_id, 'bench entity ' || tail_id, "
                    "any_value(m.target), NULL, ['syn ' || tail_id], min(doc_key), min(date), 'bench', "
                    "TIMESTAMP '2025-01-01', NULL, NULL FROM evidence e JOIN _mk m ON m.abbrev = e.metaedge "
                    "WHERE tail_id LIKE 'bench:E%' GROUP BY namespace, tail_id")
        # supersessions: 1 in 1000 seed edges replaced in NS by a later document's triple
        con.execute(f"INSERT INTO adjudications SELECT '{NS}', e.date, e.doc_key, e.triple_id, e.head_id, "
                    "e.relation, e.tail_id, e.score, 'replace', s.head_id, s.relation, s.tail_id, 0.9, NULL, NULL, 0, "
                    "true, 'bench supersession', 'bench', TIMESTAMP '2025-01-01' FROM evidence e "
                    f"JOIN _se s ON s.k = hash(e.doc_key, e.triple_id) % {n_se} WHERE e.namespace = '{NS}' "
                    "AND e.triple_id = 't5' AND hash(e.doc_key) % 100 = 0")
        con.execute("INSERT INTO merged_documents SELECT namespace, doc_key, min(date), 'fp', 'bench', "
                    "TIMESTAMP '2025-01-01' FROM evidence GROUP BY ALL")
        con.execute("CHECKPOINT")
        counts = con.execute(
            "SELECT (SELECT count(*) FROM seed_edges), (SELECT count(*) FROM evidence WHERE namespace = ?), "
            "(SELECT count(*) FROM kg_edges(?)), (SELECT count(*) FROM extracted_nodes), "
            "(SELECT count(*) FROM adjudications)", [NS, NS]).fetchone()
    return dict(zip(("seed_edges", "evidence", "edges", "new_entities", "supersessions"), counts, strict=True))


def _pool(store: KGStore) -> dict[str, list]:
    """What the measured documents are made of: existing edges (seed and extracted), seed ids by kind."""
    with store.connect(read_only=True) as con:
        existing = con.execute(
            "SELECT head_id, relation, tail_id, metaedge FROM (SELECT head_id, relation, tail_id, metaedge FROM "
            "seed_edges USING SAMPLE 200 ROWS (reservoir, 7) UNION ALL SELECT head_id, relation, tail_id, metaedge "
            "FROM evidence WHERE namespace = ? AND tail_id NOT LIKE 'bench:E%' USING SAMPLE 200 ROWS (reservoir, 8)) "
            "ORDER BY ALL", [NS]).fetchall()
        kinds = {k: [r[0] for r in con.execute("SELECT id FROM seed_nodes WHERE kind = ? ORDER BY id", [k]).fetchall()]
                 for k in ("Compound", "Disease", "Gene")}
        treats = con.execute("SELECT head_id, relation, tail_id FROM seed_edges WHERE relation = 'treats' "
                             "ORDER BY ALL LIMIT 1").fetchall()
    return {"existing": existing, "treats": treats, **kinds}


def _documents(pool: dict[str, list], n_docs: int, day: dt.date) -> dict[str, tuple[list[dict], list[NodeIn]]]:
    """n_docs documents of `day`: triples on existing edges, new edges, a new entity, a replace, a clash."""
    existing, compounds, diseases, genes = pool["existing"], pool["Compound"], pool["Disease"], pool["Gene"]
    docs: dict[str, tuple[list[dict], list[NodeIn]]] = {}
    salt = day.toordinal()

    def row(doc: str, k: int, h: str, rel: str, t: str, me: str | None, score: float, **kw: object) -> dict:
        return {"triple_id": f"t{k}", "head_id": h, "relation": rel, "tail_id": t, "metaedge": me, "score": score,
                "segment_id": f"{doc}#s{k % 3}", "evidence": SENTENCE, **kw}

    for d in range(n_docs):
        doc = f"{day}/bench-merge-{d}"
        rows = [row(doc, k, *existing[(salt + d * 7 + k * 13) % len(existing)], 0.6 + 0.05 * k) for k in range(4)]
        for k in range(4, 8):
            c, g = compounds[(salt + d * 31 + k * 17) % len(compounds)], genes[(salt + d * 29 + k * 11) % len(genes)]
            rows.append(row(doc, k, c, "binds", g, "CbG", 0.7))
        ent = NodeIn(id=f"bench:merge:{day}:{d}", name=f"bench merged entity {day} {d}", kind="Compound")
        rows.append(row(doc, 8, ent.id, "treats", diseases[(salt + d) % len(diseases)], "CtD", 0.55))
        if d == 0 and pool["treats"]:  # a replace of an existing treats edge
            old = pool["treats"][0]
            rows.append(row(doc, 9, old[0], "causes", old[2], "CcD", 0.95, action="replace", contradicts=edge_text(*old),
                            verdict="contradict"))
        if d in (1, 2):  # a same-day clash between two documents (treats vs causes on one pair)
            c, dis = compounds[-1], diseases[-1]
            rel, me = ("treats", "CtD") if d == 1 else ("causes", "CcD")
            rows.append(row(doc, 9, c, rel, dis, me, 0.8 if d == 1 else 0.5))
        docs[doc] = (rows, [ent])
    return docs


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(workdir: Path, n_edges: int, n_docs: int, repeat: int) -> dict[str, float]:
    path = workdir / f"kg-{n_edges}.duckdb"
    t0 = time.perf_counter()
    sizes = _build(path, n_edges)
    build_s = time.perf_counter() - t0
    store = KGStore(path)
    pool = _pool(store)
    warm = MERGE_DAY - dt.timedelta(days=5)  # the first merge of a store counts its edges once (kg/sizes.py)
    merge_increment(store, warm, NS, _documents(pool, n_docs, warm), run_id="bench")
    first = []
    for i in range(repeat):  # a new date each: the usual merge
        day = MERGE_DAY + dt.timedelta(days=i)
        docs = _documents(pool, n_docs, day)
        t0 = time.perf_counter()
        merge_increment(store, day, NS, docs, run_id="bench")
        first.append(time.perf_counter() - t0)
    merge_s = statistics.median(first)
    remerge_s = _median(lambda: merge_increment(store, day, NS, docs, run_id="bench"), repeat)
    as_of = day - dt.timedelta(days=1)
    doc_pairs = [[(r["head_id"], r["tail_id"]) for r in rows] for rows, _ in docs.values()]
    pairs = [p for ps in doc_pairs for p in ps]
    one = statistics.median(_median(lambda p=p: store.edges_between([p], NS, as_of), 1) for p in pairs[:20])
    per_doc = statistics.median(_median(lambda ps=ps: store.edges_between(ps, NS, as_of), 1) for ps in doc_pairs)
    synced, _ = store.extracted_entities(NS)  # what entity linking's index last synced (the usual per-document call)
    out = {
        "edges (namespace)": sizes["edges"], "evidence rows (namespace)": sizes["evidence"],
        "build s": build_s,
        f"merge of {n_docs} documents (new date) s": merge_s,
        f"re-merge of the same {n_docs} documents s": remerge_s,
        "conflict lookup, one pair s": one,
        "conflict lookup, one document's pairs s": per_doc,
        "node_kinds s": _median(store.node_kinds, repeat),
        "extracted_entities, index in sync s": _median(lambda: store.extracted_entities(NS, known=synced), repeat),
        "merged_documents s": _median(lambda: store.merged_documents(NS), repeat),
        "snapshot_counts s": _median(lambda: store.snapshot_counts(namespace=NS), repeat),
        "seed_counts s": _median(store.seed_counts, repeat),
    }
    path.unlink()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000], help="edges per store")
    ap.add_argument("--docs", type=int, default=10, help="documents in the measured merge")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions per figure (median)")
    ap.add_argument("--workdir", type=Path, help="where the stores are built (default: a temporary folder)")
    a = ap.parse_args(argv)
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="kg-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        results = {n: measure(workdir, n, a.docs, a.repeat) for n in a.sizes}
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    first, last = a.sizes[0], a.sizes[-1]
    print(f"\nKG store at scale (load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores)\n")
    print("| figure | " + " | ".join(f"{n:,} edges" for n in a.sizes) + f" | {last:,} ÷ {first:,} |")
    print("|---|" + "---|" * (len(a.sizes) + 1))
    for key in results[first]:
        vals = [results[n][key] for n in a.sizes]
        cells = [f"{v:,}" if isinstance(v, int) else f"{v * 1000:,.1f} ms" for v in vals]
        ratio = vals[-1] / vals[0] if vals[0] else float("nan")
        print(f"| {key.removesuffix(' s')} | " + " | ".join(cells) + f" | {ratio:.1f}× |")


if __name__ == "__main__":
    main()
