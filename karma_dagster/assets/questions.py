"""CogMG in Dagster: per backbone, `<backbone>/answers` and `<backbone>/completions` partitioned by question, and
`qa_benchmark` (the three hit rates per backbone). The logic is karma_dagster/cogmg/ (Dagster-free).

One partition per question (`<set>.v<N>__<id>`, registered by the `questions` sensor): measured to hold at
10,000 questions (see the report of issue 13); backfills batch up to QUESTIONS_PER_RUN questions per run, so the
models and the BM25 index load once per batch.
"""

import dagster as dg
from pydantic import Field

from karma_dagster.assets.chain import backbone_group, kg_key
from karma_dagster.cogmg.answer import answer_question
from karma_dagster.cogmg.benchmark import BenchmarkRow, benchmark, markdown
from karma_dagster.cogmg.models import Completion
from karma_dagster.cogmg.pipeline import complete_answer
from karma_dagster.cogmg.questions import load_all, question_key, split_key
from karma_dagster.cogmg.store import CogmgStore
from karma_dagster.resources.backbones import BackbonesResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.review.cogmg_items import accepted_item_ids, completion_item_id
from karma_dagster.review.queue import ReviewQueue

QUESTIONS = "questions"
QUESTIONS_PER_RUN = 50
questions_partitions = dg.DynamicPartitionsDefinition(name=QUESTIONS)


def _questions_by_key() -> dict:
    return {question_key(qs.key, q.id): q for qs in load_all() for q in qs.questions}


def _llm(backbones: BackbonesResource, storage: KarmaStorageResource, ns: str):  # noqa: ANN202
    """The LLM backbone whose client and prompts CogMG asks through (None on a local backbone)."""
    if backbones.settings(ns).kind == "local":
        return None
    built = backbones.get(ns, storage)
    return getattr(built, "base", built)  # the single-agent wrapper keeps the LLM backbone as `base`


def _answers(ns: str) -> dg.AssetsDefinition:
    @dg.asset(
        key=[ns, "answers"],
        group_name=backbone_group(ns),
        partitions_def=questions_partitions,
        backfill_policy=dg.BackfillPolicy.multi_run(QUESTIONS_PER_RUN),
        deps=[dg.AssetDep(kg_key(ns), partition_mapping=dg.AllPartitionMapping())],
        kinds={"python", "duckdb"},
        tags={"karma/stage": "cogmg_answers"},
        description=f"CogMG answering on {ns}: each question decomposed into query steps (schema relations), run "
                    f"over {ns}'s KG; a hit gives the answer with triples and provenance, a miss the missing triples.",
    )
    def answers(context: dg.AssetExecutionContext, storage: KarmaStorageResource,
                backbones: BackbonesResource) -> dg.MaterializeResult:
        data, settings = storage.paths(), backbones.settings(ns)
        llm_backbone, store, questions = _llm(backbones, storage, ns), CogmgStore(data), _questions_by_key()
        hits, misses, unplanned = [], [], []
        for key in context.partition_keys:
            if key not in questions:
                raise ValueError(f"question partition {key!r} has no question in data/questions/ (file removed?)")
            q = questions[key]
            a = answer_question(q.question, backbone=ns, settings=settings, data=data, question_id=q.id,
                                llm_backbone=llm_backbone)  # "not understood" is an answer: error says why
            store.write_answer(key, a)
            (hits if a.hit else unplanned if a.error else misses).append(key)
            context.log.info(f"{key}: {'HIT ' + ', '.join(a.answers[:5]) if a.hit else 'MISS ' + (a.error or str([m.model_dump(include={'head', 'relation', 'tail'}) for m in a.missing]))}")
        return dg.MaterializeResult(metadata={"questions": len(context.partition_keys), "hits": len(hits),
                                              "misses": len(misses), "no_plan": len(unplanned)})

    return answers


