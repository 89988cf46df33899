"""The prompt store: layout, versions, hashes, strict rendering, code versions."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from karma_dagster.backbones.llm.backbone import DEFAULT_ENTITY_TYPES, DEFAULT_RELATION_TYPES, _types
from karma_dagster.backbones.llm.outputs import OUTPUT_MODELS
from karma_dagster.runtime.prompts import PromptError, PromptStore, default_prompt_root

AGENTS = ["ingestion", "reader", "summarizer", "entity_extraction", "relation_extraction", "schema_alignment",
          "conflict_resolution", "conflict_advocate", "evaluator_confidence", "evaluator_clarity", "evaluator_relevance", "judge"]
TRIPLE = {"head_name": "cisplatin", "head_type": "Compound", "relation": "Positive_Correlation",
          "tail_name": "nephrotoxicity", "tail_type": "Disease", "evidence": "Cisplatin induced nephrotoxicity (p < 0.05)."}
SIDE = {"claim": "cisplatin treats nephrotoxicity", "source": "knowledge graph", "evidence": [], "confidence": 0.9,
        "papers": 0, "in_seed": True, "first_seen": None, "last_seen": None}
VARS = {
    "ingestion": {"source_format": "pdf", "known": {"title": "T"}, "text": "Eﬀects of x"},
    "reader": {"kg_context": ["cisplatin"], "sections": [{"index": 0, "heading": "", "kind": "abstract", "text": "a"}]},
    "summarizer": {"max_sentences": 3, "heading": "Results", "text": "Cisplatin 75 mg/m2 induced nephrotoxicity."},
    "entity_extraction": {"entity_types": _types(None, DEFAULT_ENTITY_TYPES), "text": "Cisplatin and BRCA1."},
    "relation_extraction": {"relation_types": _types(None, DEFAULT_RELATION_TYPES), "text": "t",
                            "pairs": [{"pair": 0, "head": "a", "head_type": "X", "tail": "b", "tail_type": "Y"}]},
    "schema_alignment": {"triple": TRIPLE, "candidates": ["causes", "treats"]},
    "conflict_resolution": {"triple": TRIPLE, "existing": SIDE,
                            "transcript": [{"round": 1, "advocate_of": "new", "argument": "It says induced."}]},
    "conflict_advocate": {"round": 1, "rounds": 2, "own": SIDE, "transcript": [],
                          "other": {"claim": "cisplatin causes nephrotoxicity", "source": "new triple",
                                    "evidence": [TRIPLE["evidence"]]}},
    **{f"evaluator_{d}": {"triple": TRIPLE, "probability": 0.8, "segment_relevance": 0.7, "linked_entities": 2}
       for d in ("confidence", "clarity", "relevance")},
    "judge": {"triple": TRIPLE},
}


@pytest.fixture(scope="module")
def store() -> PromptStore:
    return PromptStore(default_prompt_root())


@pytest.fixture()
def tmp_store(tmp_path: Path) -> PromptStore:
    root = tmp_path / "prompts"
    shutil.copytree(default_prompt_root(), root)
    return PromptStore(root)


def test_every_agent_has_a_v1_prompt_naming_its_output_model(store: PromptStore) -> None:
    assert set(AGENTS) <= set(store.agents())
    for agent in AGENTS:
        prompt = store.get(agent, 1)
        meta = prompt.metadata
        assert meta["output"] == OUTPUT_MODELS[agent].__name__, agent
        assert meta["description"]


@pytest.mark.parametrize("agent", AGENTS)
def test_render_gives_system_and_user_messages_with_agent_marker_and_domain(store: PromptStore, agent: str) -> None:
    rendered = store.render(agent, domain="genomics", **VARS[agent])
    assert [m["role"] for m in rendered.messages] == ["system", "user"]
    system, user = (m["content"] for m in rendered.messages)
    assert system.startswith(f"agent: {agent}\n")
    assert "genomics" in system
    assert "JSON" in system and user.strip()
    assert rendered.prompt_id == f"{agent}.v{store.versions(agent)[-1]}"  # the latest version
    assert "{{" not in system + user and "{%" not in system + user  # fully rendered


def test_hash_is_the_file_content_sha256(store: PromptStore) -> None:
    rendered = store.render("reader", domain="general biomedicine", **VARS["reader"])
    path = default_prompt_root() / "reader" / "reader.v1.jinja"
    assert rendered.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    assert store.prompt_id("reader") == f"reader.v1@{rendered.sha256}"
    assert rendered.versioned_id == store.prompt_id("reader")


def test_json_filter_keeps_text_unescaped(store: PromptStore) -> None:
    user = store.render("schema_alignment", domain="genomics", **VARS["schema_alignment"]).messages[1]["content"]
    assert "(p < 0.05)" in user and "\\u003c" not in user


def test_missing_variable_names_prompt_and_variable(store: PromptStore) -> None:
    with pytest.raises(PromptError, match=r"reader\.v1.*kg_context"):
        store.render("reader", domain="genomics", sections=[])
    bad_types = [{"name": "Gene"}]  # no description: an attribute-level undefined
    with pytest.raises(PromptError, match=r"entity_extraction\.v1.*description"):
        store.render("entity_extraction", domain="genomics", entity_types=bad_types, text="x")


def test_new_version_becomes_latest_and_changes_code_version(tmp_store: PromptStore) -> None:
    before = tmp_store.code_version_for(["reader", "summarizer"])
    assert before == tmp_store.code_version_for(["summarizer", "reader"])  # order-independent
    v1 = (tmp_store.root / "reader" / "reader.v1.jinja").read_text()
    (tmp_store.root / "reader" / "reader.v2.jinja").write_text(v1.replace("Score each segment", "Rate each segment"))
    assert tmp_store.versions("reader") == [1, 2]
    assert tmp_store.latest("reader").version == 2
    rendered = tmp_store.render("reader", domain="genomics", **VARS["reader"])
    assert rendered.prompt_id == "reader.v2" and "Rate each segment" in rendered.messages[0]["content"]
    assert tmp_store.render("reader", 1, domain="genomics", **VARS["reader"]).prompt_id == "reader.v1"
    after = tmp_store.code_version_for(["reader", "summarizer"])
    assert after != before
    assert tmp_store.code_version_for(["reader", "summarizer"], versions={"reader": 1}) == before
    assert tmp_store.code_version_for(["summarizer"]) == PromptStore(default_prompt_root()).code_version_for(["summarizer"])


def test_editing_a_file_changes_its_hash(tmp_store: PromptStore) -> None:
    before = tmp_store.prompt_id("judge")
    path = tmp_store.root / "judge" / "judge.v1.jinja"
    path.write_text(path.read_text() + "\n")
    assert tmp_store.prompt_id("judge") != before


def test_malformed_prompt_files_are_clear_errors(tmp_store: PromptStore) -> None:
    folder = tmp_store.root / "broken"
    folder.mkdir()
    (folder / "broken.v1.jinja").write_text("no parts here {{ x }}")
    with pytest.raises(PromptError, match="broken.v1.jinja.*=== system ==="):
        tmp_store.render("broken", x=1)
    (folder / "broken.v2.jinja").write_text("---\n: [\n---\n=== system ===\ns\n=== user ===\nu\n")
    with pytest.raises(PromptError, match="front matter"):
        tmp_store.render("broken", 2)
    with pytest.raises(PromptError, match="broken.v9 not found"):
        tmp_store.get("broken", 9)
    with pytest.raises(PromptError, match="no prompt files for agent 'nobody'"):
        tmp_store.latest("nobody")
