#!/usr/bin/env bash
# Makes this machine ready to build, run and test docflow. Idempotent: each
# step runs only when what it provides is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

# --- Rust toolchain pieces -------------------------------------------------
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi
wb_version=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$wb_version" ]; then
  say "installing wasm-bindgen-cli $wb_version (a few minutes, once)"
  cargo install wasm-bindgen-cli --version "$wb_version" --force
fi

# The test runner: each test a process of its own, run side by side.
if ! command -v cargo-nextest >/dev/null; then
  say "installing cargo-nextest (a few minutes, once)"
  cargo install cargo-nextest --locked
fi

# --- Debian packages: browser for end-to-end tests, promtool -------------
command -v chromium >/dev/null || { say "installing chromium"; apt_install chromium; }
command -v promtool >/dev/null || { say "installing prometheus (promtool)"; apt_install prometheus; }
command -v amtool >/dev/null || { say "installing alertmanager (amtool)"; apt_install prometheus-alertmanager; }
# OCR of scanned pages and images: Tesseract (English) and poppler's pdftoppm.
if ! command -v tesseract >/dev/null || ! command -v pdftoppm >/dev/null \
  || [ ! -f /usr/share/tesseract-ocr/5/tessdata/eng.traineddata ]; then
  say "installing tesseract-ocr, tesseract-ocr-eng and poppler-utils (OCR)"
  apt_install tesseract-ocr tesseract-ocr-eng poppler-utils
fi
# The browser bundle is compressed once when it is built, not per request.
command -v brotli >/dev/null || { say "installing brotli"; apt_install brotli; }
command -v systemd-analyze >/dev/null || { say "installing systemd (systemd-analyze)"; apt_install systemd; }

# --- Browser-test packages (never downloads a browser) ---------------------
if [ ! -d end2end/node_modules/@playwright/test ]; then
  say "installing the browser-test packages"
  (cd end2end && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi

# --- Services ----------------------------------------------------------------
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  say "starting PostgreSQL"
  ver=$(ls /etc/postgresql | sort -n | tail -1)
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start
  for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
if ! as_root rabbitmqctl -q status >/dev/null 2>&1; then
  say "starting RabbitMQ"
  as_root rabbitmq-server -detached
  as_root rabbitmqctl -q wait --timeout 60 /var/lib/rabbitmq/mnesia/rabbit@$(hostname -s).pid >/dev/null 2>&1 \
    || for _ in $(seq 60); do as_root rabbitmqctl -q status >/dev/null 2>&1 && break; sleep 1; done
fi
# Tests make and remove a vhost each through the management HTTP API: one
# request instead of a rabbitmqctl process (an Erlang VM) per call.
if ! curl -fs -u guest:guest http://127.0.0.1:15672/api/overview >/dev/null; then
  say "enabling RabbitMQ's management API"
  as_root rabbitmq-plugins -q enable rabbitmq_management >/dev/null
  for _ in $(seq 60); do curl -fs -u guest:guest http://127.0.0.1:15672/api/overview >/dev/null && break; sleep 1; done
fi
say "PostgreSQL and RabbitMQ answer"

# --- Retrieval: pgvector in PostgreSQL, the default embedding model --------
# Both idempotent: nothing happens when they are already in place.
scripts/install-pgvector.sh
scripts/fetch-model.sh
