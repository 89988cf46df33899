"""The KG browser (issue 30) over HTTP (Starlette's TestClient, on the DuckDB and the PostgreSQL store) and once in a
real headless chromium (the DuckDB data folder `karma review` serves).

The KG: the shipped seed (data/seed_kg) grown by merge_increment, on two dates, with triples about ESR1 (Gene::2099)
from the shipped sample paper (data/inbox/PMC4736972, Notch signalling and endocrine resistance in breast cancer),
one of which the second date supersedes, and a second backbone that saw one other triple."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest
from browser_harness import CHROMIUM, launch
from starlette.testclient import TestClient

from karma_dagster.ingest.papers import PaperInfo
from karma_dagster.kg.edges import edge_text
from karma_dagster.kg.merge import merge_increment
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import KGStore, NodeIn
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.review.app import create_app
from karma_dagster.review.queue import ReviewQueue
from karma_dagster.web.guard import TOKEN_HEADER
from kg_backends import KGBackend, kg_backend  # noqa: F401 - the DuckDB / PostgreSQL parametrization

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "data" / "seed_kg"
PAPER = REPO / "data" / "inbox" / "PMC4736972.json"
ESR1, BREAST_CANCER, TAMOXIFEN, FULVESTRANT, ESTRADIOL = (
    "Gene::2099", "Disease::DOID:1612", "Compound::DB00675", "Compound::DB00947", "Compound::DB00783")
AFIMOXIFENE = "NEW:Compound/4-hydroxytamoxifen"  # a new entity of the single-agent backbone, with a '/' in its id
DAY1, DAY2 = dt.date(2016, 1, 10), dt.date(2016, 2, 12)
DOC1, DOC2, DOC3 = "2016-01-10_pmc4736972", "2016-02-12_pmc4737013", "2016-02-12_pmc4738914"
SVG_NS = "{http://www.w3.org/2000/svg}"
# what the catalog says of two of the papers (DOC3 it does not know: shown by its key)
PAPERS = {DOC1: PaperInfo(doc_key=DOC1, title="Notch signalling & endocrine resistance in breast cancer",
                          first_author="Acar A", journal="Oncotarget", date=DAY1, date_source="publication"),
          DOC2: PaperInfo(doc_key=DOC2, title="Tamoxifen lowers ESR1 in MCF-7 cells", first_author="Lee K",
                          journal="Breast Cancer Res", date=DAY2, date_source="arrival")}


def paper_sentence() -> str:
    """The sample paper's abstract sentence about oestrogen receptor-positive breast cancer."""
    abstract = json.loads(PAPER.read_text())["abstractText"][0]
    (sentence,) = [s for s in re.split(r"(?<=\.)\s+", abstract) if "oestrogen receptor" in s]
    return sentence


def row(doc: str, tid: str, head: str, relation: str, tail: str, metaedge: str, score: float, evidence: str,
        **kw: object) -> dict:
    return {"triple_id": tid, "head_id": head, "relation": relation, "tail_id": tail, "metaedge": metaedge,
            "score": score, "segment_id": f"{doc}#s1", "evidence": evidence, **kw}


