"""The KG tools and the KG context of a question over MCP (the official `mcp` SDK's MCPServer): stdio, or streamable HTTP on a loopback address.

An external agent searches and curates the KG under the same validation as the tool API (session.KGTools): the
server only adapts it. Writes name their document; `merge_document` merges that document's date through
merge_increment, as the KG asset would. There is no raw query tool: only named read-only queries. A refusal is a
tool error (is_error) whose text is the refusal's message, so the client's model reads why and calls again.
Streamable HTTP binds loopback addresses only and answers only its own Host names and Origin (the SDK's
TransportSecuritySettings, and web.guard.LocalGuard in front of every path), so a DNS-rebinding page is refused
before any KG is opened; every request needs the bearer token printed at start (random per start, or
$KARMA_MCP_TOKEN), so neither a web page nor another user of the machine can call the tools.
Every tool takes the tool API's own argument model (schemas.py): the schema a client lists describes and bounds each
parameter, and a call with an unknown, missing or out-of-bounds argument is refused before the tool runs.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field, create_model

from karma_dagster.cogmg.kg_context import context_tool
from karma_dagster.ingest.keys import KEY_MAX_CHARS
from karma_dagster.kg.backends import kg_exists
from karma_dagster.kg_tools import MCP_NAMESPACE as DEFAULT_NAMESPACE
from karma_dagster.kg_tools import MCP_TRANSPORTS as TRANSPORTS
from karma_dagster.kg_tools.results import ToolResult
from karma_dagster.kg_tools.schemas import (ALL_ARGS, CONTEXT_ARGS, DOCUMENT_TEXT, READ_ARGS, MergeDocumentArgs,
                                           description, parameters)
from karma_dagster.kg_tools.session import KGTools
from karma_dagster.runtime.paths import DataPaths
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

# The tools that name a document in MCP (the tool API's session may carry one instead): required for a write that
# stages, optional where it only widens a search or records who asked.
DOCUMENT_REQUIRED = ("create_instance", "create_statement")
DOCUMENT_OPTIONAL = ("search_instance", "create_class", "create_property")
READ_ONLY = frozenset(READ_ARGS) | frozenset(CONTEXT_ARGS) | {"search_instance", "search_class", "search_property"}


def _answer(result: ToolResult) -> dict[str, Any]:
    if not result.ok:
        raise ToolError(result.text())
    return {"message": result.message, **result.data}


def argument_model(name: str) -> type[BaseModel]:
    """A tool's MCP arguments: the tool API's own model (schemas.ALL_ARGS: described, bounded, unknown arguments
    forbidden), with the document a write is staged in, made the SDK's argument model so it validates each call."""
    base = MergeDocumentArgs if name == "merge_document" else {**ALL_ARGS, **CONTEXT_ARGS}[name]
    fields: dict[str, Any] = {}
    if name in DOCUMENT_REQUIRED:
        fields["document"] = (str, Field(min_length=1, max_length=KEY_MAX_CHARS, description=DOCUMENT_TEXT))
    elif name in DOCUMENT_OPTIONAL:
        fields["document"] = (str | None, Field(None, max_length=KEY_MAX_CHARS, description=(
            DOCUMENT_TEXT + "; for a search, that document's staged (unmerged) instances are searched too")))
    return create_model(f"MCP{base.__name__}", __base__=(base, ArgModelBase), __module__=__name__,
                        __doc__=base.__doc__, **fields)


def _tool_function(method: Callable[..., ToolResult], name: str, model: type[BaseModel]) -> Callable[..., dict[str, Any]]:
    """`method` taking exactly the model's fields (the SDK reads the signature; the model replaces its own)."""

    def call(**arguments: Any) -> dict[str, Any]:
        return _answer(method(**arguments))

    call.__name__ = name
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f, inspect.Parameter.KEYWORD_ONLY, annotation=Any) for f in model.model_fields],
        return_annotation=dict[str, Any])
    return call


def build_server(paths: DataPaths, namespace: str = DEFAULT_NAMESPACE, caller: str = "mcp-client") -> MCPServer:
    """The MCP server over one data dir and namespace; every write is recorded as `caller`'s."""
    tools = KGTools(paths, namespace=namespace, caller=caller)
    server = MCPServer("karma-kg", instructions=INSTRUCTIONS)
    methods: dict[str, Callable[..., ToolResult]] = {name: getattr(tools, name) for name in (*ALL_ARGS, "merge_document")}
    methods["kg_context"] = partial(context_tool, paths, tools.namespace)
    for name, method in methods.items():
        model = argument_model(name)
        server.add_tool(_tool_function(method, name, model), name=name, description=description(model),
                        annotations=ToolAnnotations(read_only_hint=name in READ_ONLY, destructive_hint=False,
                                                    open_world_hint=False))
        tool = server._tool_manager.get_tool(name)  # noqa: SLF001 - the SDK offers no hook for the argument model
        assert tool is not None
        tool.fn_metadata.arg_model = model
        tool.parameters = parameters(model)
    return server


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
