"""`new_papers`: watch the inbox, register document partitions, request the agent chain for each new paper.

The catalog (SQLite, beside the KG) remembers every file's content hash, so a file is processed once and
again only when its content changes; an unreadable file is skipped, reported in the tick it starts failing
(not again while it stays unreadable: the cursor lists it). Registration writes the documents to process into
the catalog's outbox in the same transaction, and the cursor is the last outbox entry requested: a tick that
dies after registering never loses a paper (the next tick requests it).
"""


import datetime as dt
import json
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from karma_dagster.ingest.catalog import Catalog
from karma_dagster.ingest.inbox import scan_inbox
from karma_dagster.jobs import READING_LANE
from karma_dagster.runtime.params import ControllerParams
from karma_dagster.partitioning.definitions import add_requests, documents_partitions
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.runtime.removal import remove_deleted_citations, retire_rekeyed
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.runtime.stage_store import StageStore
from karma_dagster.stages import FINAL_STAGE


# A tick's bounds (Dagster fails a sensor tick after 60 s): the inbox scan starts no file after SCAN_BUDGET_S (the
# next tick goes on from there, ingest/inbox.py), and a tick requests at most REQUESTS_PER_TICK documents of the
# outbox (the next tick the rest). A file is registered whole: one file's parse (PDFs read at most max_pdf_pages,
# a 20,000-abstract PubTator file ~10 s) may run past the budget, so the budget leaves it the rest of the minute.
SCAN_BUDGET_S = 15.0
REQUESTS_PER_TICK = 1000
# The controller's ordering waits at most CONTROLLER_BUDGET_S in a tick (with the scan's 15 s, a tick stays well under
# 60 s). Its first decision in a data folder builds the dictionary lexicon it reads titles with (835 s in the sensor
# at load 20 on a `dagster dev` check of the sample inbox, so the first ticks failed at Dagster's 60 s): the decision
# goes on in one background thread of the code server (warming the lexicon cache for the next ticks), and this
# tick's runs keep the default priority.
CONTROLLER_BUDGET_S = 10.0
_CONTROLLER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="karma-controller")
_log = logging.getLogger(__name__)


def requested_documents(
    catalog: Catalog, after_seq: int, namespaces: list[str], stages: StageStore, limit: int | None = None
) -> tuple[list[tuple[str, str]], int]:
    """(document key, content hash) from the outbox past `after_seq` (at most `limit` entries), and the new cursor
    position.

    Documents whose every backbone already evaluated this very content (e.g. processed by `karma run`) are
    not requested again."""
    outbox = catalog.requests_after(after_seq, limit)
    last = max((seq for seq, _, _ in outbox), default=after_seq)
    wanted = list(dict.fromkeys((key, chash) for _, key, chash in outbox))
    return [(key, chash) for key, chash in wanted if not _done(key, chash, namespaces, stages)], last


def _done(key: str, content_hash: str, namespaces: list[str], stages: StageStore) -> bool:
    for ns in namespaces:
        if not (stages.exists(ns, FINAL_STAGE, key) and stages.exists(ns, "documents", key)):
            return False
        if stages.read(ns, "documents", key).iloc[0]["content_hash"] != content_hash:
            return False
    return True


def plan_runs(
    new_or_changed: list[tuple[str, str]], job_name: str, controller_tags: dict[str, dict[str, str]] | None = None
) -> list[dg.RunRequest]:
    """One run per (document key, content hash); the run key makes a repeat request a no-op. With the
    controller's tags (dagster/priority + the formula's inputs), requests come in the controller's order."""
    controller_tags = controller_tags or {}
    rank = {key: i for i, key in enumerate(controller_tags)}
    ordered = sorted(new_or_changed, key=lambda kc: rank.get(kc[0], len(rank)))
    return [
        dg.RunRequest(
            partition_key=key,
            run_key=f"{key}@{content_hash[:16]}",
            job_name=job_name,
            tags={"karma/document": key, "karma/trigger": "new_papers", **READING_LANE, **controller_tags.get(key, {})},
        )
        for key, content_hash in ordered
    ]


def plan_date_runs(
    new_or_changed: list[tuple[str, str]], job_name: str, controller_tags: dict[str, dict[str, str]] | None = None
) -> list[dg.RunRequest]:
    """Date partitions (partitioning/mode.py): one run per date with new or changed papers, which reads that day's
    papers; the run key is the date and its requested contents, so the same papers are not requested twice. The
    date's priority is its best paper's, its karma/cca_score the range of its papers' scores; dates come in the
    controller's order of their best papers."""
    import hashlib

    from karma_dagster.ingest.keys import date_of_document_key

    controller_tags = controller_tags or {}
    rank = {key: i for i, key in enumerate(controller_tags)}
    by_date: dict[str, list[tuple[str, str]]] = {}
    for key, content_hash in new_or_changed:
        by_date.setdefault(date_of_document_key(key), []).append((key, content_hash))
    requests = []
    for date, docs in sorted(by_date.items(), key=lambda d: min(rank.get(k, len(rank)) for k, _ in d[1])):
        digest = hashlib.sha256("".join(f"{k}@{h}" for k, h in sorted(docs)).encode()).hexdigest()[:16]
        best = min((k for k, _ in docs), key=lambda k: rank.get(k, len(rank)))
        tags = {k: v for k, v in controller_tags.get(best, {}).items() if k == "dagster/priority"}
        scores = sorted(float(controller_tags[k]["karma/cca_score"]) for k, _ in docs
                        if "karma/cca_score" in controller_tags.get(k, {}))
        if scores:  # the day's papers' scores, as a tier's run shows them (scheduling/tiers.py)
            tags["karma/cca_score"] = (f"{scores[0]:.4f}" if scores[0] == scores[-1]
                                       else f"{scores[0]:.4f}..{scores[-1]:.4f}")
        requests.append(dg.RunRequest(partition_key=date, run_key=f"{date}@{digest}", job_name=job_name,
                                      tags={"karma/documents": str(len(docs)), "karma/trigger": "new_papers",
                                            **READING_LANE, **tags}))
    return requests


