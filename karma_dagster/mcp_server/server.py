"""The KG tools over MCP (the official `mcp` SDK's MCPServer): stdio, or streamable HTTP on a loopback address.

An external agent searches and curates the KG under the same validation as the tool API (session.KGTools): the
server only adapts it. Writes name their document; `merge_document` merges that document's date through
merge_increment, as the KG asset would. There is no raw query tool: only named read-only queries. A refusal is a
tool error (is_error) whose text is the refusal's message, so the client's model reads why and calls again.
Streamable HTTP binds loopback addresses only and answers only its own Host names and Origin (the SDK's
TransportSecuritySettings, and web.guard.LocalGuard in front of every path), so a DNS-rebinding page is refused
before any KG is opened; every request needs the bearer token printed at start (random per start, or
$KARMA_MCP_TOKEN), so neither a web page nor another user of the machine can call the tools.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, Field

from karma_dagster.kg.backends import kg_exists
from karma_dagster.kg_tools import MCP_NAMESPACE as DEFAULT_NAMESPACE
from karma_dagster.kg_tools import MCP_TRANSPORTS as TRANSPORTS
from karma_dagster.kg_tools.bounds import NEIGHBOURS_LIMIT_MAX, SEARCH_K_MAX
from karma_dagster.kg_tools.results import ToolResult
from karma_dagster.kg_tools.schemas import ALL_ARGS, description
from karma_dagster.kg_tools.session import KGTools
from karma_dagster.paths import DataPaths
from karma_dagster.web.guard import LocalGuard, host_name, new_token, own_hosts, own_origins

LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_ENV = "KARMA_MCP_TOKEN"  # a fixed bearer token for a client's config; unset: a random one per start
MIN_TOKEN_CHARS = 24
MAX_BODY_BYTES = 1024 * 1024  # one JSON-RPC message; the longest argument (an evidence text) is ~4,000 characters
INSTRUCTIONS = (
    "Tools over a biomedical knowledge graph. Search before you create: search_instance for entities (ids), "
    "search_class for classes, search_property for relations and the classes they join. Writes are staged per "
    "document (argument 'document', a key like 2016-02-12_pmc4737013) and validated; a refusal says why and what "
    "to call next. merge_document merges the document's staged statements into the KG."
)

Doc = Annotated[str, Field(description="the document key the evidence comes from, e.g. 2016-02-12_pmc4737013")]
K = Annotated[int, Field(ge=1, le=SEARCH_K_MAX, description="how many results")]
OptDoc = Annotated[str | None, Field(description="a document key: its staged (unmerged) instances are searched too")]


def _answer(result: ToolResult) -> dict[str, Any]:
    if not result.ok:
        raise ToolError(result.text())
    return {"message": result.message, **result.data}


def build_server(paths: DataPaths, namespace: str = DEFAULT_NAMESPACE, caller: str = "mcp-client") -> MCPServer:
    """The MCP server over one data dir and namespace; every write is recorded as `caller`'s."""
    tools = KGTools(paths, namespace=namespace, caller=caller)
    server = MCPServer("karma-kg", instructions=INSTRUCTIONS)

    def search_instance(text: str, type: str | None = None, k: K = 5, document: OptDoc = None) -> dict[str, Any]:
        return _answer(tools.search_instance(text, type, k, document=document))

    def create_instance(label: str, comment: str, type: str, document: Doc) -> dict[str, Any]:
        return _answer(tools.create_instance(label, comment, type, document=document))

    def search_class(text: str, k: K = 5) -> dict[str, Any]:
        return _answer(tools.search_class(text, k))

    def create_class(label: str, comment: str, super_class: str | None = None,
                     document: str | None = None) -> dict[str, Any]:
        return _answer(tools.create_class(label, comment, super_class, document=document))

    def search_property(text: str, k: K = 5) -> dict[str, Any]:
        return _answer(tools.search_property(text, k))

    def create_property(label: str, comment: str, domain: str | None = None, range: str | None = None,
                        super_property: str | None = None, document: str | None = None) -> dict[str, Any]:
        return _answer(tools.create_property(label, comment, domain, range, super_property, document=document))

    def create_statement(subject: str, predicate: str, object: str, evidence: str, document: Doc,
                         confidence: Annotated[float | None, Field(ge=0.0, le=1.0)] = None,
                         segment: str | None = None) -> dict[str, Any]:
        return _answer(tools.create_statement(subject, predicate, object, evidence, confidence, segment,
                                              document=document))

    def neighbours(entity: str, limit: Annotated[int, Field(ge=1, le=NEIGHBOURS_LIMIT_MAX)] = 25) -> dict[str, Any]:
        return _answer(tools.neighbours(entity, limit))

    def edges_between(a: str, b: str) -> dict[str, Any]:
        return _answer(tools.edges_between(a, b))

    def edge_provenance(subject: str, predicate: str, object: str) -> dict[str, Any]:
        return _answer(tools.edge_provenance(subject, predicate, object))

    def merge_document(document: Doc) -> dict[str, Any]:
        return _answer(tools.merge_document(document))

    read_only = {"search_instance", "search_class", "search_property", "neighbours", "edges_between",
                 "edge_provenance"}
    for fn in (search_instance, create_instance, search_class, create_class, search_property, create_property,
               create_statement, neighbours, edges_between, edge_provenance, merge_document):
        text = description(ALL_ARGS[fn.__name__]) if fn.__name__ in ALL_ARGS else (
            "Merge the document's staged statements (and every other staged document of its date) into the KG, "
            "with the same validation and transaction as the date increment.")
        server.add_tool(fn, description=text, annotations=ToolAnnotations(
            read_only_hint=fn.__name__ in read_only, destructive_hint=False, open_world_hint=False))
        _forbid_unknown_arguments(server, fn.__name__)
    return server


