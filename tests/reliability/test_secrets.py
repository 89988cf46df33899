"""Secrets: an LLM backbone's key comes from an environment variable (dg.EnvVar); after a run with one paper that
succeeds and one whose provider answers 401 echoing the key back, the key appears nowhere: not in the data folder
(stage tables, catalog, KG, response cache), not in the Dagster instance folder (run storage, event log, compute
logs, schedules), not in metadata or the failure messages, not on the console."""

from __future__ import annotations

import json

import dagster as dg
from fake_openai_server import FakeOpenAIServer, Fault, karma_responder

from karma_dagster import runner
from karma_dagster.ingest.keys import date_of_document_key
from karma_dagster.resources.backbones import BackboneConfig

ENV = "KARMA_RELIABILITY_LLM_KEY"
SECRET = "sk-live-KARMA-SECRET-7f3a9c41e2b84d6d"
NOTE = """Aspirin and cisplatin in a small cohort{marker}

ABSTRACT

Aspirin reduced hypertension in the treated patients. Cisplatin induced nephrotoxicity in two patients.
"""


def responder(request: dict):
    if "CohortAuth" in json.dumps(request.get("messages", [])):
        # a provider that echoes the rejected key (as some do, in part), the worst case for error messages
        return Fault(401, body=json.dumps({"error": {"message": f"Incorrect API key provided: {SECRET}.",
                                                     "type": "invalid_request_error", "code": "invalid_api_key"}}))
    return karma_responder(request)


def test_the_key_appears_nowhere_the_run_wrote(make_pipeline, monkeypatch, capfd):
    monkeypatch.setenv(ENV, SECRET)
    with FakeOpenAIServer(responder=responder) as server:
        backbone = BackboneConfig(kind="litellm", model="openai/karma-scripted", api_base=server.url,
                                  api_key=dg.EnvVar(ENV), timeout=5, max_retries=1,
                                  uncalibrated_admission="theta")  # by Theta: the KG grows, and is searched too
        p = make_pipeline(backbones={"scripted": backbone})
        (p.inbox / "good.txt").write_text(NOTE.format(marker=""), encoding="utf-8")
        (p.inbox / "auth.txt").write_text(NOTE.format(marker=" (CohortAuth)"), encoding="utf-8")
        assert runner.import_kg(p.defs, p.instance)
        keys, _ = runner.register_inbox(p.defs, p.instance)
        failed = runner.run_documents(p.defs, p.instance, keys, log=print)
        dates = sorted({date_of_document_key(k) for k in keys})
        assert all(runner.run_increments(p.defs, p.instance, "scripted", dates).values())
        assert any(r.get("messages") for r in server.requests), "the model was asked"

    assert len(failed) == 1, failed
    (message,) = failed.values()
    assert "AuthenticationError" in message and "was refused" in message, message
    assert SECRET not in message and "***" in message, "the echoed key was masked, so the env var reached the client"

    # everything the run wrote: data folder and Dagster instance folder (run/event storage, compute logs)
    written = [path for path in p.root.parent.rglob("*") if path.is_file() and path.parent != p.inbox]
    assert any(path.suffix == ".parquet" for path in written) and any("llm_cache" in str(path) for path in written)
    assert any(path.name.endswith(".db") for path in written), "the instance's sqlite storages were searched"
    leaks = [str(path.relative_to(p.root.parent)) for path in written if SECRET.encode() in path.read_bytes()]
    assert leaks == []

    # what the instance serves back: run configs and tags, every event (failures, logs, metadata)
    for run in p.instance.get_runs():
        assert SECRET not in json.dumps(run.run_config, default=str) and SECRET not in json.dumps(run.tags)
        for event in p.instance.all_logs(run.run_id):
            assert SECRET not in str(event), (run.job_name, event.dagster_event_type)
    out, err = capfd.readouterr()
    assert SECRET not in out and SECRET not in err
