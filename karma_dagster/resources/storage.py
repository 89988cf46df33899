"""Where the pipeline's run-time data lives (stage tables, catalog, KG, index, caches): settings only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from karma_dagster.ingest.dates import UndatedPolicy, parse_undated, undated_from_env
from karma_dagster.ingest.limits import InputLimits
from karma_dagster.kg import backends as kg_backends
from karma_dagster.kg.store import KGStore
from karma_dagster.partitioning.mode import PartitionMode, partition_mode
from karma_dagster.runtime.paths import DataPaths, data_choice, display_path, inbox_choice
from karma_dagster.resources.strict import StrictResource
from karma_dagster.runtime.stage_store import StageStore


class KarmaStorageResource(StrictResource):
    """Run-time data of the pipeline. Empty `data_dir` means $KARMA_DATA, else `$DAGSTER_HOME/karma`; empty `inbox`
    means $KARMA_INBOX, else the project's inbox/, else the shipped sample inbox."""

    data_dir: str = Field("", description="folder for all run-time data; empty = $KARMA_DATA, else $DAGSTER_HOME/karma")
    inbox: str = Field("", description="folder watched for new papers; empty = $KARMA_INBOX, else the project's "
                       "inbox/, else the shipped data/inbox sample")
    cache_dir: str = Field("", description="derived, rebuildable files (lexicon, trained models); empty = data_dir/cache")
    storage_url: str = Field("", description="stage tables and entity index under this fsspec URL (s3://bucket/prefix) "
                             "that every worker reaches; empty = $KARMA_STORAGE_URL, else data_dir")
    max_file_mb: float = Field(50.0, gt=0, description="largest PDF, JATS or text file the inbox reads (MB); "
                               "a larger one is refused from its size, unread")
    max_pubtator_mb: float = Field(1000.0, gt=0, description="largest PubTator or PubMed XML file the inbox reads (MB; streamed)")
    max_text_chars: int = Field(900_000, gt=0, le=1_000_000, description="longest text of one document "
                                "(characters; spaCy reads at most 1,000,000); a longer one is refused")

    undated: str = Field("", description="what a document without a publication date does: 'arrival' (dated the "
                         "day it arrived), 'skip' (not registered; reported), or a date YYYY-MM-DD (dated so, "
                         "date_source 'configured'); empty = $KARMA_UNDATED, else arrival. Marked in `karma "
                         "status`, the report, the document's metadata and each KG evidence row")

    partitions: str = Field("", description="what a stage asset's partition is: 'document' (one per paper: each "
                            "paper's runs, metadata and failures on its own partition; holds ~1M papers) or 'date' (one "
                            "per day with papers, the day's papers as rows: what PubMed's ten million need); empty = "
                            "$KARMA_PARTITIONS, else document. Read when the code location loads")

    def model_post_init(self, context: Any, /) -> None:
        """The UI's description of this resource says which folders it uses and what chose them: Dagster shows an
        instance's `__doc__` (set once here, when the code location loads)."""
        object.__setattr__(self, "__doc__", f"{type(self).__doc__.split('.')[0]}. {self.folders_in_use()}")

    def folders_in_use(self) -> str:
        """e.g. "Inbox: papers (set by $KARMA_INBOX). Data: $DAGSTER_HOME/karma." (folders as logs show
        them: paths.display_path); a setting that cannot be read is said, not raised (the UI must still load)."""
        try:
            inbox, inbox_by = (Path(self.inbox), "set in this resource's config") if str(self.inbox) else inbox_choice()
            data, data_by = (Path(self.data_dir), "set in this resource's config") if str(self.data_dir) \
                else data_choice()
        except ValueError as exc:  # e.g. a $KARMA_PROJECT that names no project: its own message says so
            return f"Folders not resolved: {exc}"
        def named(folder: Path) -> str:  # the data folder is display_path's own base: "." says nothing
            shown = display_path(folder)
            return folder.name if shown == "." else shown

        data_text = data_by if data_by == "$DAGSTER_HOME/karma" else f"{named(data)} ({data_by})"
        return f"Inbox: {named(inbox)} ({inbox_by}). Data: {data_text}."

    def partition_mode(self) -> PartitionMode:
        """The `partitions` setting, else $KARMA_PARTITIONS, else document (partitioning/mode.py)."""
        return partition_mode(self.partitions)

    @field_validator("undated", "partitions")
    @classmethod
    def _a_known_value(cls, value: str, info: ValidationInfo) -> str:
        (parse_undated if info.field_name == "undated" else partition_mode)(value)  # a bad value fails here, named
        return value

    def undated_policy(self) -> UndatedPolicy:
        """The `undated` setting, else $KARMA_UNDATED, else arrival (ingest/dates.py)."""
        return parse_undated(self.undated) if self.undated.strip() else undated_from_env()

    def paths(self) -> DataPaths:
        return DataPaths(self.data_dir, self.inbox, self.cache_dir, self.storage_url)

    def root(self) -> Path:
        return self.paths().root

    def inbox_dir(self) -> Path:
        return self.paths().inbox

    def input_limits(self) -> InputLimits:
        """The bounds the inbox scan applies (and records in the catalog for the loads of what it registers)."""
        return InputLimits(max_file_mb=self.max_file_mb, max_pubtator_mb=self.max_pubtator_mb,
                           max_text_chars=self.max_text_chars)

    def stage_store(self) -> StageStore:
        return StageStore(self.paths().stages_dir)

    def catalog_path(self) -> Path:
        return self.paths().catalog

    def kg_path(self) -> Path:
        return self.paths().kg

    def kg_store(self) -> KGStore:
        """The deployment's KG: the Postgres database $KARMA_KG_URL when set, else kg_path()'s DuckDB file."""
        return kg_backends.kg_store(self.paths())

    def index_uri(self) -> Path:
        return self.paths().index

    def cache_path(self) -> Path:
        return self.paths().cache()
