#!/usr/bin/env bash
# Runs every docflow test: formatting and lints, unit and integration tests
# against the real PostgreSQL and RabbitMQ, and the browser tests in Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scripts/setup.sh
scripts/clean-test-state.sh

echo "==> format and lints"
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings

echo "==> browser bundle"
scripts/build-site.sh

echo "==> unit and integration tests"
log=$(mktemp)
if ! cargo test --workspace --no-fail-fast 2>&1 | tee "$log"; then
  # The failures, last, where a reader of the run's tail sees them first.
  echo "--- failed tests ---"
  grep -E -A3 "panicked at" "$log" | tail -30 || true
  grep -E "^test .* FAILED$|^error: .*target" "$log" | tail -20 || true
  exit 1
fi

echo "==> the drain, upload and login-flood benches, at a small size (debug build)"
DRAIN_DOCS=20 cargo test -p server --bench drain
DRAIN_DOCS=20 DRAIN_WORKERS=2 DRAIN_CLUSTER=1 cargo test -p server --bench drain
scripts/cluster.sh down
UPLOAD_PER_CLIENT=2 cargo test -p server --bench upload
FLOOD_REQUESTS=20 cargo test -p server --bench login_flood

echo "==> browser tests"
scripts/e2e.sh
