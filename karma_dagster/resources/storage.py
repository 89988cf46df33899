"""Where the pipeline's run-time data lives (stage tables, catalog, KG, index, caches): settings only."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from karma_dagster.paths import DataPaths
from karma_dagster.resources.strict import StrictResource
from karma_dagster.stage_store import StageStore


class KarmaStorageResource(StrictResource):
    """Run-time data of the pipeline. Empty `data_dir` means `$DAGSTER_HOME/karma`."""

    data_dir: str = Field("", description="folder for all run-time data; empty = $DAGSTER_HOME/karma")
    inbox: str = Field("", description="folder watched for new papers; empty = the shipped data/inbox sample")
    cache_dir: str = Field("", description="derived, rebuildable files (lexicon, trained models); empty = data_dir/cache")

    def paths(self) -> DataPaths:
        return DataPaths(self.data_dir, self.inbox, self.cache_dir)

    def root(self) -> Path:
        return self.paths().root

    def inbox_dir(self) -> Path:
        return self.paths().inbox

    def stage_store(self) -> StageStore:
        return StageStore(self.paths().stages_dir)

    def catalog_path(self) -> Path:
        return self.paths().catalog

    def kg_path(self) -> Path:
        return self.paths().kg

    def index_uri(self) -> Path:
        return self.paths().index

    def cache_path(self) -> Path:
        return self.paths().cache()
