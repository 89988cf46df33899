"""The review queue: KARMA's review outcomes and CogMG completions as items, decisions (also from concurrent
reviewers), and the merge of accepted items into the KG with provenance."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing as mp
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from karma_dagster.cogmg.models import Completion, Passage
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.changes import with_changes
from karma_dagster.cogmg.store import CogmgStore
from karma_dagster.review.cogmg_items import accepted_item_ids, collect_cogmg, completion_item_id, items_from_completions
from karma_dagster.review.karma_items import collect_karma
from karma_dagster.review.merge_inputs import chain_docs_from, merge_accepted, pending_dates
from karma_dagster.review.models import DecisionIn
from karma_dagster.review.queue import AlreadyDecided, InvalidEdit, ReviewError, ReviewQueue, UnknownItem
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.schemas.records import ResolvedRow
from karma_dagster.runtime.stage_store import StageStore

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
METFORMIN, T2DM, PITUITARY = "Compound::DB00331", "Disease::DOID:9352", "Anatomy::UBERON:0000007"
METHIMAZOLE, GRAVES = "Compound::DB00763", "Disease::DOID:12361"
DOC = "2016-02-12_pmc4737013"


def resolved_row(tid: str, head: tuple[str, str, str], tail: tuple[str, str, str], label: str, **kw) -> ResolvedRow:
    """A resolved-table row as the chain writes it (the pydantic record its pandera table validates)."""
    sentence = kw.pop("evidence", f"In this cohort {head[1]} was studied together with {tail[1]} over two years.")
    base = dict(doc_key=DOC, triple_id=tid, summary_id=f"{DOC}#sum1", segment_id=f"{DOC}#s3",
                head_mention_id=f"{tid}h", head_id=head[0], head_name=head[1], head_type=head[2], relation=label,
                tail_mention_id=f"{tid}t", tail_id=tail[0], tail_name=tail[1], tail_type=tail[2], probability=0.8,
                evidence=sentence, sample_confidence=0.6, head_kg_type=None, tail_kg_type=None, kg_relation=None,
                metaedge=None, alignment_prob=0.0, schema_status="review", conflict=False, contradicts=None,
                verdict="none", action="review", adjudication="schema review: no KG relation to check")
    base.update(kw)
    return ResolvedRow(**base)


METF = (METFORMIN, "metformin", "Chemical")
DIAB = (T2DM, "type 2 diabetes", "Disease")
PIT = (PITUITARY, "pituitary gland", "Anatomy")


def chain_rows() -> list[ResolvedRow]:
    return [
        # both kinds known, no metaedge between Compound and Anatomy: a new relation type
        resolved_row("t1", METF, PIT, "Association", head_kg_type="Compound", tail_kg_type="Anatomy"),
        # a mapping below the floor: the schema table suggests treats (Negative_Correlation, Compound-Disease)
        resolved_row("t2", DIAB, METF, "Negative_Correlation", head_kg_type="Disease", tail_kg_type="Compound",
                     alignment_prob=0.2, evidence="Metformin lowered HbA1c in type 2 diabetes patients."),
        # the debate could not settle: causes vs the seed's treats
        resolved_row("t3", METF, DIAB, "Positive_Correlation", head_kg_type="Compound", tail_kg_type="Disease",
                     kg_relation="causes", metaedge="CcD", alignment_prob=0.9, schema_status="aligned",
                     conflict=True, contradicts=f"{METFORMIN} -treats-> {T2DM}", verdict="contradict", action="review",
                     against="kg", against_confidence=0.9, debate_confidence=0.5,
                     adjudication="too close to call", argument_for="lactic acidosis cases",
                     debate_transcript=json.dumps([
                         {"round": 1, "side": "new", "argument": "Two cases worsened on metformin."},
                         {"round": 1, "side": "existing", "argument": "The seed states treats at 0.9."}]),
                     evidence="Metformin was associated with worsening type 2 diabetes in two cases."),
        # kept: not for review
        resolved_row("t4", METF, DIAB, "Negative_Correlation", head_kg_type="Compound", tail_kg_type="Disease",
                     kg_relation="treats", metaedge="CtD", alignment_prob=0.9, schema_status="aligned", action="keep",
                     adjudication=None),
    ]


@pytest.fixture(scope="module")
def seed_kg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("review-seed") / "kg.duckdb"
    import_hetionet(KGStore(path), SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    return path


@pytest.fixture
def paths(tmp_path: Path, seed_kg: Path) -> DataPaths:
    data = DataPaths(tmp_path / "karma")
    data.root.mkdir(parents=True)
    shutil.copy(seed_kg, data.kg)
    StageStore(data.stages_dir).write("local", "resolved", DOC, records_to_frame(chain_rows(), ResolvedRow))
    return data


def filled_queue(paths: DataPaths) -> ReviewQueue:
    queue = ReviewQueue.for_data(paths)
    queue.add_items(with_changes(collect_karma(paths, KGSchema.load()), paths.kg))
    return queue


def by_source(queue: ReviewQueue) -> dict:
    return {i.source: i for i, _ in queue.items(status="all")}


# ---------------------------------------------------------------- collecting
def test_karma_review_outcomes_become_items(paths: DataPaths) -> None:
    queue = filled_queue(paths)
    items = by_source(queue)
    assert sorted(items) == ["new_relation_type", "schema_review", "unresolved_conflict"]  # the kept row is not asked

    new_type = items["new_relation_type"]
    assert (new_type.relation, new_type.head_kind, new_type.tail_kind) == ("Association", "Compound", "Anatomy")
    assert new_type.change.startswith("adds relation type 'Association' (Compound -> Anatomy) to the schema")

    schema = items["schema_review"]  # oriented as the suggested metaedge runs: Compound -treats-> Disease
    assert (schema.head_id, schema.relation, schema.tail_id) == (METFORMIN, "treats", T2DM)
    # the seed's 0.9 is a prior worth half a paper: max(0.9, 1 - sqrt(0.1) * 0.4) = 0.9 (was 1 - 0.1 * 0.4 = 0.96)
    assert schema.change == "reinforces edge (score 0.90 → 0.90)"
    assert "below the floor" in schema.note and schema.extracted_relation == "Negative_Correlation"
    ev = schema.evidence[0]
    assert [(ev.text[s.start:s.end], s.label) for s in ev.spans] == [("Metformin", "head"), ("type 2 diabetes", "tail")]

    conflict = items["unresolved_conflict"]
    assert (conflict.relation, conflict.contradicts) == ("causes", f"{METFORMIN} -treats-> {T2DM}")
    assert conflict.change == f"new edge (score 0.60); supersedes edge {METFORMIN} -treats-> {T2DM}"
    assert conflict.scores["debate_confidence"] == 0.5 and "lactic acidosis" in conflict.note
    # the advocates' turns, in order, for the reviewer
    assert conflict.note.endswith(" | round 1 for the new triple: Two cases worsened on metformin. | round 1 for the "
                                  "KG: The seed states treats at 0.9.")
    assert (conflict.origin, conflict.stage, conflict.backbone) == (DOC, "resolved", "local")

    # collecting again finds the same items (stable ids): refreshed, nothing new
    again = queue.add_items(with_changes(collect_karma(paths, KGSchema.load()), paths.kg))
    assert again == {"new": 0, "folded": 0, "refreshed": 3, "decided_kept": 0}


def completion(question_id: str = "sample_biomed.v1__q07", supported: bool = True, score: float = 0.74) -> Completion:
    text = "Methimazole is the first-line treatment of Graves disease in adults, reducing thyroid hormone levels."
    return Completion(
        question_id=question_id, question="Which drug treats Graves disease?", backbone="local",
        head_id=METHIMAZOLE, head_name="Methimazole", relation="treats", tail_id=GRAVES, tail_name="Graves disease",
        method="passage_re", supported=supported, score=score, evidence_doc_keys=["2016-02-12_pmc4737013"],
        passages=[Passage(passage_id="p12", doc_key="2016-02-12_pmc4737013", text=text, score=7.25,
                          entities=["thyroid hormone"])])


def test_cogmg_completions_become_items(paths: DataPaths) -> None:
    items = items_from_completions([completion(score=0.5), completion(score=0.74)])  # one triple, the better one
    assert len(items) == 1
    (item,) = with_changes(items, paths.kg)
    assert (item.source, item.origin, item.agent, item.stage) == ("cogmg", "sample_biomed.v1__q07", "cogmg:passage_re",
                                                                  "completions")
    assert item.score == 0.74 and item.scores["best_passage_bm25"] == 7.25 and item.scores["supported"] == 1.0
    assert "supported by 2016-02-12_pmc4737013" in item.note
    marked = {(item.evidence[0].text[s.start:s.end], s.label) for s in item.evidence[0].spans}
    assert marked == {("Methimazole", "head"), ("Graves disease", "tail"), ("thyroid hormone", "entity")}
    with KGStore(paths.kg).connect(read_only=True) as con:  # the change text follows the KG
        held = con.execute("SELECT count(*) FROM kg_edges('local') WHERE head_id = ? AND tail_id = ?",
                           [METHIMAZOLE, GRAVES]).fetchone()[0]
    assert item.change.startswith("reinforces edge" if held else "new edge (score 0.74)")


def test_completions_the_asset_wrote_are_collected_under_their_partition(paths: DataPaths) -> None:
    key = "sample_biomed.v1__q07"
    CogmgStore(paths).write_completions("local", key, [completion(question_id="q07")])
    (item,) = collect_cogmg(paths)
    assert (item.origin, item.backbone, item.item_id) == (key, "local", completion_item_id(completion("q07"), key))
    queue = ReviewQueue.for_data(paths)
    assert queue.add_items([item]) == {"new": 1, "folded": 0, "refreshed": 0, "decided_kept": 0}
    assert accepted_item_ids(queue) == set()
    queue.decide(item.item_id, DecisionIn(action="accept", reviewer="alice"))
    assert accepted_item_ids(queue) == {item.item_id}  # what the benchmark's "after review" counts


# ---------------------------------------------------------------- decisions
def test_decisions_bad_input_changes_nothing(paths: DataPaths) -> None:
    queue = filled_queue(paths)
    conflict = by_source(queue)["unresolved_conflict"]
    with pytest.raises(UnknownItem, match="no review item 'nope' in the queue: nothing was written"):
        queue.decide("nope", DecisionIn(action="accept", reviewer="alice"))
    with pytest.raises(ValidationError, match="reviewer name is empty"):
        DecisionIn(action="accept", reviewer="   ")
    with pytest.raises(InvalidEdit, match="'heals' is not a KG schema relation"):
        queue.decide(conflict.item_id, DecisionIn(action="edit", reviewer="alice", edits={"relation": "heals"}))
    with pytest.raises(InvalidEdit, match="changes nothing"):
        queue.decide(conflict.item_id, DecisionIn(action="edit", reviewer="alice", edits={"relation": "causes"}))
    assert queue.decision(conflict.item_id) is None and queue.decision("nope") is None

    first = queue.decide(conflict.item_id, DecisionIn(action="reject", reviewer="alice"))
    with pytest.raises(AlreadyDecided, match=r"already decided \(reject\) by alice at .* nothing was changed"):
        queue.decide(conflict.item_id, DecisionIn(action="accept", reviewer="bob"))
    assert queue.decision(conflict.item_id) == first
    assert conflict.item_id not in {i.item_id for i, _ in queue.items()}  # pending no more


def _decide_in_process(db: str, item_id: str, reviewer: str, start, results) -> None:
    start.wait()
    try:
        ReviewQueue(db).decide(item_id, DecisionIn(action="accept", reviewer=reviewer))
        results.put((reviewer, "stored"))
    except AlreadyDecided as exc:
        results.put((reviewer, str(exc)))


def test_two_reviewers_at_once_never_lose_a_decision(paths: DataPaths) -> None:
    queue = filled_queue(paths)
    ids = sorted(i.item_id for i, _ in queue.items())
    ctx = mp.get_context("fork")  # the children only open the SQLite file; spawn would re-import the test module
    start, results = ctx.Event(), ctx.Queue()
    # four processes on one item, and one process per other item, released together
    jobs = [(ids[0], f"r{k}") for k in range(4)] + [(i, f"other{k}") for k, i in enumerate(ids[1:])]
    procs = [ctx.Process(target=_decide_in_process, args=(str(queue.path), i, who, start, results)) for i, who in jobs]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    outcome = dict(results.get(timeout=5) for _ in procs)
    same = {who: outcome[who] for who in ("r0", "r1", "r2", "r3")}
    winners = [who for who, what in same.items() if what == "stored"]
    assert len(winners) == 1
    assert all(f"already decided (accept) by {winners[0]}" in what for who, what in same.items() if who != winners[0])
    assert queue.decision(ids[0]).reviewer == winners[0]
    assert all(outcome[f"other{k}"] == "stored" for k in range(len(ids) - 1))
    assert {queue.decision(i).reviewer for i in ids[1:]} == {f"other{k}" for k in range(len(ids) - 1)}

    # threads of one process (one web server): the same guarantee
    fresh = queue.add_items(items_from_completions([completion()]))
    assert fresh["new"] == 1
    (cogmg,) = [i for i, _ in queue.items(source="cogmg")]
    barrier, stored, refused = threading.Barrier(6), [], []

    def decide(who: str) -> None:
        barrier.wait()
        try:
            stored.append(ReviewQueue(queue.path).decide(cogmg.item_id, DecisionIn(action="reject", reviewer=who)))
        except AlreadyDecided:
            refused.append(who)

    threads = [threading.Thread(target=decide, args=(f"t{k}",)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stored) == 1 and len(refused) == 5 and queue.decision(cogmg.item_id) == stored[0]


def test_a_reader_meeting_a_queue_file_another_process_is_creating_gets_its_tables(paths: DataPaths) -> None:
    """sqlite3.connect creates the file before the writer's DDL runs; a reader in another process that came then
    failed with "no such table: items" (four KG increments merging at once, tests/reliability/test_concurrency.py).
    """
    path = paths.root / "review" / "queue.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    sqlite3.connect(path).close()  # the file as the other process's connect leaves it, its tables not yet made
    assert path.stat().st_size == 0
    queue = ReviewQueue(path)
    assert queue.items(status="all") == [] and queue.accepted() == []
    assert queue.add_items(items_from_completions([completion()]))["new"] == 1
    assert len(ReviewQueue(path).items()) == 1


# ---------------------------------------------------------------- the merge
def edges(kg: Path, head: str, tail: str) -> dict[str, float]:
    with KGStore(kg).connect(read_only=True) as con:
        return dict(con.execute("SELECT relation, confidence FROM kg_edges('local') WHERE head_id = ? AND tail_id = ?",
                                [head, tail]).fetchall())


def test_accepted_items_enter_the_kg_with_provenance_once(paths: DataPaths) -> None:
    queue = filled_queue(paths)
    items = by_source(queue)
    queue.add_items(with_changes(items_from_completions([completion()]), paths.kg))
    cogmg = by_source(queue)["cogmg"]
    queue.decide(items["unresolved_conflict"].item_id, DecisionIn(action="accept", reviewer="alice"))
    queue.decide(items["new_relation_type"].item_id, DecisionIn(action="accept", reviewer="alice"))
    queue.decide(items["schema_review"].item_id, DecisionIn(action="reject", reviewer="bob"))
    queue.decide(cogmg.item_id, DecisionIn(action="edit", reviewer="carol", edits={"tail_name": "Graves' disease"}))
    today = dt.datetime.now(dt.UTC).date()
    assert pending_dates(queue) == {"local": {today}}
    assert edges(paths.kg, METFORMIN, T2DM) == {"treats": pytest.approx(0.9)}

    outcomes = merge_accepted(paths.kg, queue, chain_docs=chain_docs_from(paths), run_id="review-test")
    assert [(o.namespace, o.date, sorted(o.items)) for o in outcomes] == [
        ("local", today, sorted([items["unresolved_conflict"].item_id, cogmg.item_id]))]
    stats = outcomes[0].stats
    assert (stats.n_docs, stats.n_evidence, stats.n_superseded) == (2, 2, 1)

    # the conflict item won: causes enters, the seed's treats is superseded from today on (kept in history)
    assert edges(paths.kg, METFORMIN, T2DM) == {"causes": pytest.approx(0.6)}
    with KGStore(paths.kg).connect(read_only=True) as con:
        rows = con.execute("SELECT relation, tail_id, prompt_version, evidence, date FROM evidence WHERE doc_key LIKE "
                           "'review_%' ORDER BY relation").fetchall()
        before = con.execute("SELECT relation FROM kg_edges('local', as_of := ?) WHERE head_id = ? AND tail_id = ?",
                             [today - dt.timedelta(days=1), METFORMIN, T2DM]).fetchall()
    assert rows == [
        ("causes", T2DM, "reviewed by alice via unresolved_conflict",
         "Metformin was associated with worsening type 2 diabetes in two cases.", today),
        ("treats", GRAVES, "reviewed by carol via cogmg", "Methimazole is the first-line treatment of Graves disease "
         "in adults, reducing thyroid hormone levels.", today),
    ]
    assert before == [("treats",)]  # the past's view is unchanged
    assert "treats" in edges(paths.kg, METHIMAZOLE, GRAVES)

    # recorded merged; the new relation type joined the KG's schema extensions and its triple waits for a
    # metaedge, saying so; the rejected one never enters
    assert queue.decision(cogmg.item_id).merge_date == today
    waiting = queue.decision(items["new_relation_type"].item_id)
    assert waiting.merged_at is None and waiting.choice == "extension"
    assert "'Association' (Compound -> Anatomy) was added to the schema's extensions of local" in waiting.merge_note
    assert "refused by admission rule metaedge" in waiting.merge_note
    assert [(r["label"], r["domain"], r["range"], r["caller"]) for r in KGStore(paths.kg).schema_extension("local")] \
        == [("Association", "Compound", "Anatomy", "review:alice")]
    assert merge_accepted(paths.kg, queue, chain_docs=chain_docs_from(paths)) == []  # idempotent
    with KGStore(paths.kg).connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM evidence WHERE doc_key LIKE 'review_%'").fetchone()[0] == 2


def test_merge_never_drops_the_chain_increment_of_its_date(paths: DataPaths) -> None:
    queue = filled_queue(paths)
    queue.decide(by_source(queue)["unresolved_conflict"].item_id, DecisionIn(action="accept", reviewer="alice"))
    today = dt.datetime.now(dt.UTC).date()
    chain_row = {"doc_key": "chain-doc", "triple_id": "c1", "head_id": METHIMAZOLE, "relation": "treats",
                 "tail_id": GRAVES, "metaedge": "CtD", "score": 0.7, "segment_id": "chain-doc#s1", "accepted": True,
                 "evidence": "Methimazole treats Graves disease.", "prompt_version": "local-chain-v2"}
    merge_increment(KGStore(paths.kg), today, "local", {"chain-doc": ([chain_row], [])}, "chain-run")
    with pytest.raises(ReviewError, match=f"KG date {today} of 'local' holds the chain's documents \\(chain-doc\\)"):
        merge_accepted(paths.kg, queue)  # no chain documents given: it would drop their increment row
    assert queue.accepted(unmerged_only=True)  # still waiting, nothing written
    with KGStore(paths.kg).connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM evidence WHERE doc_key LIKE 'review_%'").fetchone()[0] == 0

    kept = {"chain-doc": ([chain_row], [])}
    (outcome,) = merge_accepted(paths.kg, queue, chain_docs=lambda ns, day: kept if day == today else {})
    assert outcome.stats.n_docs == 2
    with KGStore(paths.kg).connect(read_only=True) as con:
        assert sorted(r[0] for r in con.execute("SELECT doc_key FROM evidence WHERE date = ?", [today]).fetchall())[0] \
            == "chain-doc"
        assert con.execute("SELECT n_docs FROM increments WHERE namespace = 'local' AND date = ?",
                           [today]).fetchone()[0] == 2


def test_merge_with_the_data_paths_carries_the_chain_documents_of_its_date(paths: DataPaths) -> None:
    """`karma review --merge`: the day's chain documents (catalog + evaluated tables) are merged again with the
    reviewed ones, keeping the prompt version their evidence had."""
    from karma_dagster.agents.integration import collect_document
    from karma_dagster.ingest.catalog import Catalog
    from karma_dagster.schemas.records import EvaluatedRow, MentionRow, ParsedDocument, RawSection

    today = dt.datetime.now(dt.UTC).date()
    (reg,) = Catalog(paths.catalog).register([ParsedDocument(
        source_path="note.txt", source_format="text", title="Methimazole in Graves disease", pub_date=today,
        sections=[RawSection(text="Methimazole treats Graves disease.")])], arrival_date=today)
    key = reg.doc_key
    row = resolved_row("c1", (METHIMAZOLE, "Methimazole", "Chemical"), (GRAVES, "Graves disease", "Disease"),
                       "Negative_Correlation", doc_key=key, segment_id=f"{key}#s1", summary_id=f"{key}#sum1",
                       head_kg_type="Compound", tail_kg_type="Disease", kg_relation="treats", metaedge="CtD",
                       alignment_prob=0.9, schema_status="aligned", action="keep", adjudication=None,
                       evidence="Methimazole treats Graves disease.")
    evaluated = EvaluatedRow(**row.model_dump(), confidence=0.8, clarity=0.8, relevance=0.8, score=0.8, accepted=True)
    mentions = [MentionRow(doc_key=key, mention_id=f"c1{end}", summary_id=f"{key}#sum1", segment_id=f"{key}#s1",
                           start=0, end=5, text=name, long_form=None, type=typ, vocab_id=None, entity_id=node,
                           kg_id=node, kg_name=name, distance=0.0, status="linked", kind=kind, linked_to="seed")
                for end, node, name, typ, kind in (("h", METHIMAZOLE, "Methimazole", "Chemical", "Compound"),
                                                   ("t", GRAVES, "Graves disease", "Disease", "Disease"))]
    stages = StageStore(paths.stages_dir)
    stages.write("local", "evaluated", key, records_to_frame([evaluated], EvaluatedRow))
    stages.write("local", "entities", key, records_to_frame(mentions, MentionRow))
    chain = {key: collect_document(key, stages.read("local", "evaluated", key), stages.read("local", "entities", key),
                                   "local-chain-v2")}
    merge_increment(KGStore(paths.kg), today, "local", chain, "chain-run")  # what the day's increment asset did

    queue = filled_queue(paths)
    queue.decide(by_source(queue)["unresolved_conflict"].item_id, DecisionIn(action="accept", reviewer="alice"))
    (outcome,) = merge_accepted(paths.kg, queue, chain_docs=chain_docs_from(paths))
    assert outcome.stats.n_docs == 2
    with KGStore(paths.kg).connect(read_only=True) as con:
        rows = con.execute("SELECT doc_key, prompt_version FROM evidence WHERE date = ? ORDER BY doc_key",
                           [today]).fetchall()
    assert rows[0] == (key, "local-chain-v2") and rows[1][1] == "reviewed by alice via unresolved_conflict"