def grow(store: KGStore) -> KGStore:
    """The seed KG, then two dates of ESR1 triples in `local` and one in `local-single`, through merge_increment."""
    import_hetionet(store, SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    up = (TAMOXIFEN, "upregulates", ESR1)
    merge_increment(store, DAY1, "local", {DOC1: ([
        row(DOC1, "t1", BREAST_CANCER, "associates", ESR1, "DaG", 0.8, paper_sentence()),
        row(DOC1, "t2", TAMOXIFEN, "binds", ESR1, "CbG", 0.7,
            "Tamoxifen binds ESR1 in oestrogen receptor-positive breast cancer cells."),
        row(DOC1, "t3", *up, "CuG", 0.6, "Tamoxifen raised ESR1 expression in resistant cells."),
    ], [])}, run_id="test", prompt_version="relation_extraction.v2", date_sources={DOC1: "publication"})
    merge_increment(store, DAY2, "local", {
        DOC2: ([row(DOC2, "t1", TAMOXIFEN, "binds", ESR1, "CbG", 0.5,
                    "In MCF-7 cells tamoxifen binds the estrogen receptor ESR1 competitively."),
                row(DOC2, "t2", TAMOXIFEN, "downregulates", ESR1, "CdG", 0.9,
                    "Tamoxifen lowered ESR1 levels over 24 weeks.", action="replace", contradicts=edge_text(*up),
                    verdict="contradict", adjudication="a larger, later cohort")], []),
        DOC3: ([row(DOC3, "t1", FULVESTRANT, "binds", ESR1, "CbG", 0.85,
                    "Fulvestrant binds ESR1 and leads to its degradation.")], [])},
        run_id="test", prompt_version="relation_extraction.v3")
    merge_increment(store, DAY2, "local-single", {DOC3: ([
        row(DOC3, "t9", ESTRADIOL, "binds", ESR1, "CbG", 0.75, "Estradiol binds ESR1 with high affinity."),
        row(DOC3, "t10", AFIMOXIFENE, "binds", ESR1, "CbG", 0.7, "4-Hydroxytamoxifen binds ESR1 more tightly."),
    ], [NodeIn(id=AFIMOXIFENE, name="4-hydroxytamoxifen", kind="Compound", synonyms=["afimoxifene"])])},
        run_id="test", prompt_version="single_agent.v1")
    return store


@pytest.fixture(scope="module")
def client(kg_backend: KGBackend, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    """The review app with the browser over the grown KG, on DuckDB and on PostgreSQL (the queries are portable)."""
    queue = ReviewQueue(tmp_path_factory.mktemp("queue") / "queue.duckdb")
    app = create_app(queue, dagster_url="http://127.0.0.1:3999/", kg=grow(kg_backend.new("browser")),
                     papers=lambda keys: {k: PAPERS[k] for k in keys if k in PAPERS})
    return TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token},
                      follow_redirects=False)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> DataPaths:
    """A data folder whose kg.duckdb is the grown KG: what `karma review` serves in the browser test."""
    paths = DataPaths(tmp_path_factory.mktemp("kg-browser"))
    grow(KGStore(paths.kg))
    return paths


def entity_path(node_id: str) -> str:
    from urllib.parse import quote

    return f"/kg/entity/{quote(node_id, safe='')}"


def test_search_finds_a_node_by_name_id_xref_and_synonym(client: TestClient) -> None:
    for q, matched in (("ESR1", "name"), ("esr1", "name"), ("Gene::2099", "id"), ("NCBIGene:2099", "id"),
                       ("NR3A1", "synonym: NR3A1"), ("estrogen receptor 1", "synonym: estrogen receptor 1")):
        page = client.get("/kg", params={"q": q})
        assert page.status_code == 200, q
        first = page.text.split('<tr class="hit">')[1]
        assert f'href="{entity_path(ESR1)}?backbone=local"' in first, q
        assert matched in first, (q, first)
    assert "DOID:1612" in client.get("/kg", params={"q": "breast cancer"}).text
    assert "No entity is named" in client.get("/kg", params={"q": "zzzz-no-such-thing"}).text
    # a cross-reference only the shipped crosswalk knows: the seed's breast cancer by its MeSH id
    assert BREAST_CANCER in client.get("/kg", params={"q": "MESH:D001943"}).text


