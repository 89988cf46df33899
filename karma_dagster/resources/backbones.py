"""The backbones resource: named backbone configs (backbones.yaml) -> ready `Backbone` objects.

Built objects are cached per process: the local backbone loads a lexicon and a trained classifier once,
an LLM backbone keeps its response cache and concurrency limit across the stages of a run.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import dagster as dg
import yaml
from pydantic import Field

from karma_dagster.backbones.base import Backbone
from karma_dagster.resources.paths import REPO_ROOT
from karma_dagster.resources.storage import KarmaStorageResource

_LOCK = threading.Lock()
BACKBONE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")  # it prefixes asset keys, names KG namespaces and folders
_BUILT: dict[tuple, Backbone] = {}


def clear_built() -> None:
    with _LOCK:
        _BUILT.clear()


class BackboneConfig(dg.Config):
    kind: str = Field("local", description="'local' (offline classic NLP) or 'litellm'")
    model: str = Field("", description="litellm model string, e.g. openai/gpt-4o, deepseek/deepseek-chat")
    api_base: str | None = Field(None, description="OpenAI-compatible server, e.g. an Ollama or vLLM URL")
    api_key: str | None = Field(None, description="set with EnvVar; never written to files or metadata")
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout: float = 60.0
    max_retries: int = 4
    concurrency: int = Field(4, description="concurrent calls to this backbone")
    domain: str = Field("general biomedicine", description="genomics, proteomics, metabolomics, general biomedicine")
    mode: str = Field("multi_agent", description="'multi_agent' (the KARMA chain) or 'single_agent' (the paper's "
                      "baseline: one generation extracts all triples; see backbones/single_agent.py)")


class BackbonesResource(dg.ConfigurableResource):
    backbones: dict[str, BackboneConfig] = Field(default_factory=lambda: {"local": BackboneConfig()})
    prompts_dir: str = Field("", description="prompt files; empty = the repo's prompts/")

    def names(self) -> list[str]:
        return list(self.backbones)

    def prompts_root(self) -> Path:
        return Path(self.prompts_dir) if self.prompts_dir else REPO_ROOT / "prompts"

    def get(self, name: str, storage: KarmaStorageResource) -> Backbone:
        if name not in self.backbones:
            raise KeyError(f"backbone {name!r} is not configured; configured: {sorted(self.backbones)}")
        cfg = self.backbones[name]
        cache_key = (name, cfg.model_dump_json(), str(storage.root()), storage.cache_dir, str(self.prompts_root()))
        with _LOCK:
            if cache_key not in _BUILT:
                from karma_dagster import runtime

                if cfg.kind == "local":
                    _BUILT[cache_key] = runtime.local_backbone(storage.cache_path(), storage.kg_path())
                elif cfg.kind == "litellm":
                    _BUILT[cache_key] = runtime.llm_backbone(
                        name, cfg.model_dump(), self.prompts_root(), storage.root() / "llm_cache"
                    )
                else:
                    raise ValueError(f"backbone {name!r}: unknown kind {cfg.kind!r} (use 'local' or 'litellm')")
                if cfg.mode != "multi_agent":
                    from karma_dagster.backbones.single_agent import wrap_mode

                    _BUILT[cache_key] = wrap_mode(name, cfg.mode, _BUILT[cache_key])
            return _BUILT[cache_key]


def load_backbones_file(path: Path | None = None) -> dict[str, dict]:
    """backbones.yaml -> {name: config dict} of the enabled backbones (api_key_env kept as a name only)."""
    path = path or REPO_ROOT / "backbones.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    out: dict[str, dict] = {}
    for name, cfg in (data.get("backbones") or {}).items():
        if not isinstance(name, str) or not BACKBONE_NAME.match(name):
            raise ValueError(
                f"{path.name}: backbone name {name!r} must start with a letter or digit and use only a-z, 0-9, '.', '-', '_'"
            )
        if not isinstance(cfg, dict):
            raise ValueError(f"{path.name}: backbone {name!r} must be a mapping")
        if cfg.get("enabled", True):
            out[name] = dict(cfg)
    return out
