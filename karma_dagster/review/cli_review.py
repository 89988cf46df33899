"""`karma review`: collect what needs a person into the queue, serve the review page, merge accepted decisions."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from karma_dagster.kg.backends import kg_location, kg_store
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.models import DEFAULT_DAGSTER_URL

if TYPE_CHECKING:  # the page, the queue and the merge load only when the command runs: `karma` starts fast
    from karma_dagster.review.queue import ReviewQueue


DEFAULT_PORT = 8766  # `karma mcp` serves on 8765


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "review", help="the review queue and the KG browser in a browser: accept, edit or reject what needs a "
                       "person; search the KG, read an entity's or an edge's evidence as of a date",
        description="Collect KARMA's review outcomes (schema review, unresolved conflicts, new relation types) and "
                    "CogMG completions into one queue, then serve it on the loopback (keys: j/k move, a accept, "
                    "r reject, e edit). --merge merges accepted decisions into the KG instead of serving. CogMG "
                    "completions are read from what the <backbone>/completions asset wrote.")
    p.add_argument("--data-dir", default="", help="run-time data folder (default: $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME[:PORT]",
                   help="also answer to this Host name (e.g. a reverse proxy's); by default only 127.0.0.1, "
                        "localhost and [::1] with --port: a page on any other name (DNS rebinding) is refused")
    p.add_argument("--dagster-url", default=os.environ.get("KARMA_DAGSTER_URL", DEFAULT_DAGSTER_URL),
                   help="the Dagster UI items link to (default $KARMA_DAGSTER_URL or %(default)s)")
    p.add_argument("--backbone", action="append", default=None, help="collect only this backbone's stage tables")
    p.add_argument("--completions", action="append", default=[], type=Path,
                   help="also queue a JSON file of CogMG completions (a list of cogmg.models.Completion)")
    p.add_argument("--no-collect", action="store_true", help="serve the queue as it is, collecting nothing")
    p.add_argument("--collect-only", action="store_true", help="collect, print the counts and exit")
    p.add_argument("--merge", action="store_true", help="merge accepted, unmerged decisions into the KG and exit")
    p.set_defaults(func=cmd_review)
    return p


def collect(paths: DataPaths, queue: ReviewQueue, backbones: list[str] | None, completion_files: list[Path]) -> dict:
    from pydantic import TypeAdapter, ValidationError

    from karma_dagster.runtime import services
    from karma_dagster.review.changes import with_changes
    from karma_dagster.review.models import ReviewItem
    from karma_dagster.review.queue import ReviewError
    from karma_dagster.review.cogmg_items import collect_cogmg
    from karma_dagster.review.karma_items import collect_karma

    items: list[ReviewItem] = collect_karma(paths, services.kg_schema(), backbones) + collect_cogmg(paths, backbones)
    if completion_files:
        from karma_dagster.cogmg.models import Completion
        from karma_dagster.review.cogmg_items import items_from_completions

        adapter = TypeAdapter(list[Completion])
        for path in completion_files:
            try:
                items += items_from_completions(adapter.validate_json(path.read_bytes()))
            except (OSError, ValidationError) as exc:
                raise ReviewError(f"completions file {path.name}: {exc}") from exc
    return queue.add_items(with_changes(items, kg_location(paths)))


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def cmd_review(args: argparse.Namespace) -> int:
    from karma_dagster.review.app import create_app
    from karma_dagster.review.merge_inputs import chain_docs_from, merge_accepted
    from karma_dagster.review.queue import ReviewError, ReviewQueue

    serving = not (args.merge or args.collect_only)
    if serving and not _loopback(args.host):
        print(f"karma review: --host {args.host!r} is not a loopback address; the page has no accounts, so it is "
              "served on the loopback only (127.0.0.1)", file=sys.stderr)
        return 2
    paths = DataPaths(args.data_dir or "")
    queue = ReviewQueue.for_data(paths)
    try:
        if args.merge:
            outcomes = merge_accepted(kg_location(paths), queue, chain_docs=chain_docs_from(paths))
            for o in outcomes:
                what = (f"merged again after the earlier date (the KG keeps its dates in order), "
                        f"{len(o.items)} reviewed item(s) new" if o.again else f"merged {len(o.items)} reviewed item(s)")
                print(f"{o.namespace} {o.date}: {what}; "
                      f"new edges {o.stats.n_new_edges}, reinforced {o.stats.n_reinforced}, "
                      f"superseded {o.stats.n_superseded}")
            blocked = [(i, d) for i, d in queue.accepted(unmerged_only=True) if d.merge_note]
            for item, d in blocked:
                print(f"not merged {item.item_id}: {d.merge_note}", file=sys.stderr)
            if not outcomes and not blocked:
                print("no accepted decision waits for the KG")
            return 0 if not blocked else 1
        if not args.no_collect:
            counts = collect(paths, queue, args.backbone, args.completions)
            print(json.dumps({"queue": counts, "pending": len(queue.items())}))
        if args.collect_only:
            return 0
    except ReviewError as exc:
        print(f"karma review: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    from karma_dagster.ingest.catalog import catalog_lookup
    from karma_dagster.web.guard import host_name, own_hosts, session_address

    app = create_app(queue, dagster_url=args.dagster_url, hosts=own_hosts(args.host, args.port, args.allow_host),
                     port=args.port, kg=kg_store(paths), papers=catalog_lookup(paths.catalog),
                     # links to a paper's day with date partitions:
                     by_date=os.environ.get("KARMA_PARTITIONS", "").strip().lower() == "date")  # partitioning/mode.py
    # the read key is in the address (never a cookie: those reach every port): only whoever reads this line can
    # open the page; decisions need a second token that only the page shows
    base = f"http://{host_name(args.host)}:{args.port}"
    print(f"review page: {session_address(base, app.state.key)}  (Ctrl-C stops it)", flush=True)
    print(f"KG browser: {session_address(base, app.state.key, '/kg')}", flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    except KeyboardInterrupt:
        return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run without the karma CLI (`python -m karma_dagster.review.cli_review ...`): what the browser test spawns."""
    parser = argparse.ArgumentParser(prog="karma")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["review", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
