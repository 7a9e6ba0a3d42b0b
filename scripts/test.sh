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
cargo test --workspace --no-fail-fast

echo "==> browser tests"
port=3917
work=$(mktemp -d)
export DATABASE_URL="postgres://postgres@127.0.0.1:5432/docflow_e2e"
export AMQP_URL="amqp://guest:guest@127.0.0.1:5672/docflow-e2e"
export DOCFLOW_LISTEN="127.0.0.1:$port" DOCFLOW_DATA_DIR="$work/data" LEPTOS_SITE_ROOT="$root/target/site"
rabbitmqctl -q add_vhost docflow-e2e >/dev/null
rabbitmqctl -q set_permissions -p docflow-e2e guest '.*' '.*' '.*' >/dev/null
target/debug/docflow run --demo >"$work/docflow.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 1; done
if ! curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; then
  echo "docflow did not become ready:"; tail -50 "$work/docflow.log"; exit 1
fi
status=0
(cd end2end && DOCFLOW_E2E_URL="http://127.0.0.1:$port" npx playwright test) || status=$?
if [ $status -ne 0 ]; then echo "--- docflow log ---"; tail -80 "$work/docflow.log"; fi
exit $status