def test_entity_page_answers_what_the_literature_says_and_since_when(client: TestClient) -> None:
    page = client.get(entity_path(ESR1))
    assert page.status_code == 200
    html = page.text
    assert "<h1>ESR1 " in html and "NCBIGENE:2099" in html and "NR3A1" in html  # ids and synonyms
    summary = html.split('id="summary"')[1].split("</section>")[0]
    assert f'first seen <span class="first-seen">{DAY1}</span>' in summary and f"last seen {DAY2}" in summary
    assert "<strong>3</strong> papers" in summary  # DOC1, DOC2, DOC3 (the local backbone's)
    literature = html.split('id="literature"')[1].split("</section>")[0]
    rows = literature.split('<tr class="lit">')[1:]
    # earliest first: the paper's DaG edge and tamoxifen's binding on day 1, fulvestrant on day 2; the superseded
    # upregulation is gone, its replacement is there
    assert [r.count(str(DAY1)) >= 1 for r in rows[:2]] == [True, True]
    assert "Fulvestrant" in literature and "-downregulates→" in literature and "-upregulates→" not in literature
    binds = next(r for r in rows if "Tamoxifen" in r and "binds" in r)
    assert f'<td class="date">{DAY1}</td><td class="date">{DAY2}</td><td class="num">2</td>' in binds
    # neighbours grouped by relation, with counts, confidences and the seed's edges too
    assert '<h3 class="group">ESR1 -' not in html  # ESR1 is the tail of every edge here
    assert "… -binds→ ESR1" in html and "… -associates→ ESR1" in html
    binds_group = html.split("… -binds→ ESR1")[1].split("</table>")[0]
    assert 'class="count">2<' in binds_group and "0.85" in binds_group
    # evidence sentences, marked, with links to their document partitions (the evaluated asset)
    evidence = html.split('id="evidence"')[1].split("</section>")[0]
    assert '<mark class="tail">ESR1</mark>' in evidence and '<mark class="head">Fulvestrant</mark>' in evidence
    assert '<mark class="head">breast cancer</mark>' in evidence and "Notch signalling" in evidence
    assert f'href="http://127.0.0.1:3999/assets/local/evaluated?view=partitions&amp;partition={DOC1}"' in evidence
    assert "relation_extraction.v3" in evidence
    assert '<svg xmlns="http://www.w3.org/2000/svg"' in html  # the drawing, inline
    assert "the 6 neighbours with the strongest edges" in html


def test_as_of_hides_later_evidence_and_backbone_switches_namespace(client: TestClient) -> None:
    before = client.get(entity_path(ESR1), params={"as_of": str(DAY1)}).text
    literature = before.split('id="literature"')[1].split("</section>")[0]
    assert "Fulvestrant" not in literature and "-upregulates→" in literature  # not yet superseded on day 1
    assert str(DAY2) not in before.split('id="evidence"')[1] .split("</section>")[0]
    assert "<strong>1</strong> paper " in before and f"the graph as of {DAY1}" in before
    assert f'href="{entity_path(TAMOXIFEN)}?backbone=local&amp;as_of={DAY1}"' in before  # links keep the date
    nothing = client.get(entity_path(ESR1), params={"as_of": "2015-12-31"}).text
    assert "No paper has said anything about ESR1" in nothing
    single = client.get(entity_path(ESR1), params={"backbone": "local-single"}).text
    assert "Estradiol" in single.split('id="literature"')[1] and "Fulvestrant" not in single
    assert '<option value="local-single" selected>' in single
    # a new entity of one backbone, its id with a '/': found by its synonym there, its page reached, unknown elsewhere
    found = client.get("/kg", params={"q": "afimoxifene", "backbone": "local-single"}).text
    assert f'href="{entity_path(AFIMOXIFENE)}?backbone=local-single"' in found and "synonym: afimoxifene" in found
    assert "No entity is named" in client.get("/kg", params={"q": "afimoxifene"}).text
    assert "No entity is named" in client.get("/kg", params={"q": "afimoxifene", "backbone": "local-single",
                                                             "as_of": str(DAY1)}).text
    new = client.get(entity_path(AFIMOXIFENE), params={"backbone": "local-single"})
    assert new.status_code == 200 and "<h1>4-hydroxytamoxifen " in new.text and "extracted node" in new.text
    assert client.get(entity_path(AFIMOXIFENE)).status_code == 404


