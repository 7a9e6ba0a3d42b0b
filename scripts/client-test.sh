#!/usr/bin/env bash
# The API through a client generated from its OpenAPI document: generates
# docflow's Python client with openapi-python-client, then runs
# clients/python/batch_and_webhook.py with it against a `docflow run --demo`
# of its own (database docflow_client, vhost docflow-client, port 3980), as
# the demo admin with an API token: a webhook registered to a receiver in
# the script, a batch of three uploads closed, each signed delivery
# verified (a tampered body and a late replay refused), `batch.done`'s
# counts checked. Every API call goes through the generated client. Part of
# the test command (scripts/test.sh, beside the benches).
#
#   scripts/client-test.sh
#
# With DOCFLOW_CLIENT_BUILT set it runs target/debug/docflow as it is (the
# test command has built it); otherwise it builds it first.
# openapi-python-client is installed from PyPI into a virtual environment
# under ~/.cache/docflow/ once; the generated client is installed into it
# on every run, from the document the server serves.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
started=$(date +%s)

version=0.29.1
venv="${XDG_CACHE_HOME:-$HOME/.cache}/docflow/openapi-python-client-$version"
if [ ! -x "$venv/bin/openapi-python-client" ]; then
  python3 -m venv "$venv"
  # wheel: the generated client installs from its setup.py without fetching
  # a build backend.
  "$venv/bin/pip" install -q "openapi-python-client==$version" "wheel==0.48.0"
fi

[ -n "${DOCFLOW_CLIENT_BUILT:-}" ] || cargo build -q --workspace --bin docflow
docflow=$root/target/debug/docflow

port=3980 db=docflow_client vhost=docflow-client
url="http://127.0.0.1:$port"
# A docflow left running on the port by a killed run would answer instead
# of this one, from a database this run drops.
if curl -s -o /dev/null "$url/healthz"; then
  echo "port $port is taken (a docflow of an earlier run?); stop it first" >&2
  exit 1
fi
work=$(mktemp -d)
export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db"
export AMQP_URL="amqp://guest:guest@127.0.0.1:5672/$vhost"
export DOCFLOW_LISTEN="127.0.0.1:$port" DOCFLOW_DATA_DIR="$work/data"
# The browser tests' vectors (end2end/mock-embedder.mjs hashes words as the
# `local` embedder does), computed in process: this test breaks no embedder.
export DOCFLOW_EMBEDDER=local DOCFLOW_DB_POOL=${DOCFLOW_DB_POOL:-4}
# The receiver is plain http on 127.0.0.1, a target docflow refuses otherwise.
export DOCFLOW_WEBHOOK_ALLOW_PRIVATE=true DOCFLOW_WEBHOOK_ALLOW_HTTP=true
PGOPTIONS="-c client_min_messages=warning" psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
rabbitmqctl -q delete_vhost "$vhost" >/dev/null 2>&1 || true
rabbitmqctl -q add_vhost "$vhost" >/dev/null
rabbitmqctl -q set_permissions -p "$vhost" guest '.*' '.*' '.*' >/dev/null

"$docflow" run --demo >"$work/docflow.log" 2>&1 &
server=$!
cleanup() {
  local rc=$?
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rabbitmqctl -q delete_vhost "$vhost" >/dev/null 2>&1 || true
  if [ $rc -eq 0 ]; then
    rm -rf "$work"
  else
    echo "--- docflow log (last 40 lines) ---"
    tail -40 "$work/docflow.log"
    echo "logs and the generated client kept in $work"
  fi
  echo "client test took $(($(date +%s) - started)) s"
}
trap cleanup EXIT
for _ in $(seq 60); do curl -fs "$url/readyz" >/dev/null && break; sleep 1; done
if ! curl -fs "$url/readyz" >/dev/null; then
  echo "docflow did not become ready" >&2
  exit 1
fi
token=$("$docflow" token create --email admin@demo.test --name client-test 2>/dev/null)

# A warning (a schema it cannot turn into a model, an operation left out)
# fails the generation: the whole document must make a client. Its
# formatting hook (ruff) is in the venv.
PATH="$venv/bin:$PATH" "$venv/bin/openapi-python-client" generate --url "$url/api/openapi.json" \
  --meta setup --output-path "$work/client" --fail-on-warning
"$venv/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall "$work/client"
"$venv/bin/python" clients/python/batch_and_webhook.py --url "$url" --token "$token"
# What the client does not see: a panic, a 5xx answered to no one, a
# deadlock that a step's retry covered up.
if grep -E 'panicked|request failed|deadlock detected' "$work/docflow.log" | head -20 | grep .; then
  echo "docflow logged errors during the client test" >&2
  exit 1
fi
echo "client test passed"
