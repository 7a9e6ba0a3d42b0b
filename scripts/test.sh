#!/usr/bin/env bash
# Runs every docflow test: formatting and lints, unit and integration tests
# against the real PostgreSQL and RabbitMQ, the benches at a small size, and
# the browser tests in Chromium. Prints each phase's wall time and the count
# of tests run at the end, whether the run passed or not.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

phases=()
started=$(date +%s)
# Runs "$@" as the phase named $1 and records its wall time.
phase() {
  local name=$1 t0 status
  shift
  printf '\033[1m==> %s\033[0m\n' "$name"
  t0=$(date +%s)
  set +e
  "$@"
  status=$?
  set -e
  phases+=("$(printf '%-34s %5ss%s' "$name" "$(($(date +%s) - t0))" "$([ $status -ne 0 ] && echo '  FAILED')")")
  return $status
}

logs=$(mktemp -d)
counts() {
  local unit integration browser
  # nextest's JUnit report: one <testsuite> per test binary.
  if [ -f target/nextest/default/junit.xml ]; then
    unit=$(grep -o '<testsuite name="[^"]*" tests="[0-9]*"' target/nextest/default/junit.xml |
      grep -v 'name="server::api"' | grep -oE '[0-9]+"$' | tr -d '"' | awk '{s += $1} END {print s + 0}')
    integration=$(grep -o '<testsuite name="server::api" tests="[0-9]*"' target/nextest/default/junit.xml |
      grep -oE '[0-9]+"$' | tr -d '"')
  fi
  browser=$(cat "$logs"/e2e-*.log 2>/dev/null | grep -oE '^\s+[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
  echo "tests run: unit ${unit:-0}, integration ${integration:-0}, bench smoke runs ${bench_runs:-0}, browser ${browser:-0}"
}
summary() {
  echo
  echo "--- phases (wall time) ---"
  printf '%s\n' "${phases[@]}"
  printf '%-34s %5ss\n' "total" "$(($(date +%s) - started))"
  counts
}
trap summary EXIT

phase "set-up (tools and services)" scripts/setup.sh
phase "clean earlier test state" scripts/clean-test-state.sh

phase "format" cargo fmt --all --check
phase "lints (clippy, all targets)" cargo clippy --workspace --all-targets -- -D warnings

phase "browser bundle (wasm)" scripts/build-site.sh

# One build serves the tests, the benches and the browser tests' server:
# target/debug/docflow is built with the tests' features, so nothing
# compiles twice.
phase "build tests and benches" cargo test --workspace --no-run --lib --bins --tests --bench drain --bench upload --bench login_flood --bench test_setup
nextest_run() {
  if ! cargo nextest run --workspace --lib --bins --tests --no-fail-fast 2>&1 | tee "$logs/nextest.log"; then
    # The failures, last, where a reader of the run's tail sees them first.
    echo "--- failed tests ---"
    grep -E -A3 "panicked at" "$logs/nextest.log" | tail -30 || true
    grep -E "^\s+(FAIL|TIMEOUT|SIGSEGV|SIGKILL|SIGABRT) " "$logs/nextest.log" | tail -20 || true
    return 1
  fi
}
# The cluster test's three-node RabbitMQ cluster stays up for the drain
# bench on it, which takes it down (one start instead of two).
export DOCFLOW_CLUSTER_KEEP=1
phase "unit and integration tests" nextest_run

# `--workspace` as in the build above, so that the benches reuse its build
# (with `-p server`, `app` is built anew as a plain dependency).
bench_runs=0
benches() {
  DRAIN_DOCS=20 cargo test -q --workspace --bench drain
  DRAIN_DOCS=20 DRAIN_WORKERS=2 DRAIN_CLUSTER=1 cargo test -q --workspace --bench drain
  scripts/cluster.sh down
  UPLOAD_PER_CLIENT=2 cargo test -q --workspace --bench upload
  FLOOD_REQUESTS=20 cargo test -q --workspace --bench login_flood
  SETUP_RUNS=3 cargo test -q --workspace --bench test_setup
  bench_runs=5
}
phase "benches at a small size" benches

# The browser tests in two halves side by side, each with a docflow server,
# database, vhost and mock embedder of its own (their ports apart).
browser() {
  local a b sa sb
  DOCFLOW_E2E_BUILT=1 DOCFLOW_E2E_PORT=3917 scripts/e2e.sh --shard=1/2 >"$logs/e2e-1.log" 2>&1 &
  a=$!
  DOCFLOW_E2E_BUILT=1 DOCFLOW_E2E_PORT=3927 scripts/e2e.sh --shard=2/2 >"$logs/e2e-2.log" 2>&1 &
  b=$!
  set +e
  wait $a; sa=$?
  wait $b; sb=$?
  set -e
  echo "--- browser tests, first half ---"; cat "$logs/e2e-1.log"
  echo "--- browser tests, second half ---"; cat "$logs/e2e-2.log"
  [ $sa -eq 0 ] && [ $sb -eq 0 ]
}
phase "browser tests" browser
