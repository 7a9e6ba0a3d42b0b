#!/usr/bin/env bash
# Runs every docflow test: formatting and lints, unit and integration tests
# against the real PostgreSQL and RabbitMQ, the benches at a small size, the
# API through a client generated from its OpenAPI document, and the browser
# tests in Chromium. Prints each phase's wall time and the count of tests run
# at the end, whether the run passed or not.
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
  local unit=0 integration=0 browser report
  # nextest's JUnit reports: one <testsuite> per test binary (the cluster
  # run's report holds only the integration binary).
  for report in target/nextest/default/junit.xml target/nextest/cluster/junit.xml; do
    [ -f "$report" ] || continue
    read -r u i < <(grep -oE '<testsuite name="[^"]*" tests="[0-9]+"' "$report" |
      awk -F'"' '{ if ($2 == "server::api") i += $4; else u += $4 } END { print u + 0, i + 0 }')
    unit=$((unit + u))
    integration=$((integration + i))
  done
  browser=$({ cat "$logs"/e2e-*.log 2>/dev/null || true; } | awk '/^ +[0-9]+ passed/ { s += $1 } END { print s + 0 }')
  echo "tests run: unit $unit, integration $integration, bench smoke runs ${bench_runs:-0}, generated client ${client_runs:-0}, browser $browser"
}
summary() {
  set +e
  echo
  echo "--- phases (wall time) ---"
  printf '%s\n' "${phases[@]}"
  printf '%-34s %5ss\n' "total" "$(($(date +%s) - started))"
  counts
}
trap summary EXIT

phase "set-up (tools and services)" scripts/setup.sh
phase "clean earlier test state" scripts/clean-test-state.sh

# The three-node RabbitMQ cluster of the cluster tests starts now, beside
# the build (its nodes mostly wait on each other), rather than at the start
# of the cluster tests, where it was the longest wait of the run's last
# phase. The tests would start it themselves; they find it up.
(
  status=0
  scripts/cluster.sh up >"$logs/cluster-up.log" 2>&1 || status=$?
  echo $status >"$logs/cluster-up.status"
) &

# The browser bundle builds beside the lints and the test build (in a build
# directory of its own): a build's long single-threaded stretches (the
# largest crates, linking) leave a core free for the other. It is the
# release bundle, the one users get: 3 MB of WASM that Chromium compiles
# and runs with a quarter less CPU than the 27 MB `opt-level = 1` one, in a
# phase bound by CPU; it costs its link-time optimisation again only when
# app/ changes.
site_started=$(date +%s)
(
  status=0
  scripts/build-site.sh release || status=$?
  date +%s >"$logs/site.done"
  exit $status
) >"$logs/site.log" 2>&1 &
site_pid=$!
site_wait() {
  local status=0
  wait $site_pid || status=$?
  cat "$logs/site.log"
  echo "(the browser bundle took $(($(cat "$logs/site.done") - site_started)) s beside the other phases)"
  return $status
}
# shellcheck disable=SC2064
trap "kill $site_pid 2>/dev/null || true; summary" EXIT

phase "format" cargo fmt --all --check

# One build serves the lints, the tests, the benches and the browser tests'
# server. Clippy lints docflow's own crates inside it, as the rustc wrapper
# of the workspace's crates (what `cargo clippy` sets up around a check
# build): the dependencies compile once, for the tests, instead of a second
# time in check mode for the lints. Every target `cargo clippy
# --all-targets` covers is built, so every one is linted; any warning fails
# the build. target/debug/docflow is built with the tests' features, so
# nothing compiles twice.
RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver)
CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
# The build is also the SQL check: it compiles the server's queries
# (`sqlx::query!`) against a database the migrations just made, so a query
# naming a column a migration renamed fails it, and then compares the query
# descriptions it wrote with the ones committed in .sqlx/ (what an ordinary,
# offline build reads; `cargo sqlx prepare --check` without sqlx-cli).
build() {
  local url status
  url=$(scripts/sql-schema.sh) || return 1
  mkdir -p "$logs/sqlx"
  DATABASE_URL=$url SQLX_OFFLINE=false SQLX_OFFLINE_DIR="$logs/sqlx" \
    cargo test --workspace --no-run --all-targets 2>&1 | tee "$logs/build.log"
  status=${PIPESTATUS[0]}
  [ "$status" -eq 0 ] || return "$status"
  scripts/prepare-sql.sh --check "$logs/sqlx"
}
phase "lints (clippy), SQL check, build of every target" build
cluster_filter='binary(api) & test(/^cluster::/)'

