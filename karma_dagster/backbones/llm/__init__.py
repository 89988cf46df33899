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
from karma_dagster.backbones.llm.backbone import EVALUATOR_PROMPTS
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
from karma_dagster.backbones.llm.calibration import UNCALIBRATED, fingerprint
from karma_dagster.backbones.llm.calibration import load as load_calibration
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
    calibration_dir: Path | None = None,
) -> LLMBackbone:
    """The backbone from its typed settings (the key comes from an EnvVar through the resource); with
    `calibration_dir` (DataPaths.calibration_dir), the evaluator calibration `karma calibrate` stored there for these
    settings (else it is uncalibrated)."""
    client = LLMClient.from_settings(settings, name=name, cache=ResponseCache(cache_path) if cache_path else None)
    prompts = PromptStore(prompt_root)
    stamp = score_fingerprint(settings, prompts, prompt_versions)
    calibration, label = ((None, UNCALIBRATED) if calibration_dir is None
                          else load_calibration(calibration_dir, name, stamp))
    return LLMBackbone(name, client, prompts, settings.domain,  # type: ignore[arg-type]
                       prompt_versions=prompt_versions, required_prompts=required_prompts,
                       debate_rounds=settings.debate_rounds, calibration=calibration, calibration_label=label,
                       uncalibrated_admission=settings.uncalibrated_admission, calibration_fingerprint=stamp)


def score_fingerprint(settings: BackboneSettings, prompts: PromptStore, prompt_versions: dict[str, int] | None = None
                      ) -> str:
    """What an evaluator calibration of these settings is bound to (llm/calibration.py)."""
    return fingerprint(settings.model, settings.temperature,
                       prompts.code_version_for(list(EVALUATOR_PROMPTS), prompt_versions or {}))


__all__ = [
    "DEFAULT_ENTITY_TYPES", "DEFAULT_RELATION_TYPES", "Domain", "LLMBackbone", "LLMCallError", "LLMClient", "LLMContextError", "LLMDeadlineError",
    "LLMOutputError", "OUTPUT_MODELS", "PromptStore", "ResponseCache", "UsageDelta", "cache_key",
    "locate_mentions", "make_llm_backbone", "parse_json_reply", "score_fingerprint",
]
