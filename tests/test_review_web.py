"""The review page over HTTP (Starlette's TestClient) and once in a real headless chromium driven by playwright."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from karma_dagster.paths import DataPaths
from karma_dagster.review.app import create_app
from karma_dagster.review.changes import with_changes
from karma_dagster.review.cogmg_items import items_from_completions
from karma_dagster.review.models import DecisionIn
from karma_dagster.review.queue import ReviewQueue
from karma_dagster.web.guard import TOKEN_HEADER
from test_review_queue import DOC, METFORMIN, T2DM, by_source, completion, filled_queue, paths, seed_kg  # noqa: F401

CHROMIUM = "/usr/bin/chromium"
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
    assert "reinforces edge (score 0.90 → 0.96)" in html

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


def test_accept_shortcut_in_a_real_browser(queue: ReviewQueue, paths: DataPaths) -> None:  # noqa: F811
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "karma_dagster.review.cli_review", "--data-dir", str(paths.root), "--no-collect",
         "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ})
    try:
        base = f"http://127.0.0.1:{port}"
        printed = ""  # the address the server prints: it carries the session's key, which sets the page's cookie
        while server.stdout and not printed:
            line = server.stdout.readline().decode()
            if not line:
                pytest.fail("the review server stopped before printing its address")
            if line.startswith("review page: "):
                printed = line.removeprefix("review page: ").split()[0]
        assert printed.startswith(base + "/?key=")
        for _ in range(100):
            try:
                if httpx.get(base + "/", timeout=1).status_code == 401:  # up, and closed to who lacks the key
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            pytest.fail("the review server did not answer")
        first = queue.items()[0][0]  # best score first: what the page selects on load
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            console: list[str] = []  # a Content-Security-Policy violation shows here: it must not break the page
            page.on("console", lambda msg: console.append(msg.text))
            page.goto(printed)
            assert page.url == base + "/", "the key left the address bar"
            assert page.locator("article.item.selected").get_attribute("data-id") == first.item_id
            page.keyboard.press("a")  # no reviewer name yet: nothing is sent, the name field asks for one
            assert page.evaluate("document.activeElement.id") == "reviewer"
            page.fill("#reviewer", "alice")
            page.locator("#reviewer").blur()
            page.keyboard.press("j")
            assert page.locator("article.item.selected").get_attribute("data-id") != first.item_id
            page.keyboard.press("k")  # back to the first item
            page.keyboard.press("e")  # the edit form opens on the selected item, its first field focused
            assert page.locator("article.item.selected details.edit").get_attribute("open") is not None
            assert page.evaluate("document.activeElement.name") == "head_id"
            page.locator("article.item.selected h2").click()  # leave the field: keys are shortcuts again
            with page.expect_navigation():
                page.keyboard.press("a")
            page.wait_for_selector("p.message")
            assert f"accepted {first.triple_text} (alice)" in page.inner_text("p.message")
            assert page.locator("article.item").count() == 3
            page.screenshot(path=str(SCREENSHOT), full_page=True)
            assert not [m for m in console if "Content Security Policy" in m], console
            browser.close()
        stored = queue.decision(first.item_id)
        assert stored is not None and (stored.action, stored.reviewer) == ("accept", "alice")
    finally:
        server.terminate()
        server.wait(10)
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