nextest_run() {
  if ! cargo nextest run --workspace --lib --tests --no-fail-fast \
    -E "not ($cluster_filter)" 2>&1 | tee "$logs/nextest.log"; then
    # The failures, last, where a reader of the run's tail sees them first.
    echo "--- failed tests ---"
    grep -E -A3 "panicked at" "$logs/nextest.log" | tail -30 || true
    grep -E "^\s+(FAIL|TIMEOUT|SIGSEGV|SIGKILL|SIGABRT) " "$logs/nextest.log" | tail -20 || true
    return 1
  fi
}
phase "unit and integration tests" nextest_run
# The cluster tests (the failover test takes two minutes, mostly waiting for
# nodes to stop and start) run in a run of their own beside the benches and
# the browser tests, which mostly wait too. Beside the other integration
# tests they were starved: the retrieval tests keep both cores busy
# (embedding with the real model, building vector indexes), and the
# failover test's web process then waited over 3 s for a database
# connection for 20 s at a time. The three-node cluster they start stays
# up for the drain bench on it, which takes it down.
export DOCFLOW_CLUSTER_KEEP=1
(
  status=0
  while [ ! -f "$logs/cluster-up.status" ]; do sleep 1; done
  if [ "$(cat "$logs/cluster-up.status" 2>/dev/null)" != 0 ]; then
    echo "--- scripts/cluster.sh up, beside the build, failed; the tests try again ---"
    cat "$logs/cluster-up.log"
  fi
  # Their warnings (lost leases, retries, reconnects) are printed with a
  # failure: a run against stopping nodes is not repeated at will.
  RUST_LOG="${RUST_LOG:-docflow=warn}" \
    cargo nextest run --profile cluster --workspace --lib --tests --no-fail-fast \
    -E "$cluster_filter" >"$logs/cluster.log" 2>&1 || status=$?
  echo $status >"$logs/cluster.status"
) &
cluster_pid=$!
cluster_wait() {
  wait $cluster_pid || true
  cat "$logs/cluster.log"
  [ "$(cat "$logs/cluster.status")" = 0 ]
}
phase "browser bundle (wasm), the rest" site_wait

# The benches at a small size check that each bench still runs and its own
# checks hold; the costs they print are no measurement (a debug build,
# beside the browser tests): the README's numbers come from release runs.
# They run the benches' binary the build above made (benches/main.rs),
# from server/ as `cargo test` would, in two lanes (all at once they would
# need more PostgreSQL connections than the server's 100; the drains run
# their processes on 10 each, beside the cluster tests' four). A commit
# count waits 1 s, not the 10 s an idle connection may take to report its
# commits (BENCH_STATS_WAIT_MS): the drain on the cluster, the last thing
# the phase waits for, reads them four times.
bench() {
  local run=$1 bin
  bin=$(grep -oE "target/debug/deps/benches-[0-9a-f]+" "$logs/build.log" | tail -1)
  echo "\$ ${run% *} $bin ${run##* }"
  (cd server && env BENCH_STATS_WAIT_MS=1000 ${run% *} "$root/$bin" "${run##* }")
}
benches() {
  local lane status=0 t0
  t0=$(date +%s)
  (
    set -e
    bench "DRAIN_DOCS=20 DRAIN_DB_POOL=10 DOCFLOW_DB_POOL=10 drain"
    # The API through its generated Python client, while this lane waits
    # for the cluster tests (its docflow holds 4 connections besides its
    # listeners).
    echo "--- the API through a generated client (scripts/client-test.sh) ---"
    DOCFLOW_CLIENT_BUILT=1 scripts/client-test.sh
    # The cluster tests stop and start its nodes: the bench on it waits.
    while [ ! -f "$logs/cluster.status" ]; do sleep 1; done
    bench "DRAIN_DOCS=20 DRAIN_WORKERS=2 DRAIN_CLUSTER=1 DRAIN_DB_POOL=10 DOCFLOW_DB_POOL=10 drain"
    scripts/cluster.sh down
    echo "(this lane took $(($(date +%s) - t0)) s)"
  ) >"$logs/bench-drain.log" 2>&1 &
  lane=$!
  (
    set -e
    bench "UPLOAD_PER_CLIENT=2 upload"
    bench "FLOOD_REQUESTS=20 login_flood"
    bench "SETUP_RUNS=3 test_setup"
    bench "REEMBED_DOCS=10 reembed"
    bench "PARSE_SCALE=50 parse"
    echo "(this lane took $(($(date +%s) - t0)) s)"
  ) >"$logs/bench-other.log" 2>&1 || status=1
  wait $lane || status=1
  cat "$logs/bench-drain.log" "$logs/bench-other.log"
  return $status
}

