#!/usr/bin/env bash
# Fuzzes parse + chunk through real parser children for a while (default
# 180 s): `scripts/fuzz.sh [seconds]`. Inputs that killed a child are kept in
# target/fuzz/findings. Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p server --bin docflow --example fuzz_parse
exec target/release/examples/fuzz_parse "${1:-180}"
