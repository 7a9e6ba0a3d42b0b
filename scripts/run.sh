#!/usr/bin/env bash
# Runs docflow (web, relay, workers, keeper) with the demo users at
# http://127.0.0.1:3000. Extra arguments go to `docflow run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build-site.sh release
export LEPTOS_SITE_ROOT="${LEPTOS_SITE_ROOT:-$(pwd)/target/site}"
exec cargo run --release --bin docflow -- run --demo "$@"
