"""KGTools: the tool API one caller uses on one namespace (and, for writes, one document at a time).

Every method answers a ToolResult, refused or done, and never raises for bad input: a refusal's message is what
the model reads next. Calls made with a document are appended to that document's transcript (`tool_calls`),
refused ones included. `call(name, arguments)` takes a model's raw tool call (JSON text or a dict).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from karma_dagster.kg.merge import TripleValidationError
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg_tools import create, queries, search
from karma_dagster.kg_tools.context import ToolContext, safe_name
from karma_dagster.kg_tools.results import Refused, ToolResult
from karma_dagster.kg_tools.schemas import parse_arguments
from karma_dagster.kg_tools.staging import ENTITIES, FINAL_STAGE, ToolCallRecord, check_doc_key, merge_staged
from karma_dagster.runtime.paths import DataPaths

DEFAULT_NAMESPACE = "tools"
_WROTE = {"create_instance": "id", "create_statement": "triple_id", "create_class": "label", "create_property": "label"}


class KGTools:
    def __init__(self, paths: DataPaths, namespace: str = DEFAULT_NAMESPACE, caller: str = "tools",
                 document: str | None = None, schema: KGSchema | None = None,
                 staging: tuple[str, str] | None = None) -> None:
        extra: dict[str, Any] = {"schema": schema} if schema is not None else {}
        if staging is not None:
            extra["staging"] = staging
        self.ctx = ToolContext(paths, safe_name(namespace, "namespace"), caller, **extra)
        self.document = check_doc_key(document) if document else None

    @property
    def namespace(self) -> str:
        return self.ctx.namespace

    # ------------------------------------------------------------ running and recording
    def _run(self, tool: str, arguments: dict[str, Any], document: str | None, fn: Callable[[], ToolResult]) -> ToolResult:
        try:
            result = fn()
        except Refused as exc:
            result = ToolResult(ok=False, message=str(exc))
        self._log(tool, arguments, document, result)
        return result

    def _log(self, tool: str, arguments: dict[str, Any], document: str | None, result: ToolResult) -> None:
        doc = document or self.document
        if not doc:
            return
        try:
            stage = self.ctx.document(doc)
        except (Refused, ValueError):
            return  # a bad document key was the refusal itself: there is no transcript to add to
        wrote = result.data.get(_WROTE.get(tool, ""), None) if result.ok else None
        with stage:
            stage.log(self.ctx.caller, tool, arguments, result.ok, result.message, wrote)

    def call(self, name: str, arguments: str | dict | None, document: str | None = None) -> ToolResult:
        """A model's tool call as it arrives: arguments checked first (malformed: refused, nothing run)."""
        try:
            args = parse_arguments(name, arguments)
        except Refused as exc:
            result = ToolResult(ok=False, message=str(exc))
            raw = arguments if isinstance(arguments, dict) else {"raw": str(arguments)[:2000]}
            self._log(name, raw, document, result)
            return result
        return getattr(self, name)(**args, document=document) if name in _DOCUMENT_TOOLS else getattr(self, name)(**args)

    def transcript(self, document: str | None = None) -> list[ToolCallRecord]:
        doc = document or self.document
        if not doc:
            return []
        return self.ctx.document(doc).transcript()

    # ------------------------------------------------------------ the tools
    def search_instance(self, text: str, type: str | None = None, k: int = 5, document: str | None = None) -> ToolResult:
        args = {"text": text, "type": type, "k": k}
        return self._run("search_instance", args, document,
                         lambda: search.search_instance(self.ctx, text, type, document or self.document, k))

    def create_instance(self, label: str, comment: str, type: str, document: str | None = None) -> ToolResult:
        args = {"label": label, "comment": comment, "type": type}
        return self._run("create_instance", args, document,
                         lambda: create.create_instance(self.ctx, label, comment, type, document or self.document))

    def search_class(self, text: str, k: int = 5, document: str | None = None) -> ToolResult:
        return self._run("search_class", {"text": text, "k": k}, document,
                         lambda: search.search_class(self.ctx, text, k))

    def create_class(self, label: str, comment: str, super_class: str | None = None,
                     document: str | None = None) -> ToolResult:
        args = {"label": label, "comment": comment, "super_class": super_class}
        return self._run("create_class", args, document,
                         lambda: create.create_class(self.ctx, label, comment, super_class, document or self.document))

    def search_property(self, text: str, k: int = 5, document: str | None = None) -> ToolResult:
        return self._run("search_property", {"text": text, "k": k}, document,
                         lambda: search.search_property(self.ctx, text, k))

    def create_property(self, label: str, comment: str, domain: str | None = None, range: str | None = None,
                        super_property: str | None = None, document: str | None = None) -> ToolResult:
        args = {"label": label, "comment": comment, "domain": domain, "range": range, "super_property": super_property}
        return self._run("create_property", args, document, lambda: create.create_property(
            self.ctx, label, comment, domain, range, super_property, document or self.document))

    def create_statement(self, subject: str, predicate: str, object: str, evidence: str,
                         confidence: float | None = None, segment: str | None = None,
                         document: str | None = None) -> ToolResult:
        args = {"subject": subject, "predicate": predicate, "object": object, "evidence": evidence,
                "confidence": confidence, "segment": segment}
        return self._run("create_statement", args, document, lambda: create.create_statement(
            self.ctx, subject, predicate, object, evidence, document or self.document, confidence, segment))

    # ------------------------------------------------------------ read-only queries
    def neighbours(self, entity: str, limit: int = 25) -> ToolResult:
        return self._run("neighbours", {"entity": entity, "limit": limit}, None,
                         lambda: queries.neighbours(self.ctx, entity, limit))

    def edges_between(self, a: str, b: str) -> ToolResult:
        return self._run("edges_between", {"a": a, "b": b}, None, lambda: queries.edges_between(self.ctx, a, b))

    def edge_provenance(self, subject: str, predicate: str, object: str) -> ToolResult:
        return self._run("edge_provenance", {"subject": subject, "predicate": predicate, "object": object}, None,
                         lambda: queries.edge_provenance(self.ctx, subject, predicate, object))

    # ------------------------------------------------------------ merging (outside Dagster)
    def merge_document(self, document: str | None = None, run_id: str | None = None) -> ToolResult:
        """Merge the date of the document (with every other staged document of that date in the namespace)
        through merge_increment, as the KG asset would."""
        def run() -> ToolResult:
            doc = document or self.document
            if not doc:
                raise Refused("name the document to merge")
            if self.ctx.staging != (FINAL_STAGE, ENTITIES):
                raise Refused("this session stages for an agent chain: its KG increment merges the document")
            stage = self.ctx.document(doc)
            if not stage.triples():
                raise Refused(f"document {doc} has no staged statement in namespace {self.namespace!r}: nothing to "
                              "merge (instances enter the KG with the statements that use them)")
            day = stage.date
            try:
                outcome = merge_staged(self.ctx.paths, self.namespace, day, run_id
                                       or f"kg-tools-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
            except TripleValidationError as exc:
                raise Refused(f"the merge of {day} refused it, KG unchanged: {exc}") from exc
            s = outcome.stats
            skipped = f"; skipped {outcome.skipped}" if outcome.skipped else ""
            if outcome.remerged:
                skipped += ("; later dates merged again after it (the KG keeps its dates in order): "
                            + ", ".join(str(d) for d in outcome.remerged))
            return ToolResult(ok=True, data={"date": str(day), "documents": outcome.documents,
                                             "skipped": outcome.skipped, "stats": s.model_dump(mode="json"),
                                             "remerged": [str(d) for d in outcome.remerged]},
                              message=f"merged {day} in namespace {self.namespace!r}: {s.n_docs} document(s), "
                                      f"{s.n_evidence} statement(s), {s.n_new_nodes} new node(s), {s.n_new_edges} new "
                                      f"edge(s), {s.n_reinforced} reinforced; KG {s.nodes_after} nodes, "
                                      f"{s.edges_after} edges{skipped}")
        return self._run("merge_document", {"document": document}, document, run)


_DOCUMENT_TOOLS = {"search_instance", "create_instance", "create_class", "create_property", "create_statement"}