def test_edge_page_evidence_reinforcement_supersession_and_as_of(client: TestClient) -> None:
    binds = client.get("/kg/edge", params={"head": TAMOXIFEN, "relation": "binds", "tail": ESR1})
    assert binds.status_code == 200
    html = binds.text
    evidence = html.split('id="evidence"')[1]
    assert evidence.count('<tr class="ev status-live">') == 2
    assert '<td class="backbone">local</td><td class="prompt">relation_extraction.v2</td>' in evidence
    assert '<td class="prompt">relation_extraction.v3</td>' in evidence
    reinforcement = html.split('id="reinforcement"')[1].split("</section>")[0]
    assert f'<td class="date">{DAY1}</td><td>1 evidence</td><td class="num">0.700</td>' in reinforcement
    assert f'<td class="date">{DAY2}</td><td>1 evidence</td><td class="num">0.850</td>' in reinforcement  # 1-.3*.5
    assert "<svg" in reinforcement
    # the confidence reads as a probability, with the two papers and the factor each contributes
    state = html.split('id="asof"')[1].split('id="reinforcement"')[0]
    assert "<th>Probability it is right</th>" in state and "0.850 <small>(85 %)</small>" in state
    papers = state.split('<table class="papers">')[1].split("</table>")[0]
    assert papers.index(DOC1) < papers.index(DOC2)  # strongest first: 0.70, then 0.50
    assert '<td class="num">0.70</td><td class="num">1</td>' in papers and '<td class="num">0.50</td>' in papers
    up = client.get("/kg/edge", params={"head": TAMOXIFEN, "relation": "upregulates", "tail": ESR1}).text
    history = up.split('id="history"')[1].split("</section>")[0]
    assert f'<td class="date">{DAY2}</td><td>superseded</td>' in history and "downregulates" in history
    assert "a larger, later cohort" in history
    assert '<tr class="ev status-superseded">' in up and "no (superseded, or not asserted yet)" in up
    then = client.get("/kg/edge", params={"head": TAMOXIFEN, "relation": "upregulates", "tail": ESR1,
                                          "as_of": str(DAY1)}).text
    state = then.split('id="asof"')[1].split("</section>")[0]
    assert f"as of {DAY1}" in state and "<td>yes</td><td>no (superseded" in state and "0.600" in state
    down = client.get("/kg/edge", params={"head": TAMOXIFEN, "relation": "downregulates", "tail": ESR1}).text
    assert f'<td class="date">{DAY2}</td><td>supersedes</td>' in down.split('id="history"')[1]
    seed_edge = client.get("/kg/edge", params={"head": "Disease::DOID:10652", "relation": "associates",
                                               "tail": ESR1}).text
    assert "seed edge (confidence 0.90)" in seed_edge and "it is a seed edge only" in seed_edge


