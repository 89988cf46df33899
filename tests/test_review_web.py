"""The review page over HTTP (Starlette's TestClient) and once in a real headless chromium driven by playwright."""

from __future__ import annotations

import datetime as dt

import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from browser_harness import CHROMIUM, launch
from starlette.testclient import TestClient

from karma_dagster.cogmg.models import Passage
from karma_dagster.kg.schema import KGSchema
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.app import create_app
from karma_dagster.review.changes import with_changes
from karma_dagster.review.cogmg_items import items_from_completions
from karma_dagster.review.karma_items import collect_karma
from karma_dagster.review.models import DecisionIn
from karma_dagster.review.queue import ReviewQueue
from karma_dagster.schemas.frames import records_to_frame
from karma_dagster.schemas.records import ResolvedRow
from karma_dagster.runtime.stage_store import StageStore
from karma_dagster.web.guard import TOKEN_HEADER
from test_review_queue import (DOC, METFORMIN, SEED, T2DM, by_source, completion, filled_queue, paths,  # noqa: F401
                               resolved_row, seed_kg)

SCREENSHOT = Path("/tmp/karma_review.png")


@pytest.fixture
def queue(paths: DataPaths) -> ReviewQueue:  # noqa: F811
    q = filled_queue(paths)
    q.add_items(with_changes(items_from_completions([completion()]), paths.kg))
    return q


@pytest.fixture
def client(queue: ReviewQueue) -> TestClient:
    app = create_app(queue, dagster_url="http://127.0.0.1:3999/")  # the page's own Host and session token
    return TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token},
                      follow_redirects=False)


def test_with_date_partitions_a_stage_item_links_its_documents_day(queue: ReviewQueue) -> None:
    """partitioning/mode.py: a KARMA stage's partition is then the document's date; a question's stays its own."""
    from karma_dagster.ingest.keys import date_of_document_key

    app = create_app(queue, dagster_url="http://127.0.0.1:3999/", by_date=True)
    html = TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token}).get("/").text
    day = date_of_document_key(DOC)
    assert day != DOC and f"/assets/local/resolved?view=partitions&amp;partition={day}\"" in html
    assert "/assets/local/completions?view=partitions&amp;partition=sample_biomed.v1__q07" in html


def test_an_items_paper_is_named_by_title_with_its_key_a_click_away(queue: ReviewQueue) -> None:
    from karma_dagster.ingest.papers import PaperInfo

    known = {DOC: PaperInfo(doc_key=DOC, title="Metformin & type 2 diabetes: a cohort", first_author="Ng T",
                            journal="Diabetes Care", date=dt.date(2016, 1, 14), date_source="publication")}
    app = create_app(queue, dagster_url="http://127.0.0.1:3999/",
                     papers=lambda keys: {k: known[k] for k in keys if k in known})
    html = TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token}).get("/").text
    assert '<cite class="paper">Metformin &amp; type 2 diabetes: a cohort</cite>' in html
    assert "Ng T et al., Diabetes Care, 2016-01-14" in html
    assert f'partition={DOC}" target="_blank" rel="noopener">{DOC}</a>)' in html, "the key, one click away"
    assert html.count('<cite class="paper">') == 4, "every item's paper is DOC (the completion's: its passage's)"


def test_queue_page_shows_items_with_marked_evidence_and_dagster_links(client: TestClient, queue: ReviewQueue) -> None:
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    assert html.count('<article class="item"') == 4
    assert '<mark class="head">Metformin</mark>' in html and '<mark class="tail">type 2 diabetes</mark>' in html
    assert f"supersedes edge {METFORMIN} -treats-&gt; {T2DM}" in html  # the change, escaped
    assert ('href="http://127.0.0.1:3999/assets/local/resolved?view=partitions&amp;partition=' + DOC + '"') in html
    assert ('http://127.0.0.1:3999/assets/local/completions?view=partitions&amp;partition=sample_biomed.v1__q07'
            in html)
    assert "reinforces edge (score 0.90 → 0.90)" in html  # the seed's 0.9 is a prior one 0.6 reading does not lift

    only = client.get("/", params={"source": "cogmg"}).text
    assert only.count('<article class="item"') == 1 and "Methimazole" in only
    scored = client.get("/", params={"min_score": "0.7"}).text  # only the completion scores 0.74
    assert scored.count('<article class="item"') == 1
    typed = client.get("/", params={"relation": "causes"}).text
    assert typed.count('<article class="item"') == 1 and "supersedes edge" in typed
    bad = client.get("/", params={"min_score": "high"})
    assert bad.status_code == 422 and "min_score &#39;high&#39; is not a number" in bad.text


