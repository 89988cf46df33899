"""What the local web servers (the review page, the MCP HTTP server) share: who may drive them (guard.py)."""
