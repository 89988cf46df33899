"""The KG tools over MCP (the official `mcp` SDK's MCPServer): stdio, or streamable HTTP on a loopback address.

An external agent searches and curates the KG under the same validation as the tool API (session.KGTools): the
server only adapts it. Writes name their document; `merge_document` merges that document's date through
merge_increment, as the KG asset would. There is no raw query tool: only named read-only queries. A refusal is a
tool error (is_error) whose text is the refusal's message, so the client's model reads why and calls again.
The server has no authentication, so it binds loopback addresses only.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
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

LOOPBACK = ("127.0.0.1", "localhost", "::1")
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


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765, data_dir: str = "",
          namespace: str = DEFAULT_NAMESPACE, caller: str = "mcp-client", path: str = "/mcp") -> None:
    """Run the server until it is stopped (stdio: until the client closes the pipe)."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    if transport != "stdio" and host not in LOOPBACK:
        raise ValueError(f"host {host!r}: the KG tools server has no authentication and listens on loopback only "
                         f"({', '.join(LOOPBACK)})")
    paths = DataPaths(data_dir)
    if not kg_exists(paths):
        raise FileNotFoundError("the data dir has no KG yet: run `karma import-kg` (or `karma run`) first")
    server = build_server(paths, namespace, caller)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=int(port), streamable_http_path=path)