def test_decisions_through_the_forms_and_the_api(client: TestClient, queue: ReviewQueue) -> None:
    items = by_source(queue)
    conflict, cogmg = items["unresolved_conflict"].item_id, items["cogmg"].item_id
    r = client.post(f"/items/{conflict}/decision?source=unresolved_conflict", data={"action": "accept",
                                                                                     "reviewer": "alice"})
    assert r.status_code == 303
    assert r.headers["location"].startswith("/?source=unresolved_conflict&message=accepted+metformin+-causes-")
    stored = queue.decision(conflict)
    assert (stored.action, stored.reviewer) == ("accept", "alice")

    again = client.post(f"/items/{conflict}/decision", data={"action": "reject", "reviewer": "bob"})
    assert again.status_code == 409 and "already decided (accept) by alice" in again.text
    assert queue.decision(conflict) == stored

    unknown = client.post("/items/0000/decision", data={"action": "accept", "reviewer": "bob"})
    assert unknown.status_code == 404 and "no review item &#39;0000&#39; in the queue" in unknown.text
    nameless = client.post(f"/items/{cogmg}/decision", data={"action": "accept", "reviewer": " "})
    assert nameless.status_code == 422 and "reviewer name is empty" in nameless.text
    assert queue.decision(cogmg) is None and queue.decision("0000") is None

    edited = client.post(f"/items/{cogmg}/decision", data={
        "action": "edit", "reviewer": "carol", "head_id": items["cogmg"].head_id, "head_name": "thiamazole",
        "relation": "treats", "tail_id": items["cogmg"].tail_id, "tail_name": "Graves disease"})
    assert edited.status_code == 303
    assert queue.decision(cogmg).edits == {"head_name": ["Methimazole", "thiamazole"]}
    decided = client.get("/", params={"status": "decided"}).text
    assert "edited: head_name Methimazole → thiamazole" in decided and "not merged yet" in decided

    # JSON: the same rules, the same messages
    listing = client.get("/api/items").json()
    assert {x["item"]["source"] for x in listing} == {"schema_review", "new_relation_type"}
    target = listing[0]["item"]["item_id"]
    assert client.post(f"/api/items/{target}/decision", json={"action": "reject", "reviewer": "dan"}).status_code == 201
    twice = client.post(f"/api/items/{target}/decision", json={"action": "accept", "reviewer": "eve"})
    assert twice.status_code == 409 and "by dan" in twice.json()["error"]
    assert client.post("/api/items/nope/decision", json={"action": "accept", "reviewer": "eve"}).status_code == 404
    assert client.post(f"/api/items/{listing[1]['item']['item_id']}/decision",
                       json={"action": "maybe", "reviewer": "eve"}).status_code == 422
    # a page of another site cannot decide for the reviewer
    foreign = client.post(f"/api/items/{listing[1]['item']['item_id']}/decision",
                          json={"action": "accept", "reviewer": "eve"}, headers={"origin": "http://evil.example"})
    assert foreign.status_code == 403 and queue.decision(listing[1]["item"]["item_id"]) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(data_root: Path):
    """`karma review` on the loopback in a subprocess: (its base address, the printed address with the key)."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "karma_dagster.review.cli_review", "--data-dir", str(data_root), "--no-collect",
         "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ})
    try:
        base, printed = f"http://127.0.0.1:{port}", ""
        while server.stdout and not printed:
            line = server.stdout.readline().decode()
            if not line:
                pytest.fail("the review server stopped before printing its address")
            if line.startswith("review page: "):
                printed = line.removeprefix("review page: ").split()[0]
        for _ in range(100):
            try:
                if httpx.get(base + "/", timeout=1).status_code == 401:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            pytest.fail("the review server did not answer")
        yield base, printed
    finally:
        server.terminate()
        server.wait(10)


def test_accept_shortcut_in_a_real_browser(queue: ReviewQueue, paths: DataPaths) -> None:  # noqa: F811
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    first = queue.items()[0][0]  # best score first: what the page selects on load
    with serving(paths.root) as (base, printed), sync_api.sync_playwright() as pw:
        assert printed.startswith(base + "/s/") and printed.endswith("/")  # the read key is in its path
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        console: list[str] = []  # a Content-Security-Policy violation shows here: it must not break the page
        page.on("console", lambda msg: console.append(msg.text))
        page.goto(printed)
        assert page.url == printed  # no redirect: the key stays in the address, no cookie holds it
        assert page.locator("article.item.selected").get_attribute("data-id") == first.item_id
        page.keyboard.press("a")  # no reviewer name yet: nothing is sent, the name field asks for one
        assert page.evaluate("document.activeElement.id") == "reviewer" and page.input_value("#reviewer") == ""
        page.fill("#reviewer", "alice")
        page.locator("#reviewer").blur()
        page.keyboard.press("j")
        assert page.locator("article.item.selected").get_attribute("data-id") != first.item_id
        page.keyboard.press("k")  # back to the first item
        page.keyboard.press("e")  # the edit form opens on the selected item, its first field focused
        assert page.locator("article.item.selected details.edit").get_attribute("open") is not None
        assert page.evaluate("document.activeElement.name") == "head_id"
        page.locator("article.item.selected h2").click()  # leave the field: keys are shortcuts again
        page.keyboard.press("a")
        page.locator(f'article.item[data-id="{first.item_id}"] p.decided').wait_for()
        assert f"accepted {first.triple_text} (alice)" in page.inner_text("p.message")
        page.screenshot(path=str(SCREENSHOT), full_page=True)
        page.reload()
        assert page.locator("article.item").count() == 3
        assert not [m for m in console if "Content Security Policy" in m], console
        browser.close()
    stored = queue.decision(first.item_id)
    assert stored is not None and (stored.action, stored.reviewer) == ("accept", "alice")
    assert SCREENSHOT.exists()


def test_cli_refuses_a_non_loopback_host(paths: DataPaths) -> None:  # noqa: F811
    from karma_dagster.review.cli_review import main

    assert main(["--data-dir", str(paths.root), "--host", "0.0.0.0"]) == 2
    assert not ReviewQueue.for_data(paths).path.exists()  # refused before collecting anything


def test_cli_collects_then_merges(paths: DataPaths, capsys: pytest.CaptureFixture) -> None:  # noqa: F811
    from karma_dagster.review.cli_review import main

    assert main(["--data-dir", str(paths.root), "--collect-only"]) == 0
    assert '"new": 3' in capsys.readouterr().out
    queue = ReviewQueue.for_data(paths)
    conflict = by_source(queue)["unresolved_conflict"]
    queue.decide(conflict.item_id, DecisionIn(action="accept", reviewer="alice"))
    assert main(["--data-dir", str(paths.root), "--merge"]) == 0
    assert "local " in (out := capsys.readouterr().out) and "merged 1 reviewed item(s)" in out
    assert queue.decision(conflict.item_id).merged_at is not None
    assert main(["--data-dir", str(paths.root), "--merge"]) == 0
    assert "no accepted decision waits for the KG" in capsys.readouterr().out


def test_a_missed_question_hits_after_its_completion_is_accepted_in_the_page(paths: DataPaths) -> None:  # noqa: F811
    """CogMG's loop: the KG misses, the completion is reviewed in the page, merged, and the same plan hits."""
    from karma_dagster.cogmg.answer import run_plan
    from karma_dagster.cogmg.models import Completion, LinkedEntity, Passage, QueryPlan, QueryStep
    from karma_dagster.review.merge_inputs import chain_docs_from, merge_accepted

    ipf = LinkedEntity(mention="idiopathic pulmonary fibrosis", entity_id="Disease::DOID:0050156",
                       name="idiopathic pulmonary fibrosis", kind="Disease", distance=0.0)
    plan = QueryPlan(question="Which drug treats idiopathic pulmonary fibrosis?", decomposer="test",
                     steps=[QueryStep(entity=ipf, relation="treats", direction="in", answer_kinds=["Compound"])])
    before = run_plan(plan, question_id="q-ipf", backbone="local", data=paths)
    assert not before.hit and [(m.head, m.relation, m.tail) for m in before.missing] == [
        ("?", "treats", "idiopathic pulmonary fibrosis")]

    text = "Pirfenidone slowed the decline in lung function of patients with idiopathic pulmonary fibrosis."
    filled = Completion(
        question_id="q-ipf", question=plan.question, backbone="local", head_id="new::Compound::pirfenidone",
        head_name="pirfenidone", head_kind="Compound", relation="treats", tail_id=ipf.entity_id, tail_name=ipf.name,
        tail_kind="Disease", method="passage_re", supported=True, score=0.81, evidence_doc_keys=["2016-02-12_pmc1"],
        passages=[Passage(passage_id="p3", doc_key="2016-02-12_pmc1", text=text, score=9.1)])
    queue = ReviewQueue.for_data(paths)
    queue.add_items(with_changes(items_from_completions([filled]), paths.kg))
    app = create_app(queue)
    client = TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token},
                        follow_redirects=False)
    (item,) = [i for i, _ in queue.items(source="cogmg")]
    assert item.change == "new edge (score 0.81); new entity 'pirfenidone' (Compound)"
    assert "new entity &#39;pirfenidone&#39; (Compound)" in client.get("/?source=cogmg").text
    assert client.post(f"/items/{item.item_id}/decision",
                       data={"action": "accept", "reviewer": "alice"}).status_code == 303

    (outcome,) = merge_accepted(paths.kg, queue, chain_docs=chain_docs_from(paths))
    assert (outcome.items, outcome.stats.n_new_nodes, outcome.stats.n_new_edges) == ([item.item_id], 1, 1)
    after = run_plan(plan, question_id="q-ipf", backbone="local", data=paths)
    assert after.hit and after.answers == ["pirfenidone"] and not after.missing
    assert after.triples[0].provenance[0]["prompt_version"] == "reviewed by alice via cogmg"


