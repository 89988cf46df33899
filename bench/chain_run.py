"""Run backbones' own chains over a PubTator corpus, one inbox file per abstract, with the agents called directly.

Shared by bench/chain_gold.py (score the chain on dev) and scripts/train_evaluator.py (the chain's resolved
triples on the training splits, cross-fitted, as the learned evaluator's examples): both need the pipeline's
stages exactly as `karma run` runs them (reader, summarizer, EEA, REA, alignment, conflict resolution, ...), over
many small documents, without paying a Dagster run per document.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from karma_dagster import runner
from karma_dagster.backbones.base import Backbone
from karma_dagster.definitions import build_definitions
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import scan_inbox
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.resources.backbones import backbone_configs_from_file
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.runtime.stage_store import StageStore
from karma_dagster.stages import StageInputs, chain_for


def split_corpus(path: Path, inbox: Path, limit: int | None = None,
                 keep: Callable[[str], bool] | None = None) -> int:
    """One PubTator file per document of `path` (blank-line separated blocks): the first `limit`, those whose
    PMID `keep` accepts."""
    blocks = [b for b in path.read_text(encoding="utf-8").strip().split("\n\n") if b.strip()]
    if keep is not None:
        blocks = [b for b in blocks if keep(b.split("|", 1)[0].strip())]
    blocks = blocks[:limit]
    inbox.mkdir(parents=True, exist_ok=True)
    start = len(list(inbox.glob("*.pubtator")))
    for i, block in enumerate(blocks, start):
        (inbox / f"doc{i:05d}.pubtator").write_text(block.strip() + "\n", encoding="utf-8")
    return len(blocks)


@dataclass
class ChainWorkspace:
    """A data folder with the seed KG imported and the inbox registered, ready for stages to run in."""

    storage: KarmaStorageResource
    defs: dg.Definitions
    keys: list[str]

    @property
    def paths(self) -> DataPaths:
        return self.storage.paths()

    @property
    def store(self) -> StageStore:
        return self.storage.stage_store()

    def catalog(self) -> Catalog:
        return Catalog(self.storage.catalog_path())

    def backbone(self, name: str) -> Backbone:
        return self.defs.resources["backbones"].get(name, self.storage)  # type: ignore[index, union-attr]

    def chain(self, name: str) -> tuple:
        return chain_for(self.defs.resources["backbones"].settings(name))  # type: ignore[index, union-attr]

    def run(self, name: str, keys: Iterable[str], *, backbone: Backbone | None = None, upto: str | None = None,
            params: KarmaParams | None = None) -> None:
        """Each key through backbone `name`'s chain (up to and including stage `upto`), tables written as the
        pipeline writes them."""
        backbone = backbone or self.backbone(name)
        params, store, paths = params or KarmaParams(), self.store, self.paths
        for key in keys:
            for stage in self.chain(name):
                rows, _figures = stage.run(StageInputs(stage, name, key, paths, backbone, params))
                store.write(name, stage.name, key, records_to_frame(rows, stage.row_model))
                if stage.name == upto:
                    break


def prepare(work: Path, inbox: Path, backbones: list[str], cache_dir: Path) -> ChainWorkspace:
    """Definitions over `work`, the seed KG imported, every inbox file registered (dated today)."""
    configs = backbone_configs_from_file()
    unknown = [b for b in backbones if b not in configs]
    if unknown:
        raise SystemExit(f"--backbone {', '.join(unknown)}: not a runnable backbone of backbones.yaml "
                         f"(runnable: {', '.join(sorted(configs))})")
    storage = KarmaStorageResource(data_dir=str(work / "karma"), inbox=str(inbox), cache_dir=str(cache_dir))
    defs = build_definitions(backbones={b: configs[b] for b in backbones}, storage=storage)
    (work / "home").mkdir(parents=True, exist_ok=True)
    with dg.instance_for_test(temp_dir=str(work / "home")) as inst:
        if not runner.import_kg(defs, inst):
            raise SystemExit("seed import failed")
    keys = sorted(scan_inbox(inbox, Catalog(storage.catalog_path()), arrival_date=dt.date.today()).keys_to_run)
    return ChainWorkspace(storage=storage, defs=defs, keys=keys)
