#!/usr/bin/env bash
# The test suite (what CI runs). Extra arguments go to pytest.
set -euo pipefail
# everything the tests use: the test tools and the offline LLM (llama.cpp) whatever backbones.yaml enables
KARMA_EXTRAS="${KARMA_EXTRAS:-dev,llm}" source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bootstrap.sh"
cd "$ROOT"
# Some tests need system programs: Debian's chromium (the review page's browser test, no browser download),
# PostgreSQL (the KG store and Dagster's instance storage on a server) and Redis (the Celery broker of the
# distributed executor). Installed here when missing and we may (root with apt); otherwise those tests skip and
# say why.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing ${missing[*]} for the tests that need them ..."
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
    > /tmp/karma-apt.log 2>&1 || echo "could not install ${missing[*]} (see /tmp/karma-apt.log): their tests will skip" >&2
  # Debian starts the services it installs; the tests start their own throwaway servers on free ports.
  { service postgresql stop; service redis-server stop; } > /dev/null 2>&1 || true
fi
# kgx in a venv of its own (it cannot install beside our pins), for the test that reads the KGX export back with
# kgx's reader: built once (about a minute), then cached; when it cannot be built that test skips and says why.
bash "$ROOT/scripts/kgx_venv.sh"
# The tests' throwaway files (Dagster's SQLite instances, stage tables, KG files, Postgres data dirs: ~4 GB over a
# run) go to memory when /dev/shm has room: every Dagster event and KG write commits to SQLite/DuckDB, and on
# these machines' disk a 40-abstract `karma run` took 144 s against 113 s on /dev/shm (one run each, 2 cores,
# idle). KARMA_TEST_TMP=/some/dir chooses the place (kept after the run); the /dev/shm folder is removed at the end.
tmp_root="${KARMA_TEST_TMP:-}"
cleanup=""
if [ -z "$tmp_root" ] && [ -d /dev/shm ] && [ -w /dev/shm ] \
   && [ "$(df --output=avail -k /dev/shm 2>/dev/null | tail -n 1 | tr -d ' ')" -gt 10000000 ] 2>/dev/null; then
  tmp_root="$(mktemp -d /dev/shm/karma-tests.XXXXXX)"
  cleanup="$tmp_root"
fi
if [ -n "$tmp_root" ]; then
  mkdir -p "$tmp_root"
  [ -z "$cleanup" ] || chmod 1777 "$tmp_root"  # as /tmp: the throwaway PostgreSQL runs as the postgres user
  export TMPDIR="$tmp_root"
  echo "test files under $tmp_root"
fi
# Two workers (pytest-xdist), a test file each at a time (`--dist loadfile`: a module's shared fixtures are built
# once), the files in collection order (`--no-loadscope-reorder`, pytest-xdist 3.8 on): tests/conftest.py puts its
# SLOW_FILES first, so the two workers end together; KARMA_TEST_WORKERS=0 runs everything in this one process.
# --durations=25: the slowest 25 tests, and after them the slowest files, so the suite time can be kept in check.
order=()
python -c "import importlib.metadata as m, sys; sys.exit([int(x) for x in m.version('pytest-xdist').split('.')[:2]] < [3, 8])" \
  2>/dev/null && order=(--no-loadscope-reorder)
# Each worker a core: BLAS/OpenMP pools of two threads in each of two workers spin against each other on two cores
# (tests/test_ablations.py beside two CPU-bound processes: 268 s with the default pools, 245 s with one thread each).
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
status=0
python -m pytest -n "${KARMA_TEST_WORKERS:-2}" --dist loadfile "${order[@]}" --durations=25 "$@" || status=$?
[ -z "$cleanup" ] || rm -rf "$cleanup"
exit "$status"
