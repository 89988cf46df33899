"""What every tool call runs against: the data paths, the namespace it writes into, who calls, the schema."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from karma_dagster.runtime import services
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.backends import kg_exists, kg_store
from karma_dagster.kg.store import KGStore
from karma_dagster.kg_tools.ontology import Ontology
from karma_dagster.kg_tools.results import Refused
from karma_dagster.kg_tools.staging import ENTITIES, FINAL_STAGE, DocumentStage
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.runtime.stage_store import StageStore

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def safe_name(value: str, what: str) -> str:
    """A namespace or caller name: it becomes part of file names and ids."""
    if not isinstance(value, str) or not _SAFE.match(value):
        raise ValueError(f"{what} {value!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return value


def caller_tag(caller: str) -> str:
    """The caller's name reduced to id characters (a client may call itself 'Claude Desktop 1.2')."""
    tag = re.sub(r"[^A-Za-z0-9._-]+", "-", caller).strip("-.")[:40]
    return tag or "caller"


@dataclass
class ToolContext:
    paths: DataPaths
    namespace: str
    caller: str
    schema: KGSchema = field(default_factory=services.kg_schema)
    staging: tuple[str, str] = (FINAL_STAGE, ENTITIES)  # the (statements, entities) tables writes go to

    def __post_init__(self) -> None:
        safe_name(self.namespace, "namespace")
        if not self.caller or not self.caller.strip():
            raise ValueError("caller: name who calls the tools (a model, a backbone, an MCP client)")

    @property
    def store(self) -> KGStore:
        return kg_store(self.paths)

    @property
    def stages(self) -> StageStore:
        return StageStore(self.paths.stages_dir)

    def ontology(self) -> Ontology:
        return Ontology(self.schema, self.store, self.namespace)

    def document(self, doc_key: str | None) -> DocumentStage:
        if not doc_key:
            raise Refused("name the document the evidence comes from (argument 'document', a key such as "
                          "2016-02-12_pmc4737013): every write is staged per document")
        return DocumentStage(self.stages, self.namespace, doc_key, *self.staging)

    def index(self):
        """The entity index as this namespace sees it now: seed names plus every entity its merges added."""
        if not kg_exists(self.paths):
            raise Refused("the KG has no seed yet: run `karma import-kg` (or `karma run`) first")
        return services.linkable_index(self.paths, self.namespace)

    def identity(self):
        """Who an entity is (kg/identity.py): the namespace's KG nodes by id, cross-reference and exact name."""
        if not kg_exists(self.paths):
            raise Refused("the KG has no seed yet: run `karma import-kg` (or `karma run`) first")
        return services.identity_index(self.paths, self.namespace)
