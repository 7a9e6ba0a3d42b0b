#!/usr/bin/env bash
# Fuzzes the REST API against its own OpenAPI document with schemathesis
# (property-based: requests generated from each operation's parameters and
# body, valid and invalid), on a `docflow run --demo` of its own (database
# docflow_fuzz, vhost docflow-fuzz, port 3990), authenticated as the demo
# admin with an API token, so that every operation is exercised past its
# login. Checks: no 5xx, no status the document does not give that
# operation, every body valid against its schema, every content type the
# documented one. Not part of the test command.
#
#   scripts/fuzz-api.sh [schemathesis run options…]
#
# DOCFLOW_FUZZ_EXAMPLES (default 100) cases per operation and phase;
# DOCFLOW_FUZZ_PORT another port (and database and vhost) beside a run;
# DOCFLOW_FUZZ_RELEASE=1 fuzzes a release build. schemathesis is installed
# from PyPI into a virtual environment under ~/.cache/docflow/ once.
# The event streams (`/api/events`, `/api/jobs/{id}/events`) are left out:
# they answer 200 and stream until the client goes, which schemathesis
# waits for; server/tests/api/openapi.rs reads their frames instead.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

version=4.32.5
venv="${XDG_CACHE_HOME:-$HOME/.cache}/docflow/schemathesis-$version"
if [ ! -x "$venv/bin/schemathesis" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==$version"
fi

if [ -n "${DOCFLOW_FUZZ_RELEASE:-}" ]; then
  cargo build -q --release --workspace --bin docflow
  docflow=$root/target/release/docflow
else
  cargo build -q --workspace --bin docflow
  docflow=$root/target/debug/docflow
fi

port=${DOCFLOW_FUZZ_PORT:-3990}
db=docflow_fuzz vhost=docflow-fuzz
if [ "$port" != 3990 ]; then db="docflow_fuzz_$port" vhost="docflow-fuzz-$port"; fi
work=$(mktemp -d)
export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db"
export AMQP_URL="amqp://guest:guest@127.0.0.1:5672/$vhost"
export DOCFLOW_LISTEN="127.0.0.1:$port" DOCFLOW_DATA_DIR="$work/data"
# Hashed words for vectors: no model files needed, and searches are quick.
export DOCFLOW_EMBEDDER=local DOCFLOW_DB_POOL=${DOCFLOW_DB_POOL:-4}
# Small uploads: schemathesis tries a file at the documented limit and one
# byte over it, which stays cheap at 64 KiB.
export DOCFLOW_MAX_UPLOAD_BYTES=65536
export DOCFLOW_RETRY_DELAYS="300ms,600ms,900ms"
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
rabbitmqctl -q delete_vhost "$vhost" >/dev/null 2>&1 || true
rabbitmqctl -q add_vhost "$vhost" >/dev/null
rabbitmqctl -q set_permissions -p "$vhost" guest '.*' '.*' '.*' >/dev/null

"$docflow" run --demo >"$work/docflow.log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rabbitmqctl -q delete_vhost "$vhost" >/dev/null 2>&1 || true
  if [ "${status:-1}" -eq 0 ]; then rm -rf "$work"; else echo "logs kept in $work"; fi
}
trap cleanup EXIT
for _ in $(seq 60); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 1; done
if ! curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; then
  echo "docflow did not become ready:"; tail -50 "$work/docflow.log"; exit 1
fi
token=$("$docflow" token create --email admin@demo.test --name fuzz-api 2>/dev/null)

# Its example database and reports stay under target/, out of the work tree.
report="$root/target/fuzz-api"
mkdir -p "$report"
started=$(date +%s)
set +e
(cd "$report" && "$venv/bin/schemathesis" run "http://127.0.0.1:$port/api/openapi.json" \
  --checks not_a_server_error,status_code_conformance,response_schema_conformance,content_type_conformance \
  --header "Authorization: Bearer $token" \
  --exclude-path /api/events --exclude-path '/api/jobs/{id}/events' \
  --max-examples "${DOCFLOW_FUZZ_EXAMPLES:-100}" \
  --workers 1 --request-timeout 30 --suppress-health-check all \
  --report junit --report-dir "$report" \
  "$@") 2>&1 | tee "$work/schemathesis.log"
status=${PIPESTATUS[0]}
set -e
echo "schemathesis took $(($(date +%s) - started)) s"
if grep -q 'panicked\|request failed' "$work/docflow.log"; then
  echo "--- docflow logged errors ---"
  grep -B2 -A8 'panicked\|request failed' "$work/docflow.log" | tail -60
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "--- docflow log (last 40 lines) ---"
  tail -40 "$work/docflow.log"
fi
exit "$status"
