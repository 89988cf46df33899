"""Long runs (issue 11, item 11, the run part): every document's line keeps "[i/N] key: ok (x s)" and adds the rate
and the time left, formatted by tqdm, as one whole line (no carriage returns in a pipe or a CI log); and the KG
grows date by date: the first date's increment is materialized before the second date's first document starts
(read from the Dagster event log)."""

from __future__ import annotations

import re

import dagster as dg
from partition_views import partition_of

from karma_dagster import runner
from karma_dagster.jobs import DOCUMENT_JOB

PAPERS = ("PMC4686705.xml", "PMC4686705.json", "PMC4738914.pdf", "PMC4738914.json")  # 2015-12-08, 2016-01-14
FIRST, SECOND = "2015-12-08_pmc4686705", "2016-01-14_pmc4738914"
# by document "ok (12.4 s)"; by date (a run per day) "ok (date 2015-12-08, 1 document, 12.4 s each)"
LINE = re.compile(r"^\[(\d)/2\] (\S+): ok \((?:date \S+, \d+ documents?, )?\d+\.\d s(?: each)?\) \| "
                  r"(\d+\.\d+(?:doc/s|s/doc)), ETA (\d\d:\d\d)$")


def test_progress_lines_carry_rate_and_eta_and_each_date_is_merged_before_the_next_dates_documents(make_pipeline):
    p = make_pipeline(inbox_files=PAPERS)
    assert runner.import_kg(p.defs, p.instance)
    keys, failed_files = runner.register_inbox(p.defs, p.instance)
    assert keys == [FIRST, SECOND] and not failed_files

    lines: list[str] = []
    failed, merged = runner.run_dates(p.defs, p.instance, keys, ["local"], lines.append)
    assert not failed and merged == {"local": {"2015-12-08": True, "2016-01-14": True}}

    progress = [m for line in lines if (m := LINE.match(line))]
    assert [(m[1], m[2]) for m in progress] == [("1", FIRST), ("2", SECOND)], lines
    assert progress[-1][4] == "00:00", "nothing left after the last document"
    assert not any("\r" in line or "\n" in line for line in lines), "line-based output"

    # date by date: the 2015-12-08 increment materialized before the 2016-01-14 paper's run started
    kg_events = {
        r.event_log_entry.dagster_event.partition: r.timestamp
        for r in p.instance.fetch_materializations(dg.AssetKey(["local", "knowledge_graph"]), limit=10).records
    }
    doc_starts = {
        r.dagster_run.tags["dagster/partition"]: r.start_time  # a paper's partition, or its day's
        for r in p.instance.get_run_records(filters=dg.RunsFilter(job_name=DOCUMENT_JOB))
    }
    assert set(kg_events) == {"2015-12-08", "2016-01-14"}
    assert doc_starts[partition_of(FIRST)] < kg_events["2015-12-08"] < doc_starts[partition_of(SECOND)] \
        < kg_events["2016-01-14"]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_eta_counts_only_unfinished_documents_from_the_finished_ones_rate():
    from karma_dagster.runtime.progress import Progress

    clock = _Clock()
    progress = Progress(4, clock=clock)
    clock.now = 30.0
    assert progress.finished(3) == "10.00s/doc, ETA 00:10", "3 done in 30 s, 1 left"
    clock.now = 40.0
    assert progress.finished(1) == "10.00s/doc, ETA 00:00"


def test_a_batch_is_announced_before_its_run_and_its_lines_carry_the_eta_as_of_its_end(monkeypatch):
    """Three documents that finish together in one run: each line's ETA counts only the fourth (not the two
    others of its own, already finished, batch), and a line says what is running before the run starts."""
    from karma_dagster.runtime.progress import Progress

    clock = _Clock()
    lines: list[str] = []
    seen_at_start: list[list[str]] = []

    class _Storage:
        def partition_mode(self) -> str:
            return "document"

    def fake_batch(defs, inst, batch):  # noqa: ANN001, ANN202 - a run that takes 10 s per document
        seen_at_start.append(list(lines))
        clock.now += 10.0 * len(batch)
        outcome = runner._BatchOutcome.__new__(runner._BatchOutcome)
        outcome.result, outcome.seconds, outcome.success = None, 10.0 * len(batch), True
        return outcome

    monkeypatch.setattr(runner, "_resources", lambda defs: (_Storage(),))
    monkeypatch.setattr(runner, "ensure_registered", lambda *a, **k: None)
    monkeypatch.setattr(runner, "adjacent_batches", lambda inst, keys, per_run: [keys[:3], keys[3:]])
    monkeypatch.setattr(runner, "_run_batch", fake_batch)
    keys = ["2020-01-01_a", "2020-01-01_b", "2020-01-01_c", "2020-01-02_d"]
    failed = runner.run_documents(None, None, keys, lines.append, progress=Progress(4, clock=clock))
    assert not failed
    assert seen_at_start[0] == ["[1-3/4] running 3 documents in one run (2020-01-01_a .. 2020-01-01_c) ..."]
    done = [line for line in lines if ": ok (" in line]
    assert [line.split(" | ")[1] for line in done[:3]] == ["10.00s/doc, ETA 00:10"] * 3, lines
    assert done[3].endswith("| 10.00s/doc, ETA 00:00"), lines
