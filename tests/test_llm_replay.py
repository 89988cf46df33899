"""The LLM agents over recorded responses keyed by prompt version (tests/recordings, see tests/replay.py).

A changed prompt file never replays a stale answer: its id+hash has no recording, and the replay server
answers "prompt changed: re-record", which the client turns into a clear error. Re-record with
`KARMA_RECORD=1 python -m pytest -q tests/test_llm_replay.py`.
"""

from __future__ import annotations

import gzip
import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fake_openai_server import FakeOpenAIServer  # noqa: E402
from replay import Recordings  # noqa: E402

from karma_dagster.backbones.base import TripleQuery  # noqa: E402
from karma_dagster.backbones.llm import LLMBackbone, LLMCallError, LLMClient  # noqa: E402
from karma_dagster.ingest.pubtator import PubTatorDoc, parse_pubtator_lines  # noqa: E402
from karma_dagster.runtime.prompts import PromptStore, default_prompt_root  # noqa: E402
from karma_dagster.schemas.records import RawSection  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RECORDING = os.environ.get("KARMA_RECORD") == "1"


def _abstracts(n: int) -> list[PubTatorDoc]:
    """Real BC5CDR training abstracts that name drugs and diseases the scripted recorder knows."""
    with gzip.open(REPO / "data" / "corpora" / "bc5cdr-train.pubtator.gz", "rt") as fh:
        return list(itertools.islice(parse_pubtator_lines(fh), n))


def _backbone(url: str, prompts: Path | None = None) -> LLMBackbone:
    client = LLMClient("openai/recorded-model", api_base=url, api_key="x", backoff_base=0.01, timeout=10,
                       max_retries=0, name="recorded", concurrency=4)
    return LLMBackbone("recorded", client, PromptStore(prompts or default_prompt_root()))


@pytest.fixture
def replay() -> Iterator[tuple[Recordings, FakeOpenAIServer]]:
    recordings = Recordings()
    with FakeOpenAIServer(responder=recordings) as srv:
        yield recordings, srv


def _run_agents(backbone: LLMBackbone, doc: PubTatorDoc) -> dict[str, object]:
    """Every agent's question once, on one real abstract, the way the chain asks it."""
    sections = [RawSection(kind="title", text=doc.title), RawSection(kind="abstract", text=doc.abstract)]
    relevance = backbone.score_relevance(sections, ["clonidine", "naloxone", "hypotension"])
    summary = backbone.summarize(sections[1], 4)
    spans = backbone.recognize(summary)
    pairs = [(a, b) for a, b in itertools.combinations(spans, 2) if a.text.lower() != b.text.lower()][:6]
    probs = backbone.relation_probabilities(summary, pairs)
    triple = TripleQuery(head_name=pairs[0][0].text if pairs else "x", head_type="Compound",
                         relation=max(probs[0], key=probs[0].get) if probs else "Association",
                         tail_name=pairs[0][1].text if pairs else "y", tail_type="Disease", evidence=summary)
    return {
        "relevance": relevance, "summary": summary, "spans": [(s.text, s.type) for s in spans], "probs": probs,
        "align": backbone.align(triple, ["treats", "causes", "palliates"]),
        "debate": backbone.debate(triple, "causes"),
        "signals": backbone.evaluation_signals(triple, 0.8, relevance[1], 1).signals,
        "judge": backbone.judge(triple),
    }


def test_agents_replay_recorded_answers_on_real_abstracts(replay: tuple[Recordings, FakeOpenAIServer]) -> None:
    recordings, server = replay
    backbone = _backbone(server.url)
    results = [_run_agents(backbone, doc) for doc in _abstracts(3)]
    assert recordings.failures == []
    if not RECORDING:
        assert recordings.replayed == len(server.requests) > 0  # every request answered from a recording
    first = results[0]  # "Naloxone reverses the antihypertensive effect of clonidine."
    assert ("clonidine", "ChemicalEntity") in first["spans"] and ("Naloxone", "ChemicalEntity") in first["spans"]
    assert all(0.0 <= r <= 1.0 for r in first["relevance"]) and first["relevance"][1] >= 0.7  # names KG entities
    assert any(p["Negative_Correlation"] >= 0.8 for p in first["probs"])  # "reverses ... effect"
    assert first["align"].kg_relation in ("treats", "causes", "palliates")
    assert {"llm_confidence", "llm_clarity", "llm_relevance"} <= set(first["signals"])
    prompts = {r["_headers"]["x-karma-prompt"].split(".v")[0] for r in server.requests}
    assert prompts == {"reader", "summarizer", "entity_extraction", "relation_extraction", "schema_alignment",
                       "conflict_advocate", "conflict_resolution", "evaluator_confidence", "evaluator_clarity",
                       "evaluator_relevance", "judge"}


@pytest.mark.skipif(RECORDING, reason="recording mode records whatever it is asked")
def test_an_edited_prompt_is_never_replayed_stale(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts"
    shutil.copytree(default_prompt_root(), prompts)
    edited = prompts / "summarizer" / "summarizer.v1.jinja"
    edited.write_text(edited.read_text().replace("Keep numbers, dosages", "Keep all numbers, dosages"))
    new_id = PromptStore(prompts).get("summarizer").sha256
    assert new_id != PromptStore().get("summarizer").sha256

    recordings = Recordings(record=False)
    with FakeOpenAIServer(responder=recordings) as server:
        backbone = _backbone(server.url, prompts)
        doc = _abstracts(1)[0]
        # the unchanged prompts in the copy still replay ...
        assert backbone.score_relevance([RawSection(kind="title", text=doc.title),
                                         RawSection(kind="abstract", text=doc.abstract)],
                                        ["clonidine", "naloxone", "hypotension"])
        # ... the edited one fails loudly instead of answering from the old recording
        with pytest.raises(LLMCallError, match="prompt changed: re-record") as err:
            backbone.summarize(RawSection(kind="abstract", text=doc.abstract), 4)
    assert f"summarizer.v1@{new_id}" in str(err.value) and "recorded" in str(err.value)
    assert len(recordings.failures) == 1 and "summarizer.v1@" in recordings.failures[0]


@pytest.mark.skipif(RECORDING, reason="recording mode records whatever it is asked")
def test_changed_inputs_ask_for_a_re_record_too(replay: tuple[Recordings, FakeOpenAIServer]) -> None:
    _, server = replay
    with pytest.raises(LLMCallError, match="inputs changed: re-record"):
        _backbone(server.url).summarize(RawSection(kind="abstract", text="A text no recording has seen."), 4)
