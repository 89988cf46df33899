"""The backbones resource: named backbone settings (backbones.yaml) -> ready `Backbone` objects (services)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from karma_dagster import stages
from karma_dagster.runtime import paths, services
from karma_dagster.backbones.base import Backbone
from karma_dagster.runtime.config import BackboneEntry, BackboneSettings, read_backbones
from karma_dagster.resources.mirror import mirror
from karma_dagster.resources.strict import StrictConfig, StrictResource
from karma_dagster.resources.storage import KarmaStorageResource

BackboneConfig = mirror(BackboneSettings, StrictConfig, "BackboneConfig")  # defaults declared once, in config.py


def settings_of(config: dg.Config) -> BackboneSettings:
    return BackboneSettings.model_validate(config.model_dump())


class BackbonesResource(StrictResource):
    backbones: dict[str, BackboneConfig] = Field(default_factory=lambda: {"local": BackboneConfig()})  # type: ignore[valid-type]
    prompts_dir: str = Field("", description="prompt files; empty = the project folder's own prompts/ when it has "
                             "one, else the package's")
    source: str = Field("", description="which backbones.yaml these backbones were read from: the project "
                        "folder's or the package default (shown, never used to read)")

    def names(self) -> list[str]:
        return list(self.backbones)

    def prompts_root(self) -> Path:
        return Path(self.prompts_dir) if self.prompts_dir else paths.prompts_dir()

    def settings(self, name: str) -> BackboneSettings:
        if name not in self.backbones:
            raise KeyError(f"backbone {name!r} is not configured; configured: {sorted(self.backbones)}")
        return settings_of(self.backbones[name])

    def get(self, name: str, storage: KarmaStorageResource) -> Backbone:
        settings = self.settings(name)
        return services.backbone(name, settings, storage.paths(), self.prompts_root(),
                                 required_prompts=stages.all_prompts(stages.chain_for(settings)))


    def calibration_state(self, name: str, storage: KarmaStorageResource) -> str:
        """What the backbone's evaluator confidence is now: "calibrated ..." or "uncalibrated ..."; "" when it
        cannot be built here (unconfigured, unreadable calibration): said as n/a, never guessed."""
        if name not in self.backbones:
            return ""
        if "evaluator" in self.settings(name).ablate:  # no evaluator, no confidence, whatever the backbone ships
            return "uncalibrated (evaluator ablated: aligned and kept triples enter unscored)"
        try:
            return self.get(name, storage).calibration_state()
        except (ValueError, KeyError, OSError):
            return ""


def backbone_configs_from_file(path: Path | None = None) -> dict[str, BackboneConfig]:  # type: ignore[valid-type]
    """The runnable backbones of backbones.yaml as resource configs; keys stay in the environment (EnvVar),
    read only at run time. A backbone whose key variable is unset gets no chain (NOT CONFIGURED)."""
    return {name: config_of(entry) for name, entry in read_backbones(path).runnable().items()}


def config_of(entry: BackboneEntry) -> BackboneConfig:  # type: ignore[valid-type]
    """A backbones.yaml entry as resource config: its key an EnvVar, resolved only when a run starts."""
    raw = entry.settings().model_dump(exclude={"api_key"})
    if entry.api_key_env:
        raw["api_key"] = dg.EnvVar(entry.api_key_env)
    return BackboneConfig(**raw)