def controller_tags(
    storage: KarmaStorageResource, keys: list[str], params: ControllerParams | None = None,
    log: Callable[[str], None] | None = None, budget_s: float | None = None,
) -> dict[str, dict[str, str]]:
    """The Central Controller's decision per document as run tags (priority and score), in its order; `log`
    gets a line per document with the formula's inputs (KARMA Eq. 4 + UCB, which utility): the tick's log.

    Ordering is an optimisation: it never blocks new papers. A decision that takes longer than `budget_s` (a cold
    lexicon, a slow `controller:` LLM) finishes in the background and these runs keep the default priority."""
    from karma_dagster.scheduling.plan import decide

    budget_s = CONTROLLER_BUDGET_S if budget_s is None else budget_s
    future: Future = _CONTROLLER.submit(decide, keys, storage.paths(), params=params or ControllerParams())
    try:
        decisions = future.result(timeout=budget_s)
    except FutureTimeout:
        (log or _log.info)(f"controller: no decision within {budget_s:.0f} s (its first decision loads the title "
                           f"lexicon; it goes on in the background): {len(keys)} run(s) keep the default priority")
        return {}
    except Exception as exc:  # noqa: BLE001 - ordering is an optimisation: never block new papers on it
        _log.warning(f"controller unavailable, runs keep the default priority: {exc}")
        return {}
    for d in decisions:
        if log is not None:
            log(f"controller: {d.doc_key}: {d.summary()}")
    return {d.doc_key: d.tags() for d in decisions}


def build_new_papers_sensor(
    job: UnresolvedAssetJobDefinition, namespaces: list[str], interval_s: int = 15
) -> dg.SensorDefinition:
    @dg.sensor(
        name="new_papers",
        job=job,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Registers a document partition for each new paper in the inbox (PDF, JATS XML, PubMed XML, BioC, "
        "PubTator, text) and requests its agent chain; a changed file is requested again; unreadable files are skipped.",
    )
    def new_papers(
        context: dg.SensorEvaluationContext, storage: KarmaStorageResource, karma_params: KarmaParamsResource
    ) -> dg.SensorResult:
        catalog = Catalog(storage.catalog_path())
        previous = json.loads(context.cursor) if context.cursor else {}
        after = previous.get("last_request_seq", 0)
        result = scan_inbox(storage.inbox_dir(), catalog, arrival_date=dt.date.today(), limits=storage.input_limits(),
                            undated=storage.undated_policy(), budget_s=SCAN_BUDGET_S,
                            resume_after=previous.get("resume_after"))
        still_failing = set(previous.get("failed", []))  # the last tick's unreadable files (the cursor keeps them)
        if result.deferred_files:  # the tick's time bound: the next tick goes on from there
            context.log.info(f"inbox scan: {result.deferred_files} file(s) left for the next tick (a tick scans for "
                             f"{SCAN_BUDGET_S:.0f} s at most), going on after {result.resume_after}")
        looked_at = {*result.new_files, *result.changed_files, *result.unchanged_files,
                     *(f.path for f in result.failed)}
        failing = [f.path for f in result.failed] + sorted(p for p in still_failing - looked_at
                                                           if result.deferred_files)
        for failure in result.failed:  # said on the tick a file starts failing, not every 15 s while it stays there
            if failure.path not in still_failing:
                context.log.warning(f"skipped unreadable file: {failure.error}")
        for skipped in result.skipped_undated:
            context.log.info(f"skipped undated document {skipped.source_path}#{skipped.member}: {skipped.reason}")
        retired = [old for old, _ in retire_rekeyed(storage.paths())]  # documents moved to another date
        for plan in remove_deleted_citations(storage.paths()):  # PubMed's <DeleteCitation>: as `karma remove` does
            context.log.info(f"removed {plan.doc_key}: a PubMed file deleted its citation")
            retired.append(plan.doc_key)
        for old, new in result.rekeyed.items():
            context.log.info(f"{old} moved to {new} (its publication date is now known)")
        requested, last_seq = requested_documents(catalog, after, namespaces, storage.stage_store(),
                                                  limit=REQUESTS_PER_TICK)
        cursor = json.dumps({
            "last_request_seq": last_seq, "new_files": result.new_files, "changed_files": result.changed_files,
            "failed": failing, "resume_after": result.resume_after,
        })
        gone = [k for k in retired if storage.partition_mode() == "document"
                and context.instance.has_dynamic_partition(documents_partitions.name, k)]
        deletions = [documents_partitions.build_delete_request(gone)] if gone else []
        if not requested:
            seen = len(result.unchanged_files) + len(result.failed)
            return dg.SensorResult(skip_reason=f"no new or changed papers ({seen} files seen)", cursor=cursor,
                                   dynamic_partitions_requests=deletions or None)
        by_date = storage.partition_mode() == "date"
        tags = controller_tags(storage, sorted({k for k, _ in requested}), karma_params.params().controller,
                               context.log.info)
        return dg.SensorResult(
            run_requests=(plan_date_runs if by_date else plan_runs)(requested, job.name, tags),
            dynamic_partitions_requests=[*deletions, *add_requests(context.instance, {key for key, _ in requested},
                                                                   documents=not by_date)],
            cursor=cursor,
        )

    return new_papers
