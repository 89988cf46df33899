"""The shipped QA set (data/qa/sample_questions.v2.yaml) measures enrichment: its answers are stated in the sample
papers, the seed KG alone answers none of them, and a KG that merged the papers' edges answers them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from karma_dagster.ingest.parse import parse_file
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import SEED_ONLY_NAMESPACE, KGStore, NodeIn, schema_relations
from karma_dagster.metrics.judge import RuleJudge
from karma_dagster.metrics.qa import (
    answer_questions,
    answer_with_and_without_increments,
    default_questions,
    load_questions,
    normalize,
    score,
)

REPO = Path(__file__).resolve().parents[1]
SEED, INBOX = REPO / "data" / "seed_kg", REPO / "data" / "inbox"


@pytest.fixture(scope="module")
def questions():
    return load_questions()


@pytest.fixture(scope="module")
def seed_kg(tmp_path_factory: pytest.TempPathFactory) -> KGStore:
    """The shipped seed KG (the Hetionet demo subset), nothing merged."""
    kg = KGStore(tmp_path_factory.mktemp("seed") / "kg.duckdb")
    import_hetionet(kg, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    return kg


@pytest.fixture(scope="module")
def paper_texts() -> dict[str, str]:
    """Normalized text of each sample paper, by inbox file name and, for a PubTator file, 'file#PMID'."""
    texts: dict[str, str] = {}
    for path in sorted(INBOX.iterdir()):
        if path.suffix in (".json", ".md"):
            continue
        for doc in parse_file(path, INBOX):
            text = normalize(" ".join([doc.title, *(s.text for s in doc.sections)]))
            texts[path.name] = texts.get(path.name, "") + " " + text
            if doc.pmid:
                texts[f"{path.name}#{doc.pmid}"] = text
    return texts


def test_the_default_set_is_v2_with_at_least_60_questions(questions):
    assert default_questions().name == "sample_questions.v2.yaml" and questions.version == 2
    assert len(questions.questions) >= 60
    assert len({q.id for q in questions.questions}) == len(questions.questions)
    relations = schema_relations()
    for q in questions.questions:
        assert set(q.relations) <= relations, f"{q.id}: {set(q.relations) - relations} is no KG relation"
        assert q.source, f"{q.id}: says where the papers state the answer"


def test_no_question_is_answered_plausibly_from_the_seed_alone(seed_kg, questions):
    answers = answer_questions(seed_kg, SEED_ONLY_NAMESPACE, questions, RuleJudge())
    plausible = {a.id: a.how for a in answers if a.plausible}
    assert plausible == {}, f"the seed KG alone answers {plausible}: those answers need no extracted edge"
    # the seed is not empty around the questions: many start at a seed node and reach neighbours, just not the key
    assert sum(bool(a.answers) for a in answers) >= 20


def test_each_question_is_about_the_papers(seed_kg, questions, paper_texts):
    """(b) the entity is a KG node or a name in its paper, and the paper names the entity and a key answer."""
    with seed_kg.connect(read_only=True) as con:
        names = {normalize(n) for (n,) in con.execute("SELECT name FROM seed_nodes").fetchall()}
    for q in questions.questions:
        assert q.source in paper_texts, f"{q.id}: source {q.source!r} is no sample paper"
        text = paper_texts[q.source]
        in_text = [n for n in q.names() if normalize(n) in text]
        assert in_text or normalize(q.entity) in names, f"{q.id}: {q.entity!r} is neither a KG node nor in {q.source}"
        assert in_text, f"{q.id}: {q.source} never names {q.names()}"
        stated = [p for p in q.plausible if normalize(p) in text]
        assert stated, f"{q.id}: {q.source} names none of the plausible answers {q.plausible}"


def test_questions_are_scored_with_and_without_the_increments(tmp_path, seed_kg, questions):
    """(c) a real KG (the shipped seed) plus the merge of three edges two sample papers state."""
    kg = KGStore(tmp_path / "kg.duckdb")
    kg.path.write_bytes(seed_kg.path.read_bytes())
    graves, melanoma = "Disease::DOID:12361", "Disease::DOID:1909"
    levofloxacin, thrombocytopenia = "Compound::DB01137", "Side Effect::C0040034"
    ipilimumab = NodeIn(id="new::Compound::ipilimumab", name="ipilimumab", kind="Compound")

    def row(doc: str, tid: str, head: str, label: str, relation: str, tail: str, metaedge: str, evidence: str) -> dict:
        return {"doc_key": doc, "triple_id": tid, "head_id": head, "relation": label, "kg_relation": relation,
                "tail_id": tail, "metaedge": metaedge, "score": 0.8, "segment_id": f"{doc}#s1", "accepted": True,
                "evidence": evidence}

    ipi, levo = "2016-02-12_pmc4737013", "2016-02-15_pmc4738914"
    merge_increment(kg, dt.date(2016, 2, 12), "local", {ipi: ([
        row(ipi, "t1", ipilimumab.id, "Positive_Correlation", "causes", graves, "CcD",
            "Graves' disease can develop after starting ipilimumab."),
        row(ipi, "t2", ipilimumab.id, "Negative_Correlation", "treats", melanoma, "CtD",
            "Ipilimumab has been shown to increase survival in patients with melanoma."),
    ], [ipilimumab])}, "r1")
    merge_increment(kg, dt.date(2016, 2, 15), "local", {levo: ([
        row(levo, "t1", levofloxacin, "Positive_Correlation", "causes", thrombocytopenia, "CcSE",
            "We present a case of suspected levofloxacin-induced thrombocytopenia."),
    ], [])}, "r2")

    answers, seed_answers = answer_with_and_without_increments(kg, "local", questions, RuleJudge())
    # ipilimumab -causes-> Graves' disease answers both of its directions; -treats-> melanoma both of its;
    # levofloxacin -causes-> Thrombocytopenia both of its: 6 questions, and nothing over the seed alone
    assert {a.id for a in answers if a.plausible} == {
        "ipilimumab-adverse", "graves-inducing-drug", "ipilimumab-indication", "melanoma-ipilimumab",
        "thrombocytopenia-drugs", "levofloxacin-adverse"}
    n = len(questions.questions)
    assert score(answers).coherence == pytest.approx(6 / n) and score(answers).plausible == 6
    assert score(seed_answers).plausible == 0 and score(seed_answers).coherence == 0.0
    by_id = {a.id: a for a in answers}
    assert "ipilimumab" in by_id["melanoma-ipilimumab"].answers, "the new node is reached by its mention name"
    assert by_id["graves-inducing-drug"].how == "curated key: ipilimumab"
    assert "Levofloxacin" not in {x for a in seed_answers for x in a.answers if a.id == "thrombocytopenia-drugs"}


def test_a_malformed_question_set_names_the_file(tmp_path):
    bad = tmp_path / "questions.v9.yaml"
    bad.write_text("version: 9\nquestions:\n  - {id: a, question: q, entity: A, relations: [], plausible: [B]}\n")
    with pytest.raises(ValueError, match="questions.v9.yaml is malformed"):
        load_questions(bad)
    twice = tmp_path / "twice.v1.yaml"
    twice.write_text("version: 1\nquestions:\n" + "  - {id: a, question: q, entity: A, relations: [treats], "
                     "plausible: [B]}\n" * 2)
    with pytest.raises(ValueError, match=r"repeats question ids \['a'\]"):
        load_questions(twice)
    with pytest.raises(FileNotFoundError, match="nowhere.yaml"):
        load_questions(tmp_path / "nowhere.yaml")
