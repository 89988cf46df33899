"""KG tools for function-calling models and MCP clients: search and create instances, classes, properties and
statements, each validated against the KG schema, each write staged per document and merged like the chain's.

Dagster-free. session.KGTools is the API (search.py, create.py, queries.py do the work; ontology.py is the schema
view, staging.py the per-document tables and `merge_staged`); schemas.py gives the tools' JSON schemas for
function calling; loop.py runs a function-calling model over them; chain.py is the `tools` chain mode's stages;
mcp_server/ (a layer above, beside CogMG's KG context) serves the API over MCP (`karma mcp`).
"""

MCP_NAMESPACE = "mcp"  # the KG namespace `karma mcp` reads and writes by default (not a chain's)
MCP_TRANSPORTS = ("stdio", "streamable-http")
