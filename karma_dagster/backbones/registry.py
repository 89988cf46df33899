"""What backbones.yaml offers and what this machine can run: enabled, disabled, or NOT CONFIGURED (a key missing).

A backbone whose `api_key_env` variable is unset gets no chain (so one missing key never breaks the others'
runs) and is shown with the variable to set, in the `backbones_status` asset, `karma run` and `karma compare`.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JUDGE = "local"


class BackboneStatus(BaseModel):
    name: str
    kind: str
    model: str = ""
    mode: str = "multi_agent"
    enabled: bool
    key_env: str | None = None
    configured: bool  # runnable here (no key needed, or its variable is set)

    @property
    def status(self) -> str:
        if not self.enabled:
            return "disabled"
        if not self.configured:
            return f"NOT CONFIGURED: set {self.key_env}"
        return "ok"

    @property
    def runnable(self) -> bool:
        return self.enabled and self.configured


def _read(path: Path | None) -> dict:
    path = path or REPO_ROOT / "backbones.yaml"
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{Path(path).name}: expected a mapping with 'backbones:'")
    return data


def key_missing(key_env: str | None) -> bool:
    return bool(key_env) and not os.environ.get(key_env or "")


def backbone_statuses(path: Path | None = None) -> list[BackboneStatus]:
    out = []
    for name, cfg in (_read(path).get("backbones") or {}).items():
        if not isinstance(cfg, dict):
            raise ValueError(f"backbones.yaml: backbone {name!r} must be a mapping")
        key_env = cfg.get("api_key_env")
        out.append(BackboneStatus(
            name=name, kind=cfg.get("kind", "local"), model=cfg.get("model", ""), mode=cfg.get("mode", "multi_agent"),
            enabled=bool(cfg.get("enabled", True)), key_env=key_env, configured=not key_missing(key_env),
        ))
    return out


def judge_name(path: Path | None = None) -> str:
    """The backbone named `judge:` in backbones.yaml (default: the local rule-based judge)."""
    return str(_read(path).get("judge") or DEFAULT_JUDGE)


def judge_config(path: Path | None = None) -> tuple[str, dict | None, str]:
    """(judge name, its raw config when it is an LLM, why it cannot judge: '' when it can)."""
    name = judge_name(path)
    if name == DEFAULT_JUDGE:
        return name, None, ""
    raw = (_read(path).get("backbones") or {}).get(name)
    if not isinstance(raw, dict):
        return name, None, f"judge {name!r} is not a backbone in backbones.yaml"
    if raw.get("kind", "local") != "litellm":
        return name, None, ""
    if key_missing(raw.get("api_key_env")):
        return name, None, f"judge {name!r} NOT CONFIGURED: set {raw.get('api_key_env')}"
    return name, dict(raw), ""


def markdown(statuses: list[BackboneStatus], judge: str) -> str:
    lines = ["| backbone | kind | model | mode | status |", "|---|---|---|---|---|"]
    for s in statuses:
        lines.append(f"| {s.name} | {s.kind} | {s.model or '-'} | {s.mode} | {s.status} |")
    lines += ["", f"judge: {judge}"]
    return "\n".join(lines)
