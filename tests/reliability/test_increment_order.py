"""The KG keeps its dates in order whatever order the increments run in: a date that merges after later dates were
merged (Dagster's queue runs date partitions in any order) withdraws them and merges them again after itself, so
the KG (edges, confidence, evidence rows, new entities, increment sizes) equals the merge of its dates in ascending
order. Through the KG increment asset on the sample papers, and at the store on both KG stores."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import dagster as dg
import pytest
from reliability_helpers import kg_state

from karma_dagster import runner
from karma_dagster.assets.chain import kg_key
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.store import KGStore, NodeIn
from kg_backends import KGBackend, kg_backend, kg_dump_any, location_of  # noqa: F401 - fixtures

PAPERS = ("PMC4736972.pdf", "PMC4736972.json", "PMC4737013.pdf", "PMC4737013.json")  # 2016-01-10, 2016-01-11
JAN10, JAN11 = "2016-01-10", "2016-01-11"


def _evaluated(p) -> None:
    """The seed and both papers' chains, no increment merged yet (what the sensor's document runs leave)."""
    assert runner.import_kg(p.defs, p.instance)
    keys, failed = runner.register_inbox(p.defs, p.instance)
    assert sorted(k[:10] for k in keys) == [JAN10, JAN11] and not failed
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)


def _merge(p, date: str) -> dict:
    """One KG increment run of `date`, as a queued run of the partition does; its metadata."""
    kg = p.defs.resolve_assets_def(kg_key("local"))
    result = dg.materialize([kg], partition_key=date, instance=p.instance, selection=[kg_key("local")])
    assert result.success
    (mat,) = result.asset_materializations_for_node(kg.node_def.name)
    return {k: v.value for k, v in mat.metadata.items()}


def test_an_earlier_date_merged_after_a_later_one_leaves_the_kg_of_the_in_order_merge(make_pipeline):
    p = make_pipeline(inbox_files=PAPERS)
    _evaluated(p)
    kg_file = p.storage.kg_path()
    unmerged, wal = kg_file.with_name("unmerged.duckdb"), kg_file.with_name(kg_file.name + ".wal")
    assert not wal.exists()  # every connection closed: the file is the whole KG
    shutil.copy(kg_file, unmerged)  # the seed and nothing merged: both orders start from it

    ordered = [_merge(p, JAN10), _merge(p, JAN11)]
    want = kg_state(kg_file)
    assert not wal.exists()
    shutil.copy(unmerged, kg_file)
    late = [_merge(p, JAN11), _merge(p, JAN10)]  # the later date leaves the queue first
    got = kg_state(kg_file)

    assert want["evidence"] and {r[2] for r in want["evidence"]} == {dt.date(2016, 1, 10), dt.date(2016, 1, 11)}
    for part in ("edges", "evidence", "extracted_nodes", "increments", "n_nodes", "merged_documents"):
        assert got[part] == want[part], part  # confidence is in "edges"; increment sizes in "increments"
    assert [m["merged_dates"] for m in ordered] == [[JAN10], [JAN11]]
    assert [m["merged_dates"] for m in late] == [[JAN11], [JAN10, JAN11]] and late[1]["remerged_dates"] == [JAN11]
    # a third run of the earlier date changes nothing: the later one is merged again, identically
    assert _merge(p, JAN10)["merged_dates"] == [JAN10, JAN11]
    assert kg_state(kg_file) == want


# ---------------------------------------------------------------- at the store, on both KG stores
DISEASE = "Disease::DOID:9352"  # type 2 diabetes (seed)
HYPERTENSION, GESTATIONAL_DIABETES = "Disease::DOID:10763", "Disease::DOID:11714"  # shipped seed nodes
SEED = Path(__file__).resolve().parents[2] / "data" / "seed_kg"
D10, D11, D14 = dt.date(2016, 1, 10), dt.date(2016, 1, 11), dt.date(2016, 1, 14)


def _doc(key: str, node_id: str, name: str, score: float) -> tuple[list[dict], list[NodeIn]]:
    """A paper naming a new compound that treats type 2 diabetes (the papers name one entity: one vocabulary id)."""
    row = {"doc_key": key, "triple_id": "t1", "head_id": node_id, "relation": "Negative_Correlation",
           "kg_relation": "treats", "tail_id": DISEASE, "metaedge": "CtD", "score": score,
           "segment_id": f"{key}#s1", "accepted": True, "evidence": f"{name} lowered HbA1c in type 2 diabetes."}
    return [row], [NodeIn(id=node_id, name=name, kind="Compound", vocab_id="MESH:C999001")]


DAYS = {  # the same entity first named on the 10th under another id: in date order its node is the 10th's
    D10: {"2016-01-10_a": _doc("2016-01-10_a", "new::Compound::zetamab-a", "zetamab", 0.6)},
    D11: {"2016-01-11_b": _doc("2016-01-11_b", "new::Compound::zetamab-b", "Zetamab", 0.7)},
    D14: {"2016-01-14_c": _doc("2016-01-14_c", "new::Compound::zetamab-c", "ZETAMAB", 0.8)},
}


@pytest.fixture(scope="module")
def seeded(kg_backend: KGBackend) -> KGStore:  # noqa: F811 - the fixture
    store = kg_backend.new("order_seed")
    with store.connect() as con:  # a tiny seed: the disease alone
        con.execute("INSERT INTO seed_nodes VALUES (?, ?, ?, ?)", [DISEASE, "type 2 diabetes", "Disease", None])
    return store


def _merge_dates(store: KGStore, dates: list[dt.date], run: str) -> list[dt.date]:
    """Each group of dates as one run of the asset would: earliest first, withdrawn later dates merged again."""
    from karma_dagster.kg import day_order
    def one(day: dt.date) -> list[dt.date]:
        return merge_increment(store, day, "local", DAYS[day], run, withdraw_later=True).withdrawn

    return day_order.merge_in_order(dates, one)


@pytest.mark.parametrize("runs", [[[D11], [D10]], [[D14], [D10, D11]], [[D14], [D11], [D10]], [[D11, D14], [D10]]])
def test_any_order_of_runs_gives_the_in_order_kg(kg_backend: KGBackend, seeded: KGStore, runs) -> None:  # noqa: F811
    want_store = kg_backend.copy(seeded, "in_order")
    _merge_dates(want_store, sorted({d for run in runs for d in run}), "r")
    got_store = kg_backend.copy(seeded, "out_of_order")
    orders = [_merge_dates(got_store, run, "r") for run in runs]
    got, want = kg_dump_any(location_of(got_store)), kg_dump_any(location_of(want_store))
    assert got == want
    assert orders[-1] == sorted({d for run in runs for d in run if d >= min(runs[-1])})  # the later dates again
    heads = {r[4] for r in want["evidence"]}
    assert heads == {"new::Compound::zetamab-a"}, "one node per entity: the earliest date's"


def test_withdrawing_a_date_removes_exactly_its_rows(kg_backend: KGBackend, seeded: KGStore) -> None:  # noqa: F811
    from karma_dagster.kg import day_order

    store = kg_backend.copy(seeded, "withdraw")
    _merge_dates(store, [D10], "r")
    before = kg_dump_any(location_of(store))
    _merge_dates(store, [D11], "r")
    with store.connect() as con:
        assert day_order.merged_dates(con, "local") == [D10, D11]
        assert day_order.later_merged(con, "local", D10) == [D11]
        removed = day_order.withdraw(con, "local", [D11])
        assert day_order.merged_dates(con, "local") == [D10]
    assert removed["evidence"] == 1 and removed["increments"] == 1 and removed["merged_documents"] == 1
    assert kg_dump_any(location_of(store)) == before


def test_merge_in_order_refuses_a_withdrawal_that_is_not_later() -> None:
    from karma_dagster.kg import day_order

    with pytest.raises(ValueError, match="not after it"):
        day_order.merge_in_order([D11], lambda day: [D10])


# ---------------------------------------------------------------- every merge path keeps the order
def _review_item(day_doc: str):
    """An accepted-to-be review item naming zetamab as a new Compound that treats type 2 diabetes."""
    from karma_dagster.review.models import Evidence, ReviewItem, item_id

    head = "new::Compound::zetamab-r"
    return ReviewItem(
        item_id=item_id("held_back", "local", head, "treats", DISEASE, day_doc), source="held_back",
        backbone="local", head_id=head, head_name="zetamab", head_kind="Compound", relation="treats",
        tail_id=DISEASE, tail_name="type 2 diabetes", tail_kind="Disease", origin=day_doc, agent="test",
        stage="evaluated", evidence=[Evidence(text="Zetamab lowered HbA1c in type 2 diabetes.")], score=0.6,
        change="new edge")


def test_karma_review_merge_of_an_older_decision_gives_the_in_order_kg(kg_backend: KGBackend, seeded: KGStore,
                                                                       tmp_path) -> None:  # noqa: F811
    """A decision dated the 10th merged by `karma review --merge` after the 14th's increment: the 14th is withdrawn
    and merged again after it, so the KG (evidence, nodes, the 14th's increment sizes) is the in-order one."""
    from karma_dagster.review.merge_inputs import merge_accepted
    from karma_dagster.review.models import DecisionIn
    from karma_dagster.review.queue import ReviewQueue

    chain = {D14: DAYS[D14]}

    def chain_docs(_ns: str, day: dt.date) -> dict:
        return chain.get(day, {})

    dumps, outcomes = [], []
    for order in ("in order", "decision last"):
        store = kg_backend.copy(seeded, order)
        queue = ReviewQueue(tmp_path / f"{order}.sqlite")
        item = _review_item("2016-01-10_r")
        queue.add_items([item])
        queue.decide(item.item_id, DecisionIn(action="accept", reviewer="alice"),
                     now=dt.datetime.combine(D10, dt.time(12)))
        steps = [lambda: outcomes.append(merge_accepted(location_of(store), queue, chain_docs=chain_docs,
                                                        run_id="r")),
                 lambda: merge_increment(store, D14, "local", DAYS[D14], "r", withdraw_later=True)]
        for step in steps if order == "in order" else steps[::-1]:
            step()
        dumps.append(kg_dump_any(location_of(store)))
    in_order, late = dumps
    assert late == in_order, [k for k in late if late[k] != in_order[k]]
    sizes = {r[1]: r for r in in_order["increments"]}
    assert set(sizes) == {D10, D14}  # the 14th's increment counts from the KG as the 10th's decision left it
    assert [(o.date, o.again, len(o.items)) for o in outcomes[1]] == [(D10, False, 1), (D14, True, 0)]
    assert [(o.date, o.again) for o in outcomes[0]] == [(D10, False)]


def test_a_kg_tools_merge_of_an_older_document_gives_the_in_order_kg(tmp_path) -> None:
    """A KG tools session merging the 10th's staged document after the 14th's: the 14th is withdrawn and merged
    again after it (said in the tool's answer); the KG equals the in-order merge, increment sizes included."""
    from karma_dagster.kg_tools.session import KGTools
    from karma_dagster.runtime import services
    from karma_dagster.runtime.paths import DataPaths

    base = DataPaths(tmp_path / "seeded")
    services.import_seed_kg(base, SEED / "nodes.tsv", SEED / "edges.sif.gz", "hetionet", 0.9)
    docs = {"2021-03-10_a": ("Zetamab", HYPERTENSION), "2021-03-14_b": ("Zetamab", GESTATIONAL_DIABETES)}
    dumps, answers = [], []
    for order in (sorted(docs), sorted(docs, reverse=True)):
        paths = DataPaths(tmp_path / "-".join(order))
        shutil.copytree(base.root, paths.root)
        services.clear()
        for doc, (name, disease) in docs.items():
            tools = KGTools(paths, namespace="tools", caller="test-model", document=doc)
            assert tools.create_instance(name, "a made-up drug", "Compound").ok
            said = tools.create_statement("NEW:Compound:zetamab", "treats", disease, f"{name} helped ({doc}).")
            assert said.ok, said.message
        answers.append([KGTools(paths, namespace="tools", caller="test-model", document=doc).merge_document()
                        for doc in order])
        dumps.append(kg_dump_any(paths.kg))
    assert all(a.ok for run in answers for a in run)
    assert dumps[1] == dumps[0], [k for k in dumps[0] if dumps[0][k] != dumps[1][k]]
    late = answers[1][1]  # the 10th merged after the 14th
    assert late.data["remerged"] == ["2021-03-14"] and "merged again after it" in late.message
    assert answers[0][1].data["remerged"] == []


# ---------------------------------------------------------------- the run queue keeps the increments' place
def test_freshness_refreshes_never_take_the_place_kept_for_the_increments(tmp_path) -> None:
    """The shipped dagster.yaml: paper runs and freshness refreshes together hold at most 2 of the 3 places, so a
    KG increment always finds one (Dagster's own dequeue selection decides, as the daemon of `dagster dev` does)."""
    import logging
    from pathlib import Path

    from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    from karma_dagster.assets.freshness import freshness_sensor
    from karma_dagster.jobs import INCREMENT_PRIORITY, kg_job_name
    from karma_dagster.sensors.new_papers import plan_date_runs, plan_runs

    shipped = Path(__file__).resolve().parents[2] / "dagster_home" / "dagster.yaml"
    (tmp_path / "dagster.yaml").write_text(shipped.read_text())
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    queue = QueuedRunCoordinatorDaemon(interval_seconds=5)
    queue._logger = logging.getLogger("test.run_queue")  # noqa: SLF001 - set by the daemon controller

    def add(run_id: str, status: dg.DagsterRunStatus, tags: dict[str, str], job: str) -> None:
        code = InProcessCodeLocationOrigin(LoadableTargetOrigin(python_file=__file__), location_name="karma")
        origin = RemoteJobOrigin(repository_origin=RemoteRepositoryOrigin(code, "__repository__"), job_name=job)
        if instance.has_run(run_id):
            instance.delete_run(run_id)
        instance.add_run(DagsterRun(job_name=job, run_id=run_id, status=status, tags=tags, remote_job_origin=origin))

    def next_up() -> list[str]:
        return [r.run_id for r in queue._get_runs_to_dequeue(  # noqa: SLF001 - the queue's selection, no launch
            instance, instance.get_concurrency_config(), fixed_iteration_time=None)]

    # the tags the sensors really put on their runs
    (paper_request,) = plan_runs([(f"{JAN10}_pmc4736972", "ab" * 32)], "document_chain")
    (day_request,) = plan_date_runs([(f"{JAN10}_pmc4736972", "ab" * 32)], "document_chain")
    fresh = dict(freshness_sensor(["local"]).run_tags or {})
    paper = {**paper_request.tags, "dagster/priority": "100"}
    kg = {"dagster/priority": str(INCREMENT_PRIORITY), "dagster/partition": JAN10}

    add("paper-0", dg.DagsterRunStatus.STARTED, paper, "document_chain")
    add("refresh-0", dg.DagsterRunStatus.QUEUED, fresh, "__ASSET_JOB")
    assert next_up() == ["refresh-0"]  # one paper reading: a refresh may run beside it
    add("paper-1", dg.DagsterRunStatus.STARTED, paper, "document_chain")
    assert next_up() == [], "two papers read: the refresh waits, the third place stays free"
    add("kg-1", dg.DagsterRunStatus.QUEUED, kg, kg_job_name("local"))
    assert next_up() == ["kg-1"]
    add("kg-1", dg.DagsterRunStatus.STARTED, kg, kg_job_name("local"))
    add("paper-1", dg.DagsterRunStatus.SUCCESS, paper, "document_chain")
    add("refresh-0", dg.DagsterRunStatus.STARTED, fresh, "__ASSET_JOB")
    add("kg-1", dg.DagsterRunStatus.SUCCESS, kg, kg_job_name("local"))
    add("refresh-1", dg.DagsterRunStatus.QUEUED, fresh, "__ASSET_JOB")
    add("kg-2", dg.DagsterRunStatus.QUEUED, kg, kg_job_name("local"))
    assert next_up() == ["kg-2"], "a paper and a refresh running: the increment, not another refresh"
    # both sensors' runs carry the lane the queue caps
    assert fresh and paper_request.tags.items() >= fresh.items() and day_request.tags.items() >= fresh.items()


# ---------------------------------------------------------------- a new_papers tick is bounded
def test_a_new_papers_tick_stops_starting_files_at_its_budget_and_the_next_ticks_go_on(make_pipeline, monkeypatch):
    """However slow the machine (here each file's parse costs 10 s of a clock the scan reads), a tick starts no
    file after its budget, the next tick goes on after the last file looked at, and every paper is registered and
    requested once."""
    from sensor_ticks import tick

    from karma_dagster.ingest import inbox as inbox_module
    from karma_dagster.ingest.catalog import Catalog
    from karma_dagster.sensors import new_papers

    p = make_pipeline()
    for i in range(7):
        (p.inbox / f"note-{i}.txt").write_text(
            f"Metformin and thyroid function, reading note {i}\nPublished: 2016-01-{10 + i}\n\n"
            f"Metformin lowered TSH in {20 + i} patients with hypothyroidism treated with levothyroxine.\n")
    now = [0.0]
    parses: list[list[str]] = []
    real_parse = inbox_module.parse_file

    def slow_parse(path, *args, **kwargs):  # noqa: ANN001, ANN202 - parse_file's own signature
        parses[-1].append(path.name)
        now[0] += 10.0
        return real_parse(path, *args, **kwargs)

    monkeypatch.setattr(inbox_module, "parse_file", slow_parse)
    monkeypatch.setattr(inbox_module, "monotonic", lambda: now[0], raising=False)  # the clock the scan reads
    cursor, requested = None, []
    for _ in range(8):
        parses.append([])
        data = tick(p, "new_papers", cursor)
        cursor = data.cursor
        requested += [r.partition_key for r in data.run_requests or []]
        if not parses[-1]:
            break
    per_tick = [len(names) for names in parses]
    assert max(per_tick) * 10 <= 30, per_tick  # no tick spends over 30 s of the scan's clock: well under 60 s
    assert max(per_tick) <= int(new_papers.SCAN_BUDGET_S // 10) + 1  # the files started before the budget ran out
    assert sorted(name for names in parses for name in names) == sorted(f"note-{i}.txt" for i in range(7))
    assert len(Catalog(p.storage.catalog_path()).documents_for_dates(dt.date(2016, 1, 10), dt.date(2016, 1, 16))) == 7
    assert len(requested) == len(set(requested)) == 7  # a run per paper, or per day: one paper a day here


def test_a_cold_controller_never_holds_a_new_papers_tick(make_pipeline, monkeypatch):
    """The controller's first decision in a data folder builds its title lexicon (835 s at load 20 on a dev check):
    the tick waits its budget at most, requests every paper at the default priority, and says why; the decision
    goes on in the background and a later tick gets it."""
    import threading

    from sensor_ticks import tick

    from karma_dagster.scheduling import plan
    from karma_dagster.sensors import new_papers

    p = make_pipeline()
    (p.inbox / "note.txt").write_text("Metformin and thyroid function\nPublished: 2016-01-10\n\n"
                                      "Metformin lowered TSH in 20 patients with hypothyroidism.\n")
    release = threading.Event()
    real_decide = plan.decide

    def cold_decide(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - decide's own signature
        release.wait(30)  # a lexicon still being built
        return real_decide(*args, **kwargs)

    monkeypatch.setattr(plan, "decide", cold_decide)
    monkeypatch.setattr(new_papers, "CONTROLLER_BUDGET_S", 0.5)
    try:
        data = tick(p, "new_papers")
    finally:
        release.set()
    assert [r.partition_key[:10] for r in data.run_requests] == ["2016-01-10"]
    assert "dagster/priority" not in data.run_requests[0].tags  # the default priority: no decision in time
    lines: list[str] = []
    release.clear()
    try:
        tags = new_papers.controller_tags(p.storage, ["2016-01-10_note"], log=lines.append, budget_s=0.2)
    finally:
        release.set()
    assert tags == {} and lines and "no decision within" in lines[0] and "default priority" in lines[0]
