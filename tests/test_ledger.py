"""The cost ledger: one row per (run, partition, backbone, agent), concurrent writers, totals, the CLI, and the
asset layer's error that names backbone, agent and partition (and still books what the failure spent)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import dagster as dg
import pytest

from karma_dagster import cli
from karma_dagster.backbones.base import Usage
from karma_dagster.assets.chain import StageError, agent_errors, record_ledger
from karma_dagster.stages import by_name
from karma_dagster.runtime.ledger import Ledger, LedgerRow, format_totals, ledger_path
from karma_dagster.runtime.stage_store import StageStore


def _write(path: str, worker: int, n: int) -> None:
    ledger = Ledger(path)
    for i in range(n):
        ledger.record(LedgerRow(run_id=f"run-{worker}", partition=f"doc-{i}", backbone="gpt", agent="summarizer",
                                stage="summaries", calls=2, cache_hits=1, tokens_in=100, tokens_out=10,
                                cost_usd=0.001 if worker % 2 else None))


def test_concurrent_processes_append_and_totals_keep_unpriced_apart(tmp_path: Path) -> None:
    path = str(ledger_path(tmp_path))
    Ledger(path)
    procs = [mp.get_context("fork").Process(target=_write, args=(path, w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    ledger = Ledger(path)
    assert len(ledger.rows()) == 100
    [total] = ledger.totals()
    assert (total.rows, total.calls, total.cache_hits, total.tokens_in, total.tokens_out) == (100, 200, 100, 10000, 1000)
    assert total.cost_usd == pytest.approx(0.05) and total.unpriced_rows == 50  # NULL cost is never summed as 0
    # the same (run, partition, backbone, agent) again replaces its row (a retried step)
    _write(path, 0, 1)
    assert len(ledger.rows(run_id="run-0")) == 25
    by_run = {t.group["run_id"]: t for t in ledger.totals(["run_id"])}
    assert by_run["run-0"].cost_usd is None and by_run["run-1"].cost_usd == pytest.approx(0.025)
    table = format_totals(ledger.totals(["backbone", "agent"]))
    assert "summarizer" in table and "TOTAL" in table and "+?" in table
    with pytest.raises(ValueError, match="allowed columns"):
        ledger.totals(["cost_usd; DROP TABLE ledger"])


class _Failing:
    name = "gpt"

    def usage(self) -> Usage:
        return Usage(calls=3, prompt_tokens=50, completion_tokens=5, cost_usd=None)

    def prompt_id(self, agent: str) -> str:
        return f"{agent}.v1@abc"


def test_agent_failure_names_backbone_agent_and_partition_and_is_booked(tmp_path: Path) -> None:
    store = StageStore(tmp_path / "stages")
    context = dg.build_asset_context(partition_key="2016-01-10__pmc4736972")
    with pytest.raises(StageError) as err:
        with agent_errors(context, store, by_name("relations"), _Failing()):  # type: ignore[arg-type]
            raise RuntimeError("LLM call failed after 5 attempt(s): RateLimitError")
    message = str(err.value)
    assert "backbone 'gpt'" in message and "agent 'relation_extraction'" in message
    assert "partition '2016-01-10__pmc4736972'" in message and "RateLimitError" in message
    [row] = Ledger(ledger_path(tmp_path)).rows()
    assert (row.status, row.agent, row.partition, row.calls, row.cost_usd) == (
        "failed", "relation_extraction", "2016-01-10__pmc4736972", 3, None)

    record_ledger(context, store, by_name("relations"), _Failing())  # type: ignore[arg-type]
    assert Ledger(ledger_path(tmp_path)).rows()[0].status == "materialized"  # the retry's row replaces it


def test_cli_prints_totals_per_backbone_and_agent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ledger", "--data-dir", str(tmp_path)]) == 0
    assert "no ledger yet" in capsys.readouterr().out
    _write(str(ledger_path(tmp_path)), 1, 3)
    assert cli.main(["ledger", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "backbone" in out and "gpt" in out and "summarizer" in out and "0.003000" in out
    assert cli.main(["ledger", "--data-dir", str(tmp_path), "--by", "partition", "--backbone", "gpt"]) == 0
    assert "doc-2" in capsys.readouterr().out


def test_a_batch_books_its_rows_every_few_seconds_not_only_at_the_end(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A batched step writes its ledger rows together; between documents, once FLUSH_SECONDS have passed, so a
    process killed mid-step loses only the last seconds' rows, not the whole step's."""
    from karma_dagster.assets.batching import BatchState

    path = ledger_path(tmp_path)
    warnings: list[str] = []

    def row(i: int) -> LedgerRow:
        return LedgerRow(run_id="r", partition=f"doc-{i}", backbone="local", agent="summarizer", stage="summaries",
                         calls=1, status="materialized")

    batch = BatchState()
    batch.book(path, row(0))
    batch.flush_if_due(warnings.append)  # not due yet: nothing written
    assert not path.exists() or Ledger(path).rows(run_id="r") == []
    monkeypatch.setattr(BatchState, "FLUSH_SECONDS", 0.0)
    batch.book(path, row(1))
    batch.flush_if_due(warnings.append)
    assert sorted(r.partition for r in Ledger(path).rows(run_id="r")) == ["doc-0", "doc-1"]
    batch.book(path, row(2))
    batch.flush(warnings.append)
    assert sorted(r.partition for r in Ledger(path).rows(run_id="r")) == ["doc-0", "doc-1", "doc-2"]
    assert batch.ledger_rows == {} and warnings == []
