"""A DAGSTER_HOME used by two processes at once, a new home over an existing data dir, and strict configuration.

Issue 11 items 5, 10 and 13: two processes opening a fresh home together raced in Dagster's SQLite schema set-up
(the second died with `table jobs already exists`, the home was left with "more than one head"); a new home
pointed at an existing data dir failed every run while a document was unfinished (its partition was unknown to
the new instance); YAML errors gave raw tracebacks without the line, and misspelled keys were dropped silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from pydantic import ValidationError

from karma_dagster import runner
from karma_dagster.runtime.config import ConfigError, read_backbones
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.resources.backbones import BackboneConfig, BackbonesResource
from karma_dagster.resources.params import KarmaParamsResource
from karma_dagster.resources.storage import KarmaStorageResource
from karma_dagster.stages import FINAL_STAGE

REPO = Path(__file__).resolve().parents[2]

# Imports first (slow), then waits for the barrier, so the instance creations start within milliseconds.
CHILD = """
import os, sys, time
from pathlib import Path
from karma_dagster import runner
Path(sys.argv[1]).touch()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.002)
inst = runner.instance()
inst.get_runs(limit=1)
inst.add_dynamic_partitions("documents", [sys.argv[3]])
print("opened")
"""


def _open_together(home: Path, n: int, tag: str) -> list[subprocess.CompletedProcess[str]]:
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    barrier = home.parent / f"{tag}.go"
    procs = []
    for i in range(n):
        ready = home.parent / f"{tag}.ready{i}"
        procs.append((ready, subprocess.Popen([sys.executable, "-c", CHILD, str(ready), str(barrier), f"doc{i}"],
                                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    deadline = time.monotonic() + 180
    while not all(r.exists() for r, _ in procs):
        assert time.monotonic() < deadline, "children did not import within 180 s"
        assert all(p.poll() is None for _, p in procs), [p.communicate() for _, p in procs]
        time.sleep(0.05)
    barrier.touch()
    out = []
    for _, p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


@pytest.mark.parametrize("attempt", range(3))
def test_two_processes_on_a_fresh_home_both_open_it_and_it_stays_usable(tmp_path: Path, attempt: int) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    results = _open_together(home, 2, "first")
    for r in results:
        assert r.returncode == 0, r.stderr[-2000:]
    (third,) = _open_together(home, 1, "third")
    assert third.returncode == 0, third.stderr[-2000:]
    with dg.DagsterInstance.from_config(str(home)) as inst:
        assert set(inst.get_dynamic_partitions("documents")) == {"doc0", "doc1"}  # what the children added


# A second short paper beside the shipped reading note: two documents whose chains take seconds, not minutes (what
# the home does with an unfinished document does not depend on the document's size or format).
SECOND_NOTE = ("Levofloxacin and tendon rupture in the elderly\n\nRESULTS\n\n"
               "Levofloxacin caused tendinopathy and Achilles tendon rupture in two elderly patients.\n")


def test_a_new_home_over_an_existing_data_dir_runs_the_unfinished_documents(make_pipeline, tmp_path: Path) -> None:
    p = make_pipeline(inbox_files=("visfatin-hypothyroidism-note.txt",))
    (p.inbox / "levofloxacin-note.txt").write_text(SECOND_NOTE, encoding="utf-8")
    keys, _ = runner.register_inbox(p.defs, p.instance)
    assert len(keys) == 2
    assert runner.run_documents(p.defs, p.instance, keys[:1], log=lambda _: None) == {}  # the other stays unfinished
    (tmp_path / "home_b").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home_b")) as home_b:
        report = runner.run_main(p.defs, home_b, log=lambda _: None)
    assert report.documents_failed == {}, report.documents_failed
    stages = p.storage.stage_store()
    assert all(stages.exists("local", FINAL_STAGE, k) for k in keys), "the unfinished document ran in the new home"


# ------------------------------------------------------------------ strict configuration
@pytest.mark.parametrize(
    "text, expected",
    [
        ("backbones:\n  local:\n    kind: local\n   model: x\n", "not valid YAML at line 4, column 4"),
        ("backbones: {\n", "not valid YAML at line 2, column 1"),
        ("- local\n- other\n", "line 1: expected a mapping with 'backbones:'"),
        ("judge: local\nbackbones: [local, other]\n", "line 2: 'backbones' must be a mapping"),
        ("backbones:\n  local: 3\n", "line 2: backbone 'local' must be a mapping"),
        ("backbones:\n  local:\n    kind: litellm\n    api_bse: http://127.0.0.1:1\n",
         "line 4: unknown key 'backbones.local.api_bse' (did you mean 'api_base'?)"),
        ("backbones:\n  local:\n    concurency: 3\n", "line 3: unknown key 'backbones.local.concurency' (did you mean 'concurrency'?)"),
    ],
)
def test_backbones_yaml_errors_name_the_file_and_the_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "backbones.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_backbones(path)
    assert str(err.value).startswith("backbones.yaml: "), err.value
    assert expected in str(err.value), err.value
    assert err.value.__cause__ is None  # the message says it all: no chained parser traceback


def test_a_missing_backbones_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nothing.yaml: cannot be read"):
        read_backbones(tmp_path / "nothing.yaml")


@pytest.mark.parametrize(
    "make, key, closest",
    [
        (lambda: KarmaParams(delt=0.3), "delt", "delta"),
        (lambda: KarmaParams(controller={"alfa": 1.0}), "alfa", "alpha"),
        (lambda: KarmaParams(weights={"confidance": {"bias": 1.0}}), "confidance", "confidence"),
        (lambda: KarmaParamsResource(integrate_treshold=0.5), "integrate_treshold", "integrate_threshold"),
        (lambda: KarmaParamsResource(controller={"w_cots": 0.1}), "w_cots", "w_cost"),
        (lambda: KarmaStorageResource(data_dr="/tmp/x"), "data_dr", "data_dir"),
        (lambda: BackboneConfig(api_bse="http://127.0.0.1:1"), "api_bse", "api_base"),
        (lambda: BackbonesResource(backbones={"local": {"concurency": 2}}), "concurency", "concurrency"),
    ],
)
def test_unknown_keys_in_params_and_resources_name_the_closest_valid_key(make, key: str, closest: str) -> None:
    with pytest.raises(ValidationError) as err:
        make()
    assert f"unknown key {key!r}" in str(err.value) and f"did you mean {closest!r}" in str(err.value), err.value


def test_valid_params_and_resources_still_build() -> None:
    assert KarmaParams(delta=0.3, controller={"alpha": 0.1}).controller.alpha == 0.1
    assert KarmaParamsResource(delta=0.3).params().delta == 0.3
    assert KarmaStorageResource(data_dir="/tmp/x").data_dir == "/tmp/x"
    assert BackbonesResource(backbones={"local": BackboneConfig(concurrency=2)}).settings("local").concurrency == 2