def _completions(ns: str) -> dg.AssetsDefinition:
    @dg.asset(
        key=[ns, "completions"],
        group_name=backbone_group(ns),
        partitions_def=questions_partitions,
        backfill_policy=dg.BackfillPolicy.multi_run(QUESTIONS_PER_RUN),
        deps=[dg.AssetKey([ns, "answers"])],
        kinds={"python"},
        tags={"karma/stage": "cogmg_completions"},
        description=f"CogMG completion on {ns}: the missing triples filled (the chain's unaccepted candidates and "
                    "relation extraction over retrieved passages, or the LLM) and verified by BM25 over ~256-token "
                    "passages of the ingested papers; they wait for review.",
    )
    def completions(context: dg.AssetExecutionContext, storage: KarmaStorageResource,
                    backbones: BackbonesResource) -> dg.MaterializeResult:
        data, settings = storage.paths(), backbones.settings(ns)
        llm_backbone, store = _llm(backbones, storage, ns), CogmgStore(data)
        total = supported = 0
        lines = ["| question | triple | method | supported | score |", "|---|---|---|---|---|"]
        for key in context.partition_keys:
            found = complete_answer(store.read_answer(ns, key), settings=settings, data=data,
                                    llm_backbone=llm_backbone)
            store.write_completions(ns, key, found)
            total, supported = total + len(found), supported + sum(c.supported for c in found)
            lines += [f"| {split_key(key)[1]} | {c.head_name} -{c.relation}-> {c.tail_name} | {c.method} | "
                      f"{c.supported} | {c.score:.2f} |" for c in found[:5]]
        return dg.MaterializeResult(metadata={"questions": len(context.partition_keys), "completions": total,
                                              "supported": supported,
                                              "preview": dg.MetadataValue.md("\n".join(lines[:52]))})

    return completions


class QABenchmarkConfig(dg.Config):
    assume_supported_accepted: bool = Field(
        False, description="'after review' counts every supported completion as accepted (the best review could "
                           "reach); default: the completions a reviewer accepted in the review queue (`karma review`)")


def _benchmark(namespaces: list[str]) -> dg.AssetsDefinition:
    @dg.asset(
        key="qa_benchmark",
        group_name="comparison",
        deps=[dg.AssetDep(dg.AssetKey([ns, "completions"]), partition_mapping=dg.AllPartitionMapping())
              for ns in namespaces],
        kinds={"python"},
        description="CogMG's QA benchmark per backbone and question set: hit rate before completion, after "
                    "completion (unreviewed completions as if in the KG) and after review (accepted ones only).",
    )
    def qa_benchmark(context: dg.AssetExecutionContext, config: QABenchmarkConfig,
                     storage: KarmaStorageResource) -> dg.MaterializeResult:
        data, store = storage.paths(), CogmgStore(storage.paths())
        reviewed = accepted_item_ids(ReviewQueue.for_data(data))
        rows: list[BenchmarkRow] = []
        for qs in load_all():
            for ns in namespaces:
                done = set(store.keys(ns, "answers"))
                answers = {q.id: store.read_answer(ns, question_key(qs.key, q.id)) for q in qs.questions
                           if question_key(qs.key, q.id) in done}
                if not answers:
                    context.log.info(f"{ns}: no answers for {qs.key} yet: skipped")
                    continue
                completions = {q.id: store.read_completions(ns, question_key(qs.key, q.id)) for q in qs.questions}
                def accepted(c: Completion, set_key: str = qs.key) -> bool:
                    if config.assume_supported_accepted:
                        return c.supported
                    return completion_item_id(c, question_key(set_key, c.question_id)) in reviewed

                rows.append(benchmark(ns, qs.key, qs.questions, data, answers, completions, accepted=accepted))
        table = markdown(rows)
        context.log.info("\n" + table)
        metadata: dict[str, object] = {"table": dg.MetadataValue.md(table),
                                       "rows": dg.MetadataValue.json([r.model_dump(exclude={"per_question"})
                                                                      for r in rows])}
        for r in rows:
            for field in ("hit_before", "hit_after_completion", "hit_after_review"):
                metadata[f"{r.backbone}/{r.question_set}/{field}"] = getattr(r, field)
        return dg.MaterializeResult(metadata=metadata)

    return qa_benchmark


def question_assets(namespaces: list[str]) -> list:
    """`<ns>/answers` and `<ns>/completions` per backbone namespace, and `qa_benchmark` over them."""
    return [a for ns in namespaces for a in (_answers(ns), _completions(ns))] + [_benchmark(namespaces)]
