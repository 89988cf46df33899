#!/usr/bin/env bash
# The main job on the embedded default (local backbone, embedded DuckDB + LanceDB, no key, no network):
# imports the seed KG, ingests data/inbox, grows the KG in dagster_home/karma/kg.duckdb, prints the report.
# Installs what the job needs (bootstrap.sh): llama.cpp is built only when a backbone that runs is served by it.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bootstrap.sh"
cd "$ROOT"
exec karma run "$@"
