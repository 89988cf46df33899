"""The LLM backbone over litellm: client (retries, repair, validation, accounting), response cache, backbone.

Importing this package does not import litellm (the first call does), so definitions load fast.
"""

from __future__ import annotations

from pathlib import Path

from karma_dagster.backbones.llm.backbone import (
    DEFAULT_ENTITY_TYPES,
    DEFAULT_RELATION_TYPES,
    Domain,
    LLMBackbone,
    locate_mentions,
)
from karma_dagster.backbones.llm.cache import ResponseCache, cache_key
from karma_dagster.backbones.llm.client import LLMCallError, LLMClient, LLMOutputError, UsageDelta, parse_json_reply
from karma_dagster.backbones.llm.outputs import OUTPUT_MODELS
from karma_dagster.prompts import PromptStore


def make_llm_backbone(
    name: str,
    model: str,
    *,
    api_base: str | None = None,
    api_key: str | None = None,
    domain: Domain = "general biomedicine",
    prompt_root: Path | str | None = None,
    cache_path: Path | str | None = None,
    temperature: float = 0.0,
    max_tokens: int = 1024,
    timeout: float = 60,
    max_retries: int = 4,
    concurrency: int = 4,
    prompt_versions: dict[str, int] | None = None,
) -> LLMBackbone:
    """The backbone from flat settings, as a Dagster resource holds them (the key comes from an EnvVar)."""
    client = LLMClient(
        model, api_base=api_base, api_key=api_key, temperature=temperature, max_tokens=max_tokens,
        timeout=timeout, max_retries=max_retries, concurrency=concurrency,
        cache=ResponseCache(cache_path) if cache_path else None, name=name,
    )
    return LLMBackbone(name, client, PromptStore(prompt_root), domain, prompt_versions=prompt_versions)


__all__ = [
    "DEFAULT_ENTITY_TYPES", "DEFAULT_RELATION_TYPES", "Domain", "LLMBackbone", "LLMCallError", "LLMClient",
    "LLMOutputError", "OUTPUT_MODELS", "PromptStore", "ResponseCache", "UsageDelta", "cache_key",
    "locate_mentions", "make_llm_backbone", "parse_json_reply",
]
