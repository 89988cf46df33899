"""One question end to end on one backbone: answer, then (on a miss) complete and verify the missing triples."""

from __future__ import annotations

from typing import Any

from karma_dagster.cogmg import complete
from karma_dagster.cogmg.models import Answer, Completion
from karma_dagster.cogmg.verify import verify
from karma_dagster.runtime.config import BackboneSettings
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths


def complete_answer(answer: Answer, *, settings: BackboneSettings, data: DataPaths, llm_backbone: Any = None,
                    params: KarmaParams | None = None) -> list[Completion]:
    """Verified completions of the answer's missing triples (none for a full hit), best supported first, the
    refused (one entity at both ends) last."""
    params = params or KarmaParams()
    if not answer.missing:
        return []
    found: list[Completion] = []
    if settings.kind == "local":
        rows = complete.candidate_rows(data, answer.backbone)
        for m in answer.missing:
            found += complete.from_candidates(m, answer.question_id, answer.question, answer.backbone, rows)
        for m in answer.missing:
            found += complete.from_passages(m, answer.question_id, answer.question, answer.backbone, data, params)
    else:
        if llm_backbone is None:
            raise ValueError(f"backbone {answer.backbone!r} is an LLM backbone: pass its LLMBackbone to complete with")
        found += complete.from_llm(answer.missing, answer.question_id, answer.question, answer.backbone, data,
                                   llm_backbone, params)
    verified = [verify(c, data) for c in complete.dedupe(found)]
    return sorted(verified, key=lambda c: (bool(c.refused), not c.supported, -c.score, -c.fill_score))
