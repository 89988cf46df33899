"""The admission rules asked of what the KG already holds: every stored row that breaks one (`karma check`, and the
`admission_rule` asset check on the KG).

A row can be stored that a door would refuse today: written before the rule, by hand, or by a path that forgot to
ask. So the check reads the tables themselves (seed nodes and edges, extracted nodes, evidence), never the views, and
asks kg/admission_rules.py of each row with the kinds, names and ids its namespace's graph gives its ends.

Beside the rules, two invariants of what the KG states (INVARIANTS): "certainty" -- no edge whose confidence reaches
reinforcement.MIN_CERTAIN (0.99) with fewer than MIN_CERTAIN_PAPERS (2) distinct papers, read from the `edges` view,
since the confidence a user sees is the view's (a seed prior and one paper must never read as certain); and
"one_node" -- no extracted node that is another node (a seed node, or another extracted node of its namespace, by
id, cross-reference, or exact name or listed synonym: kg/same_entity.py, the rule every merge keeps). A merge never
writes one; a seed imported again with more synonyms or a vocabulary that grew can make one, and `karma dedupe`
folds what this finds.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from pydantic import BaseModel

from karma_dagster.kg import admission_rules as rules
from karma_dagster.kg import dedupe, reinforcement
from karma_dagster.kg.identity import Crosswalk
from karma_dagster.kg.store import KGStore


INVARIANTS: dict[str, str] = {
    "certainty": (f"no edge reaches confidence >= {reinforcement.MIN_CERTAIN} with fewer than "
                  f"{reinforcement.MIN_CERTAIN_PAPERS} distinct papers"),
    "one_node": ("no extracted node is another node (a seed node or another extracted one) by id, cross-reference, "
                 "or exact name or listed synonym; `karma dedupe` folds it"),
}


class Violation(BaseModel):
    """One stored row that breaks a rule: where it is (table, namespace, key), the rule and the refusal's text."""

    table: str
    namespace: str | None = None
    key: str
    rule: rules.RuleName | Literal["certainty", "one_node"]
    message: str


