"""Backbones: what answers each agent's question. `local` (classic NLP, offline) and `llm` (litellm)."""
