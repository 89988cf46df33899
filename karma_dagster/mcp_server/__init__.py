"""`karma mcp`: the KG tools (kg_tools/) and the KG context of a question (cogmg/kg_context.py) served to an MCP
client. It sits above both, as a front end: server.py builds the server, cli.py is the command."""