# The browser tests in thirds side by side (one alone leaves a core mostly
# idle; side by side with the benches and the cluster tests they keep both
# busy), each with a docflow
# server, database, vhost and mock embedder of its own, ports ten apart,
# split test by test (a serial group stays together). Playwright cuts the
# tests, in file order, into runs of so many tests each; by its (internal)
# PWTEST_SHARD_WEIGHTS the first third, whose accessibility tests read
# every page twice, takes fewer tests than the last, so that each takes
# about as long (a third of the tests each: 3.8, 3.8 and 2.1 minutes).
# A version without it splits evenly.
shards=3
shard_weights=15:20:25
browser() {
  local i pids=() status=0
  for i in $(seq $shards); do
    PWTEST_SHARD_WEIGHTS=$shard_weights DOCFLOW_E2E_BUILT=1 DOCFLOW_E2E_PORT=$((3907 + 10 * i)) \
      scripts/e2e.sh --fully-parallel --shard="$i/$shards" >"$logs/e2e-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq $shards); do
    wait "${pids[$((i - 1))]}" || status=1
  done
  # The weighted split must still cover every test: the parts together
  # pass as many tests as Playwright lists, or the run fails.
  local listed ran
  listed=$(cd end2end && npx playwright test --list 2>/dev/null | awk '/^Total: [0-9]+ test/ { print $2 }')
  ran=$(cat "$logs"/e2e-*.log | awk '/^ +[0-9]+ passed/ { s += $1 } END { print s + 0 }')
  if [ "$status" = 0 ] && [ "$ran" != "${listed:-?}" ]; then
    echo "--- the browser parts passed $ran tests of the ${listed:-?} Playwright lists ---"
    status=1
  fi
  for i in $(seq $shards); do
    echo "--- browser tests, part $i of $shards ---"
    cat "$logs/e2e-$i.log"
  done
  return $status
}

# The benches mostly wait too (on their processes, and a second for each
# commit count), so they run beside the browser tests.
benches_and_browser() {
  local t0 pid sb sw
  t0=$(date +%s)
  benches >"$logs/benches.log" 2>&1 &
  pid=$!
  browser
  sw=$?
  wait $pid
  sb=$?
  echo "--- benches at a small size (done after $(($(date +%s) - t0)) s) ---"
  cat "$logs/benches.log"
  [ $sb -eq 0 ] && bench_runs=$(grep -c '^\$ ' "$logs/benches.log")
  [ $sb -eq 0 ] && client_runs=$(grep -c '^client test passed' "$logs/benches.log")
  [ $sb -eq 0 ] && [ $sw -eq 0 ]
}
phase "benches and browser tests" benches_and_browser
phase "cluster tests (beside the browser tests), the rest" cluster_wait
