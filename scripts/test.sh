#!/usr/bin/env bash
# The test suite (what CI runs). Extra arguments go to pytest.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bootstrap.sh"
cd "$ROOT"
exec python -m pytest "$@"
