#!/usr/bin/env bash
# The test suite (what CI runs). Extra arguments go to pytest.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bootstrap.sh"
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
exec python -m pytest --durations=25 "$@"  # the slowest 25 tests, so the suite time can be kept in check
