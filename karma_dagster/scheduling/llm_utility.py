"""The controller's LLM utility: U in [0, 1] per pending paper, estimated by backbones.yaml's `controller:` LLM.

KARMA's Central Controller lets an LLM judge a task's expected utility (the U of Eq. 4). Before ingestion only a
paper's catalog entry is known, so the model sees its title, date, dominant entity type and which of the title's
entity names the KG holds or lacks, and answers U with a one-line reason (prompts/controller/). Papers go
`batch` to a call, through the LLM response cache (a paper still pending at the next tick costs nothing). A
paper the model leaves out keeps the rule U; a failed call leaves the whole batch on the rule U, and the run tag
`karma/cca_utility_source` says which U ordered each run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field

from karma_dagster.backbones.base import Usage
from karma_dagster.backbones.llm.cache import ResponseCache
from karma_dagster.backbones.llm.client import LLMClient
from karma_dagster.runtime.config import read_backbones
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.runtime.prompts import PromptStore

log = logging.getLogger(__name__)
PROMPT = "controller"


class UtilityItem(BaseModel):
    """One pending paper as the controller LLM sees it."""

    doc: int
    title: str
    date: str
    entity_type: str
    known_entities: list[str] = []
    new_entities: list[str] = []


class UtilityAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    doc: int
    utility: Annotated[float, Field(ge=0.0, le=1.0)]
    reason: str = ""


class ControllerUtilityOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    documents: list[UtilityAnswer]


class UtilityModel(Protocol):
    """What the planner needs: a source label for the run tags and U per item (`doc` -> U, missing = no answer)."""

    source: str

    def estimate(self, items: list[UtilityItem]) -> dict[int, float]: ...


class LLMUtility:
    """U from an LLM through the project's client (retries, JSON repair, response cache, key never logged)."""

    def __init__(self, name: str, client: LLMClient, prompts: PromptStore | None = None,
                 domain: str = "general biomedicine", batch: int = 20) -> None:
        if batch < 1:
            raise ValueError(f"controller utility batch must be >= 1, got {batch}")
        self.name, self.client, self.domain, self.batch = name, client, domain, batch
        self.prompts = prompts or PromptStore()
        self.usage = Usage()

    @property
    def source(self) -> str:
        return f"llm:{self.name}"

    def estimate(self, items: list[UtilityItem]) -> dict[int, float]:
        batches = [items[i: i + self.batch] for i in range(0, len(items), self.batch)]
        requests = [(self.prompts.render(PROMPT, domain=self.domain, documents=[i.model_dump() for i in b]),
                     ControllerUtilityOutput) for b in batches]
        out: dict[int, float] = {}
        for (parsed, delta), batch in zip(self.client.complete_many(requests), batches, strict=True):
            self.usage = self.usage.add(delta)
            wanted = {i.doc for i in batch}
            for answer in parsed.documents:
                if answer.doc in wanted and answer.doc not in out:
                    out[answer.doc] = answer.utility
        return out


def controller_utility(data: DataPaths, path: Path | str | None = None,
                       prompts_root: Path | str | None = None) -> tuple[UtilityModel | None, str]:
    """(the `controller:` LLM of backbones.yaml, ''), or (None, why not) — why is '' when the file asks for the
    rule U (no `controller:`, or a local backbone)."""
    name, entry, why = read_backbones(path).controller_entry()
    if entry is None or name is None:
        return None, why
    settings = entry.keyed_settings(name)
    data.llm_cache.mkdir(parents=True, exist_ok=True)
    client = LLMClient.from_settings(settings, name=f"controller:{name}",
                                     cache=ResponseCache(data.llm_cache / "llm_responses.sqlite"))
    return LLMUtility(name, client, PromptStore(prompts_root), settings.domain), ""