def test_neighbourhood_svg_is_valid_and_draws_the_neighbours(client: TestClient) -> None:
    r = client.get(f"/kg/neighbourhood/{ESR1}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    root = ET.fromstring(r.content)
    assert root.tag == f"{SVG_NS}svg"
    labels = {t.text for t in root.iter(f"{SVG_NS}text")}
    assert {"ESR1", "Tamoxifen", "Fulvestrant", "breast cancer", "Alzheimer's disease"} <= labels
    relations = {r for t in labels if t for r in t.split(", ")}
    assert "downregulates, binds" in labels and "associates" in labels and "upregulates" not in relations
    links = [a.get("href") for a in root.iter(f"{SVG_NS}a")]
    assert "/kg/entity/Compound%3A%3ADB00675?backbone=local" in links
    assert len(root.findall(f".//{SVG_NS}circle")) == 1 + 6  # ESR1; 4 seed diseases (breast cancer too), 2 drugs
    early = ET.fromstring(client.get(f"/kg/neighbourhood/{ESR1}", params={"as_of": str(DAY1)}).content)
    assert "binds, upregulates" in {t.text for t in early.iter(f"{SVG_NS}text")}  # one line, both relations


def test_timeline_shows_each_days_additions(client: TestClient) -> None:
    page = client.get("/kg/timeline").text
    days = re.sub(r">\s+<", "><", page).split('<tr class="day">')[1:]
    assert [d.split("day=")[1][:10] for d in days] == [str(DAY2), str(DAY1)]
    # day 2: 2 papers, 3 evidence rows, 2 new edges (downregulates, fulvestrant), 1 reinforced (tamoxifen binds)
    assert '<td class="num">2</td><td class="num">3</td><td class="num">2</td><td class="num">1</td>' in days[0]
    detail = client.get("/kg/timeline", params={"day": str(DAY2)}).text.split('id="day"')[1]
    assert detail.count('<tr class="new">') == 2 and detail.count('<tr class="reinforced">') == 1
    assert "supersedes" in detail
    assert "Nothing merged" in client.get("/kg/timeline", params={"as_of": "2015-01-01"}).text


def test_papers_are_named_by_title_author_journal_and_date_with_the_key_a_click_away(client: TestClient) -> None:
    page = client.get(entity_path(ESR1)).text
    assert "<cite>Notch signalling &amp; endocrine resistance in breast cancer</cite>" in page  # escaped, once
    assert "Acar A et al., Oncotarget, 2016-01-10" in page
    assert f'href="http://127.0.0.1:3999/assets/local/evaluated?view=partitions&amp;partition={DOC1}">{DOC1}</a>' \
        in page, "the key still links to the document in Dagster"
    edge = client.get("/kg/edge", params={"head": TAMOXIFEN, "relation": "binds", "tail": ESR1}).text
    assert "<cite>Tamoxifen lowers ESR1 in MCF-7 cells</cite>" in edge and "2016-02-12 (arrival date)" in edge
    # a day's view lists its papers and what each added: DOC2 2 rows on 2 edges (downregulates new, binds
    # reinforced), DOC3 (unknown to the catalog: its key) 1 row on 1 new edge
    detail = re.sub(r">\s+<", "><", client.get("/kg/timeline", params={"day": str(DAY2)}).text)
    papers = detail.split('<table class="papers">')[1].split("</table>")[0].split('<tr class="paper">')[1:]
    assert "Tamoxifen lowers ESR1" in papers[0] and papers[0].endswith(
        '<td class="num">2</td><td class="num">2</td><td class="num">1</td><td class="num">0</td></tr>')
    assert f">{DOC3}</a>" in papers[1] and "<cite>" not in papers[1] and papers[1].endswith(
        '<td class="num">1</td><td class="num">1</td><td class="num">1</td><td class="num">0</td></tr></tbody>')


def test_bad_input_names_it_and_the_guard_still_applies(client: TestClient) -> None:
    unknown = client.get(entity_path("Gene::0000000"))
    assert unknown.status_code == 404 and "entity &#39;Gene::0000000&#39; is not a node" in unknown.text
    bad_date = client.get(entity_path(ESR1), params={"as_of": "yesterday"})
    assert bad_date.status_code == 422 and "as_of &#39;yesterday&#39; is not a date" in bad_date.text
    bad_backbone = client.get("/kg", params={"q": "ESR1", "backbone": "nope"})
    assert bad_backbone.status_code == 404 and "backbone &#39;nope&#39; has no KG namespace" in bad_backbone.text
    no_edge = client.get("/kg/edge", params={"head": ESR1, "relation": "treats", "tail": TAMOXIFEN})
    assert no_edge.status_code == 404 and "no edge Gene::2099 -treats-&gt; Compound::DB00675" in no_edge.text
    assert client.get("/kg/edge", params={"head": ESR1}).status_code == 422
    assert client.get("/kg/timeline", params={"day": "2016-13-01"}).status_code == 422
    assert client.get("/kg/neighbourhood/nope").status_code == 404
    foreign = client.get("/kg", params={"q": "ESR1"}, headers={"host": "evil.example:8766"})
    assert foreign.status_code == 421
    keyless = TestClient(client.app, base_url="http://127.0.0.1:8766")
    assert keyless.get("/kg").status_code == 401  # reads need the session's key, as the review page's
    session = TestClient(client.app, base_url=f"http://127.0.0.1:8766/s/{client.app.state.key}")  # printed address
    page = session.get("/kg", params={"q": "ESR1"})
    assert page.status_code == 200 and "set-cookie" not in page.headers and not session.cookies
    prefix = f"/s/{client.app.state.key}/"
    local = [u for u in re.findall(r'(?:href|action|src)="([^"]+)"', page.text) if not u.startswith("http")]
    assert local and all(u.startswith(prefix) for u in local), local  # every link keeps the session, no cookie
    entity = re.search(r'href="(/s/[^"]+/kg/entity/[^"]+)"', page.text).group(1).replace("&amp;", "&")
    assert keyless.get(entity).status_code == 200  # a link of the page works on its own, as a browser follows it
    assert "KG browser" in client.get("/").text  # the review page links to the browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_clicks_from_the_search_box_in_a_real_browser(data: DataPaths) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "karma_dagster.review.cli_review", "--data-dir", str(data.root), "--no-collect",
         "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ})
    try:
        base = f"http://127.0.0.1:{port}"
        printed = ""
        while server.stdout and not printed:
            line = server.stdout.readline().decode()
            if not line:
                pytest.fail("the server stopped before printing the browser's address")
            if line.startswith("KG browser: "):
                printed = line.removeprefix("KG browser: ").split()[0]
        assert re.fullmatch(re.escape(base) + r"/s/[A-Za-z0-9_-]{40,}/kg", printed), printed  # the key in the path
        for _ in range(100):
            try:
                if httpx.get(base + "/kg", timeout=1).status_code == 401:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            pytest.fail("the server did not answer")
        with sync_api.sync_playwright() as pw:
            browser = launch(pw)
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            console: list[str] = []
            page.on("console", lambda msg: console.append(msg.text))
            page.goto(printed)
            assert page.url == printed  # no redirect and no cookie: every link of the pages keeps the prefix
            page.fill("input[name=q]", "ESR1")
            with page.expect_navigation():
                page.click("form.search button")  # click 1
            page.screenshot(path="/tmp/karma_browser_search.png", full_page=True)
            with page.expect_navigation():
                page.locator("tr.hit a.entity-link").first.click()  # click 2
            assert page.inner_text("h1").startswith("ESR1")
            summary = page.inner_text("#summary")
            assert f"first seen {DAY1}" in summary and "3 papers" in summary
            literature = page.inner_text("#literature")
            assert "Tamoxifen" in literature and "Fulvestrant" in literature and str(DAY1) in literature
            assert "oestrogen receptor-positive breast cancer" in page.inner_text("#evidence")
            assert page.locator("#neighbourhood svg circle").count() == 7
            page.screenshot(path="/tmp/karma_browser_entity.png", full_page=True)
            page.locator("#neighbourhood").screenshot(path="/tmp/karma_browser_svg.png")
            tamoxifen = page.locator("#literature tr", has_text="Tamoxifen").first  # its binding, since day 1
            with page.expect_navigation():
                tamoxifen.locator("a", has_text="evidence").click()
            assert page.locator("#evidence tr.ev").count() == 2
            assert page.locator("#reinforcement svg.chart circle").count() == 2
            page.screenshot(path="/tmp/karma_browser_edge.png", full_page=True)
            with page.expect_navigation():
                page.click("nav >> text=Timeline")
            with page.expect_navigation():
                page.locator("tr.day a").first.click()  # the latest day's additions
            assert page.locator("#day tr.new").count() == 2
            page.screenshot(path="/tmp/karma_browser_timeline.png", full_page=True)
            assert not [m for m in console if "Content Security Policy" in m], console
            assert page.url.startswith(printed.removesuffix("/kg")) and not page.context.cookies()
            browser.close()
    finally:
        server.terminate()
        server.wait(10)


def test_before_any_kg_the_pages_say_so_and_create_nothing(tmp_path: Path) -> None:
    missing = KGStore(tmp_path / "kg.duckdb")
    app = create_app(ReviewQueue(tmp_path / "queue.duckdb"), kg=missing)
    client = TestClient(app, base_url="http://127.0.0.1:8766", headers={TOKEN_HEADER: app.state.token})
    for url in ("/kg?q=ESR1", f"/kg/entity/{ESR1}", "/kg/timeline", f"/kg/neighbourhood/{ESR1}"):
        r = client.get(url)
        assert r.status_code == 404 and "no KG yet" in r.text, url
    assert not missing.exists()
