"""The LLM backbone over litellm: client (retries, repair, validation, accounting), response cache, backbone.

Importing this package does not import litellm (the first call does), so definitions load fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from karma_dagster.backbones.llm.backbone import (
    DEFAULT_ENTITY_TYPES,
    DEFAULT_RELATION_TYPES,
    Domain,
    LLMBackbone,
    locate_mentions,
)
from karma_dagster.backbones.llm.cache import ResponseCache, cache_key
from karma_dagster.backbones.llm.client import (
    LLMCallError,
    LLMClient,
    LLMContextError,
    LLMDeadlineError,
    LLMOutputError,
    UsageDelta,
    parse_json_reply,
)
from karma_dagster.backbones.llm.outputs import OUTPUT_MODELS
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.runtime.prompts import PromptStore


def make_llm_backbone(
    name: str,
    settings: BackboneSettings,
    *,
    prompt_root: Path | str | None = None,
    cache_path: Path | str | None = None,
    prompt_versions: dict[str, int] | None = None,
    required_prompts: Sequence[str] = (),
) -> LLMBackbone:
    """The backbone from its typed settings (the key comes from an EnvVar through the resource)."""
    client = LLMClient.from_settings(settings, name=name, cache=ResponseCache(cache_path) if cache_path else None)
    return LLMBackbone(name, client, PromptStore(prompt_root), settings.domain,  # type: ignore[arg-type]
                       prompt_versions=prompt_versions, required_prompts=required_prompts,
                       debate_rounds=settings.debate_rounds)


__all__ = [
    "DEFAULT_ENTITY_TYPES", "DEFAULT_RELATION_TYPES", "Domain", "LLMBackbone", "LLMCallError", "LLMClient", "LLMContextError", "LLMDeadlineError",
    "LLMOutputError", "OUTPUT_MODELS", "PromptStore", "ResponseCache", "UsageDelta", "cache_key",
    "locate_mentions", "make_llm_backbone", "parse_json_reply",
]
