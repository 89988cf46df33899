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
