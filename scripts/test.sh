#!/usr/bin/env bash
# The test suite (what CI runs). Extra arguments go to pytest.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bootstrap.sh"
cd "$ROOT"
# The review page's browser test drives Debian's chromium (no browser download). Installed here when missing and
# we may (root with apt); otherwise that one test skips and says why.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing chromium for the review page's browser test ..."
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } > /tmp/karma-chromium.log 2>&1 \
    || echo "chromium could not be installed (see /tmp/karma-chromium.log): the browser test will skip" >&2
fi
exec python -m pytest "$@"
