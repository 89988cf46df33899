"""The cost ledger books what was spent: a stage that fails after the model answered (replies that stay invalid
after the corrective retry, a refusal or a deadline after some answers) books every answered request, with the
tokens the server billed, on a `failed` row of its (partition, backbone, agent); `karma ledger` prints it and
what failures cost apart; the rerun's cache hits are exactly the replies that had validated.

Runs the LLM backbone's chain through litellm's real HTTP client against the loopback fake server
(tests/fake_openai_server.py), whose `answered` list holds the usage figures of every reply it sent."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from fake_openai_server import FakeOpenAIServer, Fault, agent_of, karma_responder

from karma_dagster import cli, runner
from karma_dagster.backbones.llm import client as llm_client
from karma_dagster.backbones.llm.deadline import ServerSpeed
from karma_dagster.runtime.ledger import Ledger, LedgerRow, ledger_path
from karma_dagster.resources.backbones import BackboneConfig

TIMEOUT = 3.0
SECTIONS = ["Aspirin reduced hypertension in the treated patients.",
            "Cisplatin induced nephrotoxicity in two patients.",
            "Tamoxifen reduced breast cancer recurrence in the follow-up.",
            "Metformin improved diabetes control in the same cohort."]
HEADINGS = ["ABSTRACT", "INTRODUCTION", "METHODS", "PATIENTS", "RESULTS", "SAFETY", "DISCUSSION", "LIMITS",
            "CONCLUSION", "OUTLOOK"]  # ten sections: the reader asks in two batches (section_batch 8)
NOTE = "Aspirin, cisplatin and tamoxifen in a small cohort\n\n" + "".join(
    f"{h}\n\n{SECTIONS[i % len(SECTIONS)]}\n\n" for i, h in enumerate(HEADINGS))
OK = None  # the cooperative answer
WRONG = json.dumps({"answer": "not what was asked"})  # valid JSON of the wrong schema
REFUSAL = Fault(400, body=json.dumps({"error": {"message": "The request was rejected by the content filter",
                                                "type": "invalid_request_error", "code": "content_filter"}}))
HANG = Fault(200, delay=TIMEOUT + 2, then="{}")

# case -> (agent, its stage, the agent's first replies in order (then cooperative), replies that validated (the
# rerun's cache hits), why the stage fails). One request at a time (concurrency 1), so the order is the script's.
CASES = {
    # every reply invalid: the first answer and the corrective retry's
    "invalid": ("reader", "segments", [WRONG, WRONG], 0, "not a valid ReaderOutput after one corrective retry"),
    # the first batch of sections answered and validated, the second stays invalid
    "sibling": ("reader", "segments", [OK, WRONG, WRONG], 1, "not a valid ReaderOutput after one corrective retry"),
    # one section summarized, the next one's reply invalid, its corrective retry refused by the provider
    "refused": ("summarizer", "summaries", [OK, WRONG, REFUSAL], 1, "was refused"),
    # the same, the corrective retry outliving the total deadline
    "deadline": ("summarizer", "summaries", [OK, WRONG, HANG], 1, "total deadline"),
}


class Scripted:
    """Cooperative for every agent but `agent`, whose first requests get `script`'s replies (OK: the cooperative
    one); `heal()` makes it cooperative for the rerun."""

    def __init__(self, agent: str, script: list[Any]) -> None:
        self.agent, self.script = agent, list(script)
        self.healed = False
        self.lock = threading.Lock()

    def heal(self) -> None:
        self.healed = True

    def __call__(self, request: dict) -> Any:
        reply = OK
        if agent_of(request) == self.agent and not self.healed:
            with self.lock:
                reply = self.script.pop(0) if self.script else OK
        return karma_responder(request) if reply is OK else reply


def answered(server: FakeOpenAIServer, agent: str) -> tuple[int, int, int]:
    """(requests answered, prompt tokens, completion tokens) as the server billed them to `agent`."""
    usages = [u for req, u in server.answered if agent_of(req) == agent]
    return len(usages), sum(u["prompt_tokens"] for u in usages), sum(u["completion_tokens"] for u in usages)


def rows_of(p: Any, key: str, agent: str) -> list[LedgerRow]:
    return [r for r in Ledger(ledger_path(p.root)).rows(backbone="scripted") if r.partition == key and r.agent == agent]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failed_stage_books_every_answered_call_and_the_rerun_books_its_cache_hits(
        case: str, make_pipeline: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    agent, stage, script, validated, why = CASES[case]
    # The deadline stays the backbone's TIMEOUT: measured on a loaded machine, the cooperative answers before the
    # hang would lengthen it past HANG's delay (the suite once saw the hang answered). Adaptive deadlines are
    # tested in test_llm_deadline; this test is about what the ledger books.
    monkeypatch.setattr(llm_client, "speed_of", lambda _model, _base: ServerSpeed())
    plan = Scripted(agent, script)
    with FakeOpenAIServer(responder=plan) as server:
        p = make_pipeline(backbones={"scripted": BackboneConfig(
            kind="litellm", model="openai/karma-scripted", api_base=server.url, api_key="sk-not-a-key",
            timeout=TIMEOUT, max_retries=0, concurrency=1)})
        (p.inbox / "note.txt").write_text(NOTE, encoding="utf-8")
        assert runner.import_kg(p.defs, p.instance)
        [key], bad = runner.register_inbox(p.defs, p.instance)
        assert not bad
        failed = runner.run_documents(p.defs, p.instance, [key], log=lambda _m: None)
        assert why in failed.get(key, ""), failed
        calls, tokens_in, tokens_out = answered(server, agent)
        assert calls == sum(r is OK or r == WRONG for r in script), "the server answered these before the failure"

        [row] = rows_of(p, key, agent)
        assert (row.status, row.stage, row.calls, row.tokens_in, row.tokens_out, row.cache_hits) == (
            "failed", stage, calls, tokens_in, tokens_out, 0), "every answered request is booked with its tokens"

        assert cli.main(["ledger", "--data-dir", str(p.root), "--by", "partition,agent,status"]) == 0
        out = capsys.readouterr().out
        line = next(ln for ln in out.splitlines() if key in ln and f" {agent} " in ln and "failed" in ln)
        assert line.split()[3:7] == ["1", str(calls), "0", str(tokens_in)], line
        assert cli.main(["ledger", "--data-dir", str(p.root)]) == 0
        out = capsys.readouterr().out
        assert "spent on failed stages: 1 rows" in out and f"{tokens_in} tokens in" in out, out

        # the rerun: the replies that had validated come from the cache, the others are asked again
        plan.heal()
        server.answered.clear()
        assert runner.run_documents(p.defs, p.instance, [key], log=lambda _m: None) == {}
        again, _, _ = answered(server, agent)
        done = [r for r in rows_of(p, key, agent) if r.status == "materialized"]
        assert len(done) == 1 and (done[0].calls, done[0].cache_hits) == (again, validated), done
        assert [r.calls for r in rows_of(p, key, agent) if r.status == "failed"] == [calls], "the failure stays booked"