def _forbid_unknown_arguments(server: MCPServer, name: str) -> None:
    """The SDK's argument model ignores an argument it does not know (a misspelt `limt` would be dropped
    silently): refuse it instead, as the tool API's schemas do, and say so in the published schema."""
    tool = server._tool_manager.get_tool(name)  # noqa: SLF001 - the SDK offers no hook for the argument model
    assert tool is not None
    base = tool.fn_metadata.arg_model
    strict = type(base.__name__, (base,), {"model_config": ConfigDict(**base.model_config, extra="forbid"),
                                           "__module__": base.__module__})
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)


def session_token() -> str:
    """$KARMA_MCP_TOKEN when set (it must be long enough to guess never), else a new random token."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token and len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"${TOKEN_ENV} is {len(token)} characters: use at least {MIN_TOKEN_CHARS} "
                         "(python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token or new_token()


def http_app(server: MCPServer, *, host: str, port: int, token: str, path: str = "/mcp",
             allow_hosts: Iterable[str] = ()) -> LocalGuard:
    """The streamable-HTTP app: the SDK's, with its Host/Origin checks set to this server's own names and port
    (the SDK's default admits every localhost port), behind LocalGuard (Host, Origin, bearer token, headers)."""
    hosts = own_hosts(host, port, allow_hosts)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=own_origins(hosts))
    app = server.streamable_http_app(streamable_http_path=path, transport_security=security, host=host,
                                     max_request_body_size=MAX_BODY_BYTES)
    return LocalGuard(app, hosts=hosts, token=token, token_mode="bearer", max_body=None)


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765, data_dir: str = "",
          namespace: str = DEFAULT_NAMESPACE, caller: str = "mcp-client", path: str = "/mcp",
          allow_hosts: Iterable[str] = ()) -> None:
    """Run the server until it is stopped (stdio: until the client closes the pipe)."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    if transport != "stdio" and host not in LOOPBACK:
        raise ValueError(f"host {host!r}: the KG tools server has no authentication and listens on loopback only "
                         f"({', '.join(LOOPBACK)})")
    token = session_token() if transport != "stdio" else ""
    paths = DataPaths(data_dir)
    if not kg_exists(paths):
        raise FileNotFoundError("the data dir has no KG yet: run `karma import-kg` (or `karma run`) first")
    server = build_server(paths, namespace, caller)
    if transport == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        app = http_app(server, host=host, port=int(port), token=token, path=path, allow_hosts=allow_hosts)
        print(f"MCP endpoint: http://{host_name(host)}:{int(port)}{path}\n"
              f"send the header  Authorization: Bearer {token}", flush=True)
        uvicorn.run(app, host=host, port=int(port), log_level="warning")
