#!/usr/bin/env bash
# Builds .venv-kgx: the `kgx` package in a venv of its own, for the test that reads our KGX export back with
# kgx's own TSV reader (tests/reliability/test_export_formats.py). kgx cannot install beside the project's pins
# (pyproject.toml: click<8.2 vs spaCy's >=8.2.1, pyarrow<16 vs lancedb's >=17), so it never enters .venv.
# Cached: rebuilt only when KGX_PIN below changes (stamp file). Safe to run again. Exit 0 also when it cannot be
# built (no registry, say): the test then skips and names the log.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
KGX_PIN="kgx==2.6.0"  # 2.7.0 resolves to no install (its click<8.2 against linkml-map's click>=8.2)
VENV="$ROOT/.venv-kgx"
STAMP="$VENV/.kgx-installed"
LOG="$ROOT/.venv-kgx.log"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null || true)" = "$KGX_PIN" ]; then
  exit 0
fi
echo "building .venv-kgx ($KGX_PIN, for the KGX read-back test; a minute or two, once) ..."
rm -rf "$VENV"
start=$(date +%s)
if { "$PY" -m venv "$VENV" && "$VENV/bin/python" -m pip install -q "$KGX_PIN"; } > "$LOG" 2>&1; then
  echo "$KGX_PIN" > "$STAMP"
  echo ".venv-kgx built in $(( $(date +%s) - start )) s"
else
  tail -n 20 "$LOG" >&2
  echo "could not build .venv-kgx (log: $LOG): the KGX read-back test will skip" >&2
fi
exit 0
