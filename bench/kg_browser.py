"""KG browser pages at scale: what each page costs at 10k and 1M edges, over HTTP through the real app and guard.

    python bench/kg_browser.py [--sizes 10000 1000000] [--repeat 5] [--workdir DIR] [--svg-out FILE]

Each store is bench/kg_scale.py's (the shipped seed's nodes, synthetic seed edges and evidence in two namespaces
over six years, new entities, supersessions). Measured with Starlette's TestClient against `create_app(..., kg=)`
(the review app with the browser mounted, LocalGuard in front), median of --repeat after one warm-up request:
- search: an exact name (a seed gene), a prefix that matches many names, an id;
- the entity page of the node with the most edges in the namespace (a hub: every edge read and grouped, its
  strongest drawn) and of a typical node (median degree); the same hub as of three years before the end;
- the neighbourhood SVG of the hub; an edge page (the edge with the most evidence rows) and that edge as of a date;
- the timeline (latest 90 days) and one day's view.
Prints a markdown table with the machine's load average. --svg-out writes the hub's SVG (to look at).
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
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from kg_scale import FIRST_DAY, N_DAYS, NS, _build  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from karma_dagster.kg.store import KGStore  # noqa: E402
from karma_dagster.review.app import create_app  # noqa: E402
from karma_dagster.review.queue import ReviewQueue  # noqa: E402
from karma_dagster.web.guard import TOKEN_HEADER  # noqa: E402


def _targets(store: KGStore) -> dict[str, str]:
    with store.connect(read_only=True) as con:
        degrees = con.execute(
            "SELECT id, count(*) AS d FROM (SELECT head_id AS id FROM seed_edges UNION ALL SELECT tail_id FROM "
            "seed_edges UNION ALL SELECT head_id FROM evidence WHERE namespace = ? UNION ALL SELECT tail_id FROM "
            "evidence WHERE namespace = ?) GROUP BY id ORDER BY d DESC, id", [NS, NS]).fetchall()
        hub, typical = degrees[0], degrees[len(degrees) // 2]
        gene = con.execute("SELECT name FROM seed_nodes WHERE kind = 'Gene' ORDER BY id LIMIT 1").fetchone()[0]
        edge = con.execute("SELECT head_id, relation, tail_id, count(*) FROM evidence WHERE namespace = ? "
                           "GROUP BY ALL ORDER BY 4 DESC, 1, 2, 3 LIMIT 1", [NS]).fetchone()
        day = con.execute("SELECT date FROM evidence WHERE namespace = ? GROUP BY date ORDER BY count(*) DESC, date "
                          "LIMIT 1", [NS]).fetchone()[0]
    return {"hub": hub[0], "hub_degree": hub[1], "typical": typical[0], "typical_degree": typical[1], "gene": gene,
            "head": edge[0], "relation": edge[1], "tail": edge[2], "edge_evidence": edge[3], "day": str(day)}


def measure(workdir: Path, n_edges: int, repeat: int, svg_out: Path | None) -> dict[str, float | int]:
    path = workdir / f"kg-{n_edges}.duckdb"
    sizes = _build(path, n_edges)
    store = KGStore(path)
    t = _targets(store)
    app = create_app(ReviewQueue(workdir / "queue.duckdb"), kg=store)
    client = TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token})
    as_of = str(FIRST_DAY + dt.timedelta(days=N_DAYS // 2))
    t0 = time.perf_counter()
    assert client.get("/kg", params={"q": t["gene"]}).status_code == 200  # builds the search index once
    index_s = time.perf_counter() - t0
    pages = {
        "search: exact name": ("/kg", {"q": t["gene"]}),
        "search: a prefix ('bench entity 1')": ("/kg", {"q": "bench entity 1"}),
        "search: an id": ("/kg", {"q": t["hub"]}),
        "entity page, hub": (f"/kg/entity/{quote(t['hub'], safe='')}", {}),
        "entity page, hub, as of 3 years earlier": (f"/kg/entity/{quote(t['hub'], safe='')}", {"as_of": as_of}),
        "entity page, median node": (f"/kg/entity/{quote(t['typical'], safe='')}", {}),
        "neighbourhood SVG, hub": (f"/kg/neighbourhood/{quote(t['hub'], safe='')}", {}),
        "edge page (the edge with most evidence)": (
            "/kg/edge", {"head": t["head"], "relation": t["relation"], "tail": t["tail"]}),
        "edge page, as of 3 years earlier": (
            "/kg/edge", {"head": t["head"], "relation": t["relation"], "tail": t["tail"], "as_of": as_of}),
        "timeline (90 days)": ("/kg/timeline", {}),
        "timeline, one day's view": ("/kg/timeline", {"day": t["day"]}),
    }
    out: dict[str, float | int] = {"edges (namespace)": sizes["edges"], "evidence rows (namespace)": sizes["evidence"],
                                   "hub: seed + evidence rows naming it": t["hub_degree"],
                                   "median node: rows naming it": t["typical_degree"],
                                   "edge with most evidence: its rows": t["edge_evidence"],
                                   "search index build (first search) s": index_s}
    for name, (url, params) in pages.items():
        r = client.get(url, params=params)
        assert r.status_code == 200, (name, r.status_code, r.text[:300])
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            client.get(url, params=params)
            times.append(time.perf_counter() - t0)
        out[f"{name} s"] = statistics.median(times)
    if svg_out is not None:
        svg_out.write_text(client.get(f"/kg/neighbourhood/{quote(t['hub'], safe='')}").text, encoding="utf-8")
    path.unlink()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000], help="edges per store")
    ap.add_argument("--repeat", type=int, default=5, help="timed requests per page (median)")
    ap.add_argument("--workdir", type=Path, help="where the stores are built (default: a temporary folder)")
    ap.add_argument("--svg-out", type=Path, help="write the largest store's hub neighbourhood SVG here")
    a = ap.parse_args(argv)
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="kg-browser-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        results = {n: measure(workdir, n, a.repeat, a.svg_out if n == a.sizes[-1] else None) for n in a.sizes}
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    load = os.getloadavg()
    print(f"\nKG browser pages at scale (load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}, "
          f"{os.cpu_count()} cores; median of {a.repeat} requests through the app and its guard)\n")
    print("| page | " + " | ".join(f"{n:,} edges" for n in a.sizes) + " |")
    print("|---|" + "---|" * len(a.sizes))
    for key in results[a.sizes[0]]:
        cells = [results[n][key] for n in a.sizes]
        shown = [f"{v:,}" if isinstance(v, int) else f"{v * 1000:,.0f} ms" for v in cells]
        print(f"| {key.removesuffix(' s')} | " + " | ".join(shown) + " |")


if __name__ == "__main__":
    main()
