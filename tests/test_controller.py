"""The Central Controller: KARMA Eq. 4 (w1*U + w2*urgency - w3*cost) plus the UCB bonus alpha*sqrt(ln t/(1+n_tau)),
greedily; hand-computed priorities; Eq. 4's inputs from a real catalog and cost ledger; the LLM utility through the
scripted OpenAI-compatible server on 127.0.0.1; the figures and the utility's source in the run tags."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
from collections import Counter

import dagster as dg
import pytest
from fake_openai_server import Fault, FakeOpenAIServer
from partition_views import BY_DATE

from karma_dagster import runner
from karma_dagster.backbones.llm.cache import ResponseCache
from karma_dagster.backbones.llm.client import LLMClient
from karma_dagster.ingest.catalog import Catalog
from karma_dagster.runtime.ledger import Ledger, LedgerRow, ledger_path
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.scheduling.controller import (
    Candidate,
    ControllerParams,
    DispatchHistory,
    cost_fraction,
    eq4_priority,
    exploration_bonus,
    order,
    urgency,
)
from karma_dagster.scheduling.llm_utility import LLMUtility, controller_utility
from karma_dagster.scheduling.plan import decide
from karma_dagster.scheduling.tiers import controller_tiers
from karma_dagster.sensors.new_papers import plan_date_runs, plan_runs

P = ControllerParams(alpha=0.5, w_novelty=0.7, w_recency=0.3)  # w_utility 1.0, w_urgency 0.3, w_cost 0.3
FIXTURE = [
    Candidate(doc_key="d-gene-hi", tau="Gene", novelty=0.9, recency=0.8),
    Candidate(doc_key="d-gene-mid", tau="Gene", novelty=0.8, recency=0.7),
    Candidate(doc_key="d-gene-lo", tau="Gene", novelty=0.7, recency=0.6),
    Candidate(doc_key="d-disease", tau="Disease", novelty=0.5, recency=0.5),
    Candidate(doc_key="d-chem", tau="Chemical", novelty=0.2, recency=1.0),
]
JATS = ("PMC4686705.xml", "PMC4686705.json")  # Snap25 / type 2 diabetes, 2015-12-08
PDF = ("PMC4738914.pdf", "PMC4738914.json")  # levofloxacin thrombocytopenia case report, 2016-01-14


def _brute_force(cands: list[Candidate], counts: Counter, p: ControllerParams = P) -> list[str]:
    """Eq. 4 + bonus evaluated from scratch at every step (no heaps): the reference the controller must match."""
    left, counts, out = list(cands), Counter(counts), []
    while left:
        t = sum(counts.values()) + 1
        u = {c.doc_key: c.llm_utility if c.llm_utility is not None else p.w_novelty * c.novelty + p.w_recency * c.recency
             for c in left}
        score = {c.doc_key: p.w_utility * u[c.doc_key] + p.w_urgency * c.urgency - p.w_cost * c.cost
                 + p.alpha * math.sqrt(math.log(t) / (1 + counts[c.tau])) for c in left}
        best = min(left, key=lambda c: (-score[c.doc_key], c.doc_key))
        out.append(best.doc_key)
        counts[best.tau] += 1
        left.remove(best)
    return out


def test_order_follows_the_formula_and_exploration_lets_other_types_in():
    decisions = order(FIXTURE, P)
    keys = [d.doc_key for d in decisions]
    assert keys == _brute_force(FIXTURE, Counter())
    # Pure utility would serve all three Gene papers first; the bonus brings Disease in before the third.
    by_utility = sorted(FIXTURE, key=lambda c: -(0.7 * c.novelty + 0.3 * c.recency))
    assert [c.doc_key for c in by_utility][:3] == ["d-gene-hi", "d-gene-mid", "d-gene-lo"]
    assert keys.index("d-disease") < keys.index("d-gene-lo")
    for d in decisions:  # every decision carries the formula's inputs and its result, as run tags
        assert d.score == pytest.approx(d.eq4 + P.alpha * math.sqrt(math.log(d.t) / (1 + d.n_tau)))
        assert d.utility == pytest.approx(0.7 * d.novelty + 0.3 * d.recency) and d.utility_source == "rule"
        assert d.eq4 == pytest.approx(d.utility)  # no urgency, no cost in this fixture
        tags, details = d.tags(), d.details()
        assert int(tags["dagster/priority"]) == d.priority and float(tags["karma/cca_score"]) == pytest.approx(d.score, abs=1e-4)
        assert details["tau"] == d.tau and float(details["bonus"]) == pytest.approx(d.bonus, abs=1e-4)
    assert [d.t for d in decisions] == [1, 2, 3, 4, 5] and decisions[0].bonus == 0.0
    priorities = [d.priority for d in decisions]
    assert priorities == sorted(priorities, reverse=True)  # Dagster dequeues in the controller's order


def test_eq4_priorities_by_hand():
    """Weights 1.0 / 0.3 / 0.3 (the defaults), alpha 0 to isolate Eq. 4; one type.
    A: U = 0.7*0.9 + 0.3*0.5 = 0.78, urgency 0,    cost 0.8 -> 0.78 + 0     - 0.24 = 0.54
    B: U = 0.7*0.5 + 0.3*0.5 = 0.50, urgency 0.75, cost 0   -> 0.50 + 0.225 - 0    = 0.725
    C: U = 0.2 (the LLM's),          urgency 0.5,  cost 0.5 -> 0.20 + 0.15  - 0.15 = 0.20"""
    p = ControllerParams(alpha=0.0)
    assert (p.w_utility, p.w_urgency, p.w_cost) == (1.0, 0.3, 0.3) == (KarmaParams().controller.w_utility,
                                                                       KarmaParams().controller.w_urgency,
                                                                       KarmaParams().controller.w_cost)
    a = Candidate(doc_key="A", tau="Gene", novelty=0.9, recency=0.5, urgency=0.0, cost=0.8, cost_tokens=80_000)
    b = Candidate(doc_key="B", tau="Gene", novelty=0.5, recency=0.5, urgency=0.75, wait_hours=48.0)
    c = Candidate(doc_key="C", tau="Gene", novelty=1.0, recency=1.0, llm_utility=0.2, utility_source="llm:ctrl",
                  urgency=0.5, cost=0.5)
    assert [eq4_priority(x, p) for x in (a, b, c)] == pytest.approx([0.54, 0.725, 0.20])
    decisions = order([a, b, c], p)
    assert [d.doc_key for d in decisions] == ["B", "A", "C"]
    assert [d.score for d in decisions] == pytest.approx([0.725, 0.54, 0.20])
    assert [d.priority for d in decisions] == [72, 54, 20]
    details = {d.doc_key: d.details() for d in decisions}
    assert details["B"]["eq4"] == "0.7250" and details["B"]["urgency"] == "0.7500"
    assert details["B"]["wait_hours"] == "48.0" and details["A"]["cost"] == "0.8000"
    assert details["A"]["cost_tokens"] == "80000" and details["A"]["utility_source"] == "rule"
    assert details["C"]["utility"] == "0.2000" and details["C"]["utility_source"] == "llm:ctrl"
    assert details["C"]["weights"] == "w_utility=1 w_urgency=0.3 w_cost=0.3 alpha=0"
    assert "eq4 0.7250" in decisions[0].summary() and "urgency 0.7500 after 48.0 h" in decisions[0].summary()
    # the sign of the cost: two papers alike but for the cost, the cheaper goes first; urgency the other way
    twin = dict(tau="Gene", novelty=0.5, recency=0.5)
    assert [d.doc_key for d in order([Candidate(doc_key="dear", cost=0.9, **twin),
                                      Candidate(doc_key="cheap", cost=0.1, **twin)], p)] == ["cheap", "dear"]
    assert [d.doc_key for d in order([Candidate(doc_key="fresh", urgency=0.1, **twin),
                                      Candidate(doc_key="waited", urgency=0.9, **twin)], p)] == ["waited", "fresh"]
    # the weights are parameters: without the cost term A outranks B (0.78 > 0.725)
    no_cost = p.model_copy(update={"w_cost": 0.0})
    assert [d.doc_key for d in order([a, b, c], no_cost)][:2] == ["A", "B"]
    # the inputs' own formulas
    assert urgency(0, 24) == 0.0 and urgency(24, 24) == pytest.approx(0.5) and urgency(48, 24) == pytest.approx(0.75)
    assert cost_fraction(0, 20_000) == 0.0 and cost_fraction(20_000, 20_000) == pytest.approx(0.5)
    assert cost_fraction(60_000, 20_000) == pytest.approx(0.75)
    # with urgency and cost the heap order still equals the from-scratch formula, across types and history
    mixed = [x.model_copy(update={"urgency": u, "cost": k}) for x, u, k in
             zip(FIXTURE, (0.1, 0.9, 0.3, 0.0, 0.6), (0.5, 0.0, 0.2, 0.9, 0.1), strict=True)]
    assert [d.doc_key for d in order(mixed, P, Counter({"Gene": 3}))] == _brute_force(mixed, Counter({"Gene": 3}))


def test_history_counts_shift_the_order_to_under_served_types(tmp_path):
    dispatched = DispatchHistory(tmp_path / "controller.sqlite")
    history = Counter({"Gene": 40, "Disease": 2, "Chemical": 0})
    assert [d.doc_key for d in order(FIXTURE, P, history)] == _brute_force(FIXTURE, history)
    assert order(FIXTURE, P, history)[0].tau != "Gene"  # 40 Gene papers done: exploration favours the rest
    dispatched.record(order(FIXTURE, P))
    assert dispatched.counts() == Counter({"Gene": 3, "Disease": 1, "Chemical": 1})
    assert exploration_bonus(0.5, 1, 0) == 0.0
    with pytest.raises(ValueError, match="t >= 1"):
        exploration_bonus(0.5, 0, 0)
    with pytest.raises(ValueError, match="listed twice"):
        order(FIXTURE + FIXTURE[:1], P)


def test_sensor_requests_carry_the_priority_in_controller_order():
    decisions = order(FIXTURE, P)
    tags = {d.doc_key: d.tags() for d in decisions}
    requests = plan_runs([(c.doc_key, "abc") for c in FIXTURE], "document_chain", tags)
    assert [r.partition_key for r in requests] == [d.doc_key for d in decisions]
    assert [int(r.tags["dagster/priority"]) for r in requests] == [d.priority for d in decisions]
    assert all("karma/cca_score" in r.tags for r in requests)
    assert all(len([t for t in r.tags if t.startswith("karma/cca")]) == 1 for r in requests)  # short runs-list rows
    tiers = controller_tiers({d.doc_key: d for d in decisions}, {c.doc_key: i for i, c in enumerate(FIXTURE)}, 2)
    assert all(set(t[1]) == {"dagster/priority", "karma/cca_tier", "karma/cca_score"} for t in tiers)


# ---------------------------------------------------------------- Eq. 4's inputs from a real catalog and ledger
@pytest.fixture()
def registered(make_pipeline):
    p = make_pipeline(inbox_files=JATS + PDF)
    keys, failed = runner.register_inbox(p.defs, p.instance)
    assert not failed and len(keys) == 2
    return p, sorted(keys)


def _arrival(p, key: str) -> dt.datetime:
    return dt.datetime.fromisoformat(Catalog(p.storage.paths().catalog).lookup(key).first_registered)


def test_urgency_and_cost_come_from_the_catalog_and_the_ledger(registered):
    p, keys = registered
    data = p.storage.paths()
    now = _arrival(p, keys[0]) + dt.timedelta(hours=24)
    params = ControllerParams(alpha=0.0)
    free = {d.doc_key: d for d in decide(keys, data, params=params, utility_model=None, now=now, record=False)}
    for key in keys:  # a day in the inbox: urgency 1 - 2^-1 = 0.5; no ledger yet: no cost
        assert free[key].wait_hours == pytest.approx(24.0, abs=0.05) and free[key].urgency == pytest.approx(0.5, abs=1e-3)
        assert free[key].cost_tokens == 0.0 and free[key].cost == 0.0 and free[key].utility_source == "rule"

    # two processed documents of an LLM backbone in the ledger: 30,000 and 50,000 tokens -> 40,000 per document;
    # a KG increment's date partition does not count
    ledger = Ledger(ledger_path(data.root))
    for run, part, tin, tout in (("r1", "2014-01-01_a", 20_000, 10_000), ("r2", "2014-01-02_b", 40_000, 10_000),
                                 ("r3", "2014-01-02", 0, 0)):
        ledger.record(LedgerRow(run_id=run, partition=part, backbone="gpt-4o", agent="reader", stage="segments",
                                tokens_in=tin, tokens_out=tout))
    assert ledger.tokens_per_document() == (40_000.0, 2)
    costed = {d.doc_key: d for d in decide(keys, data, params=params, utility_model=None, now=now, record=False)}
    size = {k: (data.inbox / Catalog(data.catalog).lookup(k).preferred_source.source_path).stat().st_size for k in keys}
    mean = sum(size.values()) / 2
    for key in keys:  # tokens = 40,000 x the paper's bytes / the batch's mean; cost = tokens / (tokens + 20,000)
        tokens = 40_000 * size[key] / mean
        assert costed[key].cost_tokens == pytest.approx(tokens)
        assert costed[key].cost == pytest.approx(tokens / (tokens + 20_000))
        assert costed[key].eq4 == pytest.approx(free[key].eq4 - 0.3 * costed[key].cost)
    dear, cheap = sorted(keys, key=lambda k: -size[k])
    assert costed[dear].cost > costed[cheap].cost
    assert costed[dear].eq4 - costed[cheap].eq4 < free[dear].eq4 - free[cheap].eq4  # the dearer paper lost ground


def test_a_days_run_carries_its_best_papers_priority_and_its_papers_score_range():
    """Date partitions: one run per day; the UI's run shows the range of the day's papers' scores."""
    tags = {  # the controller's order: best first
        "2016-01-14_pmc2": {"dagster/priority": "90", "karma/cca_score": "0.9000"},
        "2015-12-08_pmc1": {"dagster/priority": "50", "karma/cca_score": "0.5000"},
        "2016-01-14_pmc3": {"dagster/priority": "10", "karma/cca_score": "0.1000"},
    }
    requests = plan_date_runs([(k, "h" + k) for k in sorted(tags)], "job", tags)
    assert [r.partition_key for r in requests] == ["2016-01-14", "2015-12-08"]
    day, other = requests
    assert day.tags["dagster/priority"] == "90" and day.tags["karma/cca_score"] == "0.1000..0.9000"
    assert day.tags["karma/documents"] == "2"
    assert other.tags["karma/cca_score"] == "0.5000" and other.tags["dagster/priority"] == "50"
    assert "karma/cca_score" not in plan_date_runs([("2015-12-08_pmc1", "h")], "job", {})[0].tags


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_new_papers_tags_carry_eq4_and_which_utility(make_pipeline):
    p = make_pipeline(inbox_files=JATS + PDF)
    context = dg.SensorEvaluationContext(instance_ref=p.instance.get_ref(), cursor=None,
                                         repository_def=p.defs.get_repository_def(), resources=p.defs.resources,
                                         sensor_name="new_papers")
    with context:
        logged = _ListHandler()
        context.log.addHandler(logged)
        result = p.defs.resolve_sensor_def("new_papers").evaluate_tick(context)
    # a run per paper, or per day with papers (its tags: how many, and the range of their scores): two dates here
    assert len(result.run_requests) == 2
    for r in result.run_requests:
        assert {t for t in r.tags if t.startswith("karma/")} == {
            "karma/documents" if BY_DATE else "karma/document", "karma/trigger", "karma/cca_score", "karma/lane"}
        assert "dagster/priority" in r.tags
    lines = [m for m in logged.messages if m.startswith("controller: ")]  # the figures: the tick's log
    assert len(lines) == 2
    for line in lines:
        found = re.search(r"eq4 ([\d.]+) \(U ([\d.]+) rule: .*urgency ([\d.]+) after .*cost ([\d.]+) of (\d+) tokens", line)
        assert found, line  # the shipped backbones.yaml: controller: local
        eq4, u, urgency_, cost = (float(found.group(i)) for i in range(1, 5))
        assert eq4 == pytest.approx(u + 0.3 * urgency_ - 0.3 * cost, abs=2e-4)
        assert "w_cost=0.3" in line


# ---------------------------------------------------------------- the LLM utility
def _utility_responder(requests: list[dict]):
    """A controller LLM: U 0.9 for a title naming levofloxacin, else 0.1; counts what it is asked."""

    def respond(request: dict) -> str:
        requests.append(request)
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        docs = json.loads(re.search(r"<documents>\n?(.*?)\n?</documents>", user, re.S).group(1))
        return json.dumps({"documents": [
            {"doc": d["doc"], "utility": 0.9 if "levofloxacin" in d["title"].lower() else 0.1, "reason": "scripted"}
            for d in docs]})

    return respond


def _client(url: str, cache: ResponseCache, retries: int = 0) -> LLMClient:
    return LLMClient("openai/fake-model", api_base=url, api_key="x", cache=cache, max_retries=retries,
                     backoff_base=0.01, timeout=10, name="controller:ctrl")


def test_the_llm_utility_orders_papers_and_is_recorded(registered, tmp_path):
    p, keys = registered
    data = p.storage.paths()
    asked: list[dict] = []
    levo = next(k for k in keys if k.startswith("2016-01-14_"))
    with FakeOpenAIServer(_utility_responder(asked)) as server:
        llm = LLMUtility("ctrl", _client(server.url, ResponseCache(tmp_path / "cache.sqlite")))
        rule = {d.doc_key: d for d in decide(keys, data, utility_model=None, record=False)}
        ranked = decide(keys, data, utility_model=llm, record=False)
        assert len(asked) == 1  # both papers in one batch
        assert "agent: controller" in asked[0]["messages"][0]["content"]
        sent = json.loads(re.search(r"<documents>\n?(.*?)\n?</documents>", asked[0]["messages"][1]["content"],
                                    re.S).group(1))
        assert {d["date"] for d in sent} == {"2015-12-08", "2016-01-14"} and all(d["title"] for d in sent)
        by_key = {d.doc_key: d for d in ranked}
        assert ranked[0].doc_key == levo and by_key[levo].utility == 0.9
        for key, d in by_key.items():
            assert d.utility_source == "llm:ctrl" and d.details()["utility_source"] == "llm:ctrl"
            assert d.eq4 == pytest.approx(d.utility + 0.3 * d.urgency - 0.3 * d.cost)
            assert d.novelty == rule[key].novelty  # the rule's inputs are still shown, U replaced
        # the next tick asks nothing new: answers come from the response cache
        decide(keys, data, utility_model=llm, record=False)
        assert len(asked) == 1 and llm.usage.cache_hits == 1

    # a controller LLM that fails leaves the rule utility in charge, and says so
    with FakeOpenAIServer() as broken:
        broken.script(*[Fault(status=500)] * 4)
        failing = LLMUtility("ctrl", _client(broken.url, ResponseCache(tmp_path / "other.sqlite")))
        fallback = decide(keys, data, utility_model=failing, record=False)
        assert all(d.utility_source.startswith("rule (llm:ctrl failed:") for d in fallback)
        assert {d.doc_key: d.utility for d in fallback} == {k: d.utility for k, d in rule.items()}


def test_controller_backbone_from_backbones_yaml(tmp_path, monkeypatch):
    from karma_dagster.runtime.paths import DataPaths

    data = DataPaths(data_dir=tmp_path / "karma")
    path = tmp_path / "backbones.yaml"
    entry = {"kind": "litellm", "model": "openai/fake-model", "api_base": "http://127.0.0.1:9/v1",
             "api_key_env": "KARMA_TEST_CONTROLLER_KEY", "enabled": False}
    path.write_text(json.dumps({"controller": "ctrl", "backbones": {"local": {"kind": "local"}, "ctrl": entry}}))
    monkeypatch.delenv("KARMA_TEST_CONTROLLER_KEY", raising=False)
    model, why = controller_utility(data, path)
    assert model is None and why == "controller 'ctrl' NOT CONFIGURED: set KARMA_TEST_CONTROLLER_KEY"
    monkeypatch.setenv("KARMA_TEST_CONTROLLER_KEY", "secret")
    model, why = controller_utility(data, path)
    assert why == "" and model.source == "llm:ctrl" and model.client.api_base == "http://127.0.0.1:9/v1"
    path.write_text(json.dumps({"controller": "local", "backbones": {"local": {"kind": "local"}}}))
    assert controller_utility(data, path) == (None, "")
    path.write_text(json.dumps({"controller": "nope", "backbones": {"local": {"kind": "local"}}}))
    assert controller_utility(data, path) == (None, "controller 'nope' is not a backbone in backbones.yaml")
