"""Set-up installs what the job needs: scripts/main.sh (bootstrap.sh with no KARMA_EXTRAS) installs the project
without the `[llm]` extra (llama.cpp, compiled from source) unless a backbone that will run is served by the local
llama.cpp server; scripts/test.sh installs `[dev,llm]`; one venv, a stamp per extras set, a set covering its subsets.

bootstrap.sh runs here for real over a copy of the checkout's scripts whose .venv/bin/python is a stand-in that
records each pip command (no install, no network): the decisions are the script's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from karma_dagster.backbones.llm.runtime_needed import needing_llama_cpp
from karma_dagster.runtime.config import read_backbones
from karma_dagster.runtime.paths import shipped

ROOT = Path(__file__).resolve().parents[1]
FAKE_PYTHON = """#!/usr/bin/env bash
# a venv python that records pip installs and answers runtime_needed from $FAKE_NEEDS
if [ "$1 $2" = "-m pip" ]; then echo "pip ${*:3}" >> "$(dirname "$0")/../calls.log"; exit 0; fi
if [ "$2" = "karma_dagster.backbones.llm.runtime_needed" ]; then
  echo "runtime_needed ${*:3}" >> "$(dirname "$0")/../calls.log"
  [ -n "${FAKE_NEEDS:-}" ] && { echo "$FAKE_NEEDS"; exit 0; }; exit 1
fi
exit 0
"""


def write_backbones(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "backbones.yaml"
    path.write_text(text, encoding="utf-8")
    return path


SMOLLM2 = """
  smollm2:
    kind: litellm
    model: hosted_vllm/smollm2
    api_base: http://127.0.0.1:8088/v1
    enabled: {enabled}
"""


def test_the_shipped_backbones_need_no_llama_cpp():
    assert needing_llama_cpp(read_backbones(shipped("backbones.yaml"))) == []


def test_a_backbone_served_by_llm_serve_needs_it_when_it_runs(tmp_path):
    on = read_backbones(write_backbones(tmp_path, "backbones:\n  local: {kind: local}" + SMOLLM2.format(enabled="true")))
    assert needing_llama_cpp(on) == ["smollm2 (enabled)"]
    off = read_backbones(write_backbones(tmp_path, "backbones:\n  local: {kind: local}" + SMOLLM2.format(enabled="false")))
    assert needing_llama_cpp(off) == []
    assert needing_llama_cpp(off, ["--backbone", "smollm2"]) == ["smollm2 (named with --backbone)"]
    assert needing_llama_cpp(off, ["--backbone=local"]) == []
    judged = read_backbones(write_backbones(tmp_path, "judge: smollm2\nbackbones:\n  local: {kind: local}"
                                            + SMOLLM2.format(enabled="false")))
    assert needing_llama_cpp(judged) == ["smollm2 (the judge)"]
    ollama = read_backbones(write_backbones(tmp_path, "backbones:\n  o: {kind: litellm, model: ollama/qwen2.5, "
                                            "api_base: 'http://127.0.0.1:11434'}"))
    assert needing_llama_cpp(ollama) == [], "another local server is not llama.cpp's"


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", root / "scripts" / "bootstrap.sh")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / ".venv" / "bin").mkdir(parents=True)
    fake = root / ".venv" / "bin" / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return root


def bootstrap(root: Path, *args: str, **env: str) -> list[str]:
    """Source bootstrap.sh as main.sh does (its arguments visible to it); the pip and runtime_needed calls made."""
    log = root / ".venv" / "calls.log"
    log.unlink(missing_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in ("KARMA_EXTRAS", "FAKE_NEEDS")}
    done = subprocess.run(["bash", "-c", 'source "$0/scripts/bootstrap.sh"', str(root), *args], capture_output=True,
                          text=True, env={**environ, "PYTHON": sys.executable, **env}, timeout=60)
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines() if log.exists() else []


def installs(calls: list[str]) -> list[str]:
    return [c.split(" -e ", 1)[1] for c in calls if c.startswith("pip install -e ")]


def test_main_installs_the_project_alone_and_llm_only_when_needed_test_installs_everything(checkout):
    root = str(checkout)
    assert installs(bootstrap(checkout)) == [root], "main.sh with no LLM backbone: no [llm], nothing compiled"
    assert (checkout / ".venv" / ".karma-installed-none").is_file()
    assert installs(bootstrap(checkout)) == [], "a no-op the second time"
    calls = bootstrap(checkout, "--backbone", "smollm2", FAKE_NEEDS="smollm2 (named with --backbone)")
    assert "runtime_needed --backbone smollm2" in calls, "main.sh's arguments reach the decision"
    assert installs(calls) == [f"{root}[llm]"]
    assert installs(bootstrap(checkout, KARMA_EXTRAS="dev,llm")) == [f"{root}[dev,llm]"], "test.sh: everything"
    assert installs(bootstrap(checkout, FAKE_NEEDS="smollm2 (enabled)")) == [], "dev,llm covers llm"
    (checkout / "pyproject.toml").write_text((checkout / "pyproject.toml").read_text() + "\n# changed\n")
    assert installs(bootstrap(checkout)) == [root], "a changed pyproject.toml installs again"


def test_test_sh_asks_for_every_extra():
    text = (ROOT / "scripts" / "test.sh").read_text()
    assert 'KARMA_EXTRAS="${KARMA_EXTRAS:-dev,llm}" source' in text


@pytest.mark.parametrize("cpu", ["amx", "avx2"])
def test_llama_cpp_is_built_native_except_where_the_cpu_reports_amx(tmp_path, cpu):
    """A CPU reporting AMX gets its other extensions named and AMX left out (a guest may report AMX and refuse its
    instructions: SIGILL at the server's first answer); any other CPU gets llama.cpp's own -march=native."""
    flags = {"amx": "fpu sse4_2 avx avx2 fma f16c bmi2 avx512f avx512_vnni amx_tile amx_int8 amx_bf16",
             "avx2": "fpu sse4_2 avx avx2 fma f16c bmi2"}[cpu]
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    script = f"source <(sed -n '/^llama_cmake_args()/,/^}}/p' {ROOT / 'scripts' / 'bootstrap.sh'}); " \
             f"llama_cmake_args {cpuinfo}"
    args = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.split()
    if cpu == "avx2":
        assert args == ["-DLLAVA_BUILD=OFF"]
        return
    assert "-DGGML_NATIVE=OFF" in args and not any("AMX" in a for a in args)
    assert {"-DGGML_AVX2=ON", "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON"} <= set(args)
    assert {"-DGGML_AVX512_BF16=OFF", "-DGGML_AVX_VNNI=OFF"} <= set(args)  # what the CPU does not report: off
