"""The review page with a real day's inbox and more: bytes and time of one page against the whole queue.

    python bench/review_page.py [--sizes 1000 10000] [--repeat 5] [--workdir DIR]

A real day's inbox put 775 items (2.1 MB) on one page; the page now shows PAGE_SIZE items with counts and links.
Each queue is CogMG completions over the shipped seed's compounds and diseases (one passage each, as the
completions asset writes them) added through ReviewQueue.add_items. Measured with Starlette's TestClient against
`create_app` (LocalGuard in front), median of --repeat after one warm-up request: the first page (50 items), a
middle page, a 200-item page, a filtered page, and the bytes of every page together (what the unpaged page held).
Prints a markdown table with the machine's load average.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from starlette.testclient import TestClient  # noqa: E402

from karma_dagster.cogmg.models import Completion, Passage  # noqa: E402
from karma_dagster.review.app import PAGE_SIZE, create_app  # noqa: E402
from karma_dagster.review.changes import with_changes  # noqa: E402
from karma_dagster.review.cogmg_items import items_from_completions  # noqa: E402
from karma_dagster.review.queue import ReviewQueue  # noqa: E402
from karma_dagster.web.guard import TOKEN_HEADER  # noqa: E402


def seed(kind: str) -> list[tuple[str, str]]:
    with (REPO / "data" / "seed_kg" / "nodes.tsv").open(encoding="utf-8") as f:
        return [(r["id"], r["name"]) for r in csv.DictReader(f, delimiter="\t") if r["kind"] == kind]


def fill(queue: ReviewQueue, n: int) -> None:
    drugs, diseases = seed("Compound"), seed("Disease")
    items = []
    for q in range(n):
        (hid, head), (tid, tail) = drugs[q * 7 % len(drugs)], diseases[q % len(diseases)]
        text = (f"In a cohort of adults with {tail}, {head} was given for a year; symptoms eased within weeks and "
                "no serious adverse events were reported.")
        c = Completion(question_id=f"q{q}", question=f"Which drug treats {tail}?", backbone="local", head_id=hid,
                       head_name=head, relation="treats", tail_id=tid, tail_name=tail, method="passage_re",
                       supported=q % 5 != 0, score=(q * 53 % 100) / 100, evidence_doc_keys=["2016-02-12_pmc4737013"],
                       passages=[Passage(passage_id=f"p{q % 40}", doc_key="2016-02-12_pmc4737013", text=text,
                                         score=4 + q % 7 * 0.9)])
        items += items_from_completions([c], partition_key=f"sample_biomed.v1__q{q}")
    queue.add_items(with_changes(items, None))


def timed(client: TestClient, url: str, repeat: int) -> tuple[int, float]:
    client.get(url)
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = client.get(url)
        times.append(time.perf_counter() - t0)
        assert r.status_code == 200, (url, r.status_code, r.text[:300])
        size = len(r.content)
    return size, statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="review-page-"))
    print(f"| items | page | bytes | ms (median of {args.repeat}) |\n|---:|---|---:|---:|")
    for n in args.sizes:
        queue = ReviewQueue(work / f"queue-{n}.sqlite")
        if not queue.items(limit=1):
            fill(queue, n)
        app = create_app(queue)
        client = TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token})
        last = -(-n // PAGE_SIZE)
        for name, url in [("first (50)", "/"), ("middle (50)", f"/?page={last // 2}"),
                          ("200 per page", "/?per_page=200&page=2"), ("filtered, min score 0.5", "/?min_score=0.5")]:
            size, ms = timed(client, url, args.repeat)
            print(f"| {n:,} | {name} | {size:,} | {ms:.1f} |")
        every = sum(len(client.get(f"/?per_page=200&page={p}").content) for p in range(1, -(-n // 200) + 1))
        print(f"| {n:,} | every page together (what one unpaged page held, roughly) | {every:,} | |")
    print(f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