# ---------------------------------------------------------------- a real day's inbox: 1,000+ items, paged
def _seed_nodes(kind: str, n: int) -> list[tuple[str, str, str]]:
    import csv

    with (SEED / "nodes.tsv").open(encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["kind"] == kind]
    return [(r["id"], r["name"], "Chemical" if kind == "Compound" else kind) for r in rows[:n]]


def inbox_rows(d: int, doc: str, drugs: list, diseases: list, anatomy: list) -> list:
    """One document's resolved table as the chain writes it: what needs a person, and a kept row."""
    rows = []
    for k in range(10):
        drug, disease = drugs[(d * 10 + k) % len(drugs)], diseases[(d * 3 + k) % len(diseases)]
        common = dict(doc_key=doc, segment_id=f"{doc}#s{k}", summary_id=f"{doc}#sum1",
                      sample_confidence=round(((d * 37 + k * 11) % 90 + 5) / 100, 2),
                      evidence=f"In this cohort {drug[1]} was given to patients with {disease[1]} for a year.")
        if k < 4:  # an extractor label the schema cannot place: Accept maps it to a relation the reviewer picks
            rows.append(resolved_row(f"t{k}", drug, disease, "Association", head_kg_type="Compound",
                                     tail_kg_type="Disease", alignment_prob=0.1, **common))
        elif k < 6:
            rows.append(resolved_row(f"t{k}", drug, anatomy[(d + k) % len(anatomy)], "Association",
                                     head_kg_type="Compound", tail_kg_type="Anatomy", **common))
        elif k < 9:
            rows.append(resolved_row(
                f"t{k}", drug, disease, "Positive_Correlation", head_kg_type="Compound", tail_kg_type="Disease",
                kg_relation="causes", metaedge="CcD", alignment_prob=0.9, schema_status="aligned", conflict=True,
                contradicts=f"{drug[0]} -treats-> {disease[0]}", verdict="contradict", action="review",
                against="kg", against_confidence=0.8, debate_confidence=0.5, adjudication="too close to call",
                **common))
        else:
            rows.append(resolved_row(f"t{k}", drug, disease, "Negative_Correlation", head_kg_type="Compound",
                                     tail_kg_type="Disease", kg_relation="treats", metaedge="CtD",
                                     alignment_prob=0.9, schema_status="aligned", action="keep", adjudication=None,
                                     **common))
    return rows


