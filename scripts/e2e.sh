#!/usr/bin/env bash
# Browser tests: starts `docflow run --demo` on its own database, vhost and
# port with the built site, its embeddings from a local OpenAI-compatible
# endpoint the tests can break and fix (end2end/mock-embedder.mjs), runs
# Playwright in Debian's Chromium, stops both.
# Expects scripts/build-site.sh (and, with DOCFLOW_E2E_BUILT set, a debug build
# of the server; otherwise it builds one). Arguments go
# to Playwright (`scripts/e2e.sh tests/live.spec.ts` runs one file).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# scripts/test.sh has built target/debug/docflow with the tests already.
[ -n "${DOCFLOW_E2E_BUILT:-}" ] || cargo build -q --bin docflow
# DOCFLOW_E2E_PORT lets a second run go beside this one (own port, database, vhost).
port=${DOCFLOW_E2E_PORT:-3917}
embedder_port=$((port + 1))
db=docflow_e2e
vhost=docflow-e2e
if [ "$port" != 3917 ]; then db="docflow_e2e_$port" vhost="docflow-e2e-$port"; fi
work=$(mktemp -d)
export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db"
export AMQP_URL="amqp://guest:guest@127.0.0.1:5672/$vhost"
export DOCFLOW_LISTEN="127.0.0.1:$port" DOCFLOW_DATA_DIR="$work/data" LEPTOS_SITE_ROOT="$root/target/site"
# The mock embedding service (end2end/mock-embedder.mjs) answers with
# docflow's own 384-dimension hashed vectors, as an OpenAI-compatible API.
export DOCFLOW_EMBEDDER=openai DOCFLOW_EMBED_URL="http://127.0.0.1:$embedder_port"
export DOCFLOW_EMBED_MODEL=docflow-mock DOCFLOW_EMBED_DIMS=384
# One browser at a time needs few connections; several of these servers run
# side by side (scripts/test.sh) within PostgreSQL's 100.
export DOCFLOW_DB_POOL=${DOCFLOW_DB_POOL:-4}
# Short retries, so a broken embedding endpoint dead-letters a job in seconds.
export DOCFLOW_RETRY_DELAYS="300ms,600ms,900ms"
# The webhook tests' receivers listen on this machine.
export DOCFLOW_WEBHOOK_ALLOW_PRIVATE=true DOCFLOW_WEBHOOK_BACKOFF=300ms
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
rabbitmqctl -q delete_vhost "$vhost" >/dev/null 2>&1 || true
rabbitmqctl -q add_vhost "$vhost" >/dev/null
rabbitmqctl -q set_permissions -p "$vhost" guest '.*' '.*' '.*' >/dev/null
node end2end/mock-embedder.mjs "$embedder_port" >"$work/embedder.log" 2>&1 &
embedder=$!
target/debug/docflow run --demo >"$work/docflow.log" 2>&1 &
server=$!
trap 'kill $server $embedder 2>/dev/null || true; wait $server $embedder 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 1; done
if ! curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; then
  echo "docflow did not become ready:"; tail -50 "$work/docflow.log"; exit 1
fi
set +e
(cd end2end && DOCFLOW_E2E_URL="http://127.0.0.1:$port" DOCFLOW_E2E_EMBEDDER="http://127.0.0.1:$embedder_port" \
  npx playwright test "$@") 2>&1 | tee "$work/playwright.log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  echo "--- docflow log (last 60 lines) ---"
  tail -60 "$work/docflow.log"
  # What failed, last, where a reader of the run's tail sees it first.
  echo "--- failed browser tests ---"
  grep -E '^\s+[0-9]+\) |Error:|Expected|Received|Timeout|^\s+[0-9]+ (failed|flaky|passed|did not run|skipped)|^\s+\[chromium\]|tests/.*\.spec\.ts:[0-9]+' \
    "$work/playwright.log" | grep -v '✓' | tail -40 || true
fi
exit "$status"
