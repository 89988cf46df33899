"""`karma mcp`: serve the KG tools over MCP (stdio for a desktop client, streamable HTTP on loopback)."""

from __future__ import annotations

import argparse
import sys

from karma_dagster.kg_tools import MCP_NAMESPACE as DEFAULT_NAMESPACE
from karma_dagster.kg_tools import MCP_TRANSPORTS as TRANSPORTS  # the server (and the mcp SDK) load only when it runs


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("mcp", help="serve the KG tools (search, create, read-only queries) to an MCP client",
                       description="Serve the KG tools over MCP (streamable-http prints its URL and the bearer "
                                   "token every request must send; $KARMA_MCP_TOKEN fixes the token). Writes are "
                                   "validated, staged per document in the namespace's stage tables and merged into "
                                   "the KG by merge_document (or the date increment). No raw query tool.")
    p.add_argument("--transport", choices=TRANSPORTS, default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="streamable-http: a loopback address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="streamable-http port (default 8765)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME[:PORT]",
                   help="streamable-http: also answer to this Host name; by default only 127.0.0.1, localhost and "
                        "[::1] with --port (a DNS-rebinding page's requests name another host and are refused)")
    p.add_argument("--data-dir", default="", help="the pipeline's data dir (default $KARMA_DATA, else $DAGSTER_HOME/karma)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                   help=f"the KG namespace the tools read and write (default {DEFAULT_NAMESPACE!r}; not a chain's)")
    p.add_argument("--caller", default="mcp-client", help="who the writes are recorded as (provenance)")
    p.set_defaults(func=cmd_mcp)
    return p


def cmd_mcp(args: argparse.Namespace) -> int:
    from karma_dagster.mcp_server.server import serve

    try:
        serve(args.transport, args.host, args.port, args.data_dir, args.namespace, args.caller,
              allow_hosts=args.allow_host)
    except (ValueError, FileNotFoundError) as exc:
        print(f"karma mcp: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run without the karma CLI (`python -m karma_dagster.mcp_server.cli ...`): what the tests spawn."""
    parser = argparse.ArgumentParser(prog="karma")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["mcp", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