@pytest.fixture(scope="module")
def inbox(tmp_path_factory: pytest.TempPathFactory, seed_kg: Path) -> DataPaths:  # noqa: F811
    """60 documents' stage tables and 500 CogMG completions, collected through the real collectors and queue."""
    data = DataPaths(tmp_path_factory.mktemp("inbox") / "karma")
    data.root.mkdir(parents=True)
    shutil.copy(seed_kg, data.kg)
    # 600 compounds: no two documents' rows (nor two completions) state one fact, so the queue holds 1,000+ items
    drugs, diseases, anatomy = _seed_nodes("Compound", 600), _seed_nodes("Disease", 90), _seed_nodes("Anatomy", 40)
    stages = StageStore(data.stages_dir)
    for d in range(60):
        doc = f"2016-{1 + d % 12:02d}-{1 + d % 28:02d}_pmc{4700000 + d}"
        stages.write("local", "resolved", doc, records_to_frame(inbox_rows(d, doc, drugs, diseases, anatomy),
                                                                ResolvedRow))
    queue = ReviewQueue.for_data(data)
    queue.add_items(with_changes(collect_karma(data, KGSchema.load()), data.kg))
    filled = []
    for q in range(500):  # each question's completion, as the completions asset wrote it under its partition key
        drug, disease = drugs[(q * 7) % len(drugs)], diseases[q % len(diseases)]
        c = completion(question_id=f"q{q:03d}", score=round((q * 53 % 100) / 100, 2)).model_copy(update={
            "head_id": drug[0], "head_name": drug[1], "tail_id": disease[0], "tail_name": disease[1],
            "question": f"Which drug treats {disease[1]}?", "passages": [Passage(
                passage_id=f"p{q % 40}", doc_key="2016-02-12_pmc4737013", score=round(4 + q % 7 * 0.9, 2),
                text=f"{drug[1]} was given to adults with {disease[1]}; symptoms eased within weeks.")]})
        filled += items_from_completions([c], partition_key=f"sample_biomed.v1__q{q:03d}")
    queue.add_items(with_changes(filled, data.kg))
    return data


