"""KG context for any LLM (cogmg/kg_context.py; the `kg_context` KG tool) on the shipped seed KG (data/seed_kg, a
Hetionet subset) plus a few merged evidence rows: the entities the question names, their ranked triples with
evidence, cut to a token budget as whole items (a smaller budget gives a prefix), and clear refusals."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from karma_dagster.runtime import services
from karma_dagster.cogmg.kg_context import (context_tool, BUDGET_MAX, BUDGET_MIN, KGContextError, estimate_tokens,
                                            kg_context)
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.paths import DataPaths

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_kg"
NS = "local"
LEVOFLOXACIN, THROMBOCYTOPENIA = "Compound::DB01137", "Side Effect::C0040034"
GENE_5925 = "Gene::5925"  # the seed's Levofloxacin -downregulates-> Gene::5925
ADVERSE = "Which adverse reactions has levofloxacin been reported to cause?"
SENTENCE_1 = "Probable levofloxacin-induced thrombocytopenia in a patient previously on ciprofloxacin."
SENTENCE_2 = "Platelet counts recovered after levofloxacin was stopped, confirming drug-induced thrombocytopenia."


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> DataPaths:
    """The seed, plus Levofloxacin -causes-> Thrombocytopenia stated by two papers (2016, 2017) and a paper's
    Levofloxacin -downregulates-> Gene::5925 (a seed edge it reinforces), merged into namespace `local`."""
    paths = DataPaths(tmp_path_factory.mktemp("kgctx") / "karma")
    services.import_seed_kg(paths, SEED / "nodes.tsv", SEED / "edges.sif.gz", "hetionet", 0.9)
    store = KGStore(paths.kg)

    def row(doc: str, tid: str, relation: str, tail: str, sentence: str) -> dict:
        return {"triple_id": tid, "head_id": LEVOFLOXACIN, "relation": relation, "tail_id": tail, "score": 0.8,
                "segment_id": f"{doc}#1", "evidence": sentence}

    merge_increment(store, dt.date(2016, 1, 14), NS, {"2016-01-14_pmc4738914": (
        [row("2016-01-14_pmc4738914", "t1", "causes", THROMBOCYTOPENIA, SENTENCE_1),
         row("2016-01-14_pmc4738914", "t2", "downregulates", GENE_5925, "Levofloxacin lowered its expression.")],
        [])}, "r1")
    merge_increment(store, dt.date(2017, 3, 1), NS, {"2017-03-01_pmid-1": (
        [row("2017-03-01_pmid-1", "t1", "causes", THROMBOCYTOPENIA, SENTENCE_2)], [])}, "r2")
    services.clear()
    return paths


@pytest.fixture(scope="module")
def adverse(data: DataPaths):
    return kg_context(ADVERSE, 2000, data=data, namespace=NS)


def _keys(ctx) -> list[tuple[str, str, str]]:  # noqa: ANN001
    return [(t.head_id, t.relation, t.tail_id) for t in ctx.triples]


def test_names_the_linked_entity_and_ranks_the_evidenced_matching_triple_first(adverse) -> None:
    assert [e.id for e in adverse.entities] == [LEVOFLOXACIN] and adverse.entities[0].name == "Levofloxacin"
    assert adverse.relations_asked == ["causes"]
    top = adverse.triples[0]
    assert (top.head_id, top.relation, top.tail_id, top.hop) == (LEVOFLOXACIN, "causes", THROMBOCYTOPENIA, 1)
    assert (top.n_docs, top.in_seed, top.first_seen, top.last_seen) == (2, False, "2016-01-14", "2017-03-01")
    assert top.confidence == pytest.approx(1 - 0.2 * 0.2) and top.answer == "Thrombocytopenia"
    assert {"relation", "kind", "papers", "recency"} <= top.why.keys()
    # evidence: best score first, then newest; the sentence, its document and date are in the text at [1]
    assert [(e.doc_key, e.date) for e in top.evidence] == [("2017-03-01_pmid-1", "2017-03-01"),
                                                          ("2016-01-14_pmc4738914", "2016-01-14")]
    assert "[1] Levofloxacin causes Thrombocytopenia." in adverse.text
    assert SENTENCE_1 in adverse.text and SENTENCE_2 in adverse.text and "2017-03-01_pmid-1" in adverse.text
    # every 1-hop triple of the asked relation ranks before every 1-hop triple of another relation
    hop1 = [t.relation for t in adverse.triples if t.hop == 1]
    assert hop1.count("causes") >= 14 and hop1[: hop1.count("causes")] == ["causes"] * hop1.count("causes")
    assert adverse.answers()[0] == "Thrombocytopenia"


def test_the_questions_words_choose_the_relation_ranked_first(data: DataPaths, adverse) -> None:
    treats = kg_context("Which diseases is levofloxacin used to treat?", 2000, data=data, namespace=NS)
    assert treats.entities[0].id == LEVOFLOXACIN and treats.triples[0].relation in {"treats", "palliates"}
    hop1 = [{(t.head_id, t.relation, t.tail_id) for t in c.triples if t.hop == 1} for c in (treats, adverse)]
    assert hop1[0] == hop1[1]  # the same edges at the entity, in another order
    assert kg_context(ADVERSE, 2000, data=data, namespace=NS) == adverse  # deterministic


def test_two_hops_are_bounded_and_marked(adverse) -> None:
    hop2 = [t for t in adverse.triples if t.hop == 2]
    assert hop2, "the best neighbours' own edges are read"
    assert all(LEVOFLOXACIN not in (t.head_id, t.tail_id) for t in hop2)
    assert len({t.head_id if t.tail_id == t.answer else t.tail_id for t in hop2}) <= 5  # HOP2_FROM neighbours


def test_budget_is_respected_with_whole_items_and_smaller_budgets_give_a_prefix(data: DataPaths, adverse) -> None:
    sizes = [BUDGET_MIN, 150, 300, 600]
    contexts = [kg_context(ADVERSE, b, data=data, namespace=NS) for b in sizes]
    for b, ctx in zip(sizes, contexts, strict=True):
        assert estimate_tokens(ctx.text) <= ctx.tokens_used <= b
        assert len(ctx.triples) + ctx.dropped["triples"] == ctx.candidates == adverse.candidates
        assert [t.ref for t in ctx.triples] == list(range(1, len(ctx.triples) + 1))
        for t in ctx.triples:  # a triple is whole: its line and its evidence are both in, or neither is
            assert f"[{t.ref}] {t.head_name} {t.relation} {t.tail_name}." in ctx.text
            assert all(e.sentence in ctx.text for e in t.evidence)
    counts = [len(c.triples) for c in contexts]
    assert counts == sorted(counts) and counts[0] < counts[-1] < len(adverse.triples)
    for small, large in zip(contexts, contexts[1:]):
        assert _keys(small) == _keys(large)[: len(small.triples)]
    assert _keys(contexts[-1]) == _keys(adverse)[: len(contexts[-1].triples)]


def test_the_last_triple_comes_without_its_evidence_when_only_that_fits(data: DataPaths, adverse) -> None:
    full = estimate_tokens(adverse.text.split("[2]")[0])  # header, entity and the first triple with its evidence
    bare = kg_context(ADVERSE, full - 1, data=data, namespace=NS)
    assert [(t.tail_id, t.evidence) for t in bare.triples] == [(THROMBOCYTOPENIA, [])]
    assert bare.dropped["evidence"] >= 2 and SENTENCE_1 not in bare.text and "[1] Levofloxacin causes" in bare.text
    assert kg_context(ADVERSE, full + 3, data=data, namespace=NS).triples[0].evidence  # 3 items, each rounded up


def test_as_of_reads_the_kg_as_it_was(data: DataPaths) -> None:
    before = kg_context(ADVERSE, 2000, data=data, namespace=NS, as_of=dt.date(2016, 6, 1))
    top = next(t for t in before.triples if t.tail_id == THROMBOCYTOPENIA)
    assert (top.n_docs, [e.doc_key for e in top.evidence]) == (1, ["2016-01-14_pmc4738914"])
    assert before.as_of == "2016-06-01" and "as of 2016-06-01" in before.text
    seed_only = kg_context(ADVERSE, 2000, data=data, namespace=NS, as_of=dt.date(2015, 1, 1))
    assert all(t.tail_id != THROMBOCYTOPENIA for t in seed_only.triples) and all(t.in_seed for t in seed_only.triples)


def test_a_question_naming_nothing_the_kg_knows_gets_an_empty_context(data: DataPaths) -> None:
    ctx = kg_context("Which drugs treat zzqxitis of the flurbo?", 500, data=data, namespace=NS)
    assert ctx.entities == [] and ctx.triples == [] and "no entity this question names" in ctx.text


@pytest.mark.parametrize(("question", "budget", "problem"), [
    ("", 500, "question is empty"),
    ("   ", 500, "question is empty"),
    ("Which drug? " * 200, 500, "over the limit of 2,000"),
    (ADVERSE, BUDGET_MIN - 1, f"budget={BUDGET_MIN - 1} is out of bounds"),
    (ADVERSE, BUDGET_MAX + 1, f"budget={BUDGET_MAX + 1} is out of bounds"),
    (ADVERSE, True, "budget must be a whole number"),
    (ADVERSE, 500.0, "budget must be a whole number"),
])
def test_bad_questions_and_budgets_are_clear_errors(data: DataPaths, question, budget, problem) -> None:  # noqa: ANN001
    with pytest.raises(KGContextError, match=problem):
        kg_context(question, budget, data=data, namespace=NS)


def test_the_kg_tool_answers_with_the_context_and_refuses_bad_arguments(data: DataPaths, adverse) -> None:
    """The tool `karma mcp` serves: its arguments checked by the tools' model (KgContextArgs), then context_tool."""
    from pydantic import ValidationError

    from karma_dagster.kg_tools.schemas import CONTEXT_ARGS

    model = CONTEXT_ARGS["kg_context"]

    def call(arguments: dict):  # noqa: ANN202 - what the MCP SDK does with the model, then the tool
        return context_tool(data, NS, **model.model_validate(arguments).model_dump())

    r = call({"question": ADVERSE, "budget": 2000})
    assert r.ok and r.data["text"] == adverse.text and r.data["triples"][0]["tail_id"] == THROMBOCYTOPENIA
    assert "Levofloxacin (Compound)" in r.message and "of 2000 tokens" in r.message
    assert call({"question": ADVERSE, "as_of": "2016-06-01"}).data["as_of"] == "2016-06-01"
    for args, problem in [({"question": ADVERSE, "top_k": 3}, "top_k\n  Extra inputs are not permitted"),
                          ({"question": ADVERSE, "budget": 10}, "budget\n  Input should be greater than or equal to 64"),
                          ({"budget": 500}, "question\n  Field required"),
                          ({"question": ADVERSE, "as_of": "June 2016"}, "as_of\n  String should")]:
        with pytest.raises(ValidationError) as refused:
            call(args)
        assert problem in str(refused.value), str(refused.value)
    assert "question is empty" in context_tool(data, NS, "  ").message
    assert "2016-13-01" in context_tool(data, NS, ADVERSE, as_of="2016-13-01").message
