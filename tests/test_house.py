"""The house's wiring: a Dagster section over a Dagster-free core, layered without cycles, every stage declared
once in the registry (stages.py), so a new stage reaches the asset graph, the job and the report by itself."""

from __future__ import annotations

import ast
from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import BaseModel

from karma_dagster import jobs, stages
from karma_dagster.report import build_report
from karma_dagster.runtime.stage_store import StageStore

PACKAGE = Path(__file__).resolve().parent.parent / "karma_dagster"

# Low to high; a module may import its own layer or lower ones, never a higher one. The last layer is the
# Dagster section: the only modules that may import dagster.
LAYERS: list[tuple[str, ...]] = [
    ("runtime", "project", "paths", "strict_keys", "params", "schemas", "prompts", "config", "date_range", "interrupts", "progress",
     "integrity", "shared_storage", "web"),
    ("dictionary", "ingest", "kg", "stage_store"),
    ("backbones",),
    ("agents",),
    ("metrics", "scheduling", "services", "stages", "report", "ledger", "document_states", "removal", "kg_tools",
     "export"),
    ("cogmg", "review", "browse", "mcp_server"),  # CogMG's questions, the review queue and the KG browser build on the stores
    ("partitioning", "resources", "assets", "sensors", "jobs", "executors", "definitions", "home", "backfill_passes",
     "dagster_instance",
     "runner", "cli"),
]
SECTION = set(LAYERS[-1])


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> tuple[set[str], bool]:
    """(karma_dagster modules that `name` imports, anywhere in the file; whether it imports dagster)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    targets: set[str] = set()
    uses_dagster = False
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in names:
            uses_dagster |= target.split(".")[0] == "dagster"
            while target and target not in known:
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if target and target != name:
                targets.add(target)
    return targets, uses_dagster


def _top(name: str) -> str:
    """The module's place in the house: its top folder, or for a runtime helper the helper itself."""
    parts = name.split(".")
    if len(parts) > 2 and parts[1] == "runtime":
        return parts[2]
    return parts[1] if len(parts) > 1 else ""


def _layer(name: str) -> int:
    top = _top(name)
    for i, layer in enumerate(LAYERS):
        if top in layer:
            return i
    raise AssertionError(f"module {name} is in no layer of tests/test_house.py: place it in the house")


def _graph() -> tuple[dict[str, set[str]], set[str]]:
    modules = _modules()
    graph, dagster_users = {}, set()
    for name, path in modules.items():
        graph[name], uses = _imports(name, path, set(modules))
        if uses:
            dagster_users.add(name)
    return graph, dagster_users


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, ignoring a package <-> its own modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            root = min(comp, key=len)
            if len(comp) > 1 and not all(c.startswith(root) for c in comp):
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_import_graph_has_no_cycle_no_upward_import_and_dagster_only_in_its_section():
    graph, dagster_users = _graph()
    assert len(graph) > 60, "the package was found and parsed"
    assert not _cycles(graph), f"import cycles: {_cycles(graph)}"
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() if a != "karma_dagster"
                    for b in targets if b != "karma_dagster" and _layer(b) > _layer(a))
    assert not upward, f"imports from a lower layer into a higher one: {upward}"
    outside = sorted(m for m in dagster_users if _top(m) not in SECTION)
    assert not outside, f"modules outside the Dagster section that import dagster: {outside}"
    assert {_top(m) for m in dagster_users} >= {"assets", "resources", "sensors", "definitions", "jobs"}


def test_the_checker_sees_a_cycle_and_an_upward_import():
    graph = {"karma_dagster.kg.a": {"karma_dagster.kg.b"}, "karma_dagster.kg.b": {"karma_dagster.kg.a"},
             "karma_dagster.agents.x": set()}
    assert _cycles(graph) == [["karma_dagster.kg.a", "karma_dagster.kg.b"]]
    assert _layer("karma_dagster.assets.chain") > _layer("karma_dagster.agents.reader") > _layer("karma_dagster.kg.store")