def _copy_queue(inbox: DataPaths, tmp_path: Path) -> ReviewQueue:
    """A copy of the inbox's queue: a test that decides must not change what the next test reads."""
    shutil.copy(ReviewQueue.for_data(inbox).path, tmp_path / "queue.sqlite")
    return ReviewQueue(tmp_path / "queue.sqlite")


def _client(queue: ReviewQueue) -> TestClient:
    app = create_app(queue)
    return TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token},
                      follow_redirects=False)


def _ids(html: str) -> list[str]:
    return re.findall(r'<article class="item[^"]*" data-id="([0-9a-f]+)"', html)


def _count(html: str, key: str) -> int:
    (n,) = re.findall(rf'<span data-count="{re.escape(key)}">([0-9,]+)</span>', html)
    return int(n.replace(",", ""))


def _stored_decisions(queue: ReviewQueue) -> int:
    """Rows in the store's decisions table, read with sqlite itself (not through the code under test)."""
    con = sqlite3.connect(queue.path)
    try:
        return con.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
    finally:
        con.close()


def test_a_thousand_items_are_counted_and_paged_in_a_stable_order(inbox: DataPaths, tmp_path: Path) -> None:
    queue = _copy_queue(inbox, tmp_path)
    client = _client(queue)
    everything = [i.item_id for i, _ in queue.items(status="all")]
    by_source: dict[str, int] = {}
    for i, _ in queue.items(status="all"):
        by_source[i.source] = by_source.get(i.source, 0) + 1
    total = len(everything)
    assert total >= 1000 and set(by_source) == {"cogmg", "schema_review", "new_relation_type", "unresolved_conflict"}

    first = client.get("/")
    html = first.text
    assert first.status_code == 200 and len(_ids(html)) == 50
    assert f"items 1–50 of {total:,}" in html and f"<title>karma review ({total:,})</title>" in html
    assert len(first.content) < 200_000  # one page of 50, whatever the queue holds
    for source, n in by_source.items():
        assert _count(html, f"filtered:{source}:pending") == n and _count(html, f"filtered:{source}:all") == n
    assert _count(html, "filtered:all:pending") == total and _count(html, "filtered:all:decided") == 0

    # every page in turn: the whole queue once, best score first, nothing twice
    seen, n = [], 1
    while True:
        ids = _ids(client.get("/", params={"page": n}).text)
        if not ids or (seen and ids[0] in seen):
            break
        seen += ids
        n += 1
    assert seen == [i.item_id for i, _ in queue.items()] == everything and n - 1 == -(-total // 50)

    # filters: counted (whole queue in brackets), kept by every page link
    only = client.get("/", params={"source": "schema_review", "min_score": "0.3"}).text
    matching = queue.items(source="schema_review", min_score=0.3)
    assert _count(only, "filtered:all:pending") == len(matching) > 50
    assert _count(only, "whole:all:pending") == total and _count(only, "filtered:cogmg:pending") == 0
    assert _ids(only) == [i.item_id for i, _ in matching[:50]]
    assert 'rel="next" href="/?source=schema_review&amp;min_score=0.3&amp;page=2"' in only

    # page numbers: bounded and checked; past the end shows the last page, saying so
    for bad in ("0", "-1", "abc", "1.5", "99999999999"):
        r = client.get("/", params={"page": bad})
        assert r.status_code == 422 and "is not a page number" in r.text and not _ids(r.text), bad
    assert client.get("/", params={"status": "maybe"}).status_code == 422
    for bad in ("0", "500", "x"):
        r = client.get("/", params={"per_page": bad})
        assert r.status_code == 422 and "per_page" in r.text and "1 to 200" in r.text, bad
    last = -(-total // 50)
    past = client.get("/", params={"page": last + 5}).text
    assert f"page {last + 5} is past the last page ({last})" in past and _ids(past) == everything[(last - 1) * 50:]
    big = client.get("/", params={"per_page": 200, "page": 2}).text
    assert _ids(big) == everything[200:400] and f"items 201–400 of {total:,}" in big
    assert [x["item"]["item_id"] for x in client.get("/api/items", params={"page": 3, "per_page": 10}).json()] == \
        everything[20:30]
    assert client.get("/api/items", params={"page": "0"}).status_code == 422

    # decisions keep the order: the decided leave the pending pages, the rest keep their places; `all` holds still
    page2 = _ids(client.get("/", params={"page": 2}).text)
    for target in (everything[3], everything[7], page2[0]):
        r = client.post(f"/items/{target}/decision?page=2&min_score=0", data={"action": "reject", "reviewer": "alice"})
        assert r.status_code == 303 and "page=2" in r.headers["location"] and "min_score=0" in r.headers["location"]
    left = [i for i in everything if i not in (everything[3], everything[7], page2[0])]
    assert _ids(client.get("/", params={"page": 2}).text) == left[50:100]
    assert _ids(client.get("/", params={"page": 2, "status": "all"}).text) == everything[50:100]
    after = client.get("/").text
    assert _count(after, "filtered:all:pending") == total - 3 and _count(after, "filtered:all:reject") == 3
    assert f"items 1–50 of {total - 3:,}" in after


def test_a_decision_without_a_reviewer_is_refused_before_it_is_stored(inbox: DataPaths, tmp_path: Path) -> None:
    queue = _copy_queue(inbox, tmp_path)
    client = _client(queue)
    target = queue.items(source="schema_review")[0][0]
    for reviewer in ("", "   ", "\t\n", "a", "x" * 81):
        form = client.post(f"/items/{target.item_id}/decision", data={"action": "reject", "reviewer": reviewer})
        assert form.status_code == 422 and "reviewer" in form.text, repr(reviewer)
        api = client.post(f"/api/items/{target.item_id}/decision", json={"action": "reject", "reviewer": reviewer})
        assert api.status_code == 422 and api.json()["error"].startswith("reviewer"), repr(reviewer)
    missing = client.post(f"/api/items/{target.item_id}/decision", json={"action": "accept"})
    assert missing.status_code == 422 and "reviewer" in missing.json()["error"]
    assert client.post(f"/items/{target.item_id}/decision", data={"action": "accept"}).status_code == 422
    assert _stored_decisions(queue) == 0 and queue.decision(target.item_id) is None

    # the answer to a decision is the row as stored, the item as decided (edits applied) and fresh counters
    assert target.change.startswith("maps the triple to the relation you pick") and target.relation == "Association"
    edits = {f: getattr(target, f) for f in ("head_id", "head_name", "tail_id", "tail_name")} | {"relation": "treats"}
    r = client.post(f"/api/items/{target.item_id}/decision?source=schema_review",
                    json={"action": "edit", "reviewer": " bob ", "edits": edits})
    assert r.status_code == 201 and _stored_decisions(queue) == 1
    body = r.json()
    assert body["decision"] == queue.decision(target.item_id).model_dump(mode="json")
    assert body["decision"]["reviewer"] == "bob"
    assert body["decision"]["edits"] == {"relation": ["Association", "treats"]}
    assert body["item"]["relation"] == "treats" and body["item"]["head_name"] == target.head_name
    assert body["counts"]["filtered:schema_review:edit"] == 1 and body["counts"]["filtered:cogmg:all"] == 0
    assert body["counts"]["whole:all:pending"] == len(queue.items())
    decided = client.get("/", params={"status": "decided"}).text  # the server-rendered card: the stored triple
    assert '<span class="relation">-treats-&gt;</span>' in decided and "nothing yet" not in decided
    assert "edit by bob" in decided and "relation Association → treats" in decided


def test_shortcuts_names_paging_and_confirmations_in_a_real_browser(inbox: DataPaths) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    queue = ReviewQueue.for_data(inbox)
    total = len(queue.items())
    with serving(inbox.root) as (base, printed), sync_api.sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        console: list[str] = []
        page.on("console", lambda msg: console.append(msg.text))
        page.goto(printed)
        assert f"items 1–50 of {total:,}" in page.inner_text("nav.pager")
        assert page.locator("article.item").count() == 50
        row = page.locator("table.counts tr.total").inner_text()
        assert f"{total:,}" in row
        page.screenshot(path="/tmp/review_page1.png")

        # no name yet: `a` decides nothing, types nothing, and says why
        first = page.locator("article.item.selected").get_attribute("data-id")
        page.keyboard.press("a")
        assert page.evaluate("document.activeElement.id") == "reviewer"
        assert page.input_value("#reviewer") == "" and page.locator("#reviewer-needed").is_visible()
        page.screenshot(path="/tmp/review_name_refused.png")
        # in the name field the keys are the field's: they type, and no decision happens
        for key in ("a", "r", "j", "e"):
            page.keyboard.press(key)
        assert page.input_value("#reviewer") == "arje"
        assert page.locator("article.item.selected").get_attribute("data-id") == first
        assert _stored_decisions(queue) == 0 and page.locator("p.decided").count() == 0
        page.fill("#reviewer", "alice")
        page.locator("#reviewer").blur()
        assert not page.locator("#reviewer-needed").is_visible()

        page.keyboard.press("a")  # decided in place: the card shows the stored row, the next card is selected
        card = page.locator(f'article.item[data-id="{first}"]')
        card.locator("p.decided").wait_for()
        assert card.locator("p.decided").inner_text().startswith("accept by alice at ")
        assert page.locator("article.item.selected").get_attribute("data-id") != first
        stored = queue.decision(first)
        assert (stored.action, stored.reviewer) == ("accept", "alice") and _stored_decisions(queue) == 1
        assert f"{stored.decided_at:%Y-%m-%d %H:%M:%S} UTC" in card.locator("p.decided").inner_text()
        assert page.inner_text('[data-count="filtered:all:pending"]') == f"{total - 1:,}"

        # an edit: the card and the confirmation show the edited relation, and no longer "nothing yet"
        page.goto(printed + "?source=schema_review")
        expected = [i.item_id for i, _ in queue.items(source="schema_review")]
        assert [page.locator("article.item").nth(k).get_attribute("data-id") for k in range(3)] == expected[:3]
        page.keyboard.press("j")
        edited_id = page.locator("article.item.selected").get_attribute("data-id")
        assert edited_id == expected[1]
        target = page.locator(f'article.item[data-id="{edited_id}"]')  # the selection moves on once decided
        assert "Accepting:" in target.inner_text() and "nothing yet" not in target.inner_text()
        page.keyboard.press("e")  # the form opens, its first field focused, and the `e` is not typed into it
        assert page.evaluate("document.activeElement.name") == "head_id"
        assert target.locator("input[name=head_id]").input_value() == queue.item(edited_id).head_id
        target.locator("input[name=relation]").fill("treats")
        target.locator("input[name=relation]").press("Enter")
        target.locator("p.decided").wait_for()
        assert target.locator(".triple .relation").inner_text() == "-treats->"
        assert "nothing yet" not in target.inner_text()
        assert "edit by alice" in target.inner_text() and "relation Association → treats" in target.inner_text()
        assert "-treats->" in page.inner_text("p.message") and "(alice)" in page.inner_text("p.message")
        assert queue.decision(edited_id).edits == {"relation": ["Association", "treats"]}
        target.screenshot(path="/tmp/review_edited.png")

        # paging keeps the filters and the order, decisions included
        page.click("nav.pager >> nth=0 >> a[rel=next]")
        assert "source=schema_review" in page.url and "page=2" in page.url
        now = [i.item_id for i, _ in queue.items(source="schema_review")]
        assert page.locator("article.item").first.get_attribute("data-id") == now[50] == expected[51]
        assert not [m for m in console if "Content Security Policy" in m], console
        browser.close()
