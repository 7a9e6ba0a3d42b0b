#!/usr/bin/env bash
# Measures what a browser transfers for the first page load of `/` in
# release mode: the server-rendered HTML (logged in) plus the JS, WASM and
# CSS it loads, compressed as Chromium asks for them (br, gzip).
# Needs: scripts/build-site.sh release && cargo build --release --bin docflow
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
port=3931
work=$(mktemp -d)
db=docflow_first_load
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
rabbitmqctl -q delete_vhost docflow-first-load >/dev/null 2>&1 || true
rabbitmqctl -q add_vhost docflow-first-load >/dev/null
rabbitmqctl -q set_permissions -p docflow-first-load guest '.*' '.*' '.*' >/dev/null
DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db" AMQP_URL="amqp://guest:guest@127.0.0.1:5672/docflow-first-load" \
  DOCFLOW_LISTEN="127.0.0.1:$port" DOCFLOW_DATA_DIR="$work/data" LEPTOS_SITE_ROOT="${SITE_ROOT:-$root/target/site}" \
  RUST_LOG=warn target/release/docflow run --demo >"$work/log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rabbitmqctl -q delete_vhost docflow-first-load >/dev/null 2>&1 || true' EXIT
for _ in $(seq 60); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 1; done
base="http://127.0.0.1:$port"
curl -fs -c "$work/jar" -H 'content-type: application/json' \
  -d '{"email":"alice@acme.test","password":"docflow-demo"}' "$base/api/login" >/dev/null
total=0
fetch() {
  local size
  size=$(curl -fs -b "$work/jar" -H 'accept-encoding: br, gzip' -o /dev/null -w '%{size_download}' "$base$1")
  printf '  %-28s %8d bytes\n' "$1" "$size"
  total=$((total + size))
}
echo "first load of / (compressed transfer):"
fetch /
fetch /pkg/docflow.js
fetch /pkg/docflow_bg.wasm
fetch /pkg/docflow.css
printf '  %-28s %8d bytes (%.0f KB)\n' total "$total" "$(echo "$total / 1024" | bc -l)"