def test_importing_the_code_location_or_a_job_name_builds_nothing():
    import subprocess
    import sys

    code = ("import sys, dagster as dg\n"
            "def refuse(*a, **k): raise SystemExit('Definitions built at import')\n"
            "dg.Definitions.__init__ = refuse\n"
            "import karma_dagster.definitions, karma_dagster.jobs, karma_dagster.runner, karma_dagster.cli\n"
            "from karma_dagster.runtime import services\n"
            "print('litellm' in sys.modules, len(services._CACHE))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "0"], "no definitions, backbone or model is built at import"
    from karma_dagster.definitions import defs

    assert not isinstance(defs, dg.Definitions) and callable(defs), "the code location is built lazily"


# ---------------------------------------------------------------- a stage added through the registry alone
class ToyRow(BaseModel):
    doc_key: str
    accepted_triples: int


class ToyTable:
    """A pandera-like model: the blocking check validates the toy table too."""

    @staticmethod
    def validate(frame: pd.DataFrame, lazy: bool = True) -> pd.DataFrame:
        assert (frame["accepted_triples"] >= 0).all()
        return frame


def _toy_run(x: stages.StageInputs) -> tuple[list[BaseModel], dict[str, object]]:
    evaluated = x.table("evaluated")
    return [ToyRow(doc_key=x.document, accepted_triples=int(evaluated["accepted"].sum()))], {"toy": True}


TOY = stages.Stage(
    "toy_counts", agent="toy", reads=("evaluated",), prompts=(), row_model=ToyRow,
    preview=("doc_key", "accepted_triples"), description="Accepted triples per document (a test stage).",
    run=_toy_run, table_model=ToyTable, report=lambda t: {"toy_accepted": int(t["accepted_triples"].sum())},
)


def test_a_stage_added_to_the_registry_reaches_the_asset_graph_the_job_and_the_report(make_pipeline):
    from karma_dagster.definitions import build_definitions
    from karma_dagster.resources.backbones import BackboneConfig

    registry = (*stages.STAGES, TOY)
    p = make_pipeline(inbox_files=("abstracts.pubtator",))
    p.defs = build_definitions(backbones={"local": BackboneConfig()}, storage=p.storage, registry=registry)
    node = p.defs.resolve_asset_graph().get(dg.AssetKey(["local", "toy_counts"]))
    assert node.group_name == "local" and dg.AssetKey(["local", "evaluated"]) in node.parent_keys
    job = p.defs.resolve_job_def(jobs.DOCUMENT_JOB)
    assert dg.AssetKey(["local", "toy_counts"]) in job.asset_layer.executable_asset_keys

    from karma_dagster import runner

    assert runner.import_kg(p.defs, p.instance)
    keys, _ = runner.register_inbox(p.defs, p.instance)
    assert not runner.run_documents(p.defs, p.instance, keys[:1])
    table = StageStore(p.storage.paths().stages_dir).read("local", "toy_counts", keys[0])
    evaluated = StageStore(p.storage.paths().stages_dir).read("local", "evaluated", keys[0])
    assert int(table["accepted_triples"].iloc[0]) == int(evaluated["accepted"].sum())
    report = build_report(p.storage.stage_store(), p.kg, ["local"], registry=registry)
    ran = StageStore(p.storage.paths().stages_dir).partitions("local", "toy_counts")  # by date: the day's papers
    assert keys[0] in ran
    assert report.backbones[0].figures["toy_accepted"] == sum(
        int(StageStore(p.storage.paths().stages_dir).read("local", "evaluated", k)["accepted"].sum()) for k in ran)
    assert "toy accepted" in report.markdown()


def test_a_stage_may_read_only_what_it_declares(tmp_path):
    sneaky = stages.Stage(
        "sneaky", agent="toy", reads=("documents",), prompts=(), row_model=ToyRow, preview=(),
        description="", run=_toy_run, table_model=ToyTable,
    )
    inputs = stages.StageInputs(sneaky, "local", "2016-01-01_x", None, None, None)  # type: ignore[arg-type]
    try:
        inputs.table("evaluated")
    except stages.UndeclaredRead as exc:
        assert "sneaky" in str(exc) and "evaluated" in str(exc)
    else:
        raise AssertionError("an undeclared read must fail")
    bad_order = (stages.STAGES[0], sneaky, *stages.STAGES[1:])
    stages.check(bad_order)  # reads documents, listed before it: fine
    try:
        stages.check((sneaky,))
    except ValueError as exc:
        assert "documents" in str(exc)
    else:
        raise AssertionError("a stage reading a table no earlier stage writes must be refused")


def test_the_package_root_shows_the_flow_not_its_helpers():
    """The root holds the stage registry, the Dagster section's entry points and the CLI; every helper lives in the
    folder of its concern (runtime/ for settings, paths, stores, caches, signals, progress)."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= 8, f"modules at the package root: {loose}"
    assert {"stages.py", "definitions.py", "cli.py"} <= set(loose)
