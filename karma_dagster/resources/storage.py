"""Resources for the run-time stores: stage tables, the document catalog + inbox, and the KG store."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from karma_dagster.resources.paths import default_data_dir, repo_data
from karma_dagster.stage_store import StageStore


class KarmaStorageResource(dg.ConfigurableResource):
    """Run-time data of the pipeline: stage tables, document catalog, KG store, entity index, caches.

    Empty `data_dir` means `$DAGSTER_HOME/karma`.
    """

    data_dir: str = Field("", description="folder for all run-time data; empty = $DAGSTER_HOME/karma")
    inbox: str = Field("", description="folder watched for new papers; empty = the repo's data/inbox sample")
    cache_dir: str = Field("", description="derived, rebuildable files (lexicon, trained models); empty = data_dir/cache")

    def root(self) -> Path:
        return Path(self.data_dir) if self.data_dir else default_data_dir()

    def inbox_dir(self) -> Path:
        return Path(self.inbox) if self.inbox else repo_data("inbox")

    def stage_store(self) -> StageStore:
        return StageStore(self.root() / "stages")

    def catalog_path(self) -> Path:
        return self.root() / "catalog.sqlite"

    def kg_path(self) -> Path:
        return self.root() / "kg.duckdb"

    def index_uri(self) -> Path:
        return self.root() / "entity_index.lance"

    def cache_path(self) -> Path:
        path = Path(self.cache_dir) if self.cache_dir else self.root() / "cache"
        path.mkdir(parents=True, exist_ok=True)
        return path
