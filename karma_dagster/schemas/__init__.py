"""Contracts between stages: pydantic records (what an agent returns) and pandera tables (what an asset stores)."""
