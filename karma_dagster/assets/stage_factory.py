"""One factory for the eight agent-stage assets: each stage module only says what its agent computes.

Around every stage the same things happen: resolve the backbone, read the document's upstream tables, call
the agent (its failure names backbone, agent and partition), validate and store the table, report metadata.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg
import pandas as pd
from pydantic import BaseModel

from karma_dagster.backbones.base import Backbone
from karma_dagster.assets.batching import per_document
from karma_dagster.assets.common import StageTimer, agent_errors, finish_stage, stage_asset_kwargs
from karma_dagster.params import KarmaParams
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.frames import frame_to_records
from karma_dagster.stage_store import StageStore


@dataclass
class StageCall:
    """What a stage's compute function works with: one document of one backbone."""

    namespace: str
    document: str
    storage: KarmaStorageResource
    store: StageStore
    backbone: Backbone
    params: KarmaParams

    def table(self, stage: str) -> pd.DataFrame:
        return self.store.read(self.namespace, stage, self.document)

    def records(self, stage: str, model: type[BaseModel]) -> list:
        return frame_to_records(self.table(stage), model)


@dataclass(frozen=True)
class StageSpec:
    stage: str
    upstream: str | None
    model: type[BaseModel]  # the row model of the stage's table
    preview: tuple[str, ...]  # columns shown in the materialization's preview
    kinds: frozenset[str] = frozenset({"python"})
    extra_deps: tuple[dg.AssetKey, ...] = field(default=())


Compute = Callable[[StageCall], tuple[list[BaseModel], dict[str, object]]]


def stage_asset(ns: str, code_version: str, pool: str | None, spec: StageSpec, compute: Compute) -> dg.AssetsDefinition:
    @dg.asset(
        **stage_asset_kwargs(
            ns, spec.stage, code_version, spec.upstream, pool, kinds=set(spec.kinds), extra_deps=spec.extra_deps
        )
    )
    @per_document
    def stage_table(
        context: dg.AssetExecutionContext,
        storage: KarmaStorageResource,
        backbones: BackbonesResource,
        karma_params: KarmaParamsResource,
    ) -> dg.MaterializeResult:
        timer = StageTimer()
        store = storage.stage_store()
        backbone = backbones.get(ns, storage)
        backbone.reset_usage()
        call = StageCall(ns, context.partition_key, storage, store, backbone, karma_params.params())
        with agent_errors(context, store, spec.stage, backbone):
            rows, extra = compute(call)
        return finish_stage(
            context, store, ns, spec.stage, rows, spec.model, backbone, timer, list(spec.preview), extra=extra
        )

    return stage_table