class CheckReport(BaseModel):
    n_rows: int  # rows checked (nodes, seed edges, evidence rows)
    violations: list[Violation]

    def by_rule(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for v in self.violations:
            out[v.rule] += 1
        return dict(sorted(out.items()))


def check_store(store: KGStore, namespace: str | None = None, *, one_node: bool = True) -> CheckReport:
    """Every row of the KG's tables against the admission rules (read only). With `namespace`, only that
    namespace's extracted nodes and evidence (the seed's rows were checked by the import that wrote them; the KG
    asset's check after a merge reads its own backbone's rows only). `one_node=False` leaves out the duplicate
    search (about a millisecond per extracted node): the KG asset's check after each merge, whose merge keeps that
    rule as it writes; `karma check` asks it."""
    with store.connect(read_only=True) as con:
        return _check(con, namespace, one_node=one_node)


Node = tuple[str, str, str | None]  # name, kind, vocab_id


def _check(con: Any, only: str | None = None, *, one_node: bool = True) -> CheckReport:
    seed: dict[str, Node] = {i: (n, k, v) for i, n, k, v in con.execute(
        "SELECT id, name, kind, vocab_id FROM seed_nodes").fetchall()}
    extracted: dict[str, dict[str, Node]] = defaultdict(dict)
    where, params = ("WHERE namespace = ? ", [only]) if only is not None else ("", [])
    for ns, i, n, k, v in con.execute(
            f"SELECT namespace, id, min(name), min(kind), min(vocab_id) FROM extracted_nodes {where}"  # noqa: S608
            "GROUP BY namespace, id ORDER BY namespace, id", params).fetchall():
        if i not in seed:
            extracted[ns][i] = (n, k, v)
    crosswalk = Crosswalk.load()
    out: list[Violation] = []
    n_rows = (len(seed) if only is None else 0) + sum(len(v) for v in extracted.values())
    tables = ([("seed_nodes", None, seed)] if only is None else []) + [
        ("extracted_nodes", ns, n) for ns, n in extracted.items()]
    for table, ns, nodes in tables:
        for node_id, (_name, kind, vocab) in sorted(nodes.items()):
            refusal = rules.check_node(node_id, kind, vocab)
            if refusal is not None:
                out.append(Violation(table=table, namespace=ns, key=node_id, rule=refusal.rule,
                                     message=refusal.message()))
    seed_edges = [] if only is not None else con.execute(
        "SELECT head_id, relation, tail_id, metaedge FROM seed_edges ORDER BY head_id, relation, tail_id").fetchall()
    n_rows += len(seed_edges)
    for h, rel, t, me in seed_edges:
        refusal = _edge(h, rel, t, me, seed, crosswalk, evidence=None, date=None)
        if refusal is not None:
            out.append(Violation(table="seed_edges", key=f"{h} -{rel}-> {t}", rule=refusal.rule,
                                 message=refusal.message()))
    evidence = con.execute(
        "SELECT namespace, doc_key, triple_id, head_id, relation, tail_id, metaedge, evidence, date "  # noqa: S608
        f"FROM evidence {where}ORDER BY namespace, doc_key, triple_id", params).fetchall()
    n_rows += len(evidence)
    for ns, doc, tid, h, rel, t, me, text, date in evidence:
        refusal = _edge(h, rel, t, me, {**seed, **extracted.get(ns, {})}, crosswalk, evidence=text or "", date=date)
        if refusal is not None:
            out.append(Violation(table="evidence", namespace=ns, key=f"{doc} / {tid}", rule=refusal.rule,
                                 message=refusal.message()))
    certain = _too_certain(con, only)
    duplicates = _duplicates(con, sorted(extracted)) if one_node else []
    return CheckReport(n_rows=n_rows, violations=out + certain + duplicates)


def _duplicates(con: Any, namespaces: list[str]) -> list[Violation]:
    """Extracted nodes that are another node (the `one_node` invariant): what `karma dedupe --dry-run` lists."""
    return [Violation(table="extracted_nodes", namespace=f.namespace, key=f.old_id, rule="one_node",
                      message=(f"{f.name!r} ({f.kind}) is {'seed' if f.target == 'seed' else 'extracted'} node "
                               f"{f.new_id}; `karma dedupe` folds it ({f.n_evidence} evidence rows)"))
            for ns in namespaces for f in dedupe.find_in(con, ns)]


def _too_certain(con: Any, only: str | None) -> list[Violation]:
    """Edges at confidence >= MIN_CERTAIN from fewer than MIN_CERTAIN_PAPERS papers (the `certainty` invariant)."""
    where = " AND namespace = ?" if only is not None else ""
    rows = con.execute(
        "SELECT namespace, head_id, relation, tail_id, confidence, n_docs, in_seed FROM edges "  # noqa: S608
        f"WHERE confidence >= ? AND n_docs < ?{where} ORDER BY namespace, head_id, relation, tail_id",
        [reinforcement.MIN_CERTAIN, reinforcement.MIN_CERTAIN_PAPERS, *([only] if only is not None else [])],
    ).fetchall()
    return [Violation(table="edges", namespace=ns, key=f"{h} -{rel}-> {t}", rule="certainty",
                      message=(f"confidence {conf:.4f} from {n} paper(s){' and the seed' if seed else ''}: "
                               + INVARIANTS["certainty"]))
            for ns, h, rel, t, conf, n, seed in rows]


def _edge(h: str, rel: str, t: str, me: str | None, nodes: dict[str, Node], crosswalk: Crosswalk, *,
          evidence: str | None, date: Any) -> rules.Refusal | None:
    hn, tn = nodes.get(h), nodes.get(t)
    if me is None:  # a stored row without a metaedge breaks the rule as stored, whatever its kinds would name
        return rules.Refusal(rule="metaedge", fact=f"{h} -{rel}-> {t}", reason="stored without a metaedge")
    result = rules.check(rules.Fact(
        head_id=h, relation=rel, tail_id=t, metaedge=me, head_kind=hn[1] if hn else None,
        tail_kind=tn[1] if tn else None, head_name=hn[0] if hn else None, tail_name=tn[0] if tn else None,
        head_vocab_id=hn[2] if hn else None, tail_vocab_id=tn[2] if tn else None, evidence=evidence, date=date),
        seed=evidence is None, crosswalk=crosswalk)
    return result if isinstance(result, rules.Refusal) else None
