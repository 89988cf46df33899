"""The judge resource: the backbone that labels new triples for KARMA's correctness metric (or the rule judge)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from karma_dagster.runtime.config import read_backbones
from karma_dagster.metrics.judge import LLMJudge, NoJudge, RuleJudge, TripleJudge
from karma_dagster.resources.backbones import BackboneConfig, BackbonesResource, config_of
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.resources.strict import StrictResource


class JudgeResource(StrictResource):
    name: str = Field("local", description="'local' = the rule-based judge; else an LLM backbone's name")
    backbone: BackboneConfig | None = Field(None, description="the LLM judge's config (key through EnvVar)")  # type: ignore[valid-type]
    unavailable: str = Field("", description="why the named judge cannot run (e.g. its key variable is unset)")
    prompts_dir: str = ""
    qa_questions: str = Field("", description="QA-coherence question set; empty = data/qa/sample_questions.v2.yaml")

    def get(self, storage: KarmaStorageResource) -> TripleJudge:
        if self.unavailable:
            return NoJudge(self.unavailable)
        if self.backbone is None or self.backbone.kind != "litellm":
            return RuleJudge()
        built = BackbonesResource(backbones={self.name: self.backbone}, prompts_dir=self.prompts_dir).get(
            self.name, storage)
        base = getattr(built, "base", built)  # a single-agent wrapper judges with its LLM
        return LLMJudge(self.name, base, model=self.backbone.model)

    @property
    def kind(self) -> str:
        """'litellm' (an LLM judge that can run), 'rules' (the rule-based judge) or 'none' (cannot run)."""
        if self.unavailable:
            return "none"
        return "litellm" if self.backbone is not None and self.backbone.kind == "litellm" else "rules"

    @property
    def model(self) -> str:
        return self.backbone.model if self.kind == "litellm" and self.backbone is not None else ""

    @property
    def label(self) -> str:
        return self.name + (f" ({self.unavailable})" if self.unavailable else "")


def judge_from_file(prompts_dir: str = "", path: Path | None = None) -> JudgeResource:
    """The `judge:` of backbones.yaml; an LLM judge whose key is missing judges nothing and says why."""
    name, entry, why = read_backbones(path).judge_entry()
    if entry is None:
        return JudgeResource(name=name, unavailable=why, prompts_dir=prompts_dir)
    return JudgeResource(name=name, backbone=config_of(entry), prompts_dir=prompts_dir)
