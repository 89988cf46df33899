"""The KG's date partitions start early enough for MedKGent's 1975-2023 corpus (KARMA_KG_START_DATE), and a
document dated outside the range fails alone, naming the setting and its date, while the other documents of the
run still merge: in `karma run`'s increments, in a backfill's and in the `kg_increments` sensor's requests."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import dagster as dg
import pytest
from sensor_ticks import tick

from karma_dagster import runner
from karma_dagster.runtime import date_range
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.partitioning.definitions import KG_DATES, first_kg_date

JATS = ("PMC4686705.xml", "PMC4686705.json")  # published 2015-12-08


def _subprocess_first_key(env_value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != date_range.ENV_START}
    if env_value is not None:
        env[date_range.ENV_START] = env_value
    code = "from karma_dagster.partitioning.definitions import first_kg_date as f; print(f())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_default_start_covers_medkgent_1975_and_the_setting_moves_it(monkeypatch):
    monkeypatch.delenv(date_range.ENV_START, raising=False)
    assert date_range.kg_start_date() == dt.date(1975, 1, 1)
    if date_range.ENV_START not in os.environ:  # this process loaded the default range
        assert first_kg_date() == dt.date(1975, 1, 1)

    monkeypatch.setenv(date_range.ENV_START, "1960-07-01")
    assert date_range.kg_start_date() == dt.date(1960, 7, 1)
    monkeypatch.setenv(date_range.ENV_START, "07/01/1960")
    with pytest.raises(date_range.DateRangeError, match="KARMA_KG_START_DATE='07/01/1960' is not an ISO date"):
        date_range.kg_start_date()
    monkeypatch.setenv(date_range.ENV_START, (date_range.today() + dt.timedelta(days=3)).isoformat())
    with pytest.raises(date_range.DateRangeError, match="future"):
        date_range.kg_start_date()


def test_the_code_location_reads_the_setting_when_it_loads():
    assert _subprocess_first_key("1980-02-01").stdout.strip() == "1980-02-01"
    assert _subprocess_first_key(None).stdout.strip() == "1975-01-01"
    bad = _subprocess_first_key("nineteen-eighty")
    assert bad.returncode != 0 and "KARMA_KG_START_DATE='nineteen-eighty' is not an ISO date" in bad.stderr


def test_a_document_outside_the_range_gets_an_error_naming_the_setting_and_its_date(monkeypatch):
    monkeypatch.setenv(date_range.ENV_START, "1975-01-01")
    with pytest.raises(date_range.DocumentOutOfRange) as old:
        date_range.check_document("1970-05-04_pmid123")
    message = str(old.value)
    assert "document 1970-05-04_pmid123 is dated 1970-05-04" in message
    assert "before the KG's first date partition 1975-01-01 (KARMA_KG_START_DATE)" in message
    tomorrow = (date_range.today() + dt.timedelta(days=1)).isoformat()
    with pytest.raises(date_range.DocumentOutOfRange, match=f"dated {tomorrow}, after today"):
        date_range.check_document(f"{tomorrow}_pmid9")
    date_range.check_document("1975-01-01_pmid1")  # the first day and today are inside
    date_range.check_document(f"{date_range.today().isoformat()}_sha-abc")
    ok, skipped = date_range.split_dates(["2016-01-14", "1970-05-04", "2016-01-14", tomorrow])
    assert ok == ["2016-01-14"] and set(skipped) == {"1970-05-04", tomorrow}
    assert "KARMA_KG_START_DATE" in skipped["1970-05-04"]
    # the loaded partitions decide what launchers may request, whatever the variable says now
    ok, _ = date_range.split_dates(["1970-05-04"], start=dt.date(1960, 1, 1))
    assert ok == ["1970-05-04"]


@pytest.fixture()
def mixed(make_pipeline):
    """The JATS paper (2015-12-08) and a note whose Europe PMC sidecar dates it 1970-05-04, before the range."""
    p = make_pipeline(inbox_files=JATS)
    p.add_to_inbox("visfatin-hypothyroidism-note.txt")
    (p.inbox / "visfatin-hypothyroidism-note.json").write_text(json.dumps(
        {"pmid": ["999001"], "title": ["An old note on visfatin"], "firstPublicationDate": ["1970-05-04"]}))
    assert runner.import_kg(p.defs, p.instance)
    keys, failed_files = runner.register_inbox(p.defs, p.instance)
    assert not failed_files and len(keys) == 2
    # only the date inside the range becomes a KG partition: nothing can request the old one
    assert p.instance.get_dynamic_partitions(KG_DATES) == ["2015-12-08"]
    return p, keys


def test_an_old_document_fails_alone_and_the_others_still_merge(mixed, monkeypatch):
    monkeypatch.delenv(date_range.ENV_START, raising=False)
    p, keys = mixed
    old = next(k for k in keys if k.startswith("1970-05-04_"))
    new = next(k for k in keys if k.startswith("2015-12-08_"))
    failed = runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    assert set(failed) == {old}, failed
    assert "dated 1970-05-04, before the KG's first date partition 1975-01-01 (KARMA_KG_START_DATE)" in failed[old]
    stages = p.storage.stage_store()
    assert not stages.exists("local", "documents", old) and stages.exists("local", "evaluated", new)

    # the increments of every date the run touched: the old date has no partition and is left out, not fatal
    outcome = runner.run_increments(p.defs, p.instance, "local", sorted({date_of_document_key(k) for k in keys}))
    assert outcome == {"2015-12-08": True}
    assert p.kg.snapshot_counts(namespace="local").n_evidence > 0

    # the sensor, even if an out-of-range document were evaluated (e.g. before the start was moved later),
    # requests the other dates and logs the skipped one instead of failing the tick
    p.instance.report_runless_asset_event(dg.AssetMaterialization(dg.AssetKey(["local", "evaluated"]), partition=old))
    on_since_the_start = '{"local": 0}'  # (a first tick with no cursor starts from now: no history replay)
    result = tick(p, "kg_increments", on_since_the_start)
    assert [r.partition_key for r in result.run_requests] == ["2015-12-08"]
